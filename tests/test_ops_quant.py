"""Quantized ops (QDQ, QOperator, com.microsoft) against onnxruntime on one-node models, and
AMCT's AscendQuant/AscendDequant/AscendAntiQuant against their documented formulas."""
import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from ge.errors import AtcError

from helpers import lower, run_ir, run_ort

RNG = np.random.default_rng(13)


def model_of(nodes, inputs, outputs, inits=(), opset=17, ms=False):
    graph = helper.make_graph(nodes, "g", inputs, outputs, [numpy_helper.from_array(a, n) for n, a in inits])
    opsets = [helper.make_opsetid("", opset)] + ([helper.make_opsetid("com.microsoft", 1)] if ms else [])
    model = helper.make_model(graph, opset_imports=opsets)
    model.ir_version = 10 if opset >= 21 else 8
    return model


def vi(name, dtype, shape):
    return helper.make_tensor_value_info(name, helper.np_dtype_to_tensor_dtype(np.dtype(dtype)), shape)


def out(name):
    return onnx.ValueInfoProto(name=name)


def assert_same(model, feeds, steps=0):
    """Our IR (fp32) equals onnxruntime; quantized outputs within `steps` integer steps."""
    expected = run_ort(model, feeds)
    got = run_ir(lower(model), feeds)
    for name, ref in expected.items():
        assert got[name].dtype == ref.dtype and got[name].shape == ref.shape, name
        diff = np.abs(got[name].astype(np.float64) - ref.astype(np.float64))
        assert diff.max(initial=0) <= steps, f"{name}: max diff {diff.max()}"
    return got


def q_params(dtype, size=None, symmetric=False):
    shape = () if size is None else (size,)
    scale = (RNG.uniform(0.01, 0.05, shape)).astype(np.float32)
    info = np.iinfo(dtype)
    zp = np.zeros(shape, dtype) if symmetric else RNG.integers(info.min // 2, info.max // 2, shape).astype(dtype)
    return scale, zp


@pytest.mark.parametrize("dtype", [np.int8, np.uint8])
@pytest.mark.parametrize("symmetric", [True, False])
@pytest.mark.parametrize("opset", [13, 19, 21])
def test_quantize_dequantize_per_tensor(dtype, symmetric, opset):
    scale, zp = q_params(dtype, symmetric=symmetric)
    nodes = [helper.make_node("QuantizeLinear", ["x", "s", "z"], ["q"]),
             helper.make_node("DequantizeLinear", ["q", "s", "z"], ["y"])]
    model = model_of(nodes, [vi("x", np.float32, [2, 3, 4, 5])], [out("q"), out("y")],
                     [("s", scale), ("z", zp)], opset)
    x = RNG.standard_normal((2, 3, 4, 5)).astype(np.float32) * 3
    x.flat[:4] = [0.5 * scale, 1.5 * scale, -2.5 * scale, 1e6]     # ties to even, saturation
    got = assert_same(model, {"x": x})
    assert got["q"].dtype == dtype


@pytest.mark.parametrize("dtype", [np.int8, np.uint8])
@pytest.mark.parametrize("axis", [0, 1, -1])
def test_per_axis(dtype, axis):
    shape = (4, 6, 3)
    scale, zp = q_params(dtype, shape[axis])
    nodes = [helper.make_node("QuantizeLinear", ["x", "s", "z"], ["q"], axis=axis),
             helper.make_node("DequantizeLinear", ["q", "s", "z"], ["y"], axis=axis)]
    model = model_of(nodes, [vi("x", np.float32, list(shape))], [out("q"), out("y")], [("s", scale), ("z", zp)])
    assert_same(model, {"x": RNG.standard_normal(shape).astype(np.float32)})


def test_blocked_dequantize_opset21():
    w = RNG.integers(-128, 127, (8, 6)).astype(np.int8)
    scale = RNG.uniform(0.01, 0.1, (4, 6)).astype(np.float32)          # blocks of 2 along axis 0
    zp = RNG.integers(-3, 3, (4, 6)).astype(np.int8)
    nodes = [helper.make_node("DequantizeLinear", ["w", "s", "z"], ["wf"], axis=0, block_size=2),
             helper.make_node("MatMul", ["x", "wf"], ["y"])]
    model = model_of(nodes, [vi("x", np.float32, [3, 8])], [out("y")], [("w", w), ("s", scale), ("z", zp)], 21)
    x = RNG.standard_normal((3, 8)).astype(np.float32)
    expected = x @ ((w.astype(np.float32) - np.repeat(zp, 2, 0)) * np.repeat(scale, 2, 0))
    got = run_ir(lower(model), {"x": x})["y"]
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-6)
    try:
        ref = run_ort(model, {"x": x})["y"]
    except Exception:        # onnxruntime builds without blocked int8 DequantizeLinear
        return
    np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-6)


