"""Int8 cube fusions (QuantConvBNReLU, QuantMatMulBiasAct) on the three quantized forms: the
exact op types after the passes, and the numbers against onnxruntime (QDQ, QOperator) or the
unfused graph (AMCT, whose ops onnxruntime does not have)."""
import numpy as np
import onnx
import pytest
from onnx import helper, numpy_helper

from fusion_passes import reasons
from fusion_passes.quant_conv_bn_relu import QuantConvBNReluFusionPass
from fusion_passes.quant_matmul_bias_act import QuantMatMulBiasActFusionPass

from helpers import fuse_model, lower, op_types, run_ir, run_ort

RNG = np.random.default_rng(7)
QUANT_PASSES = [QuantConvBNReluFusionPass, QuantMatMulBiasActFusionPass]
S = np.float32


def model_of(nodes, inputs, outputs, inits, ms=False, opset=17):
    graph = helper.make_graph(nodes, "g", inputs, outputs, [numpy_helper.from_array(np.asarray(a), n) for n, a in inits])
    opsets = [helper.make_opsetid("", opset)] + ([helper.make_opsetid("com.microsoft", 1)] if ms else [])
    model = helper.make_model(graph, opset_imports=opsets)
    model.ir_version = 8
    return model


def vi(name, dtype, shape):
    return helper.make_tensor_value_info(name, helper.np_dtype_to_tensor_dtype(np.dtype(dtype)), shape)


def steps_apart(a, b, step):
    return float(np.max(np.abs(a.astype(np.float64) - b.astype(np.float64)))) / step


