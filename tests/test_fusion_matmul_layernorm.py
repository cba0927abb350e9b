"""LayerNorm recognition, MatMulBiasAct and LayerNormMatMul: op types after the passes,
numbers against onnxruntime on the unfused model (fp32 and fp16), match/effect counts, every
miss with its NF code and reason, and the disable switch."""
from __future__ import annotations

import math

import numpy as np
import onnx
import pytest

from atc_py import zoo
from codegen.fused.gemm import SLOTS, activation_name
from codegen.om_builder import build_partitions
from codegen.registry import kernel_of
from ge.ops.registry import TensorType
from fusion_passes.canonical import CanonicalizePass
from fusion_passes.layer_norm import LayerNormFusionPass
from fusion_passes.layer_norm_matmul import LayerNormMatMulFusionPass
from fusion_passes.matmul_bias_act import MatMulBiasActFusionPass
from builder import Net
from helpers import assert_matches_ort, fuse_model, lower, op_types, random_feeds

LN = [LayerNormFusionPass]
MBA = [CanonicalizePass, MatMulBiasActFusionPass]   # activations, Gemm and Conv1D in canonical form
MINE = [CanonicalizePass, LayerNormFusionPass, MatMulBiasActFusionPass, LayerNormMatMulFusionPass]
RNG = np.random.default_rng(7)


# -- model building --------------------------------------------------------------------------

def check_numbers(model, graph, feeds=None):
    assert_matches_ort(model, graph, feeds)
    assert_matches_ort(model, graph, feeds, precision="fp16")


def stats_of(stats, name):
    s = stats[name]
    return s.match_times, s.effect_times


def reduce_mean(net, x, axes=(-1,), keepdims=1):
    if net.opset >= 18:
        return net.op("ReduceMean", x, net.const(np.array(list(axes), np.int64)), keepdims=keepdims)
    return net.op("ReduceMean", x, axes=list(axes), keepdims=keepdims)


def decomposed_ln(net, x, hidden, square="pow", divide="div", gamma="right", beta="right",
                  axes=(-1,), keepdims=(1, 1), eps=None, exponent=2.0):
    mean = reduce_mean(net, x, axes, keepdims[0])
    d = net.op("Sub", x, mean)
    sq = net.op("Pow", d, net.const(exponent)) if square == "pow" else net.op("Mul", d, d)
    var = reduce_mean(net, sq, axes, keepdims[1])
    std = net.op("Sqrt", net.op("Add", var, eps if eps is not None else net.const(1e-5)))
    n = net.op("Div", d, std) if divide == "div" else net.op("Mul", net.op("Reciprocal", std), d)
    if gamma:
        g = net.const(1.0 + 0.1 * RNG.standard_normal(hidden))
        n = net.op("Mul", n, g) if gamma == "right" else net.op("Mul", g, n)
    if beta:
        b = net.const(0.1 * RNG.standard_normal(hidden))
        n = net.op("Add", n, b) if beta == "right" else net.op("Add", b, n)
    return n


# -- LayerNorm recognition ---------------------------------------------------------------------

@pytest.mark.parametrize("opset", [13, 17, 18])
@pytest.mark.parametrize("square,divide,gamma,beta", [
    ("pow", "div", "right", "right"),
    ("mul", "recip", "left", "left"),
    ("pow", "div", "right", None),
    ("pow", "div", None, None),
])
def test_layernorm_decomposed_forms_become_one_op(opset, square, divide, gamma, beta):
    net = Net(opset)
    x = net.input("x", [2, 3, 16])
    y = decomposed_ln(net, x, 16, square, divide, gamma, beta)
    model = net.model(y)
    graph, stats = fuse_model(model, passes=LN)
    assert op_types(graph) == ["LayerNormalization"]
    assert stats_of(stats, "LayerNormFusionPass") == (1, 1)
    node = graph.nodes[0]
    assert node.attrs["axis"] == 2 and node.attrs["epsilon"] == pytest.approx(1e-5)
    assert len(node.origin) == len(model.graph.node)
    check_numbers(model, graph)


def test_layernorm_over_two_trailing_axes_with_broadcast_gamma():
    net = Net(17)
    x = net.input("x", [2, 4, 6])
    mean = net.op("ReduceMean", x, axes=[-2, -1], keepdims=1)
    d = net.op("Sub", x, mean)
    var = net.op("ReduceMean", net.op("Pow", d, net.const(2.0)), axes=[1, 2], keepdims=1)
    n = net.op("Div", d, net.op("Sqrt", net.op("Add", net.const(1e-6), var)))
    y = net.op("Mul", n, net.const(RNG.standard_normal((1, 4, 1))))    # varies over axis 1 only
    model = net.model(y)
    graph, _ = fuse_model(model, passes=LN)
    assert op_types(graph) == ["LayerNormalization"]
    assert graph.nodes[0].attrs["axis"] == 1
    assert graph.nodes[0].inputs[1].desc.shape == (4, 6)
    check_numbers(model, graph)


