"""MatMulBias*FusionOp: one GEMM whose epilogue adds the bias, applies an activation and
adds a residual while the result tile is still on chip.

Why one module for six op types: they differ only in the activation of the epilogue, and
the disable list switches them off one by one, so each activation is its own op type.

Inputs: x [..., K] (rows are every leading axis), W [K, N] (constant; the pass has already
applied Gemm's transB/alpha), bias [N] (optional), residual [..., N] (optional).
The op type fixes the activation; the ``activation`` attribute ("" | Relu | Gelu | FastGelu |
Sigmoid | Tanh) repeats it for readers of the .om (and sets Netron's relu_flag).
Numerics: the product accumulates in float32 for float16 data (the cube's accumulator) and
the epilogue runs on that accumulator; the result is rounded to the data dtype once.
"""
from __future__ import annotations

from typing import Optional

import numpy as np

from codegen.registry import kernel_of, register
from codegen.work import Work
from ge.ops.nn import matmul_shape
from ge.ops.common import own_dtype_inside, with_impl
from ge.ops.registry import OpDef, OpKind, TensorType, get_op
from ge.errors import AtcError, InvalidNode

# activation attr -> (ONNX op whose kernel computes it, its attributes)
ACTIVATIONS = {
    "": None,
    "Relu": ("Relu", {}),
    "Gelu": ("Gelu", {}),
    "FastGelu": ("Gelu", {"approximate": "tanh"}),
    "Sigmoid": ("Sigmoid", {}),
    "Tanh": ("Tanh", {}),
}
FUSED_OP_BY_ACTIVATION = {
    "": "MatMulBiasFusionOp",
    "Relu": "MatMulBiasReluFusionOp",
    "Gelu": "MatMulBiasGeluFusionOp",
    "FastGelu": "MatMulBiasFastGeluFusionOp",
    "Sigmoid": "MatMulBiasSigmoidFusionOp",
    "Tanh": "MatMulBiasTanhFusionOp",
}
MATMUL_BIAS_OPS = tuple(FUSED_OP_BY_ACTIVATION.values())


def _optional(inputs, i):
    return inputs[i] if len(inputs) > i else None


def accumulate_dtype(dtype) -> np.dtype:
    return np.dtype(np.float32) if np.dtype(dtype) == np.float16 else np.dtype(dtype)


def epilogue(acc: np.ndarray, bias, residual, activation: str, attrs: Optional[dict] = None,
             data_dtype=None) -> np.ndarray:
    """bias add -> activation -> residual add, on the accumulator dtype.  A high_performance
    (or keep_fp16) kernel runs the activation on the data dtype instead (`attrs`' op_impl_mode)."""
    ct = acc.dtype
    if bias is not None:
        acc = acc + bias.astype(ct, copy=False)
    spec = ACTIVATIONS[activation]
    if spec is not None:
        act_attrs = with_impl(attrs or {}, spec[1])
        if data_dtype is not None and own_dtype_inside(act_attrs):
            acc = acc.astype(data_dtype, copy=False)
        acc = get_op(spec[0]).compute([acc], act_attrs)[0].astype(ct, copy=False)
    if residual is not None:
        acc = acc + residual.astype(ct, copy=False)
    return acc


def gemm_compute(inputs, act: str = "", attrs: Optional[dict] = None):
    """x @ W then the epilogue; also the GEMM half of LayerNormMatMulFusionOp."""
    x, w = inputs[0], inputs[1]
    ct = accumulate_dtype(x.dtype)
    acc = np.matmul(x.astype(ct, copy=False), w.astype(ct, copy=False))
    y = epilogue(np.asarray(acc), _optional(inputs, 2), _optional(inputs, 3), act, attrs, x.dtype)
    return [y.astype(x.dtype, copy=False)]


def gemm_infer(inputs, attrs):
    x, w = inputs[0], inputs[1]
    if len(w.shape) != 2:
        raise InvalidNode(f"Fused GEMM weight must be 2-D, got {tuple(w.shape)}.",
                          "Recompile the model with this version of atc_py.")
    return [TensorType(np.dtype(x.dtype), matmul_shape(x.shape, w.shape))]


def epilogue_work(out: TensorType, has_bias: bool, activation: str, has_residual: bool,
                  attrs: Optional[dict] = None) -> Work:
    """Vector work of the epilogue, and the on-chip bytes of the intermediates it avoids
    writing: the raw product plus every stage output except the last."""
    work = Work()
    stages = 0
    if has_bias:
        work.add_vector("alu", out.size)
        stages += 1
    spec = ACTIVATIONS[activation]
    if spec is not None:
        work = work + kernel_of(spec[0]).work([out], [out], with_impl(attrs or {}, spec[1]))
        stages += 1
    if has_residual:
        work.add_vector("alu", out.size)
        stages += 1
    work.onchip_bytes = stages * out.nbytes
    return work


def gemm_work(inputs, outputs, act: str = "", attrs: Optional[dict] = None):
    x, out = inputs[0], outputs[0]
    cube = Work(cube_macs=out.size * int(x.shape[-1]))
    return cube + epilogue_work(out, _optional(inputs, 2) is not None, act,
                                _optional(inputs, 3) is not None, attrs)


def _register(op_type: str, act: str) -> None:
    register(OpDef(op_type=op_type, kind=OpKind.OUT_EWISE_FUSABLE,
                   compute=lambda inputs, attrs: gemm_compute(inputs, act, attrs), infer=gemm_infer),
             work=lambda inputs, outputs, attrs: gemm_work(inputs, outputs, act, attrs))


for _act, _op_type in FUSED_OP_BY_ACTIVATION.items():
    _register(_op_type, _act)
