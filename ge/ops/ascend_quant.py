"""Semantics of AMCT's quantization ops, as its deploy ONNX carries them: AscendQuant,
AscendDequant, AscendAntiQuant (default domain; CANN's ONNX parser registers them as
``ai.onnx::8..22::AscendQuant``).  Sources and the attribute table: docs/QUANTIZATION.md.

- AscendQuant (float -> int8): ``y = saturate(round(x * scale + offset))``, ``x * scale *
  scale`` when `sqrt_mode`; `round_mode` Round (half to even, C's rint), Floor, Ceil[ing],
  Trunc[ate]; `dst_type` INT8 (the ONNX plugin reads a string; GE's attr is DT_INT8 = 2).
- AscendDequant (int32 -> float): ``y = x * deq_scale`` per channel, deq_scale a uint64 tensor
  whose low 32 bits are the float32 scale (high bits zero) or a float16 tensor; squared when
  `sqrt_mode`; ReLU when `relu_flag`; `dtype` 0 = float32, 1 = float16.
- AscendAntiQuant (int8 -> float): ``y = (x - offset) * scale`` (``scale * scale`` with
  `sqrt_mode`); the ONNX offset is the quantizer's, the plugin negates it for GE's
  ``(x + offset) * scale``.
In the deploy graph the cube op between AscendQuant and AscendDequant (Conv, Gemm, MatMul)
takes int8 data and int8 weights and writes int32 (GE's Conv2D with DT_INT8 inputs; ge/ops/nn.py).
"""
from __future__ import annotations

import math

import numpy as np

from ge.errors import AtcError, invalid_attr
from ge.ops.quant import F32
from ge.ops.registry import OpDef, OpKind, TensorType, register

ROUND_MODES = {"Round": np.rint, "Floor": np.floor, "Ceil": np.ceil, "Ceiling": np.ceil,
               "Trunc": np.trunc, "Truncate": np.trunc}
FLOAT_DTYPES = {0: np.dtype(np.float32), 1: np.dtype(np.float16)}      # GE DataType numbers
_INT8 = ("INT8", 2)


def _float_attr(op_type: str, attrs: dict, name: str) -> float:
    if name not in attrs:
        raise invalid_attr(op_type, name, "", f"{op_type} requires the float attribute [{name}] "
                           "(AMCT writes it into every deploy model).",
                           "Regenerate the deploy model with AMCT, or add the attribute.")
    value = attrs[name]
    if isinstance(value, (bool, str, list, np.ndarray)) or not math.isfinite(float(value)):
        raise invalid_attr(op_type, name, value, "it must be a finite float.")
    return float(value)


def _flag(op_type: str, attrs: dict, name: str) -> bool:
    value = attrs.get(name, 0)
    if isinstance(value, (str, list, np.ndarray)) or value not in (0, 1, True, False):
        raise invalid_attr(op_type, name, value, "it must be 0 or 1 (a bool).")
    return bool(value)


def _out_dtype(op_type: str, attrs: dict) -> np.dtype:
    value = attrs.get("dtype", 0)
    if isinstance(value, (str, list, np.ndarray)) or int(value) not in FLOAT_DTYPES:
        raise invalid_attr(op_type, "dtype", value, "supported: 0 (DT_FLOAT) and 1 (DT_FLOAT16).")
    return FLOAT_DTYPES[int(value)]


def _scale(op_type: str, attrs: dict) -> np.float32:
    scale = _float_attr(op_type, attrs, "scale")
    if scale == 0.0:
        raise invalid_attr(op_type, "scale", scale, "a zero scale maps every value to the offset.")
    s = np.float32(scale)
    return s * s if _flag(op_type, attrs, "sqrt_mode") else s


# -- AscendQuant ---------------------------------------------------------------------------------


def quant_params(attrs: dict) -> tuple:
    """(scale, offset, rounding function) of an AscendQuant node, validated."""
    scale = _scale("AscendQuant", attrs)
    offset = np.float32(_float_attr("AscendQuant", attrs, "offset"))
    mode = attrs.get("round_mode", "Round")
    if mode not in ROUND_MODES:
        raise invalid_attr("AscendQuant", "round_mode", mode, f"supported: {', '.join(ROUND_MODES)}.")
    dst = attrs.get("dst_type", "INT8")
    if (dst.strip().upper() if isinstance(dst, str) else dst) not in _INT8:
        raise invalid_attr("AscendQuant", "dst_type", dst, "only INT8 is supported (INT4 and INT16 need "
                           "kernels this build does not have).", "Quantize to int8 with AMCT.")
    return scale, offset, ROUND_MODES[mode]


def ascend_quant(x: np.ndarray, scale, offset, rounding) -> np.ndarray:
    with np.errstate(invalid="ignore", over="ignore"):
        v = rounding(np.asarray(x, F32) * scale + offset)
        return np.clip(np.nan_to_num(v, nan=0.0), -128, 127).astype(np.int8)


