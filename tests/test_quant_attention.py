"""QuantMultiHeadAttention: attention whose graph quantizes Q, K, P and V becomes one kernel
with both products on the int8 cube -- the exact op types after the pass, the numbers
against onnxruntime, and the misses."""
import numpy as np
import onnx
import pytest
from onnx import helper

from fusion_passes import reasons
from fusion_passes.canonical import CanonicalizePass
from fusion_passes.quant_attention import QuantAttentionFusionPass
from simulator.compare import compare_one

from helpers import fuse_model, op_types, run_ir, run_ort
from test_fusion_quant import model_of, vi

S = np.float32
RNG = np.random.default_rng(23)
B, H, L, D = 1, 2, 6, 8


def qdq_attention(requantize_p=True, scale_op="Div"):
    """int8 Q, K^T (an int8 Transpose of K), V -> scores -> /sqrt(d) -> +mask -> Softmax ->
    P int8 -> P.V -> int8 output, with quantize_static's Q/DQ after every op."""
    inits = [("qs", S(0.03)), ("qz", np.int8(2)), ("ks", S(0.025)), ("kz", np.int8(-1)), ("vs", S(0.02)),
             ("vz", np.int8(0)), ("ss", S(0.06)), ("sz", np.int8(0)), ("ds", S(0.02)), ("dz", np.int8(1)),
             ("as", S(0.05)), ("az", np.int8(3)), ("ps", S(1 / 255)), ("pz", np.int8(-128)), ("os", S(0.015)),
             ("oz", np.int8(0)), ("scale", S(np.sqrt(D)) if scale_op == "Div" else S(1 / np.sqrt(D)))]

    def qdq(x, s, z, out):
        return [helper.make_node("QuantizeLinear", [x, s, z], [out + "_q"]),
                helper.make_node("DequantizeLinear", [out + "_q", s, z], [out])]

    nodes = [helper.make_node("DequantizeLinear", ["q", "qs", "qz"], ["qd"]),
             helper.make_node("Transpose", ["k"], ["kt"], perm=[0, 1, 3, 2]),
             helper.make_node("DequantizeLinear", ["kt", "ks", "kz"], ["kd"]),
             helper.make_node("MatMul", ["qd", "kd"], ["s"]), *qdq("s", "ss", "sz", "sd"),
             helper.make_node(scale_op, ["sd", "scale"], ["d"]), *qdq("d", "ds", "dz", "dd"),
             helper.make_node("Add", ["dd", "mask"], ["a"]), *qdq("a", "as", "az", "ad"),
             helper.make_node("Softmax", ["ad"], ["p"], axis=-1)]
    if requantize_p:
        nodes += qdq("p", "ps", "pz", "pd")
    nodes += [helper.make_node("DequantizeLinear", ["v", "vs", "vz"], ["vd"]),
              helper.make_node("MatMul", ["pd" if requantize_p else "p", "vd"], ["o"]),
              helper.make_node("QuantizeLinear", ["o", "os", "oz"], ["y"])]
    inputs = [vi("q", np.int8, [B, H, L, D]), vi("k", np.int8, [B, H, L, D]), vi("v", np.int8, [B, H, L, D]),
              vi("mask", S, [B, 1, 1, L])]
    return model_of(nodes, inputs, [onnx.ValueInfoProto(name="y")], inits)


def feeds():
    mask = np.zeros((B, 1, 1, L), S)
    mask[..., -2:] = -10000.0
    return {n: RNG.integers(-100, 100, (B, H, L, D)).astype(np.int8) for n in "qkv"} | {"mask": mask}


@pytest.mark.parametrize("scale_op", ["Div", "Mul"])
def test_quantized_attention_is_one_int8_kernel(scale_op):
    model = qdq_attention(scale_op=scale_op)
    graph, results = fuse_model(model, passes=[CanonicalizePass, QuantAttentionFusionPass])
    assert op_types(graph) == ["QuantMultiHeadAttentionFusionOp"]
    kernel = graph.nodes[0]
    assert [v.name for v in kernel.inputs][:3] == ["q", "k", "v"] and kernel.outputs[0].desc.dtype == np.int8
    assert kernel.attrs["head_num"] == H
    f = feeds()
    expected, got = run_ort(model, f)["y"], run_ir(graph, f)["y"]
    assert got.dtype == np.int8
    assert np.max(np.abs(got.astype(np.int32) - expected)) <= 1
    assert np.mean(got == expected) > 0.98


