"""Conv, pooling, MatMul and Gemm kernels against onnxruntime on one-node models."""
import numpy as np
import pytest

from codegen.registry import kernel_of
from ge.ops.registry import TensorType, get_op
from ge.errors import AtcError

from helpers import run_ort_op

RNG = np.random.default_rng(0)


def check(op_type, inputs, attrs=None, opset=18, rtol=1e-5, atol=1e-6, fp16=True, n_outputs=1):
    """Compare compute and infer with onnxruntime on the first `n_outputs` outputs (the op
    also computes its optional outputs); repeat in float16 against the fp32 result."""
    op = get_op(op_type)
    expected = run_ort_op(op_type, inputs, attrs, opset, n_outputs=n_outputs)
    got = op.compute(inputs, dict(attrs or {}))
    types = [TensorType(x.dtype, x.shape) if x is not None else None for x in inputs]
    inferred = op.infer(types, dict(attrs or {}))
    assert len(got) == len(inferred) >= len(expected) == n_outputs
    for g, e, t in zip(got, expected, inferred):
        assert g.dtype == e.dtype and g.shape == e.shape
        assert np.dtype(t.dtype) == e.dtype and tuple(t.shape) == e.shape
        np.testing.assert_allclose(g, e, rtol=rtol, atol=atol)
    if fp16 and inputs[0].dtype == np.float32:
        half = [x.astype(np.float16) if x is not None else None for x in inputs]
        got16 = op.compute(half, dict(attrs or {}))
        ref = run_ort_op(op_type, [x.astype(np.float32) if x is not None else None for x in half],
                      attrs, opset)
        for g, e in zip(got16, ref):
            assert g.dtype == np.float16
            scale = max(1.0, float(np.abs(e).max()))
            np.testing.assert_allclose(g.astype(np.float32), e, rtol=1e-2, atol=1e-2 * scale)
    return got


def rand(*shape):
    return RNG.standard_normal(shape).astype(np.float32)


# -- Conv --------------------------------------------------------------------------------------

CONV_CASES = [
    # (x shape, w shape, bias, attrs)
    ((1, 3, 9, 9), (4, 3, 3, 3), True, {}),
    ((2, 3, 9, 8), (4, 3, 3, 3), False, {"pads": [1, 1, 1, 1]}),
    ((1, 4, 10, 10), (6, 4, 3, 3), True, {"strides": [2, 2], "pads": [1, 0, 2, 1]}),
    ((1, 4, 11, 11), (6, 4, 3, 2), True, {"dilations": [2, 1], "strides": [1, 2]}),
    ((1, 4, 7, 7), (8, 2, 3, 3), True, {"group": 2, "pads": [1, 1, 1, 1]}),
    ((2, 4, 7, 7), (4, 1, 3, 3), True, {"group": 4, "pads": [1, 1, 1, 1]}),        # depthwise
    ((1, 4, 8, 8), (8, 1, 5, 5), False, {"group": 4, "strides": [2, 2],           # multiplier 2
                                         "auto_pad": "SAME_UPPER"}),
    ((1, 3, 9, 8), (3, 1, 3, 3), True, {"group": 3, "strides": [2, 3], "dilations": [2, 1],
                                        "pads": [1, 2, 0, 1]}),                    # dw strided
    ((1, 4, 5, 6, 7), (4, 1, 3, 2, 3), True, {"group": 4, "strides": [1, 2, 2]}),  # 3-D dw
    ((1, 3, 8, 7), (4, 3, 3, 3), True, {"auto_pad": "SAME_UPPER", "strides": [2, 2]}),
    ((1, 3, 8, 7), (4, 3, 4, 4), True, {"auto_pad": "SAME_LOWER", "strides": [2, 3]}),
    ((1, 3, 8, 7), (4, 3, 3, 3), True, {"auto_pad": "VALID"}),
    ((1, 8, 6, 6), (5, 8, 1, 1), True, {}),                                        # 1x1
    ((1, 8, 7, 7), (5, 8, 1, 1), False, {"strides": [2, 2]}),                      # 1x1 stride 2
    ((2, 3, 12), (4, 3, 3), True, {"pads": [2, 1], "strides": [2]}),               # 1-D
    ((1, 3, 10), (6, 1, 3), True, {"group": 3, "dilations": [2]}),                 # 1-D depthwise
    ((1, 2, 5, 6, 5), (3, 2, 3, 2, 3), True, {"pads": [1, 0, 1, 1, 1, 0]}),        # 3-D
]


