"""Elementwise op kernels against onnxruntime: values, dtypes, inferred shapes, float16 paths.

Each case builds a one-node ONNX model (config inputs such as Clip's min/max as constant
initializers), runs it in onnxruntime and compares with the registered compute called in
canonical form (config inputs turned into attributes with .tolist(), as the importer does).
"""
import math

import numpy as np
import onnx
import pytest

from ge.ops.elementwise import erf
from codegen.registry import kernel_of
from codegen.work import Work
from ge.ops.registry import TensorType, get_op
from ge.errors import AtcError

from helpers import run_ort_op

RNG = np.random.default_rng(0)


def check_op(op_type, data, attrs=None, config=None, opset=18, rtol=1e-5, atol=1e-6,
             fp16=True, fp16_tol=1e-2, zero_work=False):
    """Compare compute/infer/work of `op_type` with onnxruntime on every output it computes
    (optional outputs included: onnxruntime is asked for as many); `config` maps config-input
    attribute names to the constant fed to onnxruntime as an input."""
    op = get_op(op_type)
    assert op is not None, f"{op_type} not registered"
    attrs, config = dict(attrs or {}), dict(config or {})
    data = [None if x is None else np.asarray(x) for x in data]
    canon = dict(attrs)
    for name, value in config.items():
        if value is not None:
            canon[name] = np.asarray(value).tolist()

    ort_inputs, constant = _ort_inputs(op, data, config)
    got = op.compute(list(data), canon)
    expected = run_ort_op(op_type, ort_inputs, attrs, opset, constant=constant, n_outputs=len(got))
    assert len(got) == len(expected)
    for g, e in zip(got, expected):
        assert g.dtype == e.dtype, (g.dtype, e.dtype)
        assert g.shape == e.shape, (g.shape, e.shape)
        if np.issubdtype(e.dtype, np.floating):
            np.testing.assert_allclose(g, e, rtol=rtol, atol=atol, equal_nan=True)
        else:
            np.testing.assert_array_equal(g, e)

    in_types = [None if x is None else TensorType(x.dtype, x.shape) for x in data]
    out_types = op.infer(in_types, canon)
    assert [(np.dtype(t.dtype), tuple(t.shape)) for t in out_types] == \
        [(e.dtype, e.shape) for e in expected]
    work = kernel_of(op.op_type).work(in_types, out_types, canon)
    assert isinstance(work, Work)
    assert all(isinstance(v, int) and v >= 0 for v in work.vector_ops.values())
    if not (kernel_of(op.op_type).no_task or zero_work):
        assert work.cube_macs + sum(work.vector_ops.values()) > 0

    if fp16 and any(x is not None and x.dtype == np.float32 for x in data):
        half = [x.astype(np.float16) if x is not None and x.dtype == np.float32 else x
                for x in data]
        back = [x.astype(np.float32) if x is not None and x.dtype == np.float16 else x
                for x in half]
        back_inputs, constant = _ort_inputs(op, back, config)
        got16 = op.compute(half, canon)
        ref = run_ort_op(op_type, back_inputs, attrs, opset, constant=constant, n_outputs=len(got16))
        types16 = op.infer([None if x is None else TensorType(x.dtype, x.shape) for x in half], canon)
        for g, e, t in zip(got16, ref, types16):
            if e.dtype == np.float32:
                # float16 in, float16 out -- but for outputs whose dtype an attribute fixes
                # (LayerNormalization's stash_type for Mean and InvStdDev)
                assert np.dtype(t.dtype) == g.dtype and g.dtype in (np.float16, np.float32)
                scale = max(1.0, float(np.nanmax(np.abs(e))) if e.size else 1.0)
                np.testing.assert_allclose(g.astype(np.float32), e, rtol=fp16_tol,
                                           atol=fp16_tol * scale, equal_nan=True)
            else:
                assert g.dtype == e.dtype
    return got


def _ort_inputs(op, data, config):
    """The node's ONNX inputs: data inputs, with config inputs in their slots (as constants).
    Returns (inputs, constant slots)."""
    slots = dict(op.config_inputs)
    it, inputs = iter(data), []
    for i in range(len(data) + len(slots)):
        if i in slots:
            value = config.get(slots[i])
            inputs.append(None if value is None else np.asarray(value))
        else:
            inputs.append(next(it))
    return inputs, set(slots)


