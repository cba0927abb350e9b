"""Unary, binary and variadic elementwise ONNX ops: numpy semantics and shape rules.

Float16 policy: transcendental and composite unary ops (Sigmoid, Exp, Gelu, ...) and Pow,
Mean compute in float32 and cast the result back to float16 (the vector unit's fp16 kernels
keep fp32 intermediates); single-instruction ops (Add, Mul, Max, Relu, Abs, ...) compute in
float16 directly, which numpy rounds exactly like an fp32 op followed by a cast.
"""
from __future__ import annotations

import math
from typing import Callable

import numpy as np

from ge.ops.common import approx_reciprocal, broadcast_result, fast_impl, own_dtype_inside, present, same_as_input
from ge.ops.mlas_float import erf_f32
from ge.ops.registry import OpDef, OpKind, TensorType, register
from ge.errors import InvalidNode, invalid_attr

# ONNX TensorProto element types numpy can represent (Cast's "to" attribute); the
# low-precision ones through ml_dtypes (onnx's own dependency), as ONNX's reference does.
ONNX_TO_NUMPY = {
    1: np.float32, 2: np.uint8, 3: np.int8, 4: np.uint16, 5: np.int16, 6: np.int32,
    7: np.int64, 9: np.bool_, 10: np.float16, 11: np.float64, 12: np.uint32, 13: np.uint64,
}
try:
    import ml_dtypes
    ONNX_TO_NUMPY.update({16: ml_dtypes.bfloat16, 17: ml_dtypes.float8_e4m3fn, 18: ml_dtypes.float8_e4m3fnuz,
                          19: ml_dtypes.float8_e5m2, 20: ml_dtypes.float8_e5m2fnuz, 21: ml_dtypes.uint4,
                          22: ml_dtypes.int4})
    FLOAT8_TYPES = tuple(np.dtype(ONNX_TO_NUMPY[t]) for t in (17, 18, 19, 20))
except ImportError:  # pragma: no cover - onnx installs ml_dtypes
    FLOAT8_TYPES = ()


def convert(x: np.ndarray, dtype, saturate: bool = True) -> np.ndarray:
    """ONNX's Cast of `x` to `dtype`: numpy's conversion, except that a float8 target
    saturates (values beyond its range, infinities included, become its largest finite
    value; NaN stays NaN) unless saturate=0."""
    dtype = np.dtype(dtype)
    with np.errstate(invalid="ignore", over="ignore"):
        if dtype in FLOAT8_TYPES and saturate:
            info = ml_dtypes.finfo(dtype)
            x = np.clip(x.astype(np.float32) if x.dtype.kind == "V" else x, float(info.min), float(info.max))
        return x.astype(dtype)


def _is_float(dtype) -> bool:
    return np.issubdtype(np.dtype(dtype), np.floating)


def upcast(x: np.ndarray) -> np.ndarray:
    """float16 -> float32 for kernels that keep fp32 intermediates; other dtypes unchanged."""
    return x.astype(np.float32) if x.dtype == np.float16 else x


# ---------------------------------------------------------------------------------------
# erf without scipy: Taylor series near 0 (full relative precision), Chebyshev erfc beyond.

_ERF_TAYLOR_TERMS = 40


def erf(x: np.ndarray) -> np.ndarray:
    """Vectorised erf.  float64 input: series/erfc in float64 (error ~1e-9).  Anything else:
    onnxruntime's float32 kernel step for step (ge/ops/mlas_float.erf_f32), because in an
    int8 graph the Erf of a GELU is rounded to int8 right after: a result one ulp off
    onnxruntime's flips that rounding next to a .5 step boundary."""
    x = np.asarray(x)
    if x.dtype != np.float64:
        return erf_f32(x)
    return _erf64(x)


