"""LayerNormQuant: a LayerNormalization its readers quantize becomes one kernel writing int8
-- the exact op types after the pass, the numbers against onnxruntime (one quantization
step, simulator/COMPARE.md), the misses with their reasons, and the quantized BERTs."""
import numpy as np
import onnx
import pytest
from onnx import helper

from fusion_passes import reasons
from fusion_passes.layer_norm_quant import LayerNormQuantFusionPass
from simulator.amct_reference import has_amct_ops, to_standard_onnx
from simulator.compare import compare_one

from helpers import fuse_model, op_types, run_ir, run_ort
from test_fusion_quant import model_of, vi

S = np.float32
RNG = np.random.default_rng(31)
T, C = 6, 16


def _ln_inits():
    return [("gamma", RNG.uniform(0.5, 1.5, C).astype(S)), ("beta", RNG.uniform(-0.2, 0.2, C).astype(S)),
            ("s1", S(0.03)), ("z1", np.int8(3)), ("s2", S(0.025)), ("z2", np.int8(-2)), ("shape", np.array([T, C]))]


def qdq_layer_norm():
    """LN -> Q -> DQ (quantize_static's form: the DQ feeds the next int8 GEMM or the residual)."""
    nodes = [helper.make_node("LayerNormalization", ["x", "gamma", "beta"], ["n"], axis=-1, epsilon=1e-12),
             helper.make_node("QuantizeLinear", ["n", "s1", "z1"], ["q"]),
             helper.make_node("DequantizeLinear", ["q", "s1", "z1"], ["y"])]
    return model_of(nodes, [vi("x", S, [1, T, C])], [onnx.ValueInfoProto(name="y")], _ln_inits())


def qoperator_layer_norm(per_axis=False):
    """LN -> {Reshape -> Q, Reshape -> Q, Q} and a float reader (Add), as QOperator BERT and
    AMCT write the LayerNorm before Q/K/V and the residual."""
    inits = _ln_inits() + [("s3", RNG.uniform(0.02, 0.04, C).astype(S) if per_axis else S(0.02))]
    nodes = [helper.make_node("LayerNormalization", ["x", "gamma", "beta"], ["n"], axis=-1, epsilon=1e-12),
             helper.make_node("Reshape", ["n", "shape"], ["r1"]), helper.make_node("QuantizeLinear", ["r1", "s1", "z1"], ["q1"]),
             helper.make_node("Reshape", ["n", "shape"], ["r2"]), helper.make_node("QuantizeLinear", ["r2", "s2", "z2"], ["q2"]),
             helper.make_node("QuantizeLinear", ["n", "s3"], ["q3"], axis=-1),
             helper.make_node("Add", ["n", "x"], ["res"])]
    outputs = [onnx.ValueInfoProto(name=n) for n in ("q1", "q2", "q3", "res")]
    return model_of(nodes, [vi("x", S, [1, T, C])], outputs, inits)


def feeds():
    return {"x": (RNG.standard_normal((1, T, C)) * 3 + 1).astype(S)}


def _check(model, graph, mode="force_fp32"):
    f = feeds()
    expected, got = run_ort(model, f), run_ir(graph, f, mode)
    for name, ref in expected.items():
        rule = ("int8" if mode == "force_fp32" else "int8-fp16") if ref.dtype == np.int8 else \
            ("fp32" if mode == "force_fp32" else "fp16")
        check = compare_one(name, name, got[name], ref, rule, step=1.0 if ref.dtype == np.int8 else 0.0)
        assert check.passed, (name, check.describe())
    return expected, got


@pytest.mark.parametrize("mode", ["force_fp32", "force_fp16"])
def test_qdq_layer_norm_and_its_quantize_are_one_kernel(mode):
    model = qdq_layer_norm()
    graph, results = fuse_model(model, passes=[LayerNormQuantFusionPass])
    assert op_types(graph) == ["LayerNormQuantFusionOp", "DequantizeLinear"]
    kernel = graph.nodes[0]
    assert [np.dtype(v.desc.dtype) for v in kernel.outputs] == [np.int8]
    assert results["LayerNormQuantFusionPass"].changes == 1
    expected, got = _check(model, graph, mode)
    if mode == "force_fp32":
        assert np.array_equal(got["y"], expected["y"])
    # the members run as the unfused kernels did under the mode: the fusion changes no number
    unfused, _ = fuse_model(model, passes=[])
    f = feeds()
    assert np.array_equal(run_ir(graph, f, mode)["y"], run_ir(unfused, f, mode)["y"])