@pytest.mark.parametrize("xs,ws,bias,attrs", CONV_CASES)
def test_conv(xs, ws, bias, attrs):
    inputs = [rand(*xs), rand(*ws)] + ([rand(ws[0])] if bias else [])
    check("Conv", inputs, attrs, rtol=1e-4, atol=1e-5)


# float32 3x3 stride-1 convs with at least winograd.MIN_TILES 2x2 output tiles: Winograd F(2x2, 3x3)
WINOGRAD_CASES = [
    ((1, 4, 12, 12), (5, 4, 3, 3), True, {"pads": [1, 1, 1, 1]}),
    ((2, 3, 13, 11), (4, 3, 3, 3), True, {"pads": [1, 1, 1, 1]}),                 # odd output sizes, batch 2
    ((1, 3, 14, 16), (4, 3, 3, 3), False, {"pads": [2, 0, 1, 2]}),                # uneven pads
    ((1, 3, 14, 14), (4, 3, 3, 3), True, {"auto_pad": "SAME_LOWER"}),
    ((1, 3, 15, 14), (4, 3, 3, 3), True, {}),                                     # no padding
]


@pytest.mark.parametrize("xs,ws,bias,attrs", WINOGRAD_CASES)
def test_conv_winograd(xs, ws, bias, attrs):
    from ge.ops import winograd
    from ge.ops.nn import _window_geometry
    x, w = rand(*xs), rand(*ws)
    out = _window_geometry(xs[2:], [3, 3], attrs).out
    assert winograd.applies(x.dtype, w.shape, 1, [1, 1], [1, 1], out)
    check("Conv", [x, w] + ([rand(ws[0])] if bias else []), attrs, rtol=1e-4, atol=1e-5)


# ... and with at least winograd.MIN_F4_TILES 4x4 output tiles: F(4x4, 3x3), whose transforms
# (4, 5, 8, 1/6, 1/24) round ~10x worse than F2's: bounded at 1e-5 of the output's scale here
# (simulator/COMPARE.md's fp32 tolerance for a whole model is 1e-4).
WINOGRAD_F4_CASES = [
    ((1, 16, 28, 28), (8, 16, 3, 3), True, {"pads": [1, 1, 1, 1]}),               # whole tiles
    ((2, 3, 25, 27), (4, 3, 3, 3), True, {"pads": [1, 1, 1, 1]}),                 # cropped tiles, batch 2
    ((1, 5, 27, 30), (3, 5, 3, 3), False, {"pads": [2, 0, 1, 2]}),                # uneven pads
    ((1, 3, 26, 25), (4, 3, 3, 3), True, {"auto_pad": "SAME_UPPER"}),
    ((1, 3, 30, 29), (4, 3, 3, 3), True, {}),                                     # no padding
]


@pytest.mark.parametrize("xs,ws,bias,attrs", WINOGRAD_F4_CASES)
def test_conv_winograd_f4(xs, ws, bias, attrs):
    from ge.ops import winograd
    from ge.ops.nn import _window_geometry
    inputs = [rand(*xs), rand(*ws)] + ([rand(ws[0])] if bias else [])
    out = _window_geometry(xs[2:], [3, 3], attrs).out
    assert winograd.applies(np.float32, ws, 1, [1, 1], [1, 1], out) and winograd.tiling_for(out) is winograd.F4
    expected = run_ort_op("Conv", inputs, attrs, 18)[0]
    got = get_op("Conv").compute(inputs, dict(attrs))[0]
    assert got.dtype == np.float32 and got.shape == expected.shape
    assert np.abs(got - expected).max() <= 1e-5 * np.abs(expected).max()
    half = [x.astype(np.float16) for x in inputs]
    got16 = get_op("Conv").compute(half, dict(attrs))[0]
    ref16 = run_ort_op("Conv", [x.astype(np.float32) for x in half], attrs, 18)[0]
    assert got16.dtype == np.float16
    np.testing.assert_allclose(got16.astype(np.float32), ref16, rtol=1e-2, atol=1e-2 * np.abs(ref16).max())


