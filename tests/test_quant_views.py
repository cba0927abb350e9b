"""Quantized views (fusion_passes/canonical/quant_views.py): DQ -> views -> Q with the same
scale and zero point becomes the views on the int8 tensor -- exactly, and only then."""
import numpy as np
import onnx
from onnx import helper

from fusion_passes.canonical import CanonicalizePass

from helpers import fuse_model, op_types, run_ir, run_ort
from test_fusion_quant import model_of, vi

S = np.float32


def head_split(q_scale=0.05, q_zero=3, views=("Reshape", "Transpose")):
    """x_q -> DQ -> Reshape [1,4,2,3] -> Transpose -> Q(q_scale, q_zero) -> DQ -> y."""
    nodes = [helper.make_node("DequantizeLinear", ["x", "s", "z"], ["d"])]
    cur = "d"
    if "Reshape" in views:
        nodes.append(helper.make_node("Reshape", [cur, "shape"], ["r"]))
        cur = "r"
    if "Transpose" in views:
        nodes.append(helper.make_node("Transpose", [cur], ["t"], perm=[0, 2, 1, 3] if "Reshape" in views else [0, 2, 1]))
        cur = "t"
    nodes += [helper.make_node("QuantizeLinear", [cur, "qs", "qz"], ["q"]),
              helper.make_node("DequantizeLinear", ["q", "qs", "qz"], ["y"])]
    inits = [("s", S(0.05)), ("z", np.int8(3)), ("qs", S(q_scale)), ("qz", np.int8(q_zero)),
             ("shape", np.array([1, 4, 2, 3], np.int64))]
    return model_of(nodes, [vi("x", np.int8, [1, 4, 6])], [onnx.ValueInfoProto(name="y")], inits)


def _feeds():
    return {"x": np.random.default_rng(0).integers(-128, 128, (1, 4, 6)).astype(np.int8)}


def test_views_between_equal_q_dq_move_onto_the_int8_tensor():
    model = head_split()
    graph, results = fuse_model(model, passes=[CanonicalizePass])
    assert op_types(graph) == ["Reshape", "Transpose", "DequantizeLinear"]
    assert all(n.outputs[0].desc.dtype == np.int8 for n in graph.nodes[:2])
    assert results["CanonicalizePass"].by_rewrite["QuantizedView"] == 1
    feeds = _feeds()
    np.testing.assert_array_equal(run_ir(graph, feeds)["y"], run_ort(model, feeds)["y"])


def test_a_requantizing_view_keeps_its_q_dq():
    for scale, zero in ((0.07, 3), (0.05, 0)):                 # another scale, another zero point
        graph, results = fuse_model(head_split(scale, zero), passes=[CanonicalizePass])
        assert "QuantizeLinear" in op_types(graph)
        assert "QuantizedView" not in results["CanonicalizePass"].by_rewrite


def test_every_q_dq_pair_around_views_goes_from_a_quantize_static_bert():
    """The small BERT quantized by onnxruntime: no DQ -> Reshape/Transpose -> Q is left, and
    the fused model still equals onnxruntime (exact in fp32 kernels)."""
    import pytest
    pytest.importorskip("onnxruntime.quantization")
    from atc_py.zoo import build
    from atc_py.zoo.int8 import calibration_feeds, quantize
    model = build("bert_base", small=True)
    quantized = quantize(model, "qdq", calibration_feeds(model, 2))
    graph, _ = fuse_model(quantized)
    for node in graph.nodes:
        if node.op_type in ("Reshape", "Transpose"):
            assert node.inputs[0].desc.dtype == np.int8, node.name
    feeds = calibration_feeds(model, 1, seed=5)[0]
    expected, got = run_ort(quantized, feeds), run_ir(graph, feeds)
    for name, ref in expected.items():
        assert np.max(np.abs(got[name].astype(np.float64) - ref)) <= 1e-6 * max(1.0, np.abs(ref).max())


def test_an_embedding_lookup_reads_the_int8_table():
    """DQ(table) -> Gather(ids) -> Q with the table's scale: Gather of the int8 table."""
    table = np.random.default_rng(1).integers(-127, 128, (10, 4)).astype(np.int8)
    nodes = [helper.make_node("DequantizeLinear", ["table", "s", "z"], ["t"]),
             helper.make_node("Gather", ["t", "ids"], ["g"]),
             helper.make_node("QuantizeLinear", ["g", "s", "z"], ["q"]),
             helper.make_node("DequantizeLinear", ["q", "s", "z"], ["y"])]
    model = model_of(nodes, [vi("ids", np.int64, [1, 3])], [onnx.ValueInfoProto(name="y")],
                     [("table", table), ("s", S(0.02)), ("z", np.int8(0))])
    graph, _ = fuse_model(model, passes=[CanonicalizePass])
    assert op_types(graph) == ["Gather", "DequantizeLinear"]
    assert graph.nodes[0].inputs[0].const.dtype == np.int8
    feeds = {"ids": np.array([[3, 0, 9]], np.int64)}
    np.testing.assert_array_equal(run_ir(graph, feeds)["y"], run_ort(model, feeds)["y"])


def test_small_constant_dequantize_folds_unless_a_cube_op_reads_it():
    """LayerNorm's int8 gamma/beta fold to float constants; the MatMul's int8 weight stays a
    DequantizeLinear for the int8 fusion."""
    rng = np.random.default_rng(2)
    nodes = [helper.make_node("DequantizeLinear", ["g8", "gs"], ["gamma"]),
             helper.make_node("DequantizeLinear", ["b8", "gs"], ["beta"]),
             helper.make_node("LayerNormalization", ["x", "gamma", "beta"], ["n"], axis=-1),
             helper.make_node("DequantizeLinear", ["w8", "ws"], ["w"]),
             helper.make_node("MatMul", ["n", "w"], ["y"])]
    inits = [("g8", rng.integers(-127, 128, 4).astype(np.int8)), ("b8", rng.integers(-127, 128, 4).astype(np.int8)),
             ("gs", S(0.01)), ("w8", rng.integers(-127, 128, (4, 3)).astype(np.int8)), ("ws", S(0.02))]
    model = model_of(nodes, [vi("x", S, [2, 4])], [onnx.ValueInfoProto(name="y")], inits)
    graph, results = fuse_model(model, passes=[CanonicalizePass])
    assert op_types(graph) == ["LayerNormalization", "DequantizeLinear", "MatMul"]
    assert results["CanonicalizePass"].by_rewrite["ConstantDequantize"] == 2
    feeds = {"x": rng.standard_normal((2, 4)).astype(S)}
    np.testing.assert_allclose(run_ir(graph, feeds)["y"], run_ort(model, feeds)["y"], rtol=1e-6, atol=1e-6)