def test_dequantize_int32_bias_and_default_zero_point():
    b = RNG.integers(-1000, 1000, (5,)).astype(np.int32)
    nodes = [helper.make_node("DequantizeLinear", ["b", "s"], ["bf"]), helper.make_node("Add", ["x", "bf"], ["y"])]
    model = model_of(nodes, [vi("x", np.float32, [2, 5])], [out("y")], [("b", b), ("s", np.array(0.003, np.float32))])
    got = run_ir(lower(model), {"x": np.zeros((2, 5), np.float32)})["y"]
    ref = run_ort(model, {"x": np.zeros((2, 5), np.float32)})["y"]
    np.testing.assert_array_equal(got, ref)


def test_dequantize_of_constant_weights_is_not_folded():
    w = RNG.integers(-128, 127, (4, 3)).astype(np.int8)
    nodes = [helper.make_node("DequantizeLinear", ["w", "s"], ["wf"]), helper.make_node("MatMul", ["x", "wf"], ["y"])]
    model = model_of(nodes, [vi("x", np.float32, [2, 4])], [out("y")], [("w", w), ("s", np.array(0.02, np.float32))])
    graph = lower(model)
    dq = [n for n in graph.nodes if n.op_type == "DequantizeLinear"]
    assert dq and dq[0].inputs[0].const.dtype == np.int8      # the int8 weights stay visible


def test_dynamic_quantize_and_matmul_integer():
    w = RNG.integers(-128, 127, (16, 8)).astype(np.int8)
    wz = RNG.integers(-4, 4, (8,)).astype(np.int8)
    nodes = [helper.make_node("DynamicQuantizeLinear", ["x"], ["xq", "xs", "xz"]),
             helper.make_node("MatMulInteger", ["xq", "w", "xz", "wz"], ["acc"])]
    model = model_of(nodes, [vi("x", np.float32, [3, 16])], [out("acc"), out("xs"), out("xz")],
                     [("w", w), ("wz", wz)])
    assert_same(model, {"x": RNG.standard_normal((3, 16)).astype(np.float32)})


@pytest.mark.parametrize("a_shape,zp_shape", [((4, 6), (4,)), ((4, 6), (4, 1)), ((2, 4, 6), (2, 4, 1))])
def test_matmul_integer_per_row_a_zero_point(a_shape, zp_shape):
    """ONNX's per-row A zero point ([M], or A's shape with K = 1), which onnxruntime's CPU
    kernel does not run: checked against the spec's formula."""
    a = RNG.integers(0, 255, a_shape).astype(np.uint8)
    b = RNG.integers(0, 255, (6, 3)).astype(np.uint8)
    az = RNG.integers(0, 255, zp_shape).astype(np.uint8)
    model = model_of([helper.make_node("MatMulInteger", ["a", "b", "az"], ["y"])], [vi("a", np.uint8, list(a_shape))],
                     [out("y")], [("b", b), ("az", az)])
    got = run_ir(lower(model), {"a": a})["y"]
    rows = az.reshape(az.shape + (1,)) if az.ndim == 1 else az
    np.testing.assert_array_equal(got, (a.astype(np.int64) - rows) @ b.astype(np.int64))


