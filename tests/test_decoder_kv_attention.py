"""Attention that reads a KV cache (issue 12 item 4, the fusion follow-up of issue 10).

A decoder exported with past_key_values inputs and present outputs attends to
K = Concat(past_k, new_k) and V = Concat(past_v, new_v) along the sequence axis; Llama and
Qwen2 rotate Q and the new K with tables computed from position_ids at run time.  The
decision (codegen/fused/attention.py): the cache Concat stays its own kernel (it writes the
`present` output the next step reads) and the MultiHeadAttentionFusionOp reads the
[B, Hkv, T, D] cache as it is (kv_layout "bhsd"), projecting and rotating Q inside
(rotary_k 0: the new K was rotated before it was written to the cache, by its own
RotaryEmbedding kernel) -- what GE's IncreFlashAttention/PromptFlashAttention take.

Real exports: Llama, Qwen2 (grouped-query, rotary, Qwen2's Q/K/V biases) and GPT-2 (packed
QKV), each with torch's TorchScript and dynamo exporters and transformers' default attention
("sdpa") and "eager": every layer is one MHA kernel reading the cache, and atc-sim's
prefill + 8 decode steps equal onnxruntime step by step.  Small built graphs check the same
at static shapes and what the pass must refuse, with the NF reason.  Then the sizes a
decoder proves non-zero (ge/passes/nonempty_dims.py) and what autofuse gains from them.
"""
from __future__ import annotations

import os

import numpy as np
import onnx
import pytest

import atc_py
import exporters
from builder import Net
from codegen.fused.attention import OP_TYPE, SLOTS
from fusion_passes import reasons
from fusion_passes.canonical import CanonicalizePass
from fusion_passes.multi_head_attention import MultiHeadAttentionFusionPass
from ge.onnx_import import parse_input_shape
from helpers import assert_matches_ort, fuse_model
from simulator import decode

LAYERS = 2
STEPS = 8
CASES = [(name, exporter, attn) for name in exporters.DECODERS for exporter in exporters.EXPORTERS
         for attn in ("sdpa", "eager")]
IDS = ["-".join(c) for c in CASES]
ROTARY = {"llama", "qwen2"}


@pytest.fixture(scope="module")
def decoders(tmp_path_factory):
    for module in ("torch", "transformers", "onnxscript"):
        pytest.importorskip(module)
    root = tmp_path_factory.mktemp("kv_decoders")
    cache: dict = {}

    def get(name, exporter, attn):
        key = (name, exporter, attn)
        if key not in cache:
            path = str(root / f"{name}_{exporter}_{attn}.onnx")
            if not os.path.exists(path):
                exporters.export_decoder(name, exporter, path, None if attn == "sdpa" else attn)
            cache[key] = path
        return cache[key]

    return get


