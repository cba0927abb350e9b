"""Decoder LLM blocks as people export them: RMSNorm, gated MLPs, bias-less linears with the
residual, on the tiny Llama / Qwen2 / GPT-NeoX configs of tests/exporters.py (ATTENTION).

Each family is exported by torch's TorchScript exporter (opset 17) and dynamo exporter
(opset 18), with transformers' default attention ("sdpa") and its explicit form ("eager").
Every case: each RMS norm is one RMSNormalization (or inside the GEMM it feeds), each gated
MLP is one packed gate|up GEMM with act(g)*u in its epilogue, fused with the norm in front,
and the down projection takes the residual Add; no RMS/SwiGLU op is left outside a kernel;
the whole pipeline matches onnxruntime in fp32 and fp16.  Then the float16 export (the
Cast-to-float32 wrappers), onnxruntime's SimplifiedLayerNormalization, and the misses with
their NF codes.  The attention inside these blocks is the MHA tests' (test_fusion_mha.py).

All TorchScript forms run (about a second each); dynamo exports cost 5-10 s each, so one or
two dynamo forms per family.
"""
from __future__ import annotations

import numpy as np
import onnx
import pytest

import exporters
from builder import Net
from codegen.fused.gemm import SLOTS
from codegen.registry import kernel_of
from fusion_passes.canonical import CanonicalizePass
from fusion_passes.gated_mlp import GatedMlpFusionPass
from fusion_passes.rms_norm import RmsNormFusionPass
from helpers import assert_matches_ort, fuse_model, op_types

DECODERS = ("llama", "qwen2", "gpt_neox")
LAYERS = exporters.TINY["num_hidden_layers"]
INTER = exporters.TINY["intermediate_size"]
HIDDEN = exporters.TINY["hidden_size"]
TORCHSCRIPT = [(name, "torchscript", attn) for name in DECODERS for attn in exporters.ATTN_IMPLS]
DYNAMO = [("llama", "dynamo", "sdpa"), ("llama", "dynamo", "eager"), ("qwen2", "dynamo", "sdpa"),
          ("gpt_neox", "dynamo", "sdpa")]
CASES = TORCHSCRIPT + DYNAMO
IDS = ["-".join(c) for c in CASES]
RMS_CASES = [c for c in CASES if c[0] != "gpt_neox"]
DECOMPOSED = {"Pow", "ReduceMean", "Sqrt", "Reciprocal", "Sigmoid", "Swish", "Erf", "Gelu"}
_FUSED: dict = {}


@pytest.fixture(scope="module")
def exports(tmp_path_factory):
    return exporters.export_cache_or_skip(tmp_path_factory, "decoder_exports")


def _fused(exports, case, passes=None, dtype="float32"):
    key = case + (dtype, tuple(p.__name__ for p in passes or ()))
    if key not in _FUSED:
        _FUSED[key] = fuse_model(exports.attention(*case, dtype=dtype), passes=passes)
    return _FUSED[key]


def _compare(exports, case, graph, precision, dtype="float32"):
    with np.errstate(over="ignore"):      # finfo.min masks become -inf in fp16, as on the device
        assert_matches_ort(exports.attention(*case, dtype=dtype), graph, exporters.attention_feeds(case[0]),
                           precision=precision)


def _gated_gemms(graph) -> list:
    """Kernels running a SwiGLU epilogue on the packed [hidden, 2 x MLP] weight."""
    return [n for n in graph.nodes if int(n.attrs.get("gate", 0)) and n.attrs.get("activation") == "Swish"]


def _residual_gemms(graph, k: int) -> list:
    """MatMulBias kernels with a residual input whose weight is [k, HIDDEN]."""
    return [n for n in graph.nodes if n.op_type == "MatMulBiasFusionOp" and SLOTS.read(n.inputs)["residual"] is not None
            and tuple(SLOTS.read(n.inputs)["w"].desc.shape) == (k, HIDDEN)]


@pytest.mark.parametrize("case", RMS_CASES, ids=[IDS[CASES.index(c)] for c in RMS_CASES])
def test_every_rms_norm_is_one_op(exports, case):
    graph, stats = _fused(exports, case, passes=[CanonicalizePass, RmsNormFusionPass])
    counts = graph.op_type_counts()
    rms = stats["RmsNormFusionPass"]
    assert (rms.match_times, rms.effect_times, rms.misses) == (2 * LAYERS + 1, 2 * LAYERS + 1, [])
    assert counts["RMSNormalization"] == 2 * LAYERS + 1
    assert not {"Pow", "ReduceMean", "Sqrt", "Reciprocal"} & set(counts), counts
    for precision in ("fp32", "fp16"):
        _compare(exports, case, graph, precision)


