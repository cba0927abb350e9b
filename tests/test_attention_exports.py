"""Attention as people export it: one MultiHeadAttentionFusionOp per block on real exports.

Tiny configs of nine attention families (tests/exporters.py ATTENTION), each exported by
torch's TorchScript exporter (opset 17) and dynamo exporter (opset 18), with transformers'
default attention ("sdpa": F.scaled_dot_product_attention) and its explicit form ("eager").
Every case: the whole pipeline leaves exactly one MHA kernel per attention block and no
Softmax, with no MHA miss, and the result matches onnxruntime in fp32 and fp16.  Then what
each family is here for (GQA, rotary, cross-attention, relative biases, SDPA's guard...),
the canonical rewrites on their own (the exporter idiom gone, the numbers unchanged), and
the misses of forms the kernel does not take, each with its NF code.

All TorchScript forms run (about a second each); dynamo exports cost 5-9 s each, so one
dynamo form per family runs, both attention forms for BERT and Llama.
"""
from __future__ import annotations

import numpy as np
import pytest

import exporters
from codegen.fused.attention import OP_TYPE, SLOTS
from fusion_passes.attention_patterns import find_qk, trace_operand
from fusion_passes.canonical import CanonicalizePass
from fusion_passes.multi_head_attention import MultiHeadAttentionFusionPass
from helpers import assert_matches_ort, fuse_model, lower, op_types

PASS = "MultiHeadAttentionFusionPass"
BLOCKS = {"bert": 1, "llama": 1, "t5": 1, "bart": 3, "gpt_neox": 1, "deberta": 1, "swin": 2, "distilbert": 1,
          "nn_mha": 1, "levit": 1, "eva": 1, "window": 1}
MODULES = ("levit", "eva", "window")      # torch modules written as timm/torchvision write them
TORCHSCRIPT = [(name, "torchscript", attn) for name in BLOCKS if name != "nn_mha"
               for attn in (("sdpa",) if name in MODULES else exporters.ATTN_IMPLS)
               if not (name == "deberta" and attn == "sdpa")]
DYNAMO = [("bert", "dynamo", "sdpa"), ("bert", "dynamo", "eager"), ("llama", "dynamo", "sdpa"),
          ("llama", "dynamo", "eager"), ("t5", "dynamo", "sdpa"), ("bart", "dynamo", "sdpa"),
          ("gpt_neox", "dynamo", "sdpa"), ("deberta", "dynamo", "eager"), ("swin", "dynamo", "sdpa"),
          ("distilbert", "dynamo", "eager"), ("nn_mha", "dynamo", "sdpa"), ("levit", "dynamo", "sdpa"),
          ("eva", "dynamo", "sdpa"), ("window", "dynamo", "sdpa")]
CASES = TORCHSCRIPT + DYNAMO
IDS = ["-".join(c) for c in CASES]
_FUSED: dict = {}


@pytest.fixture(scope="module")
def exports(tmp_path_factory):
    return exporters.export_cache_or_skip(tmp_path_factory, "attention_exports")


def _fused(exports, case, passes=None):
    key = case + (tuple(p.__name__ for p in passes or ()),)
    if key not in _FUSED:
        _FUSED[key] = fuse_model(exports.attention(*case), passes=passes)
    return _FUSED[key]


def _mha(graph) -> list:
    return [n for n in graph.nodes if n.op_type == OP_TYPE]


def _mha_kernels(graph) -> list:
    """MHA kernels, and autofused kernels built around one (LeViT's Hardswish after the
    merged heads joins the attention kernel's launch)."""
    return [n for n in graph.nodes if n.op_type == OP_TYPE or n.attrs.get("anchor") == OP_TYPE]


def _slots(node) -> dict:
    return SLOTS.read(node.inputs)


def _compare(exports, case, graph, precision):
    with np.errstate(over="ignore"):      # finfo.min masks become -inf in fp16, as on the device
        assert_matches_ort(exports.attention(*case), graph, exporters.attention_feeds(case[0]), precision=precision)


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_every_block_is_one_mha_kernel(exports, case):
    graph, stats = _fused(exports, case)
    counts = graph.op_type_counts()
    assert len(_mha_kernels(graph)) == BLOCKS[case[0]] and "Softmax" not in counts, counts
    mha = stats[PASS]
    assert (mha.match_times, mha.effect_times, mha.misses) == (BLOCKS[case[0]], BLOCKS[case[0]], [])
    assert "RotaryEmbedding" not in counts and "IsNaN" not in counts