def test_layernorm_gamma_that_varies_over_batch_stays_outside():
    net = Net(17)
    x = net.input("x", [2, 3, 8])
    y = decomposed_ln(net, x, 8, gamma=None, beta=None)
    y = net.op("Mul", y, net.const(RNG.standard_normal((3, 1))))
    model = net.model(y)
    graph, _ = fuse_model(model, passes=LN)
    assert op_types(graph) == ["LayerNormalization", "Mul"]
    check_numbers(model, graph)


def _unfused_types(model):
    return op_types(lower(model))


@pytest.mark.parametrize("case,code,words", [
    ("keepdims", "NF2003", "keepdims=1"),
    ("axes", "NF2003", "trailing axes"),
    ("axes_differ", "NF2003", "same axes"),
    ("eps_input", "NF2002", "epsilon"),
    ("exponent", "NF2006", "exponent must be 2"),
    ("eps_broadcasts_up", "NF2004", "higher rank"),
    ("escaping", "NF2001", "used outside"),
])
def test_layernorm_misses_name_the_constraint(case, code, words):
    net = Net(17)
    x = net.input("x", [2, 3, 8])
    extra = []
    if case == "keepdims":      # square input: the dropped axis still broadcasts (wrongly)
        y = decomposed_ln(net, net.input("xs", [8, 8]), 8, keepdims=(0, 0))
    elif case == "axes":
        y = decomposed_ln(net, x, 8, axes=(1,), gamma=None, beta=None)
    elif case == "axes_differ":
        mean = net.op("ReduceMean", x, axes=[-1], keepdims=1)
        d = net.op("Sub", x, mean)
        var = net.op("ReduceMean", net.op("Mul", d, d), axes=[-2, -1], keepdims=1)
        y = net.op("Div", d, net.op("Sqrt", net.op("Add", var, net.const(1e-5))))
    elif case == "eps_input":
        y = decomposed_ln(net, x, 8, eps=net.input("eps", [1]))
    elif case == "exponent":
        y = decomposed_ln(net, x, 8, exponent=3.0)
    elif case == "eps_broadcasts_up":   # [1,1,1,1] eps makes the output [1,2,3,8]
        y = decomposed_ln(net, x, 8, eps=net.const(np.full((1, 1, 1, 1), 1e-5)))
    else:
        y = decomposed_ln(net, x, 8, gamma=None, beta=None)
        extra = [next(n.output[0] for n in net.nodes if n.op_type == "Sqrt")]
    model = net.model(y, *extra)
    if case == "keepdims":
        model.graph.input.pop(0)
    graph, stats = fuse_model(model, passes=LN)
    s = stats["LayerNormFusionPass"]
    assert (s.match_times, s.effect_times) == (1, 0)
    miss = s.misses[0]
    assert miss.code == code and words in miss.constraint, miss.constraint
    assert miss.pass_name == "LayerNormFusionPass" and miss.tensors
    assert miss.to_json()["op_types"][0] == "ReduceMean"
    assert op_types(graph) == _unfused_types(model)
    feeds = random_feeds(model)
    if "eps" in feeds:
        feeds["eps"] = np.abs(feeds["eps"]) + 1e-3
    assert_matches_ort(model, graph, feeds)


def test_layernorm_disabled_keeps_primitives():
    net = Net(17)
    y = decomposed_ln(net, net.input("x", [2, 8]), 8)
    model = net.model(y)
    graph, stats = fuse_model(model, disabled_ops=["LayerNormalization"], passes=LN)
    assert op_types(graph) == _unfused_types(model)
    assert stats_of(stats, "LayerNormFusionPass") == (1, 0)
    assert stats["LayerNormFusionPass"].disabled_by == "GE_FUSION_DISABLE_LIST"


def test_reduce_mean_alone_is_not_a_candidate():
    net = Net(17)
    model = net.model(net.op("ReduceMean", net.input("x", [2, 8]), axes=[-1], keepdims=1))
    _, stats = fuse_model(model, passes=LN)
    assert stats_of(stats, "LayerNormFusionPass") == (0, 0)


# -- MatMulBiasAct -----------------------------------------------------------------------------