def _erf64(x: np.ndarray) -> np.ndarray:
    x = np.asarray(x, dtype=np.float64)
    small = np.abs(x) <= 2.5
    xs = np.where(small, x, 0.0)
    x2 = xs * xs
    term = xs.copy()
    total = xs.copy()
    for n in range(1, _ERF_TAYLOR_TERMS):       # loop over series terms, not elements
        term = term * (-x2) / n
        total = total + term / (2 * n + 1)
    taylor = total * (2.0 / np.sqrt(np.pi))
    z = np.abs(x)
    t = 1.0 / (1.0 + 0.5 * z)
    poly = (-1.26551223 + t * (1.00002368 + t * (0.37409196 + t * (0.09678418 + t * (
        -0.18628806 + t * (0.27886807 + t * (-1.13520398 + t * (1.48851587 + t * (
            -0.82215223 + t * 0.17087277)))))))))
    with np.errstate(over="ignore", under="ignore"):
        erfc = t * np.exp(-z * z + poly)        # Numerical Recipes erfcc, fractional err < 1.2e-7
    tail = np.sign(x) * (1.0 - erfc)
    return np.where(small, taylor, tail)


# ---------------------------------------------------------------------------------------
# Registration helpers

def _unary(op_type: str, fn: Callable, fp32_inside: bool = True, out_dtype=None,
           kind: OpKind = OpKind.ELEMWISE) -> None:
    """Register a one-input op; `fn(x, attrs)` sees float32 for float16 data if fp32_inside."""

    def compute(inputs, attrs):
        x = inputs[0]
        y = np.asarray(fn(upcast(x) if fp32_inside and not own_dtype_inside(attrs) else x, attrs))
        return [y.astype(out_dtype if out_dtype is not None else x.dtype, copy=False)]

    def infer(inputs, attrs):
        if out_dtype is None:
            return same_as_input(inputs, attrs)
        return [TensorType(np.dtype(out_dtype), tuple(inputs[0].shape))]

    register(OpDef(op_type=op_type, kind=kind, compute=compute, infer=infer))


def _no_integer_zero(op_type: str, divisor) -> None:
    """Integer division by zero has no value (numpy makes it 0, C traps): the model's mistake."""
    b = np.asarray(divisor)
    if not _is_float(b.dtype) and b.dtype != np.bool_ and b.size and not np.all(b):
        raise InvalidNode(f"{op_type}: integer division by zero (the divisor holds 0)",
                          "Make the divisor non-zero, or divide in floating point.")


def _binary(op_type: str, fn: Callable, out_dtype=None, divides: bool = False,
            check_attrs: Callable = None) -> None:
    """Register a broadcasting two-input op; `fn(a, b, attrs)` gets the raw arrays.  A
    dividing op refuses an integer divisor holding 0, constant (at compile time) or not;
    `check_attrs(dtype, attrs)` refuses attributes the op cannot honour for that input dtype
    (the shape rule runs it, so atc refuses what the kernel would)."""

    def compute(inputs, attrs):
        a, b = inputs[0], inputs[1]
        if divides:
            _no_integer_zero(op_type, b)
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
            y = np.asarray(fn(a, b, attrs))
        dtype = out_dtype if out_dtype is not None else a.dtype
        return [y.astype(dtype, copy=False)]

    def infer(inputs, attrs):
        if check_attrs is not None:
            check_attrs(np.dtype(inputs[0].dtype), attrs)
        return broadcast_result(inputs, attrs, dtype=out_dtype)

    def check_values(values, types, attrs):
        if values[1] is not None:
            _no_integer_zero(op_type, values[1])

    register(OpDef(op_type=op_type, kind=OpKind.BROADCAST, compute=compute, infer=infer,
                   check_values=check_values if divides else None))


def _variadic(op_type: str, fn: Callable) -> None:
    """Register Max/Min/Sum/Mean: a fold of `fn` over all inputs with broadcasting."""

    def compute(inputs, attrs):
        xs = present(inputs)
        acc = upcast(xs[0])
        for x in xs[1:]:                          # loop over inputs, not elements
            acc = fn(acc, upcast(x))
        if op_type == "Mean":
            acc = acc / len(xs)
        return [np.asarray(acc).astype(xs[0].dtype, copy=False)]

    register(OpDef(op_type=op_type, kind=OpKind.BROADCAST, compute=compute, infer=broadcast_result))