def normal(*shape):
    return RNG.standard_normal(shape).astype(np.float32)


def positive(*shape):
    return RNG.uniform(0.1, 4.0, shape).astype(np.float32)


def away_from_zero(*shape):
    x = normal(*shape)
    return np.where(x >= 0, x + 0.5, x - 0.5).astype(np.float32)


# ---------------------------------------------------------------------------------------
# Unary

UNARY = [
    ("Relu", {}, normal), ("Sigmoid", {}, lambda *s: normal(*s) * 6), ("Tanh", {}, normal),
    ("Exp", {}, normal), ("Log", {}, positive), ("Sqrt", {}, positive),
    ("Reciprocal", {}, away_from_zero), ("Neg", {}, normal), ("Abs", {}, normal),
    ("Erf", {}, lambda *s: normal(*s) * 2), ("Floor", {}, lambda *s: normal(*s) * 3),
    ("Ceil", {}, lambda *s: normal(*s) * 3), ("Round", {}, lambda *s: normal(*s) * 3),
    ("Sign", {}, normal), ("Softplus", {}, lambda *s: normal(*s) * 5),
    ("LeakyRelu", {}, normal), ("LeakyRelu", {"alpha": 0.3}, normal),
    ("Elu", {}, normal), ("Elu", {"alpha": 0.5}, normal),
    ("Selu", {}, normal), ("Selu", {"alpha": 1.5, "gamma": 2.0}, normal),
    ("HardSigmoid", {}, lambda *s: normal(*s) * 4),
    ("HardSigmoid", {"alpha": 0.5, "beta": 0.2}, lambda *s: normal(*s) * 4),
    ("HardSwish", {}, lambda *s: normal(*s) * 4),
    ("Sin", {}, lambda *s: normal(*s) * 3), ("Cos", {}, lambda *s: normal(*s) * 3),
    ("Identity", {}, normal),
]


@pytest.mark.parametrize("op_type,attrs,gen", UNARY, ids=[f"{u[0]}{u[1] or ''}" for u in UNARY])
@pytest.mark.parametrize("shape", [(2, 3, 5), (7,), ()])
def test_unary_float(op_type, attrs, gen, shape):
    check_op(op_type, [gen(*shape)], attrs)


@pytest.mark.parametrize("approximate", ["none", "tanh"])
def test_gelu_opset20(approximate):
    check_op("Gelu", [normal(3, 8) * 3], {"approximate": approximate}, opset=20)


def test_round_half_to_even():
    check_op("Round", [np.array([-2.5, -1.5, -0.5, 0.5, 1.5, 2.5, 0.49], np.float32)])


@pytest.mark.parametrize("op_type", ["Abs", "Neg", "Sign", "Relu"])
def test_unary_int(op_type):
    check_op(op_type, [RNG.integers(-9, 9, (3, 4)).astype(np.int32)])


def test_not_and_isnan():
    check_op("Not", [RNG.random((3, 4)) > 0.5])
    x = normal(4, 5)
    x[0, 1] = np.nan
    x[2, 3] = np.inf
    check_op("IsNaN", [x])


def test_erf_helper_precision():
    x = np.concatenate([np.linspace(-7, 7, 2001), [1e-9, -3e-5, 2.5, 2.5000001]])
    ref = np.array([math.erf(v) for v in x])
    np.testing.assert_allclose(erf(x), ref, rtol=1e-10, atol=1e-9)


# ---------------------------------------------------------------------------------------
# Cast, Clip, PRelu

F = onnx.TensorProto


@pytest.mark.parametrize("src,to", [
    (lambda: normal(3, 4) * 10, F.INT32), (lambda: normal(3, 4), F.FLOAT16),
    (lambda: normal(3, 4), F.DOUBLE), (lambda: normal(3, 4), F.BOOL),
    (lambda: RNG.integers(-100, 100, (5,)).astype(np.int64), F.FLOAT),
    (lambda: RNG.integers(-100, 100, (5,)).astype(np.int64), F.INT32),
    (lambda: RNG.integers(0, 200, (5,)).astype(np.int32), F.UINT8),
    (lambda: RNG.random((5,)) > 0.5, F.FLOAT),
])
def test_cast(src, to):
    check_op("Cast", [src()], {"to": to}, fp16=False)