def _fused(path, passes=None):
    model = onnx.load(path)
    return fuse_model(model, passes=passes, input_shapes=parse_input_shape(exporters.decoder_input_shape(model)))


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_every_layer_is_one_attention_kernel_reading_the_cache(decoders, case):
    name = case[0]
    graph, stats = _fused(decoders(*case))
    counts = graph.op_type_counts()
    mha = stats["MultiHeadAttentionFusionPass"]
    assert (mha.match_times, mha.effect_times, mha.misses) == (LAYERS, LAYERS, [])
    assert counts[OP_TYPE] == LAYERS
    assert "Softmax" not in counts and "IsNaN" not in counts
    present = {v.name for v in graph.outputs if v.name.startswith("present.")}
    for node in (n for n in graph.nodes if n.op_type == OP_TYPE):
        slots = SLOTS.read(node.inputs)
        assert node.attrs["kv_layout"] == "bhsd"
        assert {slots["x_k"].name, slots["x_v"].name} <= present         # the cache the Concat wrote
        assert slots["x_k"].producer.op_type == slots["x_v"].producer.op_type == "Concat"
        assert slots["w_k"] is None and slots["w_v"] is None
        assert node.attrs["kv_heads"] == (2 if name in ROTARY else 4) and node.attrs["num_heads"] == 4
        if name in ROTARY:           # Q rotated inside with the run-time tables, K before the cache
            assert node.attrs["rotary_dim"] == 8 and node.attrs["rotary_k"] == 0
            assert slots["rope_cos"] is not None and not slots["rope_cos"].is_const
        else:
            assert node.attrs["rotary_dim"] == 0
    assert counts.get("Concat", 0) >= 2 * LAYERS
    if name in ROTARY:
        assert counts["RotaryEmbedding"] == LAYERS                   # the new K's, written to the cache
        assert "Neg" not in counts and "Sin" not in counts or counts.get("Neg", 0) == 0


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_prefill_and_eight_decode_steps_match_onnxruntime(decoders, case, tmp_path):
    path = decoders(*case)
    out = str(tmp_path / "m")
    report = atc_py.compile(path, output=out, soc_version="Ascend910", precision_mode="force_fp32",
                            input_shape=exporters.decoder_input_shape(onnx.load(path)))
    assert {p["pattern"]: p["effect"] for p in report["patterns"]}.get("MHA") == LAYERS
    session = atc_py.InferSession(out + ".om")
    steps = decode.generate(session, decode.prompt_tokens(session.model.graph, 2, 5), STEPS, path)
    assert [s.kind for s in steps] == ["prefill"] + ["decode"] * STEPS
    for step in steps:
        assert step.compares and step.passed, (step.index, [c.describe() for c in step.compares])


def test_fp16_decode_steps_with_the_cache_kernel(decoders, tmp_path):
    path = decoders("llama", "torchscript", "sdpa")
    out = str(tmp_path / "m16")
    atc_py.compile(path, output=out, soc_version="Ascend910", precision_mode="force_fp16",
                   input_shape=exporters.decoder_input_shape(onnx.load(path)))
    session = atc_py.InferSession(out + ".om")
    steps = decode.generate(session, decode.prompt_tokens(session.model.graph, 1, 4), STEPS, path)
    assert all(s.passed for s in steps), [c.describe() for s in steps for c in s.compares if not c.passed]


# -- built graphs: static shapes, and what the pass refuses ---------------------------------
B, S, P, H, D, HIDDEN = 2, 3, 5, 4, 8, 32


def _heads(net, x, weight, heads=H):
    y = net.op("MatMul", x, weight)
    y = net.op("Reshape", y, net.const(np.array([B, S, heads, D], np.int64)))
    return net.op("Transpose", y, perm=[0, 2, 1, 3])