# ---------------------------------------------------------------------------------------
# Unary math

def _sigmoid(x, a):
    # Split by sign so exp never overflows.
    e = np.exp(-np.abs(x))
    if fast_impl(a):      # high_performance: reciprocal estimate, one multiply instead of a division
        r = approx_reciprocal(np.asarray(1 + e, dtype=x.dtype))
        return np.where(x >= 0, r, (e * r).astype(x.dtype, copy=False))
    return np.where(x >= 0, 1 / (1 + e), e / (1 + e))


def _gelu(x, a):
    approx = a.get("approximate", "none")
    if isinstance(approx, bytes):
        approx = approx.decode()
    if approx == "tanh" or fast_impl(a):      # high_performance: the tanh approximation
        c = float(np.sqrt(2 / np.pi))
        return 0.5 * x * (1 + np.tanh(c * (x + 0.044715 * x * x * x)))
    if approx != "none":
        raise invalid_attr("Gelu", "approximate", approx, "must be 'none' or 'tanh'")
    return (0.5 * x * (1 + erf(x * (1.0 / math.sqrt(2.0))))).astype(x.dtype)  # Python float: stays in x.dtype


def _swish(x, a):
    """x * sigmoid(alpha * x): SiLU (alpha 1) and QuickGelu (alpha 1.702) in one op."""
    alpha = float(a.get("alpha", 1.0))
    return x * _sigmoid(x if alpha == 1.0 else (alpha * x).astype(x.dtype, copy=False), a)


def _selu(x, a):
    alpha = a.get("alpha", 1.67326319217681884765625)
    gamma = a.get("gamma", 1.05070102214813232421875)
    return gamma * np.where(x > 0, x, alpha * np.expm1(np.minimum(x, 0)))


def _hard_sigmoid(x, a):
    return np.clip(a.get("alpha", 0.2) * x + a.get("beta", 0.5), 0, 1)


def _float_fn(fn):
    """Silence numpy's domain warnings (log of negatives gives NaN as in ONNX)."""

    def wrapped(x, a):
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
            return fn(x, a)

    return wrapped


_unary("Relu", lambda x, a: np.maximum(x, 0), fp32_inside=False)
_unary("Sigmoid", _float_fn(_sigmoid))
_unary("Tanh", lambda x, a: np.tanh(x))
_unary("Exp", _float_fn(lambda x, a: np.exp(x)))
_unary("Log", _float_fn(lambda x, a: np.log(x)))
_unary("Sqrt", _float_fn(lambda x, a: np.sqrt(x)))
_unary("Reciprocal", _float_fn(lambda x, a: np.reciprocal(x)))
_unary("Neg", lambda x, a: np.negative(x), fp32_inside=False)
_unary("Abs", lambda x, a: np.abs(x), fp32_inside=False)
_unary("Erf", lambda x, a: erf(x))
_unary("Floor", lambda x, a: np.floor(x), fp32_inside=False)
_unary("Ceil", lambda x, a: np.ceil(x), fp32_inside=False)
_unary("Round", lambda x, a: np.round(x), fp32_inside=False)  # half to even
_unary("Sign", lambda x, a: np.sign(x), fp32_inside=False)
_unary("Softplus", _float_fn(lambda x, a: np.logaddexp(0, x)))
_unary("LeakyRelu", lambda x, a: np.where(x >= 0, x, a.get("alpha", 0.01) * x))
_unary("Elu", _float_fn(lambda x, a: np.where(x > 0, x, a.get("alpha", 1.0) * np.expm1(np.minimum(x, 0)))))
_unary("Selu", _float_fn(_selu))
_unary("HardSigmoid", _hard_sigmoid)
_unary("HardSwish", lambda x, a: x * np.clip(x / 6 + 0.5, 0, 1))
_unary("Gelu", _float_fn(_gelu))
_unary("Swish", _float_fn(_swish))
_unary("Mish", _float_fn(lambda x, a: x * np.tanh(np.logaddexp(0, x))))
_unary("Sin", lambda x, a: np.sin(x))
_unary("Cos", lambda x, a: np.cos(x))
_unary("Not", lambda x, a: np.logical_not(x), fp32_inside=False)
_unary("IsNaN", lambda x, a: np.isnan(x), out_dtype=np.bool_, fp32_inside=False)