def test_cast_unsupported_target_is_atc_error():
    with pytest.raises(AtcError) as err:
        get_op("Cast").compute([normal(2)], {"to": F.STRING})
    assert err.value.code.startswith("E")


@pytest.mark.parametrize("lo,hi", [(-0.5, 0.7), (None, 0.3), (-0.2, None), (None, None),
                                   (0.5, -0.5)])
def test_clip_float(lo, hi):
    config = {"min": None if lo is None else np.float32(lo),
              "max": None if hi is None else np.float32(hi)}
    check_op("Clip", [normal(2, 3, 4)], config=config, zero_work=lo is None and hi is None)


def test_clip_int():
    check_op("Clip", [RNG.integers(-20, 20, (10,)).astype(np.int32)],
             config={"min": np.int32(-3), "max": np.int32(5)})


@pytest.mark.parametrize("slope_shape", [(1,), (3, 1, 1), (4,), (2, 3, 4, 4)])
def test_prelu(slope_shape):
    check_op("PRelu", [normal(2, 3, 4, 4), RNG.uniform(0, 0.5, slope_shape).astype(np.float32)])


# ---------------------------------------------------------------------------------------
# Binary / variadic

SHAPE_PAIRS = [((2, 3, 4), (2, 3, 4)), ((2, 3, 4), (4,)), ((2, 1, 4), (3, 1)), ((), (2, 3))]


@pytest.mark.parametrize("op_type", ["Add", "Sub", "Mul", "Div", "Max", "Min", "Sum", "Mean",
                                     "Equal", "Less", "Greater", "LessOrEqual", "GreaterOrEqual"])
@pytest.mark.parametrize("shapes", SHAPE_PAIRS)
def test_binary_float(op_type, shapes):
    a = normal(*shapes[0])
    b = away_from_zero(*shapes[1]) if op_type == "Div" else normal(*shapes[1])
    if op_type.startswith(("Equal", "Less", "Greater")) and a.ndim == b.ndim:
        b = np.where(RNG.random(b.shape) < 0.3, a, b).astype(np.float32)   # exercise ties
    check_op(op_type, [a, b])


@pytest.mark.parametrize("op_type", ["Add", "Sub", "Mul", "Div", "Max", "Min",
                                     "Equal", "Less", "GreaterOrEqual"])
def test_binary_int(op_type):
    a = RNG.integers(-50, 50, (3, 4)).astype(np.int32)
    b = RNG.integers(1, 7, (4,)).astype(np.int32) * RNG.choice([-1, 1], (4,)).astype(np.int32)
    check_op(op_type, [a, b])


def test_int_div_truncates_toward_zero():
    a = np.array([7, -7, 7, -7, 6, -6], np.int64)
    b = np.array([2, 2, -2, -2, 3, -3], np.int64)
    got = check_op("Div", [a, b])[0]
    np.testing.assert_array_equal(got, [3, -3, -3, 3, 2, 2])


@pytest.mark.parametrize("n", [1, 3])
@pytest.mark.parametrize("op_type", ["Max", "Min", "Sum", "Mean"])
def test_variadic(op_type, n):
    shapes = [(2, 3, 4), (3, 1), (4,)][:n]
    check_op(op_type, [normal(*s) for s in shapes], zero_work=n == 1 and op_type != "Mean")


def test_pow():
    check_op("Pow", [positive(3, 4), normal(4)], rtol=1e-5)
    check_op("Pow", [normal(3, 4), np.array(2, np.int64)], fp16=False)
    check_op("Pow", [normal(3, 4), np.array(3.0, np.float32)], rtol=1e-5)
    check_op("Pow", [RNG.integers(-5, 5, (6,)).astype(np.int32), np.array([2], np.int32)])


@pytest.mark.parametrize("fmod", [0, 1])
def test_mod_int(fmod):
    a = RNG.integers(-20, 20, (4, 5)).astype(np.int32)
    b = np.array([3, -3, 4, -7, 5], np.int32)
    check_op("Mod", [a, b], {"fmod": fmod})


def test_mod_float_fmod():
    check_op("Mod", [normal(4, 5) * 5, away_from_zero(5)], {"fmod": 1}, fp16_tol=3e-2)