def erf_gelu(net, y, form):
    if form == "zoo":       # Mul(Mul(y, 1 + erf(y / sqrt2)), 0.5)
        p = net.op("Add", net.op("Erf", net.op("Div", y, net.const(1.4142135))), net.const(1.0))
        return net.op("Mul", net.op("Mul", y, p), net.const(0.5))
    if form == "hf":        # Mul(Mul(y, 0.5), Add(1, Erf(Div(y, 1.4142))))
        p = net.op("Add", net.const(1.0), net.op("Erf", net.op("Div", y, net.const(1.4142))))
        return net.op("Mul", net.op("Mul", y, net.const(0.5)), p)
    # Mul(y, Mul(0.5, Add(Erf(Mul(y, 0.7071)), 1)))
    p = net.op("Add", net.op("Erf", net.op("Mul", net.const(0.70710678), y)), net.const(1.0))
    return net.op("Mul", y, net.op("Mul", net.const(0.5), p))


def tanh_gelu(net, y, cube):
    c = net.op("Pow", y, net.const(3.0)) if cube == "pow" else net.op("Mul", net.op("Mul", y, y), y)
    inner = net.op("Add", y, net.op("Mul", net.const(0.044715), c))
    t = net.op("Tanh", net.op("Mul", net.const(math.sqrt(2 / math.pi)), inner))
    return net.op("Mul", net.op("Mul", net.const(0.5), y), net.op("Add", net.const(1.0), t))


def activation(net, y, act):
    if act in ("Relu", "Sigmoid", "Tanh"):
        return net.op(act, y)
    if act == "GeluOp":
        return net.op("Gelu", y)
    if act == "GeluOpTanh":
        return net.op("Gelu", y, approximate="tanh")
    if act.startswith("erf_"):
        return erf_gelu(net, y, act[4:])
    if act.startswith("tanh_"):
        return tanh_gelu(net, y, act[5:])
    return y


@pytest.mark.parametrize("act,fused", [
    ("", "MatMulBiasFusionOp"),
    ("Relu", "MatMulBiasReluFusionOp"),
    ("Sigmoid", "MatMulBiasSigmoidFusionOp"),
    ("Tanh", "MatMulBiasTanhFusionOp"),
    ("GeluOp", "MatMulBiasGeluFusionOp"),
    ("GeluOpTanh", "MatMulBiasFastGeluFusionOp"),
    ("erf_zoo", "MatMulBiasGeluFusionOp"),
    ("erf_hf", "MatMulBiasGeluFusionOp"),
    ("erf_mul", "MatMulBiasGeluFusionOp"),
    ("tanh_pow", "MatMulBiasFastGeluFusionOp"),
    ("tanh_mul", "MatMulBiasFastGeluFusionOp"),
])
@pytest.mark.parametrize("bias_first,residual", [(False, False), (True, True)])
def test_matmul_bias_activation_variants(act, fused, bias_first, residual):
    net = Net(20)
    x = net.input("x", [2, 3, 8])
    mm = net.op("MatMul", x, net.rand(8, 8))
    b = net.rand(8)
    y = net.op("Add", b, mm) if bias_first else net.op("Add", mm, b)
    y = activation(net, y, act)
    if residual:
        y = net.op("Add", net.input("r", [2, 3, 8]), y)
    model = net.model(y)
    graph, stats = fuse_model(model, passes=MBA)
    assert op_types(graph) == [fused]
    assert stats_of(stats, "MatMulBiasActFusionPass") == (1, 1)
    node = graph.nodes[0]
    assert len(node.inputs) == 3 + residual and node.outputs[0].name == y
    check_numbers(model, graph)


def test_gemm_with_transb_alpha_beta_folds_into_weight_and_bias():
    net = Net(17)
    x = net.input("x", [4, 6])
    y = net.op("Gemm", x, net.rand(5, 6), net.rand(1, 5), transB=1, alpha=0.5, beta=2.0)
    model = net.model(net.op("Relu", y))
    graph, _ = fuse_model(model, passes=MBA)
    assert op_types(graph) == ["MatMulBiasReluFusionOp"]
    assert graph.nodes[0].inputs[1].desc.shape == (6, 5) and graph.nodes[0].inputs[2].desc.shape == (5,)
    check_numbers(model, graph)


def test_gemm_without_c_takes_the_following_add_as_bias_and_ignores_beta():
    net = Net(17)
    y = net.op("Gemm", net.input("x", [4, 6]), net.rand(5, 6), transB=1, alpha=2.0, beta=3.0)
    model = net.model(net.op("Add", net.rand(5), y))
    graph, _ = fuse_model(model, passes=MBA)
    assert op_types(graph) == ["MatMulBiasFusionOp"]
    check_numbers(model, graph)