def test_conv_integer():
    w = RNG.integers(-128, 127, (4, 3, 3, 3)).astype(np.int8)
    nodes = [helper.make_node("ConvInteger", ["x", "w", "xz"], ["y"], pads=[1, 1, 1, 1], strides=[2, 2])]
    model = model_of(nodes, [vi("x", np.uint8, [1, 3, 7, 7])], [out("y")], [("w", w), ("xz", np.array(7, np.uint8))])
    assert_same(model, {"x": RNG.integers(0, 255, (1, 3, 7, 7)).astype(np.uint8)})


@pytest.mark.parametrize("act_dtype", [np.int8, np.uint8])
@pytest.mark.parametrize("per_channel", [False, True])
def test_qlinear_conv(act_dtype, per_channel):
    w = RNG.integers(-127, 127, (6, 4, 3, 3)).astype(np.int8)
    xs, xz = q_params(act_dtype)
    ws, wz = q_params(np.int8, 6 if per_channel else None, symmetric=True)
    ys, yz = np.float32(0.5), np.array(3, act_dtype)
    b = RNG.integers(-500, 500, (6,)).astype(np.int32)
    node = helper.make_node("QLinearConv", ["x", "xs", "xz", "w", "ws", "wz", "ys", "yz", "b"], ["y"],
                            pads=[1, 1, 1, 1])
    model = model_of([node], [vi("x", act_dtype, [1, 4, 6, 6])], [out("y")],
                     [("xs", xs), ("xz", xz), ("w", w), ("ws", ws), ("wz", wz), ("ys", np.array(ys)),
                      ("yz", yz), ("b", b)])
    info = np.iinfo(act_dtype)
    assert_same(model, {"x": RNG.integers(info.min, info.max, (1, 4, 6, 6)).astype(act_dtype)})


def test_qlinear_matmul():
    b = RNG.integers(-127, 127, (8, 5)).astype(np.int8)
    node = helper.make_node("QLinearMatMul", ["a", "as", "az", "b", "bs", "bz", "ys", "yz"], ["y"])
    model = model_of([node], [vi("a", np.uint8, [2, 3, 8])], [out("y")],
                     [("as", np.array(0.02, np.float32)), ("az", np.array(120, np.uint8)), ("b", b),
                      ("bs", np.array(0.01, np.float32)), ("bz", np.array(0, np.int8)),
                      ("ys", np.array(0.05, np.float32)), ("yz", np.array(128, np.uint8))])
    assert_same(model, {"a": RNG.integers(0, 255, (2, 3, 8)).astype(np.uint8)})


def _ms_params(names, dtype):
    inits = []
    for n in names:
        s, z = q_params(dtype)
        inits += [(n + "_s", s), (n + "_z", z)]
    return inits


@pytest.mark.parametrize("op", ["QLinearAdd", "QLinearMul"])
def test_qlinear_binary_com_microsoft(op):
    node = helper.make_node(op, ["a", "A_s", "A_z", "b", "B_s", "B_z", "C_s", "C_z"], ["c"], domain="com.microsoft")
    model = model_of([node], [vi("a", np.int8, [2, 4, 3]), vi("b", np.int8, [4, 3])], [out("c")],
                     _ms_params(["A", "B", "C"], np.int8), ms=True)
    feeds = {"a": RNG.integers(-128, 127, (2, 4, 3)).astype(np.int8), "b": RNG.integers(-128, 127, (4, 3)).astype(np.int8)}
    assert_same(model, feeds, steps=1)