def test_mod_float_without_fmod_is_atc_error():
    with pytest.raises(AtcError):
        get_op("Mod").compute([normal(2), normal(2)], {})


@pytest.mark.parametrize("op_type", ["And", "Or", "Xor"])
def test_logic(op_type):
    check_op(op_type, [RNG.random((2, 3, 4)) > 0.5, RNG.random((3, 1)) > 0.5])


@pytest.mark.parametrize("shapes", [((2, 3, 4), (2, 3, 4), (2, 3, 4)), ((3, 1), (1, 4), (2, 1, 1))])
def test_where(shapes):
    c, x, y = shapes
    check_op("Where", [RNG.random(c) > 0.5, normal(*x), normal(*y)])
    check_op("Where", [RNG.random(c) > 0.5, RNG.integers(0, 9, x).astype(np.int64),
                       RNG.integers(0, 9, y).astype(np.int64)])


# ---------------------------------------------------------------------------------------
# Registry contract

ELEMENTWISE_OPS = (
    "Relu Sigmoid Tanh Exp Log Sqrt Reciprocal Neg Abs Erf Floor Ceil Round Sign Softplus "
    "LeakyRelu Elu Selu HardSigmoid HardSwish Gelu Not Cast Identity Clip Sin Cos IsNaN PRelu "
    "Add Sub Mul Div Pow Max Min Sum Mean Equal Less Greater LessOrEqual GreaterOrEqual And Or "
    "Xor Where Mod").split()


def test_all_registered_with_kinds():
    from ge.ops.registry import OpKind
    for name in ELEMENTWISE_OPS:
        op = get_op(name)
        assert op is not None, name
        assert op.kind in (OpKind.ELEMWISE, OpKind.BROADCAST), name
    assert kernel_of("Identity").no_task
    assert get_op("Clip").config_inputs == ((1, "min"), (2, "max"))
    assert kernel_of("Div").om_type == "RealDiv"


def test_erf_both_precisions_against_math_erf():
    import math
    from ge.ops.elementwise import erf
    xs = np.linspace(-7, 7, 20001)
    ref = np.array([math.erf(v) for v in xs])
    assert np.max(np.abs(erf(xs) - ref)) < 1e-8                       # float64 path
    got32 = erf(xs.astype(np.float32))
    assert got32.dtype == np.float32
    assert np.max(np.abs(got32.astype(np.float64) - ref)) < 1e-6      # float32 rational form


def test_cast_to_float8_saturates_unless_told_not_to():
    """ONNX's Cast to float8: out-of-range values and infinities become the largest finite
    value (448 for e4m3fn), NaN stays NaN; saturate=0 keeps numpy's (ml_dtypes') conversion."""
    import ml_dtypes
    x = np.array([1000.0, -np.inf, np.nan, 1.5, -500.0], np.float32)
    y = get_op("Cast").compute([x], {"to": 17})[0]
    assert y.dtype == np.dtype(ml_dtypes.float8_e4m3fn)
    np.testing.assert_array_equal(y.astype(np.float32), [448, -448, np.nan, 1.5, -448])
    raw = get_op("Cast").compute([x], {"to": 19, "saturate": 0})[0]       # e5m2 keeps infinities
    assert np.isinf(raw.astype(np.float32)[1])
    like = get_op("CastLike").compute([x, np.zeros(1, ml_dtypes.float8_e5m2)], {})[0]
    assert float(like.astype(np.float32)[0]) == 1024.0 and float(like.astype(np.float32)[1]) == -57344.0


def test_a_tensor_type_no_ge_datatype_holds_is_refused_by_name():
    from builder import Net
    from helpers import lower
    from onnx import TensorProto
    net = Net(opset=21)
    x = net.input("x", [2, 3])
    # every opset-21 type is held now (float8 FNUZ and uint4 as uint8 bit patterns:
    # tests/test_storage_types.py); an opset-23 type in an opset-21 Cast is refused by ONNX's
    # own check, naming the type
    model = net.model(net.op("Cast", x, to=TensorProto.FLOAT4E2M1))
    with pytest.raises(AtcError) as err:
        lower(model)
    assert err.value.code == "E16004" and "tensor(float4e2m1)" in err.value.message