def test_the_kernel_multiplies_int8_on_the_cube_under_every_precision_mode():
    from codegen.om_builder import compute_dtype
    from simulator.pricing import kernel_spec
    graph, _ = fuse_model(qdq_attention(), passes=[CanonicalizePass, QuantAttentionFusionPass])
    kernel = graph.nodes[0]
    for mode in ("force_fp16", "force_fp32", "allow_mix_precision"):
        spec = kernel_spec(kernel, compute_dtype(kernel, mode))
        assert spec.work.cube_dtype == "int8" and spec.work.cube_macs == 2 * B * H * L * L * D
        f = feeds()
        got = run_ir(graph, f, mode)["y"]
        # the mask and the scale reach the kernel in the mode's float type: --compare's rule
        check = compare_one("y", "y", got, run_ort(qdq_attention(), f)["y"],
                            "int8" if mode == "force_fp32" else "int8-fp16", step=1.0)
        assert check.passed, check.describe()


def test_float_probabilities_are_a_miss_and_stay_float():
    graph, results = fuse_model(qdq_attention(requantize_p=False), passes=[CanonicalizePass, QuantAttentionFusionPass])
    assert "QuantMultiHeadAttentionFusionOp" not in op_types(graph)
    [miss] = results["QuantMultiHeadAttentionFusionPass"].misses
    assert miss.code == reasons.DTYPE_MISMATCH and "P must be requantized" in miss.constraint


@pytest.mark.parametrize("form", ["qdq", "qoperator"])
def test_quantize_static_bert_attention_fuses_in_every_layer(form):
    """QDQ: MatMul of DQs ... Softmax -> Q -> DQ -> MatMul; QOperator: QLinearMatMul -> DQ ->
    Div -> Q -> QLinearAdd -> QLinearSoftmax -> QLinearMatMul (its ops kept as written)."""
    pytest.importorskip("onnxruntime.quantization")
    from atc_py.zoo import build
    from atc_py.zoo.int8 import calibration_feeds, quantize
    model = build("bert_base", small=True)
    quantized = quantize(model, form, calibration_feeds(model, 2))
    graph, results = fuse_model(quantized)
    assert results["QuantMultiHeadAttentionFusionPass"].changes == 2       # SMALL has two layers
    left = {"MatMul", "Softmax", "QLinearMatMul", "QLinearSoftmax"}.intersection(op_types(graph))
    assert not left
    f = calibration_feeds(model, 1, seed=5)[0]
    expected, got = run_ort(quantized, f), run_ir(graph, f)
    for name, ref in expected.items():
        assert np.max(np.abs(got[name].astype(np.float64) - ref)) <= 1e-6 * max(1.0, np.abs(ref).max())


def test_p_dequantized_with_other_parameters_than_it_was_quantized_with_is_a_miss():
    """The kernel multiplies P's int8 by the scale of P's QuantizeLinear; a DequantizeLinear
    of P with another scale would be computed with the wrong one, so it stays unfused."""
    model = qdq_attention()
    model.graph.initializer.append(onnx.numpy_helper.from_array(np.asarray(S(2 / 255)), "ps2"))
    [p_dq] = [n for n in model.graph.node if n.op_type == "DequantizeLinear" and n.input[0] == "pd_q"]
    p_dq.input[1] = "ps2"
    graph, results = fuse_model(model, passes=[CanonicalizePass, QuantAttentionFusionPass])
    assert "QuantMultiHeadAttentionFusionOp" not in op_types(graph)
    [miss] = [m for m in results["QuantMultiHeadAttentionFusionPass"].misses if m.code == reasons.UNSUPPORTED_VARIANT]
    assert "P's DequantizeLinear" in miss.constraint       # (P.V, anchored too, misses as P's readers)
    f = feeds()
    expected, got = run_ort(model, f)["y"], run_ir(graph, f)["y"]
    assert np.max(np.abs(got.astype(np.int32) - expected)) <= 1