@pytest.mark.parametrize("precision", ["fp32", "fp16"])
@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_fused_matches_onnxruntime(exports, case, precision):
    graph, _ = _fused(exports, case)
    _compare(exports, case, graph, precision)


@pytest.mark.parametrize("precision", ["fp32", "fp16"])
@pytest.mark.parametrize("case", [c for c in CASES if c[1] == "torchscript" or c[0] in ("bert", "llama")],
                         ids=lambda c: "-".join(c))
def test_mha_kernel_alone_matches_onnxruntime(exports, case, precision):
    """Canonicalization and MHA only: everything else stays as exported, so a wrong attention
    kernel cannot hide behind another fusion."""
    graph, stats = _fused(exports, case, [CanonicalizePass, MultiHeadAttentionFusionPass])
    assert len(_mha(graph)) == BLOCKS[case[0]]
    _compare(exports, case, graph, precision)


# -- what each family exercises -------------------------------------------------------------
def _one(exports, case):
    graph, _ = _fused(exports, case)
    [node] = _mha(graph)[:1]
    return node


@pytest.mark.parametrize("exporter,attn", [("torchscript", "sdpa"), ("torchscript", "eager"),
                                           ("dynamo", "sdpa"), ("dynamo", "eager")])
def test_llama_grouped_query_attention_with_rotary_in_the_kernel(exports, exporter, attn):
    """4 query heads over 2 KV heads, repeated by Unsqueeze/Expand/Reshape views (read as a
    stride-0 axis, not copied); RoPE on Q and K goes into the kernel as cos/sin tables."""
    node = _one(exports, ("llama", exporter, attn))
    assert (node.attrs["num_heads"], node.attrs["kv_heads"], node.attrs["head_dim"]) == (4, 2, 8)
    assert node.attrs["rotary_dim"] == 8 and node.attrs["rotary_interleaved"] == 0
    slots = _slots(node)
    assert slots["w_q"].desc.shape == (32, 32) and slots["w_k"].desc.shape == (32, 16)
    assert slots["rope_cos"].desc.shape == (1, 8, 4) and slots["rope_cos"].is_const
    assert slots["x_q"] is slots["x_k"] is slots["x_v"]


def test_gpt_neox_partial_rotary_and_per_head_packed_qkv(exports):
    """rotary_pct 0.5: the first 4 of 8 features rotate; the packed QKV interleaves Q, K, V
    per head ([B,S,H,3D]), gathered into per-role weights."""
    node = _one(exports, ("gpt_neox", "torchscript", "eager"))
    assert node.attrs["rotary_dim"] == 4 and node.attrs["head_dim"] == 8
    slots = _slots(node)
    assert slots["w_q"].desc.shape == (32, 32) and slots["w_q"].name.endswith("/q/weight")


@pytest.mark.parametrize("case", [("t5", "torchscript", "sdpa"), ("t5", "dynamo", "sdpa")], ids="-".join)
def test_t5_no_scale_and_position_bias_input(exports, case):
    node = _one(exports, case)
    slots = _slots(node)
    assert node.attrs["scale"] == 1.0 and slots["bias"] is not None and slots["b_q"] is None
    assert slots["bias"].desc.shape[-2:] == (8, 8)


def test_bart_cross_attention_reads_the_encoder_output(exports):
    graph, _ = _fused(exports, ("bart", "torchscript", "eager"))
    cross = [n for n in _mha(graph) if _slots(n)["x_q"] is not _slots(n)["x_k"]]
    assert len(cross) == 1
    slots = _slots(cross[0])
    assert slots["x_k"] is slots["x_v"] and slots["x_k"].desc.shape == (2, 8, 32)
    assert slots["x_q"].desc.shape == (2, 4, 32)


@pytest.mark.parametrize("exporter", exporters.EXPORTERS)
def test_deberta_relative_bias_is_a_kernel_input_over_projected_q_and_k(exports, exporter):
    """DeBERTa's c2p/p2c bias reads the Q and K projections: those stay GEMMs (their output is
    the kernel's input, no weight), V's projection is in the kernel, the bias is an input."""
    node = _one(exports, ("deberta", exporter, "eager"))
    slots = _slots(node)
    assert slots["w_q"] is None and slots["w_k"] is None and slots["w_v"] is not None
    assert slots["bias"] is not None and node.attrs["mask_kind"] == "where" and node.attrs["mask_keep"] == 0