# ---------------------------------------------------------------------------------------
# Cast, Identity, Clip, PRelu

def _cast_target(attrs) -> np.dtype:
    to = attrs.get("to")
    if to not in ONNX_TO_NUMPY:
        raise invalid_attr("Cast", "to", to, "not an ONNX element type the converter supports "
                       f"(supported: {sorted(ONNX_TO_NUMPY)})")
    return np.dtype(ONNX_TO_NUMPY[to])


def _cast_compute(inputs, attrs):
    return [convert(inputs[0], _cast_target(attrs), bool(int(attrs.get("saturate", 1))))]


register(OpDef(op_type="Cast", kind=OpKind.ELEMWISE, compute=_cast_compute,
               infer=lambda i, a: [TensorType(_cast_target(a), tuple(i[0].shape))]))

register(OpDef(op_type="Identity", kind=OpKind.ELEMWISE, compute=lambda i, a: [i[0]],
               infer=same_as_input))


def dropout_training(attrs) -> bool:
    """Whether a Dropout drops anything: training_mode true with a ratio above 0 (the
    default ratio is 0.5).  Inference (the default) passes the input through."""
    training = attrs.get("training_mode")
    if training is None or not bool(np.asarray(training).reshape(-1)[0]):
        return False
    ratio = attrs.get("ratio")
    return ratio is None or float(np.asarray(ratio).reshape(-1)[0]) > 0


def _dropout_check(attrs) -> None:
    ratio = attrs.get("ratio")
    if ratio is not None and (np.size(ratio) != 1 or not 0 <= float(np.asarray(ratio).reshape(-1)[0]) < 1):
        raise invalid_attr("Dropout", "ratio", ratio, "it must be one value in [0, 1) (as in onnxruntime).")
    if dropout_training(attrs):
        raise InvalidNode("Dropout in training mode with a ratio above 0 draws random numbers: the result "
                          "cannot match any other runtime.", "Export the model for inference (training_mode=False).")


def _dropout_compute(inputs, attrs):
    """y = x and the optional mask all true (inference, or training with ratio 0)."""
    _dropout_check(attrs)
    x = inputs[0]
    return [np.array(x, copy=True), np.ones(x.shape, dtype=np.bool_)]


def _dropout_infer(inputs, attrs):
    _dropout_check(attrs)
    x = inputs[0]
    return [TensorType(x.dtype, tuple(x.shape)), TensorType(np.dtype(np.bool_), tuple(x.shape))]


# Dropout with an unused mask is removed by ge.passes.eliminate_identity; one whose mask is
# read stays a kernel that writes both.
register(OpDef(op_type="Dropout", kind=OpKind.OPAQUE, compute=_dropout_compute, infer=_dropout_infer,
               config_inputs=((1, "ratio"), (2, "training_mode")), foldable=False))


def _clip_compute(inputs, attrs):
    x = inputs[0]
    lo, hi = attrs.get("min"), attrs.get("max")
    y = x
    if lo is not None:                                      # bounds are scalars (0-d or [1])
        y = np.maximum(y, np.asarray(lo).astype(x.dtype).reshape(()))
    if hi is not None:
        y = np.minimum(y, np.asarray(hi).astype(x.dtype).reshape(()))  # min > max gives max
    return [np.array(y, dtype=x.dtype, copy=True)]