def conv1d(net, x, k, n, out_lead, **gemm_attrs):
    """GPT-2's Conv1D linear: Reshape [..,K]->[R,K] -> Gemm(W, C) -> Reshape [R,N]->[out_lead..,N]."""
    flat = net.op("Reshape", x, net.const(np.array([-1, k], np.int64)))
    w = net.rand(n, k) if gemm_attrs.get("transB") else net.rand(k, n)
    y = net.op("Gemm", flat, w, net.rand(n), **gemm_attrs)
    return flat, net.op("Reshape", y, net.const(np.array(list(out_lead) + [n], np.int64)))


@pytest.mark.parametrize("act,fused,residual,gemm_attrs", [
    ("", "MatMulBiasFusionOp", False, {}),                 # bare: the two views go into the kernel
    ("tanh_pow", "MatMulBiasFastGeluFusionOp", False, {}),  # GPT-2 c_fc
    ("", "MatMulBiasFusionOp", True, {}),                  # GPT-2 c_proj + residual
    ("Relu", "MatMulBiasReluFusionOp", True, dict(transB=1, alpha=0.5, beta=2.0)),
])
def test_gemm_between_row_reshapes_takes_the_nd_input(act, fused, residual, gemm_attrs):
    net = Net(17)
    x = net.input("x", [2, 3, 8])
    _, y = conv1d(net, x, 8, 4, [2, 3], **gemm_attrs)
    y = activation(net, y, act)
    if residual:
        y = net.op("Add", net.input("r", [2, 3, 4]), y)
    model = net.model(y)
    graph, stats = fuse_model(model, passes=MBA)
    assert op_types(graph) == [fused]
    assert stats_of(stats, "MatMulBiasActFusionPass") == (1, 1)
    node = graph.nodes[0]
    assert node.inputs[0].name == "x" and node.outputs[0].name == y and node.outputs[0].desc.shape == (2, 3, 4)
    assert len(node.inputs) == 3 + residual
    check_numbers(model, graph)


def test_row_bracket_with_a_shared_flatten_keeps_the_view_for_its_other_reader():
    net = Net(17)
    flat, y = conv1d(net, net.input("x", [2, 3, 8]), 8, 4, [2, 3])
    model = net.model(net.op("Tanh", y), net.op("Relu", flat))
    graph, _ = fuse_model(model, passes=MBA)
    assert sorted(op_types(graph)) == ["MatMulBiasTanhFusionOp", "Relu", "Reshape"]
    fused = next(n for n in graph.nodes if n.op_type == "MatMulBiasTanhFusionOp")
    assert fused.inputs[0].name == "x"
    check_numbers(model, graph)


def test_gemm_whose_reshapes_regroup_rows_is_a_matmul_of_x_then_a_view():
    """[2,3,8] -> [6,8] -> Gemm -> [3,2,4]: the rows keep their order, so it is MatMul(x) + b
    on [2,3,4] read as [3,2,4] (a view after the kernel)."""
    net = Net(17)
    _, y = conv1d(net, net.input("x", [2, 3, 8]), 8, 4, [3, 2])
    model = net.model(y)
    graph, stats = fuse_model(model, passes=MBA)
    assert op_types(graph) == ["MatMulBiasFusionOp", "Reshape"]
    assert graph.nodes[0].inputs[0].name == "x" and graph.nodes[1].outputs[0].desc.shape == (3, 2, 4)
    assert stats_of(stats, "MatMulBiasActFusionPass") == (1, 1)
    check_numbers(model, graph)


def test_a_bare_matmul_is_not_a_candidate_and_a_gemm_is_matmul_plus_bias():
    net = Net(17)
    a = net.op("MatMul", net.input("x", [3, 8]), net.rand(8, 4))
    b = net.op("Gemm", a, net.rand(4, 4), net.rand(4))
    model = net.model(net.op("MatMul", b, net.rand(4, 4)))
    graph, stats = fuse_model(model, passes=MBA)
    assert op_types(graph) == ["MatMul", "MatMulBiasFusionOp", "MatMul"]
    assert stats_of(stats, "MatMulBiasActFusionPass") == (1, 1)
    check_numbers(model, graph)