def test_every_quantizing_reader_joins_and_float_readers_get_the_normalized_rows():
    model = qoperator_layer_norm()
    graph, _ = fuse_model(model, passes=[LayerNormQuantFusionPass])
    assert op_types(graph) == ["LayerNormQuantFusionOp", "Add"]
    kernel = graph.nodes[0]
    assert [v.name for v in kernel.outputs] == ["q1", "q2", "q3", "n"] and kernel.attrs["emit_normalized"] == 1
    assert [np.dtype(v.desc.dtype) for v in kernel.outputs] == [np.int8, np.int8, np.uint8, np.float32]   # q3: no zero point, uint8
    assert [tuple(v.desc.shape) for v in kernel.outputs[:2]] == [(T, C), (T, C)]
    expected, got = _check(model, graph)
    for name in ("q1", "q2", "q3"):
        assert np.array_equal(got[name], expected[name]), name


def test_a_per_axis_quantizer_is_a_miss_with_its_reason():
    model = qoperator_layer_norm(per_axis=True)
    graph, results = fuse_model(model, passes=[LayerNormQuantFusionPass])
    assert "LayerNormQuantFusionOp" not in op_types(graph) and "LayerNormalization" in op_types(graph)
    [miss] = results["LayerNormQuantFusionPass"].misses
    assert miss.code == reasons.UNSUPPORTED_VARIANT and "per-axis" in miss.constraint
    _check(model, graph)


def test_a_float_layer_norm_is_not_a_candidate():
    nodes = [helper.make_node("LayerNormalization", ["x", "gamma", "beta"], ["y"], axis=-1)]
    model = model_of(nodes, [vi("x", S, [1, T, C])], [onnx.ValueInfoProto(name="y")], _ln_inits()[:2])
    graph, results = fuse_model(model, passes=[LayerNormQuantFusionPass])
    assert op_types(graph) == ["LayerNormalization"]
    assert results["LayerNormQuantFusionPass"].match_times == 0 and not results["LayerNormQuantFusionPass"].misses


@pytest.mark.parametrize("form", ["qdq", "qoperator", "amct"])
def test_quantized_bert_layer_norms_write_int8(form):
    """Small BERT in each int8 form: every LayerNorm but the last (a graph output whose pooler
    quantizes a Gather of it) is one LayerNormQuant kernel; no QuantizeLinear/AscendQuant
    kernel is left behind one; the numbers match onnxruntime."""
    pytest.importorskip("onnxruntime.quantization")
    from atc_py.zoo import build
    from atc_py.zoo.int8 import calibration_feeds, quantize
    model = build("bert_base", small=True)
    quantized = quantize(model, form, calibration_feeds(model, 2))
    graph, results = fuse_model(quantized)
    types = op_types(graph)
    fused = types.count("LayerNormQuantFusionOp")
    assert fused == results["LayerNormQuantFusionPass"].changes == (5 if form == "qdq" else 4)
    assert types.count("LayerNormalization") == (0 if form == "qdq" else 1)
    assert not results["LayerNormQuantFusionPass"].misses
    for node in graph.nodes:
        if node.op_type in ("QuantizeLinear", "AscendQuant"):
            assert node.inputs[0].producer is None or node.inputs[0].producer.op_type != "LayerNormQuantFusionOp"
    f = calibration_feeds(model, 1, seed=5)[0]
    reference = run_ort(to_standard_onnx(quantized) if has_amct_ops(quantized) else quantized, f)
    got = run_ir(graph, f)
    for key, ref in reference.items():
        assert np.max(np.abs(got[key].astype(np.float64) - ref)) <= 1e-4 * max(1.0, np.abs(ref).max()), key