def test_qlinear_global_average_pool_and_lut_ops():
    nodes = [helper.make_node("QLinearGlobalAveragePool", ["x", "X_s", "X_z", "Y_s", "Y_z"], ["p"], domain="com.microsoft"),
             helper.make_node("QLinearSigmoid", ["x", "X_s", "X_z", "Y_s", "Y_z"], ["sg"], domain="com.microsoft"),
             helper.make_node("QLinearLeakyRelu", ["x", "X_s", "X_z", "Y_s", "Y_z"], ["lr"], domain="com.microsoft",
                              alpha=0.1),
             helper.make_node("QLinearSoftmax", ["x", "X_s", "X_z", "Y_s", "Y_z"], ["sm"], domain="com.microsoft",
                              axis=-1, opset=13)]
    inits = [("X_s", np.array(0.05, np.float32)), ("X_z", np.array(5, np.uint8)),
             ("Y_s", np.array(1 / 255, np.float32)), ("Y_z", np.array(0, np.uint8))]
    model = model_of(nodes, [vi("x", np.uint8, [1, 3, 4, 4])], [out("p"), out("sg"), out("lr"), out("sm")], inits, ms=True)
    assert_same(model, {"x": RNG.integers(0, 255, (1, 3, 4, 4)).astype(np.uint8)}, steps=1)


def test_qgemm_float_and_quantized_output():
    b = RNG.integers(-127, 127, (5, 8)).astype(np.int8)
    c = RNG.integers(-300, 300, (5,)).astype(np.int32)
    base = [("as", np.array(0.02, np.float32)), ("az", np.array(3, np.int8)), ("b", b),
            ("bs", RNG.uniform(0.005, 0.02, (5,)).astype(np.float32)), ("bz", np.zeros(5, np.int8)), ("c", c)]
    feeds = {"a": RNG.integers(-128, 127, (4, 8)).astype(np.int8)}
    node = helper.make_node("QGemm", ["a", "as", "az", "b", "bs", "bz", "c"], ["y"], domain="com.microsoft", transB=1)
    model = model_of([node], [vi("a", np.int8, [4, 8])], [out("y")], base, ms=True)
    expected, got = run_ort(model, feeds)["y"], run_ir(lower(model), feeds)["y"]
    np.testing.assert_allclose(got, expected, rtol=1e-6, atol=1e-6)
    node = helper.make_node("QGemm", ["a", "as", "az", "b", "bs", "bz", "c", "ys", "yz"], ["y"], domain="com.microsoft",
                            transB=1, alpha=0.5)
    model = model_of([node], [vi("a", np.int8, [4, 8])], [out("y")],
                     base + [("ys", np.array(0.03, np.float32)), ("yz", np.array(-2, np.int8))], ms=True)
    assert_same(model, feeds, steps=1)


# -- import ----------------------------------------------------------------------------------


def test_unknown_op_of_com_microsoft_is_named_with_the_supported_ones():
    node = helper.make_node("QAttention", ["x"], ["y"], domain="com.microsoft")
    model = model_of([node], [vi("x", np.int8, [2])], [out("y")], ms=True)
    with pytest.raises(AtcError) as err:
        lower(model)
    assert err.value.code == "E16002" and "QLinearAdd" in err.value.message and "QAttention" in err.value.message


def test_other_custom_domain_is_refused():
    node = helper.make_node("Foo", ["x"], ["y"], domain="my.domain")
    model = model_of([node], [vi("x", np.float32, [2])], [out("y")])
    model.opset_import.append(helper.make_opsetid("my.domain", 1))
    with pytest.raises(AtcError) as err:
        lower(model)
    assert err.value.code == "E16002" and "my.domain" in err.value.message


# BERT-base's GELU `Erf + 1` (scales measured in its quantize_static QOperator graph):
# A_scale / C_scale = 1 - 5e-7, and 127 * B_scale / C_scale lands next to .5
GELU_ADD_SCALES = {"layer0": (0.007843129, -1, 0.007843133), "layer1": (0.007843131, 0, 0.007843134)}