@pytest.mark.parametrize("precision", ["fp32", "fp16"])
def test_matmul_without_bias_takes_its_activation_and_residual(precision):
    """Decoder LLMs' linears have no bias: MatMul -> act, and MatMul -> residual Add (Llama's
    o_proj/down_proj) are one kernel with an empty bias slot."""
    net = Net(17)
    x = net.input("x", [2, 3, 8])
    h = net.op("Relu", net.op("MatMul", x, net.rand(8, 8)))
    model = net.model(net.op("Add", x, net.op("MatMul", h, net.rand(8, 8))))
    graph, stats = fuse_model(model, passes=MBA)
    assert op_types(graph) == ["MatMulBiasReluFusionOp", "MatMulBiasFusionOp"]
    slots = [SLOTS.read(n.inputs) for n in graph.nodes]
    assert [s["bias"] for s in slots] == [None, None] and slots[1]["residual"].name == "x"
    assert stats_of(stats, "MatMulBiasActFusionPass") == (2, 2)
    assert_matches_ort(model, graph, {"x": RNG.standard_normal((2, 3, 8)).astype(np.float32)}, precision=precision)


def test_gelu_with_wrong_constant_is_not_absorbed():
    net = Net(17)
    y = net.op("Add", net.op("MatMul", net.input("x", [3, 8]), net.rand(8, 8)), net.rand(8))
    p = net.op("Add", net.op("Erf", net.op("Div", y, net.const(2.0))), net.const(1.0))
    model = net.model(net.op("Mul", net.op("Mul", y, p), net.const(0.5)))
    graph, _ = fuse_model(model, passes=MBA)
    assert op_types(graph) == ["MatMulBiasFusionOp", "Div", "Erf", "Add", "Mul", "Mul"]
    check_numbers(model, graph)


SQRT2 = math.sqrt(2.0)


@pytest.mark.parametrize("form,const", [
    ("erf_half", 0.5004), ("erf_one", 1.0008), ("erf_sqrt2", 1.4150),
    ("tanh_cubic", 0.04475), ("tanh_scale", 0.7985),
])
def test_almost_gelu_constants_are_not_absorbed(form, const):
    """Constants 1e-4..1e-3 off GELU's: the kernel would compute exact GELU, the graph not."""
    net = Net(17)
    y = net.op("Add", net.op("MatMul", net.input("x", [3, 8]), net.rand(8, 8)), net.rand(8))
    if form.startswith("erf"):
        c = {k: (const if form == f"erf_{k}" else v) for k, v in (("half", 0.5), ("one", 1.0), ("sqrt2", SQRT2))}
        p = net.op("Add", net.op("Erf", net.op("Div", y, net.const(c["sqrt2"]))), net.const(c["one"]))
        out = net.op("Mul", net.op("Mul", y, p), net.const(c["half"]))
    else:
        cubic = const if form == "tanh_cubic" else 0.044715
        scale = const if form == "tanh_scale" else math.sqrt(2 / math.pi)
        inner = net.op("Add", y, net.op("Mul", net.const(cubic), net.op("Pow", y, net.const(3.0))))
        t = net.op("Tanh", net.op("Mul", net.const(scale), inner))
        out = net.op("Mul", net.op("Mul", net.const(0.5), y), net.op("Add", net.const(1.0), t))
    model = net.model(out)
    graph, _ = fuse_model(model, passes=MBA)
    assert op_types(graph)[0] == "MatMulBiasFusionOp" and {"Erf", "Tanh"} & set(op_types(graph))
    check_numbers(model, graph)


def test_gelu_constant_that_broadcasts_the_output_up_is_not_absorbed():
    """A [1,1,1] 0.5 makes the graph's output rank 3; the kernel would write rank 2."""
    net = Net(17)
    y = net.op("Add", net.op("MatMul", net.input("x", [3, 8]), net.rand(8, 8)), net.rand(8))
    p = net.op("Add", net.op("Erf", net.op("Div", y, net.const(SQRT2))), net.const(1.0))
    model = net.model(net.op("Mul", net.op("Mul", y, p), net.const(np.full((1, 1, 1), 0.5))))
    graph, _ = fuse_model(model, passes=MBA)
    assert op_types(graph) == ["MatMulBiasFusionOp", "Div", "Erf", "Add", "Mul", "Mul"]
    check_numbers(model, graph)


def test_shared_activation_input_keeps_the_activation_outside():
    net = Net(17)
    y = net.op("Add", net.op("MatMul", net.input("x", [3, 8]), net.rand(8, 8)), net.rand(8))
    model = net.model(net.op("Relu", y), net.op("Sigmoid", y))
    graph, _ = fuse_model(model, passes=MBA)
    assert op_types(graph) == ["MatMulBiasFusionOp", "Relu", "Sigmoid"]
    check_numbers(model, graph)