def qdq_conv_block():
    """DQ(x) -> Conv(DQ(W) per channel, DQ(b int32)) -> Relu -> Q -> DQ -> Add(DQ(r)) -> Q -> DQ."""
    cout = 8
    w = RNG.integers(-127, 127, (cout, 4, 3, 3)).astype(np.int8)
    xs, ws = S(0.04), RNG.uniform(0.002, 0.01, cout).astype(S)
    b = RNG.integers(-2000, 2000, cout).astype(np.int32)
    inits = [("xs", xs), ("xz", np.int8(-3)), ("w", w), ("ws", ws), ("wz", np.zeros(cout, np.int8)), ("b", b),
             ("bs", (xs * ws).astype(S)), ("ys", S(0.05)), ("yz", np.int8(-128)), ("rs", S(0.03)),
             ("rz", np.int8(2)), ("os", S(0.06)), ("oz", np.int8(0))]
    nodes = [helper.make_node("QuantizeLinear", ["x", "xs", "xz"], ["xq"]),
             helper.make_node("DequantizeLinear", ["xq", "xs", "xz"], ["xd"]),
             helper.make_node("DequantizeLinear", ["w", "ws", "wz"], ["wd"], axis=0),
             helper.make_node("DequantizeLinear", ["b", "bs"], ["bd"], axis=0),
             helper.make_node("Conv", ["xd", "wd", "bd"], ["c"], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c"], ["r1"]),
             helper.make_node("QuantizeLinear", ["r1", "ys", "yz"], ["q1"]),
             helper.make_node("DequantizeLinear", ["q1", "ys", "yz"], ["d1"]),
             helper.make_node("QuantizeLinear", ["res", "rs", "rz"], ["rq"]),
             helper.make_node("DequantizeLinear", ["rq", "rs", "rz"], ["rd"]),
             helper.make_node("Add", ["d1", "rd"], ["sum"]),
             helper.make_node("QuantizeLinear", ["sum", "os", "oz"], ["out_q"]),
             helper.make_node("DequantizeLinear", ["out_q", "os", "oz"], ["y"])]
    return model_of(nodes, [vi("x", S, [1, 4, 6, 6]), vi("res", S, [1, cout, 6, 6])], [onnx.ValueInfoProto(name="y")], inits)


def test_qdq_conv_relu_residual_requantize_is_one_int8_kernel():
    model = qdq_conv_block()
    graph, _ = fuse_model(model, passes=QUANT_PASSES)
    assert op_types(graph) == ["QuantizeLinear", "QuantizeLinear", "QuantConvBNReluFusionOp", "DequantizeLinear"]
    fused = next(n for n in graph.nodes if n.op_type == "QuantConvBNReluFusionOp")
    assert fused.inputs[0].desc.dtype == np.int8 and fused.outputs[0].desc.dtype == np.int8
    assert fused.attrs["activation"] == "Relu"
    feeds = {"x": RNG.standard_normal((1, 4, 6, 6)).astype(S), "res": RNG.standard_normal((1, 8, 6, 6)).astype(S)}
    expected = run_ort(model, feeds)["y"]
    got = run_ir(graph, feeds)["y"]
    assert steps_apart(got, expected, 0.06) <= 1
    assert np.mean(got == expected) > 0.99


def test_precision_modes_leave_the_int8_kernel_int8():
    from codegen.om_builder import compute_dtype
    from simulator.pricing import kernel_spec
    graph, _ = fuse_model(qdq_conv_block(), passes=QUANT_PASSES)
    fused = next(n for n in graph.nodes if n.op_type == "QuantConvBNReluFusionOp")
    for mode in ("force_fp16", "force_fp32", "allow_mix_precision"):
        assert compute_dtype(fused, mode) == np.int8
        spec = kernel_spec(fused, compute_dtype(fused, mode))
        assert spec.work.cube_dtype == "int8"
        assert spec.input_bytes < 8 * 4 * 9 * 2 + 4 * 36 * 2      # int8 data and weights, not fp16


def test_qoperator_conv_and_qlinear_add():
    cout = 6
    w = RNG.integers(-127, 127, (cout, 3, 3, 3)).astype(np.int8)
    inits = [("xs", S(0.02)), ("xz", np.uint8(128)), ("w", w), ("ws", RNG.uniform(0.005, 0.01, cout).astype(S)),
             ("wz", np.zeros(cout, np.int8)), ("ys", S(0.05)), ("yz", np.uint8(120)),
             ("b", RNG.integers(-500, 500, cout).astype(np.int32)), ("rs", S(0.04)), ("rz", np.uint8(100)),
             ("cs", S(0.07)), ("cz", np.uint8(128))]
    nodes = [helper.make_node("QLinearConv", ["x", "xs", "xz", "w", "ws", "wz", "ys", "yz", "b"], ["c"], pads=[1, 1, 1, 1]),
             helper.make_node("QLinearAdd", ["c", "ys", "yz", "r", "rs", "rz", "cs", "cz"], ["y"], domain="com.microsoft")]
    model = model_of(nodes, [vi("x", np.uint8, [1, 3, 5, 5]), vi("r", np.uint8, [1, cout, 5, 5])],
                     [onnx.ValueInfoProto(name="y")], inits, ms=True)
    graph, _ = fuse_model(model, passes=QUANT_PASSES)
    assert op_types(graph) == ["QuantConvBNReluFusionOp"]
    feeds = {"x": RNG.integers(0, 255, (1, 3, 5, 5)).astype(np.uint8), "r": RNG.integers(0, 255, (1, cout, 5, 5)).astype(np.uint8)}
    expected, got = run_ort(model, feeds)["y"], run_ir(graph, feeds)["y"]
    assert got.dtype == np.uint8 and steps_apart(got, expected, 1) <= 1


@pytest.mark.parametrize("op", ["QLinearMatMul", "QGemm"])
def test_qoperator_requantization_is_onnxruntimes_exactly(op):
    """The fused kernel requantizes as onnxruntime does, rint(acc * ((a_scale * b_scale) /
    y_scale)), and equals it exactly.  Dequantizing first and dividing by y_scale after rounds
    twice: with these scales (found by search) the accumulator +-1304 comes out +-10 instead
    of onnxruntime's +-11."""
    n = 8
    a_s, b_s, y_s = S(0.077135354), S(0.0021413327), S(0.020512845)
    w = RNG.integers(-127, 127, (2, n)).astype(np.int8)
    w[:, 0] = [127, 1]                                            # column 0: acc = 127 a0 + a1
    inits = [("as", a_s), ("az", np.int8(0)), ("w", w if op == "QLinearMatMul" else w.T.copy()), ("bs", b_s),
             ("bz", np.int8(0)), ("ys", y_s), ("yz", np.int8(-5))]
    if op == "QLinearMatMul":
        node = helper.make_node(op, ["a", "as", "az", "w", "bs", "bz", "ys", "yz"], ["y"])
    else:
        inits.append(("c", np.zeros(n, np.int32)))
        node = helper.make_node(op, ["a", "as", "az", "w", "bs", "bz", "c", "ys", "yz"], ["y"], transB=1,
                                domain="com.microsoft")
    model = model_of([node], [vi("a", np.int8, [6, 2])], [onnx.ValueInfoProto(name="y")], inits, ms=op == "QGemm")
    graph, _ = fuse_model(model, passes=QUANT_PASSES)
    assert op_types(graph) == ["QuantMatMulBiasActFusionOp"]
    a = RNG.integers(-20, 20, (6, 2)).astype(np.int8)
    a[0], a[1] = [10, 34], [-10, -34]                             # acc +-1304 in column 0
    expected, got = run_ort(model, {"a": a})["y"], run_ir(graph, {"a": a})["y"]
    assert expected[0, 0] == 11 - 5 and expected[1, 0] == -11 - 5
    assert got.dtype == np.int8 and np.array_equal(got, expected)


def test_qdq_gemm_transb_per_channel_float_output():
    n, k = 5, 16
    w = RNG.integers(-127, 127, (n, k)).astype(np.int8)
    ws = RNG.uniform(0.002, 0.01, n).astype(S)
    inits = [("xs", S(0.03)), ("xz", np.int8(0)), ("w", w), ("ws", ws), ("wz", np.zeros(n, np.int8)),
             ("b", RNG.standard_normal(n).astype(S))]
    nodes = [helper.make_node("QuantizeLinear", ["x", "xs", "xz"], ["xq"]),
             helper.make_node("DequantizeLinear", ["xq", "xs", "xz"], ["xd"]),
             helper.make_node("DequantizeLinear", ["w", "ws", "wz"], ["wd"], axis=0),
             helper.make_node("Gemm", ["xd", "wd", "b"], ["y"], transB=1)]
    model = model_of(nodes, [vi("x", S, [3, k])], [onnx.ValueInfoProto(name="y")], inits)
    graph, _ = fuse_model(model, passes=QUANT_PASSES)
    assert op_types(graph) == ["QuantizeLinear", "QuantMatMulBiasActFusionOp"]
    feeds = {"x": RNG.standard_normal((3, k)).astype(S)}
    np.testing.assert_allclose(run_ir(graph, feeds)["y"], run_ort(model, feeds)["y"], rtol=1e-5, atol=1e-5)


def test_activation_times_activation_matmul_is_a_miss():
    nodes = [helper.make_node("DequantizeLinear", ["a", "s"], ["ad"]), helper.make_node("DequantizeLinear", ["b", "s"], ["bd"]),
             helper.make_node("MatMul", ["ad", "bd"], ["y"])]
    model = model_of(nodes, [vi("a", np.int8, [2, 4]), vi("b", np.int8, [4, 3])], [onnx.ValueInfoProto(name="y")],
                     [("s", S(0.1))])
    graph, results = fuse_model(model)
    assert "QuantMatMulBiasActFusionOp" not in op_types(graph)
    misses = results["QuantMatMulBiasActFusionPass"].misses
    assert [m.code for m in misses] == [reasons.NON_CONSTANT]


def amct_conv_block(relu=True, offset=0.0):
    """AscendQuant -> Conv(int8 W, int32 b) -> AscendDequant -> Add(float residual) -> AscendQuant -> AscendAntiQuant."""
    cout = 8
    w = RNG.integers(-127, 127, (cout, 4, 3, 3)).astype(np.int8)
    deq = (S(0.04) * RNG.uniform(0.002, 0.01, cout).astype(S)).astype(S)
    deq_u64 = deq.view(np.uint32).astype(np.uint64)
    nodes = [helper.make_node("AscendQuant", ["x"], ["xq"], scale=25.0, offset=offset, sqrt_mode=0, round_mode="Round"),
             helper.make_node("Conv", ["xq", "w", "b"], ["acc"], pads=[1, 1, 1, 1]),
             helper.make_node("AscendDequant", ["acc", "deq"], ["d"], relu_flag=int(relu), sqrt_mode=0, dtype=0),
             helper.make_node("Add", ["d", "res"], ["s"]),
             helper.make_node("AscendQuant", ["s"], ["sq"], scale=16.0, offset=0.0),
             helper.make_node("AscendAntiQuant", ["sq"], ["y"], scale=1 / 16, offset=0.0)]
    inits = [("w", w), ("b", RNG.integers(-2000, 2000, cout).astype(np.int32)), ("deq", deq_u64)]
    return model_of(nodes, [vi("x", S, [1, 4, 6, 6]), vi("res", S, [1, cout, 6, 6])], [onnx.ValueInfoProto(name="y")], inits)


def test_amct_conv_dequant_residual_quant_is_one_int8_kernel():
    model = amct_conv_block()
    graph, _ = fuse_model(model, passes=QUANT_PASSES)
    assert op_types(graph) == ["AscendQuant", "QuantConvBNReluFusionOp", "AscendAntiQuant"]
    fused = next(n for n in graph.nodes if n.op_type == "QuantConvBNReluFusionOp")
    assert fused.outputs[0].desc.dtype == np.int8 and fused.attrs["activation"] == "Relu"
    feeds = {"x": RNG.standard_normal((1, 4, 6, 6)).astype(S), "res": RNG.standard_normal((1, 8, 6, 6)).astype(S)}
    unfused = run_ir(lower(model), feeds)["y"]
    np.testing.assert_array_equal(run_ir(graph, feeds)["y"], unfused)
