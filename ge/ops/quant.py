"""Semantics of ONNX's quantized ops: QDQ (QuantizeLinear, DequantizeLinear,
DynamicQuantizeLinear) and QOperator (QLinearConv, QLinearMatMul, MatMulInteger, ConvInteger).

Numerics follow onnxruntime's CPU kernels, which are the reference users compare with:
- quantize: ``saturate(round_half_even(x / scale) + zero_point)`` in float32 (MLAS divides);
- dequantize: ``(x - zero_point) * scale`` with the difference in int32, the product in float32;
- integer matrix work accumulates exactly in int32 (products of 8-bit values are summed in
  float64 here, which is exact for any realistic depth, then cast);
- requantize (QLinearConv/QLinearMatMul): the int32 accumulator (plus an int32 bias) times
  the float32 multiplier ``x_scale * w_scale / y_scale``, rounded half to even, plus the
  output zero point, saturated -- MLAS's MlasRequantizeOutput.

Scales and zero points are config inputs (canonical form): once constant they are numpy
attributes (``array_config``), so a zero point keeps the dtype that decides the output type.
Per-tensor (a scalar or one element), per-axis (1-D along ``axis``) and blocked (opset 21:
same rank as x, ``block_size`` along ``axis``) parameters are supported.
"""
from __future__ import annotations

from typing import Optional

import numpy as np
from onnx import helper

from ge.errors import AtcError, InvalidNode, invalid_attr
from ge.ops.common import normalize_axis
from ge.ops.nn import conv_compute, conv_infer, matmul_shape
from ge.ops.registry import OpDef, OpKind, TensorType, register

F32 = np.dtype(np.float32)
QUANT_TYPES = tuple(np.dtype(t) for t in (np.int8, np.uint8, np.int16, np.uint16))
# QuantizeLinear/DequantizeLinear also take float8 (opset 19) and int4/uint4 (opset 21); the .om
# holds FNUZ float8 and uint4 in a storage type (om_format.attrs), so all of ONNX's are here
import ml_dtypes  # noqa: E402  (onnx's own dependency)
FLOAT8_QUANT_TYPES = tuple(np.dtype(t) for t in (ml_dtypes.float8_e4m3fn, ml_dtypes.float8_e4m3fnuz,
                                                 ml_dtypes.float8_e5m2, ml_dtypes.float8_e5m2fnuz))
INT4 = np.dtype(ml_dtypes.int4)
UINT4 = np.dtype(ml_dtypes.uint4)
QDQ_TYPES = QUANT_TYPES + FLOAT8_QUANT_TYPES + (INT4, UINT4)


# -- parameters --------------------------------------------------------------------------------


def param(attrs: dict, name: str) -> Optional[np.ndarray]:
    value = attrs.get(name)
    return None if value is None else np.asarray(value)


def quant_dtype(op_type: str, zero_point: Optional[np.ndarray], output_dtype: int = 0,
                allowed: tuple = QUANT_TYPES) -> np.dtype:
    """The integer type a quantizer writes: its zero point's, else `output_dtype`, else uint8."""
    if zero_point is not None:
        dtype = zero_point.dtype
    elif output_dtype:
        try:
            dtype = np.dtype(helper.tensor_dtype_to_np_dtype(int(output_dtype)))
        except (KeyError, TypeError, ValueError):
            raise invalid_attr(op_type, "output_dtype", output_dtype, "it is not an ONNX tensor type.") from None
    else:
        dtype = np.dtype(np.uint8)
    if dtype not in allowed:
        names = ", ".join(str(t) for t in allowed)
        raise AtcError("E16002", f"{op_type} to {dtype} is not supported (supported: {names}).",
                       "Quantize to 8- or 16-bit integers.")
    return dtype