@pytest.mark.parametrize("case,code,words", [
    ("weight_input", "NF2002", "weight (input B) must be a constant"),
    ("weight_3d", "NF2004", "must be 2-D"),
    ("bias_shape", "NF2004", "last axis"),
    ("product_shared", "NF2001", "readers other than the bias Add"),
    ("trans_a", "NF2003", "transA=1"),
])
def test_matmul_bias_misses_name_the_constraint(case, code, words):
    net = Net(17)
    x = net.input("x", [3, 8])
    extra = []
    if case == "weight_input":
        y = net.op("Add", net.op("MatMul", x, net.input("w", [8, 4])), net.rand(4))
    elif case == "weight_3d":
        y = net.op("Add", net.op("MatMul", x, net.rand(2, 8, 4)), net.rand(4))
    elif case == "bias_shape":
        y = net.op("Add", net.op("MatMul", x, net.rand(8, 4)), net.rand(3, 4))
    elif case == "product_shared":
        mm = net.op("MatMul", x, net.rand(8, 4))
        y, extra = net.op("Add", mm, net.rand(4)), [net.op("Relu", mm)]
    else:
        y = net.op("Relu", net.op("Gemm", x, net.rand(3, 4), net.rand(4), transA=1))
    model = net.model(y, *extra)
    graph, stats = fuse_model(model, passes=MBA)
    s = stats["MatMulBiasActFusionPass"]
    assert (s.match_times, s.effect_times) == (1, 0)
    assert s.misses[0].code == code and words in s.misses[0].constraint, s.misses[0].constraint
    assert op_types(graph) == _unfused_types(model)
    assert_matches_ort(model, graph)


def test_matmul_bias_disabled_by_fused_op_name():
    net = Net(17)
    y = net.op("Relu", net.op("Add", net.op("MatMul", net.input("x", [3, 8]), net.rand(8, 4)), net.rand(4)))
    z = net.op("Add", net.op("MatMul", y, net.rand(4, 4)), net.rand(4))
    model = net.model(z)
    graph, stats = fuse_model(model, disabled_ops=["MatMulBiasReluFusionOp"], passes=MBA)
    assert op_types(graph) == ["MatMul", "Add", "Relu", "MatMulBiasFusionOp"]
    assert stats_of(stats, "MatMulBiasActFusionPass") == (2, 1)


def test_matmul_bias_work_is_gemm_plus_epilogue():
    kernel = kernel_of("MatMulBiasReluFusionOp")
    x, w, b, r = (TensorType(np.float16, s) for s in [(2, 3, 8), (8, 4), (4,), (2, 3, 4)])
    out = TensorType(np.float16, (2, 3, 4))
    work = kernel.work([x, w, b, r], [out], {})
    assert work.cube_macs == 6 * 8 * 4
    assert work.vector_ops == {"alu": 3 * 24}                # bias, relu, residual
    assert work.onchip_bytes == 3 * out.nbytes               # product, +bias, relu kept on chip
    assert kernel.op.infer([x, w, b, r], {}) == [out]


# -- LayerNormMatMul ---------------------------------------------------------------------------

def ln_op(net, x, hidden, axis=-1):
    return net.op("LayerNormalization", x, net.const(1 + 0.1 * RNG.standard_normal(hidden)),
                  net.const(0.1 * RNG.standard_normal(hidden)), axis=axis, epsilon=1e-5)


def test_layernorm_then_matmul_single_output():
    net = Net(17)
    y = net.op("MatMul", ln_op(net, net.input("x", [2, 3, 8]), 8), net.rand(8, 6))
    model = net.model(y)
    graph, stats = fuse_model(model, passes=MINE)
    assert op_types(graph) == ["LayerNormMatMulFusionOp"]
    assert stats_of(stats, "LayerNormMatMulFusionPass") == (1, 1)
    node = graph.nodes[0]
    assert len(node.outputs) == 1 and node.attrs["emit_normalized"] == 0
    check_numbers(model, graph)