# Every kernel of a one-layer decoder: the embedding Gather, the padding/causal mask (one
# autofused kernel), the attention (MHA: test_attention_exports.py), and the blocks here.
_LLAMA = {"Gather": 1, "AutofusedKernel": 1, "MultiHeadAttentionFusionOp": 1,
          "RMSNormalization": 2,              # before attention (the MHA kernel takes Q/K/V) and the final norm
          "MatMulBiasFusionOp": 2,            # o_proj + residual, down_proj + residual
          "RmsNormMatMulFusionOp": 1}         # post-attention norm + packed gate|up GEMM + SwiGLU
KERNELS = {"llama": _LLAMA, "qwen2": _LLAMA,
           "gpt_neox": {"Gather": 1, "AutofusedKernel": 2, "MultiHeadAttentionFusionOp": 1,
                        "LayerNormalization": 2,          # before attention, and the final norm
                        "LayerNormMatMulFusionOp": 1,     # post-attention norm + fc1 + GELU
                        "MatMulBiasFusionOp": 1}}         # fc2 (+ attention output: the parallel residual)


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_every_kernel_of_the_decoder(exports, case):
    graph, _ = _fused(exports, case)
    launched = {}
    for node in graph.nodes:
        if not kernel_of(node.op_type).no_task:
            launched[node.op_type] = launched.get(node.op_type, 0) + 1
    assert launched == KERNELS[case[0]]


@pytest.mark.parametrize("case", RMS_CASES, ids=[IDS[CASES.index(c)] for c in RMS_CASES])
def test_rms_norm_and_gated_mlp_blocks(exports, case):
    """Per layer: post-attention RMSNorm + packed gate|up GEMM + SwiGLU = one RmsNormMatMul
    kernel; down projection + residual = one MatMulBias kernel; the final norm is one op."""
    graph, stats = _fused(exports, case)
    counts = graph.op_type_counts()
    assert not DECOMPOSED & set(counts), counts
    mlp = stats["GatedMlpFusionPass"]
    assert (mlp.match_times, mlp.effect_times, mlp.misses) == (LAYERS, LAYERS, [])
    assert mlp.fused_types == {"MatMulBiasSwiGluFusionOp": LAYERS}
    gated = _gated_gemms(graph)
    assert [n.op_type for n in gated] == ["RmsNormMatMulFusionOp"] * LAYERS
    assert all(tuple(n.inputs[3].desc.shape) == (HIDDEN, 2 * INTER) and n.outputs[0].desc.shape[-1] == INTER
               for n in gated)
    assert len(_residual_gemms(graph, INTER)) == LAYERS          # down_proj + residual Add
    assert stats["RmsNormFusionPass"].effect_times == 2 * LAYERS + 1
    assert stats["RmsNormFusionPass"].misses == stats["RmsNormMatMulFusionPass"].misses == []
    assert graph.nodes[-1].op_type == "RMSNormalization"         # the final norm feeds no GEMM
    assert counts.get("MatMulBiasSwiGluFusionOp", 0) == 0        # every gated GEMM took its norm


@pytest.mark.parametrize("precision", ["fp32", "fp16"])
@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_decoder_matches_onnxruntime(exports, case, precision):
    graph, _ = _fused(exports, case)
    _compare(exports, case, graph, precision)


@pytest.mark.parametrize("case", [c for c in CASES if c[0] == "gpt_neox"], ids=lambda c: "-".join(c))
def test_gpt_neox_mlp(exports, case):
    """GPT-NeoX: LayerNorm + fc1 + GELU is one LayerNormMatMul kernel, fc2 + bias one GEMM."""
    graph, stats = _fused(exports, case)
    gelu = [n for n in graph.nodes if n.op_type == "LayerNormMatMulFusionOp" and n.attrs.get("activation") == "Gelu"]
    assert len(gelu) == LAYERS
    assert not DECOMPOSED & set(graph.op_type_counts())


def test_float16_export_takes_the_cast_wrappers(exports):
    """A half-precision Llama computes each RMSNorm in float32 between two Casts: the op
    reads the float16 tensor and keeps float32 statistics (stash_type 1)."""
    case = ("llama", "torchscript", "eager")
    graph, stats = _fused(exports, case, dtype="float16")
    assert stats["RmsNormFusionPass"].effect_times == 2 * LAYERS + 1
    norms = [n for n in graph.nodes if n.op_type in ("RMSNormalization", "RmsNormMatMulFusionOp")]
    assert len(norms) == 2 * LAYERS + 1
    assert all(n.attrs["stash_type"] == 1 and n.inputs[0].desc.dtype == np.float16 for n in norms)
    assert "Pow" not in graph.op_type_counts()
    _compare(exports, case, graph, "fp16", dtype="float16")


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_mask_gathers_are_views(exports, case):
    """The padding mask's Gather/GatherND of every position in order becomes a Reshape: the
    only gathers left read the embedding tables."""
    graph, stats = _fused(exports, case, passes=[CanonicalizePass])
    gathers = [n for n in graph.nodes if n.op_type in ("Gather", "GatherND")]
    assert gathers and all(n.inputs[0].is_const for n in gathers), [n.name for n in gathers]
    assert stats["CanonicalizePass"].by_rewrite.get("IdentityGather") == 1
    _compare(exports, case, graph, "fp32")