@pytest.mark.parametrize("scales", sorted(GELU_ADD_SCALES))
@pytest.mark.parametrize("scalar_b", [True, False])
def test_qlinear_add_rounds_where_mlas_rounds(scalar_b, scales):
    """Sums within float rounding of .5, or exactly on it (layer 1, a = 117: 116.5 after
    MLAS's two fma): the kernel follows MLAS's order of float32 operations, so every one of
    the 256 values of A rounds as onnxruntime rounds it."""
    a_s, a_z, c_s = GELU_ADD_SCALES[scales]
    node = helper.make_node("QLinearAdd", ["a", "A_s", "A_z", "b", "B_s", "B_z", "C_s", "C_z"], ["c"],
                            domain="com.microsoft")
    b_shape = [1] if scalar_b else [256]
    inits = [("A_s", np.array(a_s, np.float32)), ("A_z", np.array(a_z, np.int8)),
             ("B_s", np.array(0.007874016, np.float32)), ("B_z", np.array(0, np.int8)),
             ("C_s", np.array(c_s, np.float32)), ("C_z", np.array(-128, np.int8))]
    model = model_of([node], [vi("a", np.int8, [256]), vi("b", np.int8, b_shape)], [out("c")], inits, ms=True)
    feeds = {"a": np.arange(-128, 128).astype(np.int8),
             "b": np.full(b_shape, 127, np.int8) if scalar_b else RNG.integers(-128, 128, 256).astype(np.int8)}
    assert_same(model, feeds)


@pytest.mark.parametrize("op", ["QLinearAdd", "QLinearMul"])
@pytest.mark.parametrize("scalar_b", [True, False])
def test_qlinear_binary_on_exact_ties(op, scalar_b):
    """Scales whose ratios are powers of two put most results exactly on .5: only the very
    order onnxruntime rounds in (QLinearMul: the output zero point added before the
    rounding) gives its integers.  Odd zero points, so ties to even land differently."""
    node = helper.make_node(op, ["a", "A_s", "A_z", "b", "B_s", "B_z", "C_s", "C_z"], ["c"], domain="com.microsoft")
    c_s = np.float32(0.02)
    a_s, b_s = (np.float32(0.01), np.float32(0.03)) if op == "QLinearAdd" else (np.float32(0.05), c_s / np.float32(0.05) / 2)
    b_shape = [1] if scalar_b else [512]
    inits = [("A_s", np.array(a_s, np.float32)), ("A_z", np.array(7, np.int8)), ("B_s", np.array(b_s, np.float32)),
             ("B_z", np.array(-3, np.int8)), ("C_s", np.array(c_s, np.float32)), ("C_z", np.array(-23, np.int8))]
    model = model_of([node], [vi("a", np.int8, [512]), vi("b", np.int8, b_shape)], [out("c")], inits, ms=True)
    feeds = {"a": np.tile(np.arange(-128, 128).astype(np.int8), 2),
             "b": RNG.integers(-128, 128, b_shape).astype(np.int8)}
    assert_same(model, feeds)


@pytest.mark.parametrize("dtype,saturate", [("float8_e4m3fn", 1), ("float8_e4m3fn", 0), ("float8_e5m2", 1),
                                            ("float8_e5m2", 0), ("int4", None)])