def test_qoperator_scale_as_qlinearmul_joins_the_score_chain():
    """quantize_static's QOperator form of eager attention that scales by a Mul (torch exports
    of BERT/RoBERTa/DistilBERT): QLinearMatMul -> QLinearMul(constant) -> QLinearAdd(mask) ->
    QLinearSoftmax -> QLinearMatMul.  The QLinearMul by a constant is a score-chain step (it
    was an NF2006 miss: 'found QLinearMul in the score chain'), kept as written."""
    pytest.importorskip("onnxruntime.quantization")
    from atc_py.zoo.int8 import quantize
    nodes = [helper.make_node("Transpose", ["k"], ["kt"], perm=[0, 1, 3, 2]),
             helper.make_node("MatMul", ["q", "kt"], ["s"]),
             helper.make_node("Mul", ["s", "scale"], ["d"]),
             helper.make_node("Add", ["d", "mask"], ["a"]),
             helper.make_node("Softmax", ["a"], ["p"], axis=-1),
             helper.make_node("MatMul", ["p", "v"], ["y"])]
    inputs = [vi(n, S, [B, H, L, D]) for n in "qkv"] + [vi("mask", S, [B, 1, 1, L])]
    model = model_of(nodes, inputs, [vi("y", S, [B, H, L, D])], [("scale", S(1 / np.sqrt(D)))])
    rng = np.random.default_rng(7)

    def sample():
        mask = np.zeros((B, 1, 1, L), S)
        mask[..., -2:] = -10000.0
        return {n: rng.standard_normal((B, H, L, D)).astype(S) for n in "qkv"} | {"mask": mask}

    quantized = quantize(model, "qoperator", [sample() for _ in range(4)])
    assert "QLinearMul" in [n.op_type for n in quantized.graph.node]
    graph, results = fuse_model(quantized, passes=[CanonicalizePass, QuantAttentionFusionPass])
    assert results["QuantMultiHeadAttentionFusionPass"].changes == 1
    assert not {"QLinearMatMul", "QLinearMul", "QLinearAdd", "QLinearSoftmax"} & set(op_types(graph))
    assert op_types(graph).count("QuantMultiHeadAttentionFusionOp") == 1
    f = sample()
    expected, got = run_ort(quantized, f)["y"], run_ir(graph, f)["y"]
    assert np.array_equal(got, expected)        # QOperator ops kept as written: onnxruntime's numbers


def _insert_before_pv(graph, p: str, guarded: str, nodes):
    """The guard `nodes` between P (`p`) and P.V, which then reads `guarded`."""
    [pv] = [n for n in graph.node if n.op_type == "MatMul" and n.input[0] == p]
    pv.input[0] = guarded
    at = list(graph.node).index(pv)
    for offset, node in enumerate(nodes):
        graph.node.insert(at + offset, node)


def _with_sdpa_nan_guard(model):
    """P -> Q -> DQ -> Where(IsNaN(.), 0, .) -> Q -> DQ -> P.V, as quantize_static writes
    torch SDPA's guard."""
    graph = model.graph
    _insert_before_pv(graph, "pd", "pgd", [helper.make_node("IsNaN", ["pd"], ["pnan"]),
                                           helper.make_node("Where", ["pnan", "zero", "pd"], ["pg"]),
                                           helper.make_node("QuantizeLinear", ["pg", "ps", "pz"], ["pg_q"]),
                                           helper.make_node("DequantizeLinear", ["pg_q", "ps", "pz"], ["pgd"])])
    graph.initializer.append(onnx.numpy_helper.from_array(np.asarray(S(0.0)), "zero"))
    return model


def test_sdpa_nan_guard_on_dequantized_probabilities_is_dropped():
    """SDPA's Where(IsNaN(p), 0, p) on DequantizeLinear(p_int8) can never fire: the canonical
    DequantizedNanGuard drops it and the attention is one int8 kernel (before: an NF2001 miss,
    P read by both IsNaN and Where)."""
    model = _with_sdpa_nan_guard(qdq_attention())
    graph, results = fuse_model(model, passes=[CanonicalizePass, QuantAttentionFusionPass])
    assert op_types(graph) == ["QuantMultiHeadAttentionFusionOp"]
    assert results["CanonicalizePass"].by_rewrite.get("DequantizedNanGuard") == 1
    f = feeds()
    expected, got = run_ort(model, f)["y"], run_ir(graph, f)["y"]
    assert np.max(np.abs(got.astype(np.int32) - expected)) <= 1 and np.mean(got == expected) > 0.98


def test_a_nan_guard_on_float_probabilities_stays():
    """Not dequantized (P float, -inf masks can make a row NaN): the guard is not proved a no-op."""
    model = qdq_attention(requantize_p=False)
    graph = model.graph
    _insert_before_pv(graph, "p", "pg", [helper.make_node("IsNaN", ["p"], ["pnan"]),
                                         helper.make_node("Where", ["pnan", "zero", "p"], ["pg"])])
    graph.initializer.append(onnx.numpy_helper.from_array(np.asarray(S(0.0)), "zero"))
    out, results = fuse_model(model, passes=[CanonicalizePass])
    assert not results["CanonicalizePass"].by_rewrite.get("DequantizedNanGuard")
    assert {"IsNaN", "Where"} <= set(op_types(out))