def _clip_infer(inputs, attrs):
    """Bounds are scalars, 0-d or [1] (onnxruntime refuses any other shape), given as
    constants (moved to min/max) or as run-time inputs."""
    for index, name in ((1, "min"), (2, "max")):
        bound = attrs.get(name)
        shape = np.shape(bound) if bound is not None else (
            tuple(inputs[index].shape) if len(inputs) > index and inputs[index] is not None else ())
        if shape not in ((), (1,)):
            raise invalid_attr("Clip", name, f"of shape {shape}", "it must be a scalar (shape () or [1]).",
                               "Give Clip scalar bounds.")
    return same_as_input(inputs, attrs)


register(OpDef(op_type="Clip", kind=OpKind.ELEMWISE, compute=_clip_compute, infer=_clip_infer,
               config_inputs=((1, "min"), (2, "max"))))

_binary("PRelu", lambda x, s, a: np.where(x < 0, x * s, x))


# ---------------------------------------------------------------------------------------
# Binary arithmetic

def _div(a, b, attrs):
    if _is_float(a.dtype):
        return np.true_divide(a, b)
    q = np.floor_divide(a, b)
    inexact = (np.remainder(a, b) != 0) & ((a < 0) != (b < 0))
    return q + inexact.astype(q.dtype)            # truncate toward zero as ONNX (C) does


def _pow(a, b, attrs):
    if _is_float(a.dtype):
        return np.power(upcast(a), upcast(b).astype(upcast(a).dtype))
    return np.power(a.astype(np.float64), b.astype(np.float64))   # cast back truncates like C


def _mod_fmod(dtype, attrs) -> int:
    fmod = int(attrs.get("fmod", 0))
    if fmod not in (0, 1) or _is_float(dtype) and not fmod:
        raise invalid_attr("Mod", "fmod", fmod, "it must be 0 or 1, and floating-point Mod requires fmod=1")
    return fmod


def _mod(a, b, attrs):
    return np.fmod(a, b) if _mod_fmod(a.dtype, attrs) else np.mod(a, b)


_binary("Add", lambda a, b, _: np.add(a, b))
_binary("Sub", lambda a, b, _: np.subtract(a, b))
_binary("Mul", lambda a, b, _: np.multiply(a, b))
_binary("Div", _div, divides=True)
_binary("Pow", _pow)
_binary("Mod", _mod, divides=True, check_attrs=_mod_fmod)

_variadic("Max", np.maximum)
_variadic("Min", np.minimum)
_variadic("Sum", np.add)
_variadic("Mean", np.add)

# Comparisons and logic produce bool.
_binary("Equal", lambda a, b, _: np.equal(a, b), out_dtype=np.bool_)
_binary("Less", lambda a, b, _: np.less(a, b), out_dtype=np.bool_)
_binary("Greater", lambda a, b, _: np.greater(a, b), out_dtype=np.bool_)
_binary("LessOrEqual", lambda a, b, _: np.less_equal(a, b), out_dtype=np.bool_)
_binary("GreaterOrEqual", lambda a, b, _: np.greater_equal(a, b), out_dtype=np.bool_)
_binary("And", lambda a, b, _: np.logical_and(a, b), out_dtype=np.bool_)
_binary("Or", lambda a, b, _: np.logical_or(a, b), out_dtype=np.bool_)
_binary("Xor", lambda a, b, _: np.logical_xor(a, b), out_dtype=np.bool_)


def _where_compute(inputs, attrs):
    cond, x, y = inputs
    return [np.where(cond.astype(bool), x, y).astype(x.dtype, copy=False)]


def _where_infer(inputs, attrs):
    return broadcast_result(inputs, attrs, dtype=inputs[1].dtype)


register(OpDef(op_type="Where", kind=OpKind.BROADCAST, compute=_where_compute,
               infer=_where_infer))
