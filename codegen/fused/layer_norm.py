"""LayerNormMatMulFusionOp: a LayerNorm over the last axis whose normalized rows feed a GEMM
(+ bias + activation + residual) straight from the unified buffer.

Why: the normalized tile is produced on the vector unit and consumed by the cube without a
round trip through global memory, and the LayerNorm kernel launch disappears.  When the
normalized tensor has other readers (post-LN BERT's residual, or sibling Q/K/V GEMMs), the
kernel also writes it once as a second output (attribute ``emit_normalized`` = 1).

Inputs: x [..., K], gamma [K], beta [K] (optional), W [K, N], bias [N] (optional),
residual [..., N] (optional).  Attributes: axis (-1), epsilon, activation (see
codegen.fused.gemm), emit_normalized.  Outputs: Y [..., N], then normalized [..., K] if
emitted.  Numerics: the LayerNorm kernel (fp32 statistics), its result rounded to the data
dtype (what the cube reads), then the fused GEMM kernel.
"""
from __future__ import annotations

import numpy as np

from codegen.fused.gemm import ACTIVATIONS, gemm_compute, gemm_infer, gemm_work
from codegen.registry import kernel_of, register
from ge.ops.registry import OpDef, OpKind, TensorType, get_op
from ge.errors import invalid_attr

OP_TYPE = "LayerNormMatMulFusionOp"


def _activation(attrs: dict) -> str:
    act = attrs.get("activation", "")
    act = act.decode() if isinstance(act, bytes) else str(act)
    if act not in ACTIVATIONS:
        raise invalid_attr(OP_TYPE, "activation", act, f"it must be one of {sorted(ACTIVATIONS)}.",
                           "Recompile the model with this version of atc_py.")
    return act


def _ln_attrs(attrs: dict) -> dict:
    return {"axis": int(attrs.get("axis", -1)), "epsilon": float(attrs.get("epsilon", 1e-5))}


def _gemm_inputs(normalized, inputs):
    rest = list(inputs[3:6]) + [None] * (6 - len(inputs))
    return [normalized, rest[0], rest[1], rest[2]]


def _compute(inputs, attrs):
    x, gamma, beta = inputs[0], inputs[1], inputs[2] if len(inputs) > 2 else None
    ln_inputs = [x, gamma] + ([beta] if beta is not None else [])
    normalized = get_op("LayerNormalization").compute(ln_inputs, _ln_attrs(attrs))[0]
    y = gemm_compute(_gemm_inputs(normalized, inputs), _activation(attrs), attrs)[0]
    return [y, normalized] if int(attrs.get("emit_normalized", 0)) else [y]


def _infer(inputs, attrs):
    x = inputs[0]
    y = gemm_infer(_gemm_inputs(x, inputs), {})[0]
    normalized = TensorType(np.dtype(x.dtype), tuple(x.shape))
    return [y, normalized] if int(attrs.get("emit_normalized", 0)) else [y]


def _work(inputs, outputs, attrs):
    """LayerNorm vector work + GEMM and epilogue; on chip: the normalized tensor the GEMM
    reads from the buffer, plus the epilogue's intermediates."""
    x = inputs[0]
    normalized = TensorType(np.dtype(x.dtype), tuple(x.shape))
    ln_inputs = [x] + list(inputs[1:3])
    ln = kernel_of("LayerNormalization").work(ln_inputs, [normalized], _ln_attrs(attrs))
    gemm = gemm_work(_gemm_inputs(normalized, inputs), outputs[:1], _activation(attrs), attrs)
    work = ln + gemm
    work.onchip_bytes = normalized.nbytes + gemm.onchip_bytes
    return work


register(OpDef(op_type=OP_TYPE, kind=OpKind.OUT_EWISE_FUSABLE, compute=_compute, infer=_infer), _work)
