"""LayerNormMatMulFusionOp and RmsNormMatMulFusionOp: a LayerNorm or an RMSNorm over the last
axis whose normalized rows feed a GEMM (+ bias + activation + residual) straight from the
unified buffer.

Why: the normalized tile is produced on the vector unit and consumed by the cube without a
round trip through global memory, and the norm kernel launch disappears.  When the
normalized tensor has other readers (post-LN BERT's residual, or sibling Q/K/V GEMMs), the
kernel also writes it once as a second output (attribute ``emit_normalized`` = 1).  The two
op types differ only in the norm they run first (NORM_OPS): the norm's own kernel, so the
fused and unfused norms are one function.

Inputs: x [..., K], gamma [K], beta [K] (optional; LayerNorm only), W [K, N], bias [N]
(optional), residual [..., N] (optional).  Attributes: the norm's (axis -1, epsilon, and
RMSNorm's stash_type), the GEMM epilogue's (`activation`, `act_*`, `residual_after_act` -- 1
unless set: codegen/fused/gemm.py), emit_normalized.  Outputs: Y [..., N], then normalized
[..., K] if emitted.  Numerics: the norm kernel (fp32 statistics), its result rounded to the
data dtype (what the cube reads), then the fused GEMM kernel.
"""
from __future__ import annotations

import numpy as np

from codegen.fused import epilogue
from codegen.fused.gemm import gemm_compute, gemm_infer, gemm_work
from codegen.registry import kernel_of, register
from ge.ops.registry import OpDef, OpKind, TensorType, get_op

OP_TYPE = "LayerNormMatMulFusionOp"
RMS_OP_TYPE = "RmsNormMatMulFusionOp"
NORM_OPS = {OP_TYPE: "LayerNormalization", RMS_OP_TYPE: "RMSNormalization"}   # fused op -> its norm
NORM_ATTRS = ("axis", "epsilon", "stash_type")


def _ln_attrs(attrs: dict) -> dict:
    out = {"axis": int(attrs.get("axis", -1)), "epsilon": float(attrs.get("epsilon", 1e-5))}
    if "stash_type" in attrs:
        out["stash_type"] = int(attrs["stash_type"])
    return out


def _gemm_attrs(attrs: dict) -> dict:
    """The GEMM's epilogue attributes (checked): a MatMulBias kernel's, residual after the activation."""
    epilogue.activation_of(attrs, OP_TYPE)
    return {"residual_after_act": 1, **attrs}


def _gemm_inputs(normalized, inputs):
    rest = list(inputs[3:6]) + [None] * (6 - len(inputs))
    return [normalized, rest[0], rest[1], rest[2]]


def _norm_inputs(inputs) -> list:
    x, gamma, beta = inputs[0], inputs[1], inputs[2] if len(inputs) > 2 else None
    return [x, gamma] + ([beta] if beta is not None else [])


def _compute(norm: str):
    def compute(inputs, attrs):
        normalized = get_op(norm).compute(_norm_inputs(inputs), _ln_attrs(attrs))[0]
        y = gemm_compute(_gemm_inputs(normalized, inputs), _gemm_attrs(attrs))[0]
        return [y, normalized] if int(attrs.get("emit_normalized", 0)) else [y]
    return compute


def _infer(inputs, attrs):
    x = inputs[0]
    y = gemm_infer(_gemm_inputs(x, inputs), attrs)[0]
    normalized = TensorType(np.dtype(x.dtype), tuple(x.shape))
    return [y, normalized] if int(attrs.get("emit_normalized", 0)) else [y]


def _work(norm: str):
    def work(inputs, outputs, attrs):
        """Norm vector work + GEMM and epilogue; on chip: the normalized tensor the GEMM
        reads from the buffer, plus the epilogue's intermediates."""
        x = inputs[0]
        normalized = TensorType(np.dtype(x.dtype), tuple(x.shape))
        ln = kernel_of(norm).work(_norm_inputs(inputs), [normalized], _ln_attrs(attrs))
        gemm = gemm_work(_gemm_inputs(normalized, inputs), outputs[:1], _gemm_attrs(attrs), a_onchip=True)
        total = ln + gemm
        total.onchip_bytes = normalized.nbytes + gemm.onchip_bytes
        return total
    return work


for _op_type, _norm in NORM_OPS.items():
    register(OpDef(op_type=_op_type, kind=OpKind.OUT_EWISE_FUSABLE, compute=_compute(_norm), infer=_infer),
             _work(_norm))
