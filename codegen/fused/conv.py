"""Kernels of the conv fusions: ConvBNReluFusionOp and ConvPoolFCFusionOp.

Why one module: the classification-head kernel runs the same conv block (conv + folded BN
bias + residual + activation) as ConvBNReluFusionOp before its pooling and FC, so both
share `_conv_block`.  BatchNorm is already folded into the weights and bias at compile
time (fusion_passes/conv_bn_relu.py), so the kernel sees a plain conv with an epilogue.

Inputs of ConvBNReluFusionOp: [x, W, b | None, residual | None] (trailing None dropped).
Inputs of ConvPoolFCFusionOp: [x, W, b | None, residual | None, fc_weight, fc_bias | None].
Attrs: the Conv attrs, `activation` (Relu, Clip, LeakyRelu, Sigmoid, HardSwish, SiLU, Tanh,
absent = none) with `clip_min`/`clip_max`/`act_alpha`, `has_residual`; the head adds
`fc_transB`, `fc_alpha`, `fc_beta`.

Numerics: float16 data is widened to float32 once; the conv accumulates in float32 and the
whole epilogue (bias, residual, activation, pooling, FC) stays float32 on chip; only the
kernel's output is rounded back to float16 -- one rounding where the unfused graph has one
per op.  Every piece of arithmetic reuses the ONNX kernels of codegen.ops, and the work
rules reuse theirs, so fused and unfused kernels are priced by one ruler.
"""
from __future__ import annotations

from typing import Optional, Sequence

import numpy as np

from codegen.ops.registry import OpDef, OpKind, TensorType, Work, get_op, register

ACTIVATIONS = ("Relu", "Clip", "LeakyRelu", "Sigmoid", "HardSwish", "SiLU", "Tanh")


def _acc_dtype(dtype) -> np.dtype:
    """The on-chip dtype: float16 widens to float32 (the cube's accumulator), others stay."""
    return np.dtype(np.float32) if np.dtype(dtype) == np.float16 else np.dtype(dtype)


def _slot(inputs: Sequence, i: int):
    return inputs[i] if len(inputs) > i else None


def activation_op(attrs: dict) -> list:
    """The ONNX ops (type, attrs) an activation attr stands for, in order; [] for none."""
    act = attrs.get("activation", "")
    if not act:
        return []
    if act == "Clip":
        bounds = {k: float(attrs[f"clip_{k}"]) for k in ("min", "max") if f"clip_{k}" in attrs}
        return [("Clip", bounds)]
    if act == "LeakyRelu":
        return [("LeakyRelu", {"alpha": float(attrs.get("act_alpha", 0.01))})]
    if act == "SiLU":
        return [("Sigmoid", {}), ("Mul", {})]
    if act in ACTIVATIONS:
        return [(act, {})]
    raise ValueError(f"unknown fused activation {act!r}")


def _activate(y: np.ndarray, attrs: dict) -> np.ndarray:
    ops = activation_op(attrs)
    if attrs.get("activation") == "SiLU":
        sig = get_op("Sigmoid").compute([y], {})[0]
        return get_op("Mul").compute([y, sig], {})[0]
    for op_type, op_attrs in ops:
        y = get_op(op_type).compute([y], op_attrs)[0]
    return y


def _conv_block(inputs: Sequence[Optional[np.ndarray]], attrs: dict) -> np.ndarray:
    """conv + bias + residual + activation, returned in the on-chip (accumulation) dtype."""
    x, w, b, r = inputs[0], inputs[1], _slot(inputs, 2), _slot(inputs, 3)
    acc = _acc_dtype(x.dtype)
    conv_in = [x.astype(acc, copy=False), w.astype(acc, copy=False)]
    if b is not None:
        conv_in.append(b.astype(acc, copy=False))
    y = get_op("Conv").compute(conv_in, attrs)[0]
    if r is not None:
        y = y + r.astype(acc, copy=False)
    return _activate(y, attrs)


def _conv_block_type(inputs: Sequence[Optional[TensorType]], attrs: dict) -> TensorType:
    return get_op("Conv").infer(list(inputs[:2]), attrs)[0]