def test_swin_window_bias_and_shifted_window_mask(exports):
    """Windows of 4x4 tokens: 4 windows per image, batch 2 -> scores [8, 2 heads, 16, 16].  The
    relative position bias is the same for every window; the shifted block adds the window
    mask (through a [B, nW, H, N, N] view of the scores), so its additive input varies over
    the 8 windows."""
    graph, _ = _fused(exports, ("swin", "torchscript", "eager"))
    plain, shifted = _mha(graph)
    bias = _slots(plain)["bias"]
    assert bias is not None and bias.desc.shape[-3:] == (2, 16, 16) and _slots(plain)["mask"] is None
    terms = [t for t in (_slots(shifted)["bias"], _slots(shifted)["mask"]) if t is not None]
    assert any(t.desc.shape[0] == 8 for t in terms), [t.desc.shape for t in terms]


@pytest.mark.parametrize("exporter", exporters.EXPORTERS)
def test_levit_batchnorm_projections_and_per_head_split(exports, exporter):
    """LinearNorm (Linear + BatchNorm1d over flattened tokens) folds into the projection; the
    qkv output splits per head into q, k (4 features) and v (8 features); the learned
    attention bias is an input."""
    graph, _ = _fused(exports, ("levit", exporter, "sdpa"), [CanonicalizePass, MultiHeadAttentionFusionPass])
    [node] = _mha(graph)
    assert (node.attrs["head_dim"], node.attrs["v_head_dim"], node.attrs["num_heads"]) == (4, 8, 4)
    assert "BatchNormalization" not in graph.op_type_counts() and _slots(node)["bias"] is not None


@pytest.mark.parametrize("exporter", exporters.EXPORTERS)
def test_eva_pair_rotary_with_the_class_token_left_out(exports, exporter):
    """The pair rotation (interleaved) of every token but the first: one rotary table in the
    kernel whose first row is the identity (cos 1, sin 0)."""
    node = _one(exports, ("eva", exporter, "sdpa"))
    assert node.attrs["rotary_interleaved"] == 1 and node.attrs["rotary_dim"] == 8
    cos, sin = _slots(node)["rope_cos"].const, _slots(node)["rope_sin"].const
    assert cos.shape == (1, 7, 4) and np.all(cos[:, 0] == 1) and np.all(sin[:, 0] == 0)


def test_window_attention_rows_regrouped_into_windows(exports):
    """Tokens split into windows before the projection: the kernel reads the hidden states
    as [B*windows, tokens, K] (a view), the window mask through the scores' 5-D view."""
    node = _one(exports, ("window", "torchscript", "sdpa"))
    assert _slots(node)["x_q"].desc.shape == (4, 4, 32) and _slots(node)["x_q"].producer.op_type == "Reshape"
    assert node.attrs["scale"] == pytest.approx(8 ** -0.5)


def test_nn_multihead_attention_three_d_heads(exports):
    """torch.nn.MultiheadAttention: packed in-projection, heads taken by Gather, [B*H,S,D]
    bmm layout, batch/sequence transposes around both projections."""
    graph, _ = _fused(exports, ("nn_mha", "dynamo", "sdpa"))
    [node] = _mha(graph)
    assert (node.attrs["num_heads"], node.attrs["head_dim"]) == (4, 8)
    assert "Transpose" not in graph.op_type_counts()


@pytest.mark.parametrize("exporter,attn,guard", [("torchscript", "sdpa", 1), ("dynamo", "sdpa", 0),
                                                 ("torchscript", "eager", 0)])
def test_sdpa_nan_guard_dropped_only_when_proved(exports, exporter, attn, guard):
    """TorchScript's SDPA masks with -inf: a fully padded row would be NaN, so the guard
    stays and the kernel applies it; dynamo's mask is finfo.min (finite): the guard goes."""
    node = _one(exports, ("bert", exporter, attn))
    assert node.attrs["nan_guard"] == guard


# -- the canonical rewrites, each on a real export ------------------------------------------
def _canonical(exports, case):
    model = exports.attention(*case)
    graph, stats = fuse_model(model, passes=[CanonicalizePass])
    return model, graph, stats[CanonicalizePass.name].by_rewrite