def test_post_ln_block_two_outputs_and_residual_reads_normalized():
    """Post-LN BERT: LN -> FFN1 (bias, erf GELU) -> FFN2 (bias) + residual from the LN."""
    net = Net(17)
    x = net.input("x", [2, 3, 8])
    h0 = decomposed_ln(net, x, 8)
    h = erf_gelu(net, net.op("Add", net.rand(16), net.op("MatMul", h0, net.rand(8, 16))), "zoo")
    z = net.op("Add", net.op("Add", net.rand(8), net.op("MatMul", h, net.rand(16, 8))), h0)
    model = net.model(z)
    graph, stats = fuse_model(model, passes=MINE)
    assert op_types(graph) == ["LayerNormMatMulFusionOp", "MatMulBiasFusionOp"]
    lnmm, ffn2 = graph.nodes
    assert lnmm.attrs["activation"] == "Gelu" and lnmm.attrs["emit_normalized"] == 1
    assert [v.name for v in lnmm.outputs] == [ffn2.inputs[0].name, h0]
    assert ffn2.inputs[3] is lnmm.outputs[1]
    assert stats_of(stats, "LayerNormMatMulFusionPass") == (1, 1)
    check_numbers(model, graph)
    # the .om carries both outputs of the fused op
    parts = build_partitions(graph, "m", "Ascend910B2", "force_fp16")
    op = next(o for o in parts.model_def.graph[0].op if o.type == "LayerNormMatMulFusionOp")
    assert len(op.output_desc) == 2


def test_layernorm_feeding_three_gemms_fuses_the_first():
    net = Net(17)
    n = ln_op(net, net.input("x", [4, 8]), 8)
    outs = [net.op("Add", net.op("MatMul", n, net.rand(8, 8)), net.rand(8)) for _ in range(3)]
    model = net.model(*outs)
    graph, _ = fuse_model(model, passes=MINE)
    assert op_types(graph) == ["LayerNormMatMulFusionOp", "MatMulBiasFusionOp", "MatMulBiasFusionOp"]
    assert graph.nodes[0].outputs[0].name == outs[0]
    check_numbers(model, graph)


def test_layernorm_graph_output_is_emitted():
    net = Net(17)
    n = ln_op(net, net.input("x", [4, 8]), 8)
    model = net.model(net.op("MatMul", n, net.rand(8, 8)), n)
    graph, _ = fuse_model(model, passes=MINE)
    assert op_types(graph) == ["LayerNormMatMulFusionOp"] and len(graph.nodes[0].outputs) == 2
    check_numbers(model, graph)


@pytest.mark.parametrize("case,code,words", [
    ("two_axes", "NF2003", "last axis only"),
    ("weight_input", "NF2002", "constant 2-D weight"),
    ("reads_twice", "NF1002", "cycle"),
])
def test_layernorm_matmul_misses(case, code, words):
    net = Net(17)
    x = net.input("x", [2, 3, 8])
    if case == "two_axes":
        n = net.op("LayerNormalization", x, net.const(np.ones((3, 8))), axis=-2)
        y = net.op("Add", net.op("MatMul", n, net.rand(8, 4)), net.rand(4))
    elif case == "weight_input":
        y = net.op("MatMul", ln_op(net, x, 8), net.input("w", [8, 4]))
    else:
        n = ln_op(net, x, 8)
        y = net.op("Add", net.op("Add", net.op("MatMul", n, net.rand(8, 8)), net.rand(8)), n)
    model = net.model(y)
    graph, stats = fuse_model(model, passes=MINE)
    s = stats["LayerNormMatMulFusionPass"]
    assert (s.match_times, s.effect_times) == (1, 0)
    assert s.misses[0].code == code and words in s.misses[0].constraint, s.misses[0].constraint
    assert "LayerNormalization" in op_types(graph)
    assert_matches_ort(model, graph)


def test_layernorm_matmul_disabled_leaves_layernorm_kernel():
    net = Net(17)
    y = net.op("Relu", net.op("Add", net.op("MatMul", ln_op(net, net.input("x", [4, 8]), 8),
                                            net.rand(8, 8)), net.rand(8)))
    model = net.model(y)
    graph, stats = fuse_model(model, disabled_ops=["LayerNormMatMulFusionOp"], passes=MINE)
    assert op_types(graph) == ["LayerNormalization", "MatMulBiasReluFusionOp"]
    assert stats_of(stats, "LayerNormMatMulFusionPass") == (1, 0)


def test_layernorm_matmul_work_adds_ln_and_gemm():
    kernel = kernel_of("LayerNormMatMulFusionOp")
    f = np.float16
    x, g, b, w, bias = (TensorType(f, s) for s in [(6, 8), (8,), (8,), (8, 4), (4,)])
    outs = kernel.op.infer([x, g, b, w, bias], {"emit_normalized": 1})
    assert [o.shape for o in outs] == [(6, 4), (6, 8)]
    work = kernel.work([x, g, b, w, bias], outs, {"activation": "Gelu", "epsilon": 1e-5})
    ln = kernel_of("LayerNormalization").work([x, g, b], [x], {})
    gemm = kernel_of("MatMulBiasGeluFusionOp").work([x, w, bias], outs[:1], {})
    assert work.cube_macs == gemm.cube_macs == 6 * 8 * 4
    assert work.vector_ops == (ln + gemm).vector_ops
    assert work.onchip_bytes == x.nbytes + gemm.onchip_bytes