def _conv_block_work(inputs: Sequence[Optional[TensorType]], out: TensorType, attrs: dict) -> Work:
    """Cube MACs of the conv, vector ops of its epilogue, and the intermediates kept on
    chip: the conv accumulator, the residual sum when an activation follows it, and SiLU's
    sigmoid -- each a tensor of the block's output size that the unfused graph writes out."""
    work = get_op("Conv").work(list(inputs[:2]), [out], attrs)
    stages = 1
    if _slot(inputs, 2) is not None:
        work.add_vector("alu", out.size)
    if _slot(inputs, 3) is not None:
        work.add_vector("alu", out.size)
        stages += 1 if attrs.get("activation") else 0
    for op_type, op_attrs in activation_op(attrs):
        work = work + get_op(op_type).work([out, out] if op_type == "Mul" else [out], [out], op_attrs)
    if attrs.get("activation") == "SiLU":
        stages += 1
    work.onchip_bytes = stages * out.nbytes
    return work


# -- ConvBNReluFusionOp ------------------------------------------------------------------


def conv_bn_relu_compute(inputs, attrs):
    return [_conv_block(inputs, attrs).astype(inputs[0].dtype, copy=False)]


def conv_bn_relu_infer(inputs, attrs):
    return [_conv_block_type(inputs, attrs)]


def conv_bn_relu_work(inputs, outputs, attrs):
    return _conv_block_work(inputs, outputs[0], attrs)


register(OpDef("ConvBNReluFusionOp", OpKind.OUT_EWISE_FUSABLE, conv_bn_relu_compute,
               conv_bn_relu_infer, conv_bn_relu_work, ge_type="ConvBNReluFusionOp"))


# -- ConvPoolFCFusionOp --------------------------------------------------------------------

FC_WEIGHT, FC_BIAS = 4, 5


def _fc_attrs(attrs: dict) -> dict:
    return {"transB": int(attrs.get("fc_transB", 0)), "alpha": float(attrs.get("fc_alpha", 1.0)),
            "beta": float(attrs.get("fc_beta", 1.0))}


def conv_pool_fc_compute(inputs, attrs):
    y = _conv_block(inputs, attrs)                                   # (N, C, *spatial)
    acc = y.dtype
    pooled = np.mean(y, axis=tuple(range(2, y.ndim)), dtype=acc)    # (N, C), global average
    fc_in = [pooled, inputs[FC_WEIGHT].astype(acc, copy=False)]
    if _slot(inputs, FC_BIAS) is not None:
        fc_in.append(inputs[FC_BIAS].astype(acc, copy=False))
    out = get_op("Gemm").compute(fc_in, _fc_attrs(attrs))[0]
    return [out.astype(inputs[0].dtype, copy=False)]


def _pooled_type(inputs, attrs) -> tuple:
    block = _conv_block_type(inputs, attrs)
    return block, TensorType(block.dtype, tuple(block.shape[:2]))


def conv_pool_fc_infer(inputs, attrs):
    _, pooled = _pooled_type(inputs, attrs)
    fc_in = [pooled, inputs[FC_WEIGHT]] + ([inputs[FC_BIAS]] if _slot(inputs, FC_BIAS) is not None else [])
    return get_op("Gemm").infer(fc_in, _fc_attrs(attrs))


def conv_pool_fc_work(inputs, outputs, attrs):
    """Conv block + global average (one add per block element, one divide per channel) +
    FC; on chip: the block's intermediates, the block output and the pooled vector."""
    block, pooled = _pooled_type(inputs, attrs)
    block = TensorType(outputs[0].dtype, block.shape)       # sized in the compute dtype
    pooled = TensorType(outputs[0].dtype, pooled.shape)
    work = _conv_block_work(inputs, block, attrs)
    work.add_vector("alu", block.size).add_vector("div", pooled.size)
    fc_in = [pooled, inputs[FC_WEIGHT]] + ([inputs[FC_BIAS]] if _slot(inputs, FC_BIAS) is not None else [])
    fc = get_op("Gemm").work(fc_in, outputs, _fc_attrs(attrs))
    total = work + fc
    total.onchip_bytes = work.onchip_bytes + block.nbytes + pooled.nbytes
    return total


register(OpDef("ConvPoolFCFusionOp", OpKind.OUT_EWISE_FUSABLE, conv_pool_fc_compute,
               conv_pool_fc_infer, conv_pool_fc_work, ge_type="ConvPoolFCFusionOp"))