_GRID = np.stack(np.meshgrid(np.arange(4), np.arange(6), indexing="ij"), -1)


@pytest.mark.parametrize("op_type,indices,axis,expected", [
    ("Gather", np.arange(6).reshape(1, 6), 1, ["Reshape", "Relu"]),
    ("Gather", np.array([0, -5, 2, 3, 4, 5]), 1, ["Relu"]),            # -5 is 1; a same-shape view is no op
    ("Gather", np.array([1, 0, 2, 3, 4, 5]), 1, ["Gather", "Relu"]),   # a permutation: a real gather
    ("Gather", np.arange(5), 1, ["Gather", "Relu"]),                   # not every element
    ("GatherND", _GRID.reshape(1, 24, 2), 0, ["Reshape", "Relu"]),
    ("GatherND", _GRID.transpose(1, 0, 2).reshape(1, 24, 2), 0, ["GatherND", "Relu"]),   # column-major order
])
def test_identity_gather(op_type, indices, axis, expected):
    net = Net(17)
    x = net.input("x", [4, 6, 3])
    attrs = {"axis": axis} if op_type == "Gather" else {}
    model = net.model(net.op("Relu", net.op(op_type, x, net.const(indices.astype(np.int64)), **attrs)))
    graph, _ = fuse_model(model, passes=[CanonicalizePass])
    assert op_types(graph) == expected
    assert_matches_ort(model, graph, {"x": np.random.default_rng(5).standard_normal((4, 6, 3)).astype(np.float32)})


# -- onnxruntime's SimplifiedLayerNormalization ------------------------------------------------

def _simplified_model(dtype=np.float32):
    net = Net(17)
    elem = 1 if dtype == np.float32 else 10
    x = net.input("x", [2, 5, 16], elem)
    y = net.op("SimplifiedLayerNormalization", x, net.const(np.linspace(0.5, 1.5, 16).astype(dtype)), epsilon=1e-6)
    model = net.model(net.op("MatMul", y, net.const((np.random.default_rng(3).standard_normal((16, 8)) * 0.3)
                                                    .astype(dtype))))
    # ONNX's shape inference does not know onnxruntime's op: type the output for onnxruntime
    model.graph.output[0].CopyFrom(onnx.helper.make_tensor_value_info(model.graph.output[0].name, elem, [2, 5, 8]))
    return model


@pytest.mark.parametrize("precision", ["fp32", "fp16"])
def test_simplified_layer_norm_is_an_rms_norm(precision):
    model = _simplified_model()
    graph, stats = fuse_model(model)
    assert op_types(graph) == ["RmsNormMatMulFusionOp"]
    assert graph.nodes[0].attrs["epsilon"] == pytest.approx(1e-6)
    feeds = {"x": np.random.default_rng(1).standard_normal((2, 5, 16)).astype(np.float32)}
    assert_matches_ort(model, graph, feeds, precision=precision)


def test_simplified_layer_norm_in_float16_keeps_its_rounding():
    """float16: onnxruntime scales before its one rounding, RMSNormalization after: not the
    same tensor, so the op stays itself (one kernel)."""
    model = _simplified_model(np.float16)
    graph, _ = fuse_model(model)
    assert op_types(graph) == ["SimplifiedLayerNormalization", "MatMul"]
    feeds = {"x": np.random.default_rng(1).standard_normal((2, 5, 16)).astype(np.float16)}
    assert_matches_ort(model, graph, feeds, precision="fp16")


# -- misses, each with its NF code ------------------------------------------------------------

def _rms_net(exponent=2.0, keepdims=1, axes=(-1,), eps=None, leak=False, inverse="reciprocal", shape=(2, 4, 8)):
    net = Net(17)
    x = net.input("x", list(shape))
    sq = net.op("Pow", x, net.const(np.float32(exponent)))
    ms = net.op("ReduceMean", sq, axes=list(axes), keepdims=keepdims)
    t = net.op("Add", ms, eps if eps is not None else net.const(np.float32(1e-6)))
    if inverse == "reciprocal":
        n = net.op("Mul", x, net.op("Reciprocal", net.op("Sqrt", t)))
    else:
        n = net.op("Div", x, net.op("Sqrt", t))
    y = net.op("Mul", n, net.const(np.linspace(0.5, 1.5, 8).astype(np.float32)))
    return net, x, y, ([sq] if leak else []), ([eps] if eps is not None else [])