def broadcast_param(op_type: str, value: np.ndarray, shape: tuple, axis: int = 1, block_size: int = 0,
                    check_only: bool = False) -> np.ndarray:
    """A scale or zero point shaped to broadcast against a tensor of `shape`: per-tensor stays a
    scalar, per-axis becomes [.., C, ..], blocked is repeated `block_size` times along `axis`.
    `check_only`: a shape rule's call -- validate, but never build the input-sized repeat."""
    value = np.asarray(value)
    rank = len(shape)
    if block_size:
        try:
            axis = normalize_axis(int(axis), rank)
        except ValueError:          # a blocked parameter needs a real axis (a rank-0 input has none)
            raise invalid_attr(op_type, "axis", axis, f"out of range for an input of rank {rank}.") from None
        if block_size < 0:
            raise invalid_attr(op_type, "block_size", block_size, "it must not be negative.")
        blocks = -(-int(shape[axis]) // int(block_size))
        expect = tuple(blocks if i == axis else int(d) for i, d in enumerate(shape))
        if block_size < 0 or value.shape != expect:
            raise invalid_attr(op_type, "block_size", block_size, f"blocked parameters must have shape "
                               f"{list(expect)} for input {list(shape)}, got {list(value.shape)}.")
        if check_only:
            return value
        return np.repeat(value, int(block_size), axis=axis)[tuple(
            slice(0, int(shape[axis])) if i == axis else slice(None) for i in range(rank))]
    if value.size == 1 and value.ndim <= 1:
        return value.reshape(())
    try:
        axis = normalize_axis(int(axis), rank)
    except ValueError:
        raise invalid_attr(op_type, "axis", axis, f"out of range for an input of rank {rank}.") from None
    if value.ndim != 1 or value.shape[0] != shape[axis]:
        raise AtcError("E16004", f"{op_type}: per-axis parameters of shape {list(value.shape)} do not match "
                       f"axis {axis} of the input {list(shape)}.",
                       "Give a scalar scale, or one value per element of the quantized axis.")
    return value.reshape(tuple(-1 if i == axis else 1 for i in range(rank)))


def quantize(x: np.ndarray, scale, zero_point, dtype, saturate: bool = True) -> np.ndarray:
    """saturate(round_half_even(x / scale) + zero_point), as onnxruntime's QuantizeLinear; to
    float8, x / scale rounded to the nearest float8 (saturated to its largest finite value
    unless saturate=0)."""
    if np.dtype(dtype) in FLOAT8_QUANT_TYPES:
        from ge.ops.elementwise import convert
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
            v = np.asarray(x, F32) / np.asarray(scale, F32)
        return convert(v, dtype, saturate)
    info = ml_dtypes.iinfo(dtype) if np.dtype(dtype) in (INT4, UINT4) else np.iinfo(dtype)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        v = np.rint(np.asarray(x, F32) / np.asarray(scale, F32)) + np.asarray(zero_point, F32)
        v = np.clip(np.nan_to_num(v, nan=0.0), info.min, info.max)
    return v.astype(dtype)


def dequantize(x: np.ndarray, scale, zero_point=None, dtype=F32) -> np.ndarray:
    """(x - zero_point) * scale; the difference is exact, the product float32."""
    wide = F32 if np.dtype(x.dtype) in FLOAT8_QUANT_TYPES else np.int64 if np.dtype(x.dtype).itemsize >= 4 \
        else np.int32
    diff = x.astype(wide, copy=False)
    if zero_point is not None:
        diff = diff - np.asarray(zero_point).astype(wide)
    return (diff.astype(F32) * np.asarray(scale, F32)).astype(dtype, copy=False)


def requantize(acc: np.ndarray, multiplier, zero_point, dtype) -> np.ndarray:
    """MLAS's requantization of an int32 accumulator: acc * multiplier (float32), round half to
    even, plus the zero point, saturated."""
    info = np.iinfo(dtype)
    v = np.rint(acc.astype(F32) * np.asarray(multiplier, F32)) + np.asarray(zero_point, F32)
    return np.clip(v, info.min, info.max).astype(dtype)


def exact_int32(y: np.ndarray) -> np.ndarray:
    """An integer-valued float64 result (exact) as int32, wrapping like a 32-bit accumulator."""
    return np.rint(y).astype(np.int64).astype(np.int32)


def _centered(x: np.ndarray, zero_point) -> np.ndarray:
    """x - zero_point in float64: exact, and fast through BLAS."""
    x = x.astype(np.float64)
    return x if zero_point is None else x - np.asarray(zero_point, np.float64)


def _quant_attrs(attrs: dict, scale: str, zero_point: str) -> tuple:
    s = param(attrs, scale)
    if s is None:
        raise AtcError("E16002", f"The {scale} input is missing or not a constant.", "Give constant scales.")
    return s, param(attrs, zero_point)


_QUANTIZE_CONFIG = ((1, "y_scale"), (2, "y_zero_point"))
_DEQUANTIZE_CONFIG = ((1, "x_scale"), (2, "x_zero_point"))
_QLINEAR_CONFIG = ((1, "x_scale"), (2, "x_zero_point"), (4, "w_scale"), (5, "w_zero_point"),
                   (6, "y_scale"), (7, "y_zero_point"))
_QLINEAR_MATMUL_CONFIG = ((1, "a_scale"), (2, "a_zero_point"), (4, "b_scale"), (5, "b_zero_point"),
                          (6, "y_scale"), (7, "y_zero_point"))


def _stand_ins(inputs: list, attrs: dict, config: tuple) -> dict:
    """The attributes a shape rule reads, with each config input left for the kernel to read
    at run time (a graph input's scale) stood in by ones (zero points by zeros) of its type and
    shape: the rule needs their dtype and size, never their values."""
    missing = {attr: inputs[i] for i, attr in config
               if attrs.get(attr) is None and i < len(inputs) and inputs[i] is not None}
    if not missing:
        return attrs
    # A zero-stride view: one element however large the input (a 16 GiB graph-input scale must
    # not allocate 16 GiB in a shape rule; the fuzz run with seed 5 found it).
    return {**attrs, **{attr: np.broadcast_to(np.array(0 if "zero_point" in attr else 1, t.dtype), tuple(t.shape))
                        for attr, t in missing.items()}}


# -- QuantizeLinear / DequantizeLinear ----------------------------------------------------------


def _check_scale(op_type: str, scale: np.ndarray) -> None:
    if scale.dtype.kind != "f":
        raise AtcError("E16004", f"{op_type}: the scale must be a float tensor, got {scale.dtype}.",
                       "Re-export the model.")


def quantize_linear_compute(inputs, attrs):
    x = inputs[0]
    scale, zp = _quant_attrs(attrs, "y_scale", "y_zero_point")
    dtype = quant_dtype("QuantizeLinear", zp, int(attrs.get("output_dtype", 0)), QDQ_TYPES)
    axis, block = int(attrs.get("axis", 1)), int(attrs.get("block_size", 0))
    s = broadcast_param("QuantizeLinear", scale, x.shape, axis, block)
    z = broadcast_param("QuantizeLinear", zp, x.shape, axis, block) if zp is not None else 0
    if dtype in FLOAT8_QUANT_TYPES:
        _check_float8_zero_point("QuantizeLinear", zp, dtype)
        return [quantize(x, s, 0, dtype, bool(int(attrs.get("saturate", 1))))]     # a float8 zero point is 0
    return [quantize(x, s, z, dtype)]


def quantize_linear_infer(inputs, attrs):
    attrs = _stand_ins(inputs, attrs, _QUANTIZE_CONFIG)
    x = inputs[0]
    scale, zp = _quant_attrs(attrs, "y_scale", "y_zero_point")
    _check_scale("QuantizeLinear", scale)
    axis, block = int(attrs.get("axis", 1)), int(attrs.get("block_size", 0))
    broadcast_param("QuantizeLinear", scale, x.shape, axis, block, check_only=True)
    if zp is not None and zp.shape != scale.shape and not zp.size == scale.size == 1:
        raise AtcError("E16004", f"QuantizeLinear: zero point shape {list(zp.shape)} differs from scale shape "
                       f"{list(scale.shape)}.", "Give the zero point the scale's shape.")
    dtype = quant_dtype("QuantizeLinear", zp, int(attrs.get("output_dtype", 0)), QDQ_TYPES)
    _check_float8_zero_point("QuantizeLinear", zp, dtype)
    return [TensorType(dtype, tuple(x.shape))]


def _check_float8_zero_point(op_type: str, zp, dtype) -> None:
    if zp is not None and zp.ndim and zp.size and not any(zp.strides):    # a stand-in: one value
        zp = zp[(0,) * zp.ndim]
    if dtype in FLOAT8_QUANT_TYPES and zp is not None and np.any(zp.astype(F32) != 0):
        raise AtcError("E16004", f"{op_type}: a float8 zero point must be 0.", "Give a zero point of 0.")


def dequantize_linear_compute(inputs, attrs):
    x = inputs[0]
    scale, zp = _quant_attrs(attrs, "x_scale", "x_zero_point")
    axis, block = int(attrs.get("axis", 1)), int(attrs.get("block_size", 0))
    s = broadcast_param("DequantizeLinear", scale, x.shape, axis, block)
    z = broadcast_param("DequantizeLinear", zp, x.shape, axis, block) if zp is not None else None
    return [dequantize(x, s, z, scale.dtype)]


def dequantize_linear_infer(inputs, attrs):
    attrs = _stand_ins(inputs, attrs, _DEQUANTIZE_CONFIG)
    x = inputs[0]
    scale, zp = _quant_attrs(attrs, "x_scale", "x_zero_point")
    _check_scale("DequantizeLinear", scale)
    if np.dtype(x.dtype) not in QDQ_TYPES + (np.dtype(np.int32),):
        raise AtcError("E16002", f"DequantizeLinear of {np.dtype(x.dtype)} is not supported "
                       "(supported: int8, uint8, int16, uint16, int32, int4, uint4, float8 e4m3fn, e4m3fnuz, "
                       "e5m2, e5m2fnuz).",
                       "Quantize to 8- or 16-bit integers.")
    if zp is not None and np.dtype(zp.dtype) != np.dtype(x.dtype):
        raise AtcError("E16004", f"DequantizeLinear: zero point {zp.dtype} differs from the input {np.dtype(x.dtype)}.",
                       "Give the zero point the input's type.")
    if zp is not None and zp.shape != scale.shape and not zp.size == scale.size == 1:     # as QuantizeLinear
        raise AtcError("E16004", f"DequantizeLinear: zero point shape {list(zp.shape)} differs from scale shape "
                       f"{list(scale.shape)}.", "Give the zero point the scale's shape.")
    broadcast_param("DequantizeLinear", scale, x.shape, int(attrs.get("axis", 1)), int(attrs.get("block_size", 0)),
                    check_only=True)
    return [TensorType(np.dtype(scale.dtype), tuple(x.shape))]


register(OpDef("QuantizeLinear", OpKind.ELEMWISE, quantize_linear_compute, quantize_linear_infer,
               config_inputs=_QUANTIZE_CONFIG, array_config=True))
register(OpDef("DequantizeLinear", OpKind.ELEMWISE, dequantize_linear_compute, dequantize_linear_infer,
               config_inputs=_DEQUANTIZE_CONFIG, array_config=True, foldable=False))


# -- DynamicQuantizeLinear ----------------------------------------------------------------------


def dynamic_quantize_compute(inputs, attrs):
    """uint8 with a run-time scale and zero point over [min(0, x), max(0, x)] (onnxruntime)."""
    x = np.asarray(inputs[0], F32)
    lo = np.minimum(F32.type(0), x.min()) if x.size else F32.type(0)
    hi = np.maximum(F32.type(0), x.max()) if x.size else F32.type(0)
    scale = (hi - lo) / F32.type(255) if hi != lo else F32.type(1)        # float32 arithmetic
    zp = np.uint8(np.clip(np.rint(F32.type(0) - lo / scale), 0, 255))
    return [quantize(x, scale, zp, np.uint8), np.array(scale, F32), np.array(zp, np.uint8)]


register(OpDef("DynamicQuantizeLinear", OpKind.OPAQUE, dynamic_quantize_compute,
               lambda i, a: [TensorType(np.dtype(np.uint8), tuple(i[0].shape)), TensorType(F32, ()),
                             TensorType(np.dtype(np.uint8), ())]))


# -- integer matrix ops -------------------------------------------------------------------------


def _matmul_zero_point(zp):
    """A zero point of MatMulInteger/QLinearMatMul as the shape rules let it through, shaped
    to broadcast: per tensor; per row of A ([M] becomes [M, 1]; [..., M, 1] is ready); per
    column of B ([N] or [..., 1, N], ready)."""
    if zp is None:
        return None
    zp = np.asarray(zp)
    return zp.reshape(()) if zp.size == 1 else zp.reshape(zp.shape + (1,)) if zp.ndim == 1 else zp


def integer_matmul(a, b, a_zp=None, b_zp=None) -> np.ndarray:
    """(a - a_zp) @ (b - b_zp) exactly, as int32."""
    a64 = _centered(a, _matmul_zero_point(a_zp))
    b64 = _centered(b, None if b_zp is None else np.asarray(b_zp).reshape(()) if np.size(b_zp) == 1 else b_zp)
    return exact_int32(np.matmul(a64, b64))


def _conv_zero_point(zp, rank: int):
    if zp is None:
        return None
    zp = np.asarray(zp)
    return zp.reshape(()) if zp.size == 1 else zp.reshape((-1,) + (1,) * (rank - 1))


def integer_conv(x, w, attrs, x_zp=None, w_zp=None) -> np.ndarray:
    """conv(x - x_zp, w - w_zp) exactly, as int32 (padding holds x_zp, i.e. zero after centering)."""
    x64 = _centered(x, np.asarray(x_zp).reshape(()) if x_zp is not None else None)
    w64 = _centered(w, _conv_zero_point(w_zp, w.ndim))
    return exact_int32(conv_compute([x64, w64], attrs)[0])


def _int32_like(shape) -> list:
    return [TensorType(np.dtype(np.int32), tuple(shape))]


def _shape_of(param) -> Optional[tuple]:
    """The shape of a scale or zero point: a TensorType (a node input), an array (a config
    input made an attribute) or a shape; None when absent."""
    if param is None:
        return None
    return tuple(int(d) for d in (param.shape if hasattr(param, "shape") else param))     # TensorType is a tuple


def param_shapes(inputs, attrs: dict, config: tuple) -> dict:
    """name -> shape of each scale and zero point present: a constant one's (an attribute
    by now) or a run-time input's."""
    shapes = {}
    for index, name in config:
        if attrs.get(name) is not None:
            shapes[name] = tuple(np.shape(attrs[name]))
        elif index < len(inputs) and inputs[index] is not None:
            shapes[name] = tuple(inputs[index].shape)
    return shapes


def _is_per_tensor(shape: tuple) -> bool:
    return len(shape) == 0 or shape == (1,)


def check_per_tensor(op_type: str, name: str, param) -> None:
    """A scale or zero point onnxruntime takes only per tensor: a scalar or a 1-D tensor of one
    value (its IsScalarOr1ElementVector) -- a kernel broadcasting anything else would compute
    what no runtime does, or fail at run time."""
    shape = _shape_of(param)
    if shape is not None and not _is_per_tensor(shape):
        raise InvalidNode(f"{op_type} {name} of shape {list(shape)} must be a scalar or a 1-D tensor of one value "
                          "(per-tensor quantization)", "Give the node a per-tensor scale and zero point.")


def check_per_row(op_type: str, name: str, param, a_shape) -> None:
    """MatMulInteger's a_zero_point as ONNX defines it: per tensor, or one per row of A --
    [M] for a 2-D A, A's shape with the K axis 1 ([..., M, 1]) for any A.  (onnxruntime's CPU
    kernel runs only the first; the spec's per-row form is computed as the spec says.)"""
    shape, a = _shape_of(param), tuple(int(d) for d in a_shape)
    if shape is None or _is_per_tensor(shape) or (len(a) == 2 and shape == a[:1]) or \
            (len(a) >= 2 and shape == a[:-1] + (1,)):
        return
    raise InvalidNode(f"{op_type} {name} of shape {list(shape)} does not fit A {list(a)}: it must be a scalar, a 1-D "
                      f"tensor of one value or one value per row ({list(a[:-1]) + [1] if len(a) >= 2 else [1]})",
                      "Give the node a per-tensor or per-row zero point.")


def check_per_column(op_type: str, name: str, param, b_shape) -> None:
    """A scale or zero point of the B (weight) operand of MatMulInteger/QLinearMatMul, as
    onnxruntime takes it (IsBQuantParamSupported): per tensor, [N] for a 2-D B, or B's own
    shape with the K axis 1 ([..., 1, N]: one value per column of each matrix)."""
    shape, b = _shape_of(param), tuple(int(d) for d in b_shape)
    if shape is None or _is_per_tensor(shape) or (len(shape) == 1 and len(b) == 2 and shape[0] == b[1]):
        return
    if len(shape) == len(b) >= 2 and shape[-2] == 1 and shape[:-2] + shape[-1:] == b[:-2] + b[-1:]:
        return
    raise InvalidNode(f"{op_type} {name} of shape {list(shape)} does not fit B {list(b)}: it must be a scalar, one "
                      f"value per column ({[b[-1]] if len(b) == 2 else list(b[:-2]) + [1, b[-1]] if b else [1]}) "
                      "or a 1-D tensor of one value", "Give the node a per-tensor or per-column weight quantization.")


def _check_8bit(op_type: str, *types) -> None:
    for t in types:
        if t is not None and np.dtype(t.dtype) not in (np.dtype(np.int8), np.dtype(np.uint8)):
            raise AtcError("E16004", f"{op_type} takes int8/uint8 tensors, got {np.dtype(t.dtype)}.",
                           "Check the quantized model.")


def matmul_integer_compute(inputs, attrs):
    zps = list(inputs[2:4]) + [None] * (4 - len(inputs))
    return [integer_matmul(inputs[0], inputs[1], zps[0], zps[1])]


def matmul_integer_infer(inputs, attrs):
    _check_8bit("MatMulInteger", inputs[0], inputs[1])
    out = matmul_shape(inputs[0].shape, inputs[1].shape)
    zps = list(inputs[2:4]) + [None] * (4 - len(inputs))
    check_per_row("MatMulInteger", "a_zero_point", zps[0], inputs[0].shape)
    check_per_column("MatMulInteger", "b_zero_point", zps[1], inputs[1].shape)
    return _int32_like(out)


def conv_integer_compute(inputs, attrs):
    zps = list(inputs[2:4]) + [None] * (4 - len(inputs))
    return [integer_conv(inputs[0], inputs[1], attrs, zps[0], zps[1])]


def conv_integer_infer(inputs, attrs):
    _check_8bit("ConvInteger", inputs[0], inputs[1])
    out = conv_infer(list(inputs[:2]), attrs)[0]
    zps = list(inputs[2:4]) + [None] * (4 - len(inputs))
    check_per_tensor("ConvInteger", "x_zero_point", zps[0])
    # per tensor or per output channel, as ONNX defines it (onnxruntime's CPU kernel runs only
    # the first; ONNX's own conformance case checks the second)
    if zps[1] is not None and not (_is_per_tensor(_shape_of(zps[1])) or _shape_of(zps[1]) == (out.shape[1],)):
        raise InvalidNode(f"ConvInteger w_zero_point of shape {list(zps[1].shape)} must be a scalar, a 1-D tensor of "
                          f"one value or [{out.shape[1]}], one per output channel",
                          "Give one weight zero point, or one per output channel.")
    return _int32_like(out.shape)


register(OpDef("MatMulInteger", OpKind.OUT_EWISE_FUSABLE, matmul_integer_compute, matmul_integer_infer))
register(OpDef("ConvInteger", OpKind.OUT_EWISE_FUSABLE, conv_integer_compute, conv_integer_infer))


# -- QLinearConv / QLinearMatMul ----------------------------------------------------------------


def output_multiplier(a_scale, b_scale, y_scale) -> np.ndarray:
    """float32 (a_scale * b_scale) / y_scale, in onnxruntime's order of operations."""
    return (np.asarray(a_scale, F32) * np.asarray(b_scale, F32)) / np.asarray(y_scale, F32)


def _qlinear_conv_params(attrs):
    xs, xz = _quant_attrs(attrs, "x_scale", "x_zero_point")
    ws, wz = _quant_attrs(attrs, "w_scale", "w_zero_point")
    ys, yz = _quant_attrs(attrs, "y_scale", "y_zero_point")
    return xs, xz, ws, wz, ys, yz


def qlinear_conv_compute(inputs, attrs):
    x, w = inputs[0], inputs[3]
    bias = inputs[8] if len(inputs) > 8 else None
    xs, xz, ws, wz, ys, yz = _qlinear_conv_params(attrs)
    acc = integer_conv(x, w, attrs, xz, wz)
    if bias is not None:
        acc = acc + bias.astype(np.int32).reshape((-1,) + (1,) * (acc.ndim - 2))
    mult = output_multiplier(xs, ws.reshape(-1), ys).reshape((-1,) + (1,) * (acc.ndim - 2))
    return [requantize(acc, mult, yz if yz is not None else 0, quant_dtype("QLinearConv", yz))]


def qlinear_conv_infer(inputs, attrs):
    attrs = _stand_ins(inputs, attrs, _QLINEAR_CONFIG)
    _check_8bit("QLinearConv", inputs[0], inputs[3])
    xs, xz, ws, wz, ys, yz = _qlinear_conv_params(attrs)
    out = conv_infer([inputs[0], inputs[3]], attrs)[0]
    for name, p in (("x_scale", xs), ("x_zero_point", xz), ("y_scale", ys), ("y_zero_point", yz)):
        check_per_tensor("QLinearConv", name, p)
    for name, p in (("w_scale", ws), ("w_zero_point", wz)):       # per tensor, or one per output channel
        if p is not None and not (_is_per_tensor(p.shape) or tuple(p.shape) == (out.shape[1],)):
            raise InvalidNode(f"QLinearConv {name} of shape {list(p.shape)} must be a scalar, a 1-D tensor of one "
                              f"value or [{out.shape[1]}], one per output channel",
                              "Give one weight scale and zero point, or one per output channel.")
    return [TensorType(quant_dtype("QLinearConv", yz), tuple(out.shape))]


register(OpDef("QLinearConv", OpKind.OUT_EWISE_FUSABLE, qlinear_conv_compute, qlinear_conv_infer,
               config_inputs=_QLINEAR_CONFIG, array_config=True))


def _qlinear_matmul_params(attrs):
    a_s, a_z = _quant_attrs(attrs, "a_scale", "a_zero_point")
    b_s, b_z = _quant_attrs(attrs, "b_scale", "b_zero_point")
    y_s, y_z = _quant_attrs(attrs, "y_scale", "y_zero_point")
    return a_s, a_z, b_s, b_z, y_s, y_z


def qlinear_matmul_compute(inputs, attrs):
    a, b = inputs[0], inputs[3]
    a_s, a_z, b_s, b_z, y_s, y_z = _qlinear_matmul_params(attrs)
    acc = integer_matmul(a, b, a_z, b_z)
    mult = output_multiplier(a_s, b_s, y_s)     # b_scale: a scalar or one per column
    return [requantize(acc, mult, y_z if y_z is not None else 0, quant_dtype("QLinearMatMul", y_z))]


def qlinear_matmul_infer(inputs, attrs):
    attrs = _stand_ins(inputs, attrs, _QLINEAR_MATMUL_CONFIG)
    _check_8bit("QLinearMatMul", inputs[0], inputs[3])
    a_s, a_z, b_s, b_z, y_s, y_z = _qlinear_matmul_params(attrs)
    out = matmul_shape(inputs[0].shape, inputs[3].shape)
    for name, p in (("a_scale", a_s), ("a_zero_point", a_z), ("y_scale", y_s), ("y_zero_point", y_z)):
        check_per_tensor("QLinearMatMul", name, p)
    for name, p in (("b_scale", b_s), ("b_zero_point", b_z)):
        check_per_column("QLinearMatMul", name, p, inputs[3].shape)
    return [TensorType(quant_dtype("QLinearMatMul", y_z), out)]


register(OpDef("QLinearMatMul", OpKind.OUT_EWISE_FUSABLE, qlinear_matmul_compute, qlinear_matmul_infer,
               config_inputs=_QLINEAR_MATMUL_CONFIG, array_config=True))