def ascend_quant_compute(inputs, attrs):
    return [ascend_quant(inputs[0], *quant_params(attrs))]


def ascend_quant_infer(inputs, attrs):
    quant_params(attrs)
    if np.dtype(inputs[0].dtype) not in (np.dtype(np.float32), np.dtype(np.float16)):
        raise AtcError("E16004", f"AscendQuant takes float16/float32 input, got {np.dtype(inputs[0].dtype)}.",
                       "Check the deploy model.")
    return [TensorType(np.dtype(np.int8), tuple(inputs[0].shape))]


register(OpDef("AscendQuant", OpKind.ELEMWISE, ascend_quant_compute, ascend_quant_infer))


# -- AscendDequant -------------------------------------------------------------------------------


def deq_scale_values(deq_scale) -> np.ndarray:
    """The float32 scales of a deq_scale tensor: uint64 (float32 bits in the low word) or float16."""
    deq = np.asarray(deq_scale)
    if deq.dtype == np.uint64:
        if np.any(deq >> np.uint64(32)):
            raise invalid_attr("AscendDequant", "deq_scale", "uint64", "its high 32 bits must be zero: the low 32 "
                               "bits hold the float32 scale (GE's quantization guide).",
                               "Encode deq_scale as np.uint64(np.float32(scale).view(np.uint32)).")
        return (deq & np.uint64(0xFFFFFFFF)).astype(np.uint32).view(F32).reshape(deq.shape)
    if deq.dtype in (np.dtype(np.float16), F32):
        return deq.astype(F32)
    raise invalid_attr("AscendDequant", "deq_scale", str(deq.dtype), "it must be uint64 or float16.")


def channel_shape(x_shape, size: int) -> tuple:
    """Where per-channel deq scales go: axis 1 of conv outputs (rank >= 3 NCHW), else the last."""
    rank = len(x_shape)
    if size == 1:
        return ()
    axis = 1 if rank in (4, 5) else rank - 1
    if x_shape[axis] != size:
        raise AtcError("E16004", f"AscendDequant: deq_scale has {size} values, the input {list(x_shape)} has "
                       f"{x_shape[axis]} channels.", "Give one deq_scale per output channel of the cube op.")
    return tuple(-1 if i == axis else 1 for i in range(rank))


def dequant_scale(attrs: dict, x_shape) -> np.ndarray:
    deq = attrs.get("deq_scale")
    if deq is None:
        raise AtcError("E16002", "AscendDequant's deq_scale input is missing or not a constant.",
                       "Give deq_scale as a constant (AMCT writes an initializer).")
    scale = deq_scale_values(deq).reshape(-1)
    if _flag("AscendDequant", attrs, "sqrt_mode"):
        scale = scale * scale
    return scale.reshape(channel_shape(x_shape, scale.size))


def ascend_dequant_compute(inputs, attrs):
    y = inputs[0].astype(F32) * dequant_scale(attrs, inputs[0].shape)
    if _flag("AscendDequant", attrs, "relu_flag"):
        y = np.maximum(y, 0)
    return [y.astype(_out_dtype("AscendDequant", attrs), copy=False)]


def ascend_dequant_infer(inputs, attrs):
    if np.dtype(inputs[0].dtype) != np.dtype(np.int32):
        raise AtcError("E16004", f"AscendDequant takes the int32 output of a cube op, got {np.dtype(inputs[0].dtype)}.",
                       "Check the deploy model.")
    dequant_scale(attrs, inputs[0].shape)
    _flag("AscendDequant", attrs, "relu_flag")
    return [TensorType(_out_dtype("AscendDequant", attrs), tuple(inputs[0].shape))]


register(OpDef("AscendDequant", OpKind.ELEMWISE, ascend_dequant_compute, ascend_dequant_infer,
               config_inputs=((1, "deq_scale"),), array_config=True))


# -- AscendAntiQuant -----------------------------------------------------------------------------


def anti_quant_params(attrs: dict) -> tuple:
    return _scale("AscendAntiQuant", attrs), np.float32(_float_attr("AscendAntiQuant", attrs, "offset"))


def ascend_anti_quant_compute(inputs, attrs):
    scale, offset = anti_quant_params(attrs)
    y = (inputs[0].astype(F32) - offset) * scale
    return [y.astype(_out_dtype("AscendAntiQuant", attrs), copy=False)]


def ascend_anti_quant_infer(inputs, attrs):
    anti_quant_params(attrs)
    if np.dtype(inputs[0].dtype) != np.dtype(np.int8):
        raise AtcError("E16004", f"AscendAntiQuant takes int8 input, got {np.dtype(inputs[0].dtype)}.",
                       "Check the deploy model.")
    return [TensorType(_out_dtype("AscendAntiQuant", attrs), tuple(inputs[0].shape))]


register(OpDef("AscendAntiQuant", OpKind.ELEMWISE, ascend_anti_quant_compute, ascend_anti_quant_infer))