def _rms_misses(model):
    graph, stats = fuse_model(model, passes=[RmsNormFusionPass])
    return graph, stats["RmsNormFusionPass"]


@pytest.mark.parametrize("inverse", ["reciprocal", "div"])
@pytest.mark.parametrize("precision", ["fp32", "fp16"])
def test_rms_norm_forms(inverse, precision):
    net, x, y, _, _ = _rms_net(inverse=inverse)
    model = net.model(y)
    graph, result = _rms_misses(model)
    assert op_types(graph) == ["RMSNormalization"] and result.effect_times == 1
    feeds = {"x": np.random.default_rng(2).standard_normal((2, 4, 8)).astype(np.float32)}
    assert_matches_ort(model, graph, feeds, precision=precision)


@pytest.mark.parametrize("kwargs,code,text", [
    (dict(exponent=3.0), "NF2006", "must be 2"),
    (dict(keepdims=0, shape=(1, 8, 8)), "NF2003", "keepdims"),     # [1,8] broadcasts back, the wrong way
    (dict(axes=(1,)), "NF2003", "trailing axes"),
    (dict(leak=True), "NF2001", "used outside the pattern"),
])
def test_rms_norm_misses(kwargs, code, text):
    net, x, y, extra, _ = _rms_net(**kwargs)
    graph, result = _rms_misses(net.model(y, *extra))
    assert "RMSNormalization" not in op_types(graph)
    assert [m.code for m in result.misses] == [code] and text in result.misses[0].constraint
    assert result.match_times == 1 and result.effect_times == 0


def test_rms_norm_miss_on_a_computed_epsilon():
    net = Net(17)
    x, e = net.input("x", [2, 4, 8]), net.input("eps", [1])
    n = net.op("Mul", x, net.op("Reciprocal", net.op("Sqrt", net.op(
        "Add", net.op("ReduceMean", net.op("Mul", x, x), axes=[-1], keepdims=1), e))))
    graph, result = _rms_misses(net.model(n))
    assert [m.code for m in result.misses] == ["NF2002"] and "epsilon" in result.misses[0].constraint


def _gated_net(up_weight=None, leak=False):
    net = Net(17)
    x = net.input("x", [2, 4, 8])
    gate = net.op("MatMul", x, net.rand(8, 16))
    act = net.op("Mul", gate, net.op("Sigmoid", gate))          # SiLU as both exporters write it
    up = net.op("MatMul", x, up_weight if up_weight is not None else net.rand(8, 16))
    h = net.op("Mul", act, up)
    out = net.op("MatMul", h, net.rand(16, 8))
    return net, [net.op("Add", x, out)] + ([act] if leak else [])


@pytest.mark.parametrize("precision", ["fp32", "fp16"])
def test_gated_mlp_on_a_built_graph(precision):
    net, outs = _gated_net()
    model = net.model(*outs)
    graph, stats = fuse_model(model)
    assert op_types(graph) == ["MatMulBiasSwiGluFusionOp", "MatMulBiasFusionOp"]
    assert stats["GatedMlpFusionPass"].effect_times == 1
    feeds = {"x": np.random.default_rng(4).standard_normal((2, 4, 8)).astype(np.float32)}
    assert_matches_ort(model, graph, feeds, precision=precision)


def test_gated_mlp_misses():
    net = Net(17)
    x, w = net.input("x", [2, 4, 8]), net.input("w", [8, 16])
    gate = net.op("MatMul", x, net.rand(8, 16))
    h = net.op("Mul", net.op("Relu", gate), net.op("MatMul", x, w))
    graph, stats = fuse_model(net.model(h), passes=[CanonicalizePass, GatedMlpFusionPass])
    misses = stats["GatedMlpFusionPass"].misses
    assert [m.code for m in misses] == ["NF2002"] and "weight w must be a constant" in misses[0].constraint

    net2, outs = _gated_net(leak=True)
    graph, stats = fuse_model(net2.model(*outs), passes=[CanonicalizePass, GatedMlpFusionPass])
    misses = stats["GatedMlpFusionPass"].misses
    assert [m.code for m in misses] == ["NF2001"] and "used outside the pattern" in misses[0].constraint

    net3 = Net(17)
    x = net3.input("x", [2, 4, 8])
    h = net3.op("Mul", net3.op("Relu", net3.op("MatMul", x, net3.rand(8, 16))),
                net3.op("MatMul", x, net3.rand(8, 1)))
    graph, stats = fuse_model(net3.model(h), passes=[CanonicalizePass, GatedMlpFusionPass])
    assert [m.code for m in stats["GatedMlpFusionPass"].misses] == ["NF2004"]