@pytest.mark.parametrize("tiling", ["F2", "F4"])
def test_winograd_rounding_on_resnet_shapes(tiling):
    """Against a float64 reference on a ResNet-50 layer-2 shape (128 channels, 28x28, ReLU'd
    input, He-scaled weights): F2 rounds like the direct product, F4 within 1e-5 of scale."""
    from ge.ops import winograd
    rng = np.random.default_rng(1)
    x = np.maximum(rng.standard_normal((1, 128, 28, 28)), 0).astype(np.float32)
    w = (rng.standard_normal((128, 128, 3, 3)) * np.sqrt(2 / (9 * 128))).astype(np.float32)
    b = rng.standard_normal(128).astype(np.float32)
    got = winograd.conv3x3(x, w, (1, 1), (28, 28), b, getattr(winograd, tiling))
    xp = np.pad(x.astype(np.float64), [(0, 0), (0, 0), (1, 1), (1, 1)])
    windows = np.lib.stride_tricks.sliding_window_view(xp, (3, 3), axis=(2, 3))
    ref = np.einsum("nchwij,ocij->nohw", windows, w.astype(np.float64)) + b.reshape(1, -1, 1, 1)
    error = np.abs(got - ref).max() / np.abs(ref).max()
    assert error < (2e-6 if tiling == "F2" else 1e-5)


def test_winograd_weights_are_transformed_once_per_array():
    from ge.ops import winograd
    w = rand(4, 3, 3, 3)
    u = winograd.transformed_weights(w)
    assert u.shape == (16, 4, 3) and u.dtype == np.float32
    assert winograd.transformed_weights(w) is u                  # the executor's constant: reused
    key = (id(w), 2)
    assert key in winograd._weights.keys()
    del w                                                        # and dropped with the weights
    assert key not in winograd._weights.keys()


@pytest.mark.parametrize("strides", [[1, 1], [2, 2]])
def test_depthwise_channel_blocks(monkeypatch, strides):
    """The depthwise path processes channels in cache-sized blocks: force many small blocks."""
    from ge.ops import nn
    monkeypatch.setattr(nn, "_DEPTHWISE_BLOCK", 40)
    check("Conv", [rand(2, 6, 7, 7), rand(12, 1, 3, 3), rand(12)],
          {"group": 6, "pads": [1, 1, 1, 1], "strides": strides}, rtol=1e-4, atol=1e-5)


def test_conv_work_counts_macs():
    op = get_op("Conv")
    x, w = TensorType(np.float32, (2, 4, 8, 8)), TensorType(np.float32, (6, 2, 3, 3))
    attrs = {"group": 2, "pads": [1, 1, 1, 1]}
    out = op.infer([x, w], attrs)
    assert out[0].shape == (2, 6, 8, 8)
    assert kernel_of(op.op_type).work([x, w], out, attrs).cube_macs == 2 * 6 * 8 * 8 * 2 * 3 * 3


def test_conv_channel_mismatch_is_atc_error():
    with pytest.raises(AtcError):
        get_op("Conv").infer([TensorType(np.float32, (1, 3, 8, 8)),
                              TensorType(np.float32, (4, 2, 3, 3))], {})


CONVT_CASES = [
    ((1, 3, 5, 5), (3, 4, 3, 3), True, {}),
    ((1, 3, 5, 4), (3, 2, 3, 3), False, {"strides": [2, 2], "pads": [1, 1, 1, 1]}),
    ((2, 3, 4, 4), (3, 2, 4, 4), True, {"strides": [2, 2], "pads": [1, 1, 1, 1],
                                        "output_padding": [1, 0]}),
    ((1, 2, 4, 4), (2, 2, 3, 3), True, {"strides": [2, 2], "dilations": [2, 1]}),
    ((1, 4, 4, 4), (4, 2, 3, 3), True, {"group": 2, "strides": [2, 2]}),
    ((2, 3, 6), (3, 2, 3), True, {"strides": [3], "pads": [1, 0]}),                 # 1-D
    ((1, 3, 4, 5), (3, 2, 3, 3), True, {"strides": [2, 2], "auto_pad": "SAME_UPPER"}),
    ((1, 3, 4, 5), (3, 2, 4, 3), True, {"strides": [2, 2], "auto_pad": "SAME_LOWER"}),
    ((1, 3, 4, 5), (3, 2, 3, 3), True, {"strides": [2, 2], "output_shape": [9, 10]}),
]