@pytest.mark.parametrize("case,rewrite,gone,kept", [
    (("bert", "dynamo", "sdpa"), "SoftmaxNanGuard", "IsNaN", None),
    (("llama", "torchscript", "eager"), "RotaryEmbedding", "Neg", "RotaryEmbedding"),
    (("gpt_neox", "dynamo", "sdpa"), "RotaryEmbedding", "Neg", "RotaryEmbedding"),
    (("bert", "torchscript", "eager"), "ViewAsReshape", "Flatten", None),
    (("llama", "dynamo", "eager"), "ViewAsReshape", "Unsqueeze", None),
    (("nn_mha", "dynamo", "sdpa"), "GemmAsMatMul", "Gemm", None),
    (("nn_mha", "dynamo", "sdpa"), "ViewBelowLinear", None, None),
    (("nn_mha", "dynamo", "sdpa"), "ViewAboveLinear", None, None),
    (("nn_mha", "dynamo", "sdpa"), "TransposeChain", None, None),
    (("llama", "torchscript", "sdpa"), "ReshapeChain", None, None),
], ids=lambda v: v if isinstance(v, str) else None)
def test_canonical_rewrite_on_a_real_export(exports, case, rewrite, gone, kept):
    model, graph, by_rewrite = _canonical(exports, case)
    assert by_rewrite.get(rewrite, 0) > 0, by_rewrite
    types = op_types(graph)
    if gone:
        assert gone not in types
    if kept:
        assert kept in types
    assert "Squeeze" not in types and "Unsqueeze" not in types and "Flatten" not in types
    for precision in ("fp32", "fp16"):
        with np.errstate(over="ignore"):
            assert_matches_ort(model, graph, exporters.attention_feeds(case[0]), precision=precision)


@pytest.mark.parametrize("case,operand_scales", [
    (("bert", "dynamo", "sdpa"), [8 ** -0.25, 8 ** -0.25]),        # SDPA: sqrt(scale) on Q and on K
    (("bert", "torchscript", "sdpa"), [8 ** -0.25, 8 ** -0.25]),
    (("window", "dynamo", "sdpa"), [8 ** -0.5, 1.0]),              # torchvision Swin: q * D**-0.5
    (("deberta", "torchscript", "eager"), [1.0, (8 * 3) ** -0.5]),  # DeBERTa: K^T / sqrt(D * 3)
], ids=lambda v: "-".join(v) if isinstance(v, tuple) else "")
def test_q_and_k_scales_fold_into_the_kernel_scale(exports, case, operand_scales):
    """The exporter's scalar scales on the Q.K^T operands stay in the canonical graph as
    written (the scores have no scale of their own here), and each attention kernel's scale
    is their product."""
    _, graph, _ = _canonical(exports, case)
    products = [find_qk(n.inputs[0]) for n in graph.nodes if n.op_type == "Softmax"]
    assert products and [[trace_operand(v, role)[1] for v, role in zip(mm.inputs, "QK")] for mm in products] == \
        [[pytest.approx(f, rel=1e-6) for f in operand_scales]] * len(products)
    kernels = _mha(_fused(exports, case)[0])
    assert len(kernels) == BLOCKS[case[0]]
    product = operand_scales[0] * operand_scales[1]
    assert [n.attrs["scale"] for n in kernels] == [pytest.approx(product, rel=1e-6)] * len(kernels)


def test_the_stage_is_idempotent(exports):
    """A canonical graph is left as it is."""
    _, graph, _ = _canonical(exports, ("gpt_neox", "dynamo", "sdpa"))
    before = op_types(graph)
    [result] = __import__("ge.passes.contract", fromlist=["run_passes"]).run_passes(graph, [CanonicalizePass()])
    assert result.changes == 0 and op_types(graph) == before


def test_lowered_graphs_are_untouched_when_every_fusion_is_off(exports):
    from fusion_passes import pipeline
    from fusion_passes.switches import FusionSwitches
    model = exports.attention("llama", "torchscript", "eager")
    graph, _ = fuse_model(model, switches=FusionSwitches(all_state=False))
    assert op_types(graph) == op_types(lower(model))
    assert [p.name for p in pipeline.fusion_passes()][0] == CanonicalizePass.name