# -- zoo models --------------------------------------------------------------------------------

def _bert_feeds(model):
    feeds = random_feeds(model)
    mask = np.ones_like(feeds["attention_mask"])
    mask[0, -2:] = 0        # a padding mask of 0/1 (random ints overflow fp16 in the mask)
    feeds["attention_mask"] = mask
    return feeds


@pytest.mark.parametrize("opset", [17, 18])
def test_bert_small_layernorms_and_gemms(opset):
    model = zoo.build("bert_base", small=True, opset=opset)
    graph, stats = fuse_model(model, passes=MINE)
    counts = graph.op_type_counts()
    assert stats_of(stats, "LayerNormFusionPass") == (5, 5)          # embeddings + 2 per layer
    assert counts["LayerNormMatMulFusionOp"] == 4 and counts["LayerNormalization"] == 1
    assert counts["MatMulBiasFusionOp"] == 8                         # K, V, out-proj, FFN2 x 2
    assert counts["MatMulBiasTanhFusionOp"] == 1                     # pooler Gemm + Tanh
    for t in ("ReduceMean", "Pow", "Sqrt", "Erf", "Gemm"):
        assert t not in counts
    assert all(getattr(s, "misses", []) == [] for s in stats.values())
    check_numbers(model, graph, _bert_feeds(model))


@pytest.mark.parametrize("name,fast", [("vit_base", "MatMulBiasGeluFusionOp"), ("gpt2", "MatMulBiasFastGeluFusionOp")])
def test_vit_and_gpt2_small(name, fast):
    model = zoo.build(name, small=True)
    graph, stats = fuse_model(model, passes=MINE)
    counts = graph.op_type_counts()
    assert fast not in counts          # FFN1 with its GELU went into LayerNormMatMul (LN2 feeds it)
    lnmm = [n for n in graph.nodes if n.op_type == "LayerNormMatMulFusionOp"]
    assert sum(activation_name(n.attrs) == fast[len("MatMulBias"):-len("FusionOp")] for n in lnmm) == 2
    assert "Erf" not in counts and "Tanh" not in counts and "Pow" not in counts
    check_numbers(model, graph)


def test_bert_small_full_pipeline_five_kernels_per_layer():
    model = zoo.build("bert_base", small=True)
    graph, stats = fuse_model(model)
    counts = graph.op_type_counts()
    assert counts["LayerNormMatMulFusionOp"] == 2          # LN1 + FFN1 per layer
    assert counts["MatMulBiasFusionOp"] == 4               # out-proj and FFN2 (+residual) per layer
    assert counts["LayerNormalization"] == 3               # embeddings LN (feeds MHA), LN2 x 2
    residuals = [n for n in graph.nodes if n.op_type == "MatMulBiasFusionOp" and len(n.inputs) == 4]
    assert len(residuals) == 4
    check_numbers(model, graph, _bert_feeds(model))


@pytest.mark.parametrize("mode", ["force_fp32", "force_fp16"])
def test_two_output_kernel_with_input_gap_survives_om_and_compare(tmp_path, capsys, mode):
    """LN without beta (an input gap) + FFN block: atc writes the .om, atc-sim reloads it and
    compares with onnxruntime."""
    import cli as atc_cli
    from simulator import cli as sim_cli
    net = Net(17)
    h0 = decomposed_ln(net, net.input("x", [2, 3, 8]), 8, beta=None)
    h = erf_gelu(net, net.op("Add", net.rand(16), net.op("MatMul", h0, net.rand(8, 16))), "zoo")
    z = net.op("Add", net.op("Add", net.rand(8), net.op("MatMul", h, net.rand(16, 8))), h0)
    path = tmp_path / "m.onnx"
    onnx.save(net.model(z), str(path))
    assert atc_cli.main([f"--model={path}", "--framework=5", f"--output={tmp_path}/m",
                         "--soc_version=Ascend910", f"--precision_mode={mode}"]) == 0
    assert sim_cli.main(["--model", f"{tmp_path}/m.om", "--compare", str(path),
                         "--output", str(tmp_path / "out")]) == 0
    text = capsys.readouterr().out
    assert "2 tasks" in text and "compare PASS" in text