def test_quantize_dequantize_float8_and_int4(dtype, saturate):
    """QDQ through the float8 and int4 types GE holds: float8 rounds x / scale to the nearest
    float8 (saturated unless saturate=0), int4 as the integer types."""
    import ml_dtypes
    t = np.dtype(getattr(ml_dtypes, dtype))
    x = (RNG.standard_normal((3, 8)) * 40).astype(np.float32)
    if saturate != 0:
        x[0, 0], x[1, 1] = 1e5, -1e5                       # beyond the range: saturated
    attrs = {} if saturate is None else {"saturate": saturate}
    nodes = [helper.make_node("QuantizeLinear", ["x", "s", "z"], ["q"], **attrs),
             helper.make_node("DequantizeLinear", ["q", "s", "z"], ["y"])]
    inits = [("s", np.float32(0.5)), ("z", np.zeros((), t))]
    model = model_of(nodes, [vi("x", np.float32, [3, 8])], [out("q"), out("y")], inits, opset=21)
    got = run_ir(lower(model), {"x": x})
    # onnxruntime's Python API cannot return float8_e5m2 or int4 arrays: compare y, the round trip
    ref = run_ort(model_of(nodes, [vi("x", np.float32, [3, 8])], [out("y")], inits, opset=21), {"x": x})
    assert got["q"].dtype == t and got["y"].dtype == np.float32
    np.testing.assert_array_equal(got["y"], ref["y"])
    np.testing.assert_array_equal(got["q"].astype(np.float32) * np.float32(0.5), got["y"])


@pytest.mark.parametrize("x_type,w_type", [("float8_e4m3fn", "int8"), ("int8", "int4"), ("float8_e5m2", "int4")])
def test_float8_and_int4_qdq_matmul_after_fusion(x_type, w_type):
    """A DQ -> MatMul whose data is float8 or whose weight is int4 is no int8 GEMM: the fusion
    passes leave it (with a reason) and the result still equals onnxruntime's."""
    import ml_dtypes
    from helpers import fuse_model
    xt, wt = (np.dtype(getattr(ml_dtypes, t, None) or getattr(np, t)) for t in (x_type, w_type))
    w = RNG.integers(-7, 7, (8, 4)).astype(wt)
    nodes = [helper.make_node("QuantizeLinear", ["x", "xs", "xz"], ["xq"]),
             helper.make_node("DequantizeLinear", ["xq", "xs", "xz"], ["xd"]),
             helper.make_node("DequantizeLinear", ["w", "ws"], ["wd"]),
             helper.make_node("MatMul", ["xd", "wd"], ["y"])]
    model = model_of(nodes, [vi("x", np.float32, [3, 8])], [out("y")],
                     [("xs", np.float32(0.25)), ("xz", np.zeros((), xt)), ("w", w), ("ws", np.float32(0.1))],
                     opset=21)
    x = (RNG.standard_normal((3, 8)) * 4).astype(np.float32)
    graph, _ = fuse_model(model)
    assert not [n for n in graph.nodes if "Quant" in n.op_type and "Fusion" in n.op_type]
    got = run_ir(graph, {"x": x})["y"]
    np.testing.assert_allclose(got, run_ort(model, {"x": x})["y"], rtol=1e-5, atol=1e-5)


def test_quantize_shape_rules_never_build_input_sized_parameters():
    """A shape rule needs the parameters' shapes, not an input-sized copy of them: a blocked
    scale of a 16 GiB input, or a graph-input scale that large, must not allocate 16 GiB at
    compile time (the seed-5 fuzz run: E19999 MemoryError in QuantizeLinear's shape rule)."""
    import tracemalloc

    from ge.ops.registry import TensorType, get_op

    big = TensorType(np.dtype(np.float32), (65536, 65536))
    tracemalloc.start()
    try:
        for op_type, scale_attr in (("QuantizeLinear", "y_scale"), ("DequantizeLinear", "x_scale")):
            x = big if op_type == "QuantizeLinear" else TensorType(np.dtype(np.int8), big.shape)
            blocked = {scale_attr: np.ones((65536, 1), np.float32), "axis": 1, "block_size": 65536}
            assert get_op(op_type).infer([x, None, None], blocked)[0].shape == big.shape
            # the scale is a graph input as large as x: stood in by a view, refused for its shape
            with pytest.raises(AtcError) as err:
                get_op(op_type).infer([x, big, None], {"axis": 1, "block_size": 3})
            assert err.value.code == "E16004"
        assert tracemalloc.get_traced_memory()[1] < 64 << 20
    finally:
        tracemalloc.stop()