def _rotate(net, x, cos, sin):
    """x * cos + rotate_half(x) * sin, as transformers writes it."""
    ax = net.const(np.array([3], np.int64))
    low = net.op("Slice", x, net.const(np.array([0], np.int64)), net.const(np.array([D // 2], np.int64)), ax)
    high = net.op("Slice", x, net.const(np.array([D // 2], np.int64)), net.const(np.array([D], np.int64)), ax)
    rot = net.op("Concat", net.op("Neg", high), low, axis=-1)
    return net.op("Add", net.op("Mul", x, cos), net.op("Mul", rot, sin))


def kv_attention(v_from_cache=True, rope=None, kt_output=False, kv_heads=H):
    """One decoder attention step at static shapes: x [B,S,32], a cache of P positions;
    K/V = Concat(past, new heads) -> present; GQA when kv_heads < H (repeat by Expand);
    rope: None, "equal" (tables from Concat(f, f): transformers') or "unequal" (Concat(f, 2f))."""
    net = Net()
    x = net.input("x", [B, S, HIDDEN])
    past_k = net.input("past_k", [B, kv_heads, P, D])
    past_v = net.input("past_v", [B, kv_heads, P, D])
    q = _heads(net, x, net.rand(HIDDEN, H * D))
    k_new = _heads(net, x, net.rand(HIDDEN, kv_heads * D), kv_heads)
    if rope is not None:
        pos = net.input("pos", [B, S, 1])
        f = net.op("Mul", pos, net.const(10000.0 ** (-np.arange(0, D, 2) / D)))
        g = f if rope == "equal" else net.op("Mul", f, net.const(np.float32(2.0)))
        angles = net.op("Concat", f, g, axis=-1)
        unsq = net.const(np.array([1], np.int64))
        cos = net.op("Unsqueeze", net.op("Cos", angles), unsq)
        sin = net.op("Unsqueeze", net.op("Sin", angles), unsq)
        q, k_new = _rotate(net, q, cos, sin), _rotate(net, k_new, cos, sin)
    present_k = net.op("Concat", past_k, k_new, axis=2)
    if v_from_cache:
        present_v = net.op("Concat", past_v, _heads(net, x, net.rand(HIDDEN, kv_heads * D), kv_heads), axis=2)
        v = present_v
    else:                              # V projected from other states of the cache's length
        mem = net.input("mem", [B, P + S, HIDDEN])
        v = net.op("Transpose", net.op("Reshape", net.op("MatMul", mem, net.rand(HIDDEN, kv_heads * D)),
                                       net.const(np.array([B, P + S, kv_heads, D], np.int64))), perm=[0, 2, 1, 3])
        present_v = net.op("Identity", past_v)
    k, vv = present_k, v
    if kv_heads < H:                   # transformers' repeat_kv
        group = H // kv_heads
        expand = lambda t: net.op("Reshape", net.op("Expand", net.op("Unsqueeze", t, net.const(np.array([2], np.int64))),  # noqa: E731
                                                     net.const(np.array([B, kv_heads, group, P + S, D], np.int64))),
                                  net.const(np.array([B, H, P + S, D], np.int64)))
        k, vv = expand(k), expand(vv)
    kt = net.op("Transpose", k, perm=[0, 1, 3, 2])
    scores = net.op("Mul", net.op("MatMul", q, kt), net.const(np.float32(D ** -0.5)))
    ctx = net.op("MatMul", net.op("Softmax", scores, axis=-1), vv)
    out = net.op("Reshape", net.op("Transpose", ctx, perm=[0, 2, 1, 3]), net.const(np.array([B, S, H * D], np.int64)))
    outputs = [out, present_k, present_v] + ([kt] if kt_output else [])
    return net.model(*outputs)


def _feeds(model, seed=0):
    rng = np.random.default_rng(seed)
    feeds = {}
    for info in model.graph.input:
        shape = [d.dim_value for d in info.type.tensor_type.shape.dim]
        feeds[info.name] = rng.integers(0, 20, shape).astype(np.float32) if info.name == "pos" else \
            rng.standard_normal(shape).astype(np.float32)
    return feeds


@pytest.mark.parametrize("kv_heads,rope", [(H, None), (2, None), (H, "equal"), (2, "equal")],
                         ids=["mha", "gqa", "mha-rope", "gqa-rope"])
@pytest.mark.parametrize("precision", ["fp32", "fp16"])
def test_static_cache_attention_is_one_kernel_and_matches_onnxruntime(kv_heads, rope, precision):
    model = kv_attention(rope=rope, kv_heads=kv_heads)
    graph, stats = fuse_model(model)
    counts = graph.op_type_counts()
    assert stats["MultiHeadAttentionFusionPass"].effect_times == 1, stats["MultiHeadAttentionFusionPass"].misses
    assert counts[OP_TYPE] == 1 and "Softmax" not in counts
    assert counts["Concat"] == 2 + bool(rope)       # the caches (and the angles cat(f, f) of the tables)
    node = next(n for n in graph.nodes if n.op_type == OP_TYPE)
    assert node.attrs["kv_layout"] == "bhsd" and node.attrs["kv_heads"] == kv_heads
    if rope:
        assert node.attrs["rotary_k"] == 0 and counts["RotaryEmbedding"] == 1 and "Neg" not in counts
    assert_matches_ort(model, graph, _feeds(model), precision=precision)


def _miss(model):
    graph, stats = fuse_model(model, passes=[CanonicalizePass, MultiHeadAttentionFusionPass])
    result = stats["MultiHeadAttentionFusionPass"]
    assert result.effect_times == 0 and OP_TYPE not in graph.op_type_counts()
    assert len(result.misses) == 1
    return result.misses[0]


def test_k_from_the_cache_and_v_from_a_projection_is_refused():
    miss = _miss(kv_attention(v_from_cache=False))
    assert miss.code == reasons.UNSUPPORTED_VARIANT
    assert "reads the KV cache" in miss.constraint and "V a projection" in miss.constraint


def test_a_view_of_the_cache_read_outside_the_block_is_refused():
    miss = _miss(kv_attention(kt_output=True))
    assert miss.code == reasons.OTHER_CONSUMERS and "also read outside" in miss.constraint


def test_computed_rope_tables_with_different_halves_stay_as_exported():
    """cos(cat(f, 2f)): the halves differ, so it is not a RotaryEmbedding (rotate_half's
    identity does not hold) and the attention pass says what it found instead."""
    model = kv_attention(rope="unequal")
    graph, _ = fuse_model(model, passes=[CanonicalizePass])
    assert "RotaryEmbedding" not in graph.op_type_counts()
    miss = _miss(model)
    assert miss.code == reasons.UNSUPPORTED_VARIANT and "found Add" in miss.constraint
    full, _ = fuse_model(model)
    assert_matches_ort(model, full, _feeds(model))


def test_the_kernel_refuses_a_bad_cache_layout():
    from codegen.fused.attention import infer
    from ge.errors import InvalidNode
    from ge.ops.registry import TensorType
    f32 = np.dtype(np.float32)
    x, cache = TensorType(f32, (B, S, HIDDEN)), TensorType(f32, (B, 2, P, D))
    attrs = {"num_heads": H, "kv_heads": 2, "head_dim": D, "kv_layout": "bhsd"}
    w = TensorType(f32, (HIDDEN, H * D))
    assert infer(SLOTS.pack(x_q=x, w_q=w, x_k=cache, x_v=cache), attrs)[0].shape == (B, S, H * D)
    with pytest.raises(InvalidNode, match="kv_layout"):
        infer(SLOTS.pack(x_q=x, w_q=w, x_k=cache, x_v=cache), {**attrs, "kv_layout": "bshd"})
    with pytest.raises(InvalidNode, match="bhsd needs"):
        infer(SLOTS.pack(x_q=x, w_q=w, x_k=cache, x_v=cache), {**attrs, "kv_heads": 4})


# -- sizes the graph proves non-zero ----------------------------------------------------------
def test_the_decoder_proves_its_batch_and_sequence_non_empty_but_not_its_cache(decoders):
    graph, _ = _fused(decoders("gpt2", "torchscript", "sdpa"))
    lows = {name: atom.lo for name, atom in graph.symbols.items()}
    assert lows["batch"] == 1 and lows["seq"] == 1          # Reshape [batch, seq, -1, 8] of the heads
    assert lows["past"] == 0                                # an empty cache (the prefill) stays valid


@pytest.mark.parametrize("case", [("llama", "torchscript", "sdpa"), ("gpt2", "dynamo", "sdpa")],
                         ids=["llama-torchscript", "gpt2-dynamo"])
def test_non_empty_sizes_let_autofuse_prove_its_iteration_spaces(decoders, case, monkeypatch):
    """The same export with and without the proof: the mask's groups that compare
    [1,1,S,P+S] with its [1,1,1,P+S] row (S*(P+S) >= P+S needs S >= 1) are refused with
    NF2008 without it, and fuse with it."""
    import ge.passes as generic
    graph, stats = _fused(decoders(*case))
    proved = [m for m in stats["AutoFusePass"].misses if m.code == reasons.DYNAMIC_DIM]
    kernels = sum(1 for n in graph.nodes if not _no_task(n))
    monkeypatch.setattr(generic, "GENERIC_PASSES", tuple(p for p in generic.GENERIC_PASSES
                                                          if p.name != "NonEmptyDims"))
    graph0, stats0 = _fused(decoders(*case))
    unproved = [m for m in stats0["AutoFusePass"].misses if m.code == reasons.DYNAMIC_DIM]
    assert graph0.symbols["seq"].lo == 0
    assert len(proved) < len(unproved)
    assert sum(1 for n in graph0.nodes if not _no_task(n)) > kernels
    pair = ["past + seq", "past*seq + seq*seq"]             # the mask row vs the mask
    assert pair in [_sizes(m) for m in unproved] and pair not in [_sizes(m) for m in proved]


def _sizes(miss) -> list:
    """The element counts a "no member's output is provably the largest" miss lists."""
    head = "provably the largest: "
    return miss.constraint.split(head, 1)[1].split(", ") if head in miss.constraint else []


def _no_task(node) -> bool:
    from codegen.registry import kernel_of
    return kernel_of(node.op_type).no_task


def _reshape_model(target, allowzero=0, dead=False):
    net = Net()
    x = net.input("x", ["n", "s", 8])
    y = net.op("Reshape", x, net.const(np.array(target, np.int64)), allowzero=allowzero)
    out = net.op("Relu", x) if dead else y
    return net.model(out)


@pytest.mark.parametrize("target,allowzero,dead,nonzero", [
    ([0, 0, -1, 2], 0, False, {"n", "s"}),         # 0 copies the input dim: n * s * 2 != 0
    ([0, -1], 0, False, {"n"}),
    ([-1, 8], 0, False, set()),                   # nothing but the -1 and a constant
    ([0, 0, 4, 2], 0, False, set()),              # no -1: an empty tensor reshapes fine
    ([0, 0, -1, 2], 0, True, set()),              # a dead Reshape never runs
])
def test_which_reshapes_prove_a_size_non_zero(target, allowzero, dead, nonzero):
    from helpers import lower
    model = _reshape_model(target, allowzero, dead)
    graph = lower(model, {"x": [-1, -1, 8]})
    assert {name for name, atom in graph.symbols.items() if atom.lo >= 1} == nonzero


def test_an_input_the_model_cannot_run_on_is_refused(decoders, tmp_path):
    from ge.dynamic import bind_inputs
    from ge.errors import AtcError
    graph, _ = _fused(decoders("gpt2", "torchscript", "sdpa"))
    shapes = {v.name: tuple(d if isinstance(d, int) else 0 if str(d) == "past" else 1 for d in v.desc.shape)
              for v in graph.inputs}
    bind_inputs(graph, {**shapes, "attention_mask": (1, 1)})         # an empty cache: fine
    with pytest.raises(AtcError, match="E10001"):
        bind_inputs(graph, {**shapes, "input_ids": (1, 0), "position_ids": (1, 0), "attention_mask": (1, 0)})


@pytest.mark.parametrize("dims,kernels", [("-1", 3), ("1~64", 1)])
def test_user_ranges_decide_an_iteration_space(dims, kernels):
    """-[1, T] + -[S, 1] -> [S, T]: one kernel over [S, T] needs S*T >= T and S*T >= S, true
    only when S, T >= 1 -- given by the user's ranges here (nothing in the graph proves it);
    with -1 (from 0) the two Negs stay their own kernels, with the reason."""
    net = Net()
    row, col = net.input("row", ["t"]), net.input("col", ["s"])
    y = net.op("Add", net.op("Reshape", net.op("Neg", row), net.const(np.array([1, -1], np.int64))),
               net.op("Reshape", net.op("Neg", col), net.const(np.array([-1, 1], np.int64))))
    model = net.model(net.op("Relu", y))
    graph, stats = fuse_model(model, input_shapes=parse_input_shape(f"row:{dims};col:{dims}"))
    assert sum(1 for n in graph.nodes if not _no_task(n)) == kernels
    misses = [m for m in stats["AutoFusePass"].misses if m.code == reasons.DYNAMIC_DIM]
    assert bool(misses) == (kernels > 1)
    assert all("provably the largest" in m.constraint for m in misses)
    feeds = {"row": np.arange(5, dtype=np.float32), "col": np.arange(3, dtype=np.float32) - 1}
    assert_matches_ort(model, graph, feeds)