@pytest.mark.parametrize("xs,ws,bias,attrs", CONVT_CASES)
def test_conv_transpose(xs, ws, bias, attrs):
    inputs = [rand(*xs), rand(*ws)] + ([rand(ws[1] * attrs.get("group", 1))] if bias else [])
    check("ConvTranspose", inputs, attrs, rtol=1e-4, atol=1e-5)


# -- Pooling -----------------------------------------------------------------------------------

POOL_CASES = [
    ((1, 2, 8, 8), {"kernel_shape": [2, 2], "strides": [2, 2]}),
    ((2, 3, 9, 9), {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1]}),
    ((1, 2, 10, 9), {"kernel_shape": [3, 2], "strides": [2, 2], "ceil_mode": 1}),
    ((1, 2, 10, 9), {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1],
                     "ceil_mode": 1}),
    ((1, 2, 7, 7), {"kernel_shape": [3, 3], "auto_pad": "SAME_UPPER", "strides": [2, 2]}),
    ((1, 2, 8, 7), {"kernel_shape": [2, 3], "auto_pad": "SAME_LOWER"}),
    ((1, 2, 8, 7), {"kernel_shape": [3, 3], "auto_pad": "VALID", "strides": [2, 1]}),
    ((1, 2, 9, 9), {"kernel_shape": [2, 2], "dilations": [2, 2], "pads": [1, 0, 1, 0]}),
    ((1, 3, 11), {"kernel_shape": [3], "strides": [2], "pads": [1, 1]}),
    ((1, 2, 5, 6, 5), {"kernel_shape": [2, 3, 2], "strides": [2, 1, 2]}),
]


@pytest.mark.parametrize("xs,attrs", POOL_CASES)
def test_max_pool(xs, attrs):
    check("MaxPool", [rand(*xs)], attrs)


@pytest.mark.parametrize("xs,attrs", POOL_CASES[:4])
@pytest.mark.parametrize("storage_order", [0, 1])
def test_max_pool_indices(xs, attrs, storage_order):
    """The optional Indices output: where each maximum was read in the flattened input."""
    check("MaxPool", [rand(*xs)], dict(attrs, storage_order=storage_order), n_outputs=2, fp16=False)


@pytest.mark.parametrize("xs,attrs", POOL_CASES)
def test_max_pool_without_indices(xs, attrs):
    """A node with no Indices output takes the separable path (max along one axis, then the
    next): the same values as onnxruntime and as the path that tracks indices."""
    x = rand(*xs)
    expected = run_ort_op("MaxPool", [x], attrs, 18)[0]
    got = get_op("MaxPool").compute([x], dict(attrs, _outputs=1))
    assert len(got) == 1 and got[0].shape == expected.shape and got[0].dtype == expected.dtype
    np.testing.assert_array_equal(got[0], expected)
    np.testing.assert_array_equal(got[0], get_op("MaxPool").compute([x], dict(attrs))[0])


def test_max_pool_int8():
    x = RNG.integers(-128, 127, (1, 2, 6, 6)).astype(np.int8)
    check("MaxPool", [x], {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1]})


@pytest.mark.parametrize("xs,attrs", POOL_CASES)
@pytest.mark.parametrize("include", [0, 1])
def test_average_pool(xs, attrs, include):
    attrs = dict(attrs, count_include_pad=include)
    check("AveragePool", [rand(*xs)], attrs, opset=19)


@pytest.mark.parametrize("xs", [(1, 3, 5, 6), (2, 4, 7), (1, 2, 3, 4, 5)])
@pytest.mark.parametrize("op", ["GlobalAveragePool", "GlobalMaxPool"])
def test_global_pool(op, xs):
    check(op, [rand(*xs)], {})


# -- MatMul / Gemm -----------------------------------------------------------------------------

MATMUL_SHAPES = [
    ((3, 4), (4, 5)), ((4,), (4, 5)), ((3, 4), (4,)), ((4,), (4,)),
    ((2, 3, 4), (4, 5)), ((2, 1, 3, 4), (3, 4, 6)), ((5, 4), (2, 4, 3)), ((2, 3, 4), (4,)),
]


@pytest.mark.parametrize("a,b", MATMUL_SHAPES)
def test_matmul(a, b):
    check("MatMul", [rand(*a), rand(*b)], {}, rtol=1e-5, atol=1e-5)


def test_matmul_int_and_work():
    a = RNG.integers(-5, 5, (2, 3, 4)).astype(np.int32)
    b = RNG.integers(-5, 5, (4, 6)).astype(np.int32)
    check("MatMul", [a, b], {})
    op = get_op("MatMul")
    ta, tb = TensorType(np.float32, (2, 3, 4)), TensorType(np.float32, (4, 6))
    assert kernel_of(op.op_type).work([ta, tb], op.infer([ta, tb], {}), {}).cube_macs == 2 * 3 * 4 * 6


def test_matmul_mismatch_is_atc_error():
    with pytest.raises(AtcError):
        get_op("MatMul").infer([TensorType(np.float32, (3, 4)), TensorType(np.float32, (5, 2))], {})


GEMM_CASES = [
    ((3, 4), (4, 5), None, {}),
    ((4, 3), (4, 5), (5,), {"transA": 1}),
    ((3, 4), (5, 4), (3, 5), {"transB": 1, "alpha": 0.5, "beta": 2.0}),
    ((4, 3), (5, 4), (3, 1), {"transA": 1, "transB": 1, "beta": -1.0}),
    ((3, 4), (4, 5), (), {"alpha": 3.0}),
    ((3, 4), (4, 5), (1, 5), {}),
]


@pytest.mark.parametrize("a,b,c,attrs", GEMM_CASES)
def test_gemm(a, b, c, attrs):
    inputs = [rand(*a), rand(*b)] + ([] if c is None else [rand(*c)])
    check("Gemm", inputs, attrs, opset=13, rtol=1e-5, atol=1e-5)


def test_gemm_work():
    op = get_op("Gemm")
    ts = [TensorType(np.float32, (8, 16)), TensorType(np.float32, (32, 16)),
          TensorType(np.float32, (32,))]
    out = op.infer(ts, {"transB": 1})
    assert out[0].shape == (8, 32)
    work = kernel_of(op.op_type).work(ts, out, {"transB": 1})
    assert work.cube_macs == 8 * 16 * 32 and work.vector_ops["alu"] == 8 * 32


def test_pool_work_and_errors():
    x = TensorType(np.float32, (1, 2, 8, 8))
    attrs = {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1]}
    for op_type, alu in (("MaxPool", 8), ("AveragePool", 9)):
        op = get_op(op_type)
        out = op.infer([x], attrs)
        assert out[0].shape == (1, 2, 4, 4)
        assert kernel_of(op.op_type).work([x], out, attrs).vector_ops["alu"] == 2 * 16 * alu
    with pytest.raises(AtcError):
        get_op("MaxPool").infer([x], {"kernel_shape": [3]})
    with pytest.raises(AtcError):
        get_op("MaxPool").infer([x], {"kernel_shape": [9, 9]})
    with pytest.raises(AtcError):
        get_op("Conv").compute([rand(1, 1, 4, 4), rand(1, 1, 3, 3)], {"auto_pad": "BOGUS"})


@pytest.mark.parametrize("op_type", ["MaxPool", "AveragePool", "Conv"])
def test_negative_pads_are_refused_by_the_shape_rule(op_type):
    """ONNX's checker refuses them at import; the shape rule refuses them too, for an .om
    that carries them."""
    from ge.ops.registry import TensorType, get_op
    from ge.errors import AtcError
    x = TensorType(np.dtype(np.float32), (1, 1, 6, 6))
    inputs = [x] if op_type != "Conv" else [x, TensorType(np.dtype(np.float32), (1, 1, 2, 2))]
    with pytest.raises(AtcError) as err:
        get_op(op_type).infer(inputs, {"kernel_shape": [2, 2], "pads": [-1, 0, 0, 0]})
    assert err.value.code == "E16004" and "pads" in err.value.message
