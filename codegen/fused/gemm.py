"""MatMulBias*FusionOp: one GEMM whose epilogue adds the bias, applies an activation and
adds a residual while the result tile is still on chip.

Why one module for many op types: they differ only in the activation of the epilogue, and
the disable list switches them off one by one, so each activation is its own op type
(`fused_op_type`: MatMulBiasFusionOp, MatMulBiasReluFusionOp, MatMulBiasGeluFusionOp,
MatMulBiasFastGeluFusionOp for GELU's tanh form, MatMulBiasSwishFusionOp for SiLU and
QuickGelu, ... one per canonical activation of codegen/fused/epilogue.py), and the gated
linear units of decoder MLPs (epilogue ``gate``: MatMulBiasSwiGluFusionOp,
MatMulBiasGeGluFusionOp, MatMulBiasFastGeGluFusionOp, MatMulBiasReGluFusionOp,
MatMulBiasGluFusionOp for Sigmoid; epilogue.GLU_NAMES).

Input slots (SLOTS): x [..., K] (rows are every leading axis), w [K, N] (constant; the pass
has already applied Gemm's transB/alpha; gated: [K, 2N], the gate's columns then the up
projection's), bias [N] (optional; gated: [2N]), residual [..., N] (optional).
Attributes: the epilogue's (codegen/fused/epilogue.py): ``activation`` and its ``act_*``
(Netron's relu_flag for Relu); absent, the op type says which (FastGelu: Gelu's tanh form).
``residual_after_act`` defaults to 1 here: bias -> activation -> residual, the transformer's
residual branch.  Numerics: the epilogue's float16 rule.
"""
from __future__ import annotations

from dataclasses import replace

import numpy as np

from codegen.fused import epilogue
from codegen.fused.slots import Slots
from codegen.onnx_ops.nn import matmul_gemm
from codegen.registry import register
from codegen.work import Work
from ge.errors import InvalidNode
from ge.ops.nn import matmul_shape
from ge.ops.registry import OpDef, OpKind, TensorType


def activation_name(attrs: dict) -> str:
    """The activation as the op type names it: "" (none), FastGelu for GELU's tanh form, else
    the activation op type."""
    act = epilogue.activation_of(attrs)
    if act is None:
        return ""
    op_type, op_attrs = act
    approx = op_attrs.get("approximate", "none")
    approx = approx.decode() if isinstance(approx, bytes) else approx
    return "FastGelu" if op_type == "Gelu" and approx == "tanh" else op_type


def epilogue_name(attrs: dict) -> str:
    """What the op type calls the epilogue: the activation's name, or its gated unit's."""
    name = activation_name(attrs)
    return epilogue.GLU_NAMES.get(name, f"{name}Glu") if epilogue.gated(attrs) else name


# op type name -> the epilogue attributes it stands for


def fused_op_type(attrs: dict) -> str:
    return f"MatMulBias{epilogue_name(attrs)}FusionOp"


# op type name -> the epilogue attributes it stands for
_BY_NAME = {"": {"activation": ""}}
_BY_NAME.update({name: {"activation": name} for name in epilogue.ACTIVATIONS})
_BY_NAME["FastGelu"] = {"activation": "Gelu", "act_approximate": "tanh"}
_BY_NAME.update({glu: dict(_BY_NAME[act], gate=1) for act, glu in epilogue.GLU_NAMES.items()})


def epilogue_attrs(op_type: str, attrs: dict) -> dict:
    """The epilogue attributes of a MatMulBias*FusionOp node: its own, or the activation (and
    gate) its op type names when it carries none; the residual after the activation unless
    it says not."""
    full = {"residual_after_act": 1, **attrs}
    if "activation" not in attrs:
        full.update(_BY_NAME.get(op_type[len("MatMulBias"):-len("FusionOp")], {}))
    if fused_op_type(full) != op_type:
        raise InvalidNode(f"{op_type} carries the activation of {fused_op_type(full)}",
                          "Recompile the model with this version of atc_py.")
    return full


MATMUL_BIAS_OPS = tuple(f"MatMulBias{name}FusionOp" for name in _BY_NAME)


SLOTS = Slots("x", "w", "bias", "residual", required=("x", "w"))


def gemm_compute(inputs, attrs: dict):
    """x @ W then the epilogue; also the GEMM half of LayerNormMatMulFusionOp."""
    s = SLOTS.read(inputs)
    x, w = s["x"], s["w"]
    ct = epilogue.accumulate_dtype(x.dtype)
    acc = np.asarray(np.matmul(x.astype(ct, copy=False), w.astype(ct, copy=False)))
    y = epilogue.apply(acc, attrs, s["bias"], s["residual"], x.dtype)
    return [y.astype(x.dtype, copy=False)]


def gemm_infer(inputs, attrs):
    x, w = inputs[0], inputs[1]
    if len(w.shape) != 2 or (epilogue.gated(attrs) and w.shape[1] % 2):
        raise InvalidNode(f"Fused GEMM weight must be 2-D (with an even width when gated), got {tuple(w.shape)}.",
                          "Recompile the model with this version of atc_py.")
    shape = matmul_shape(x.shape, w.shape)
    if epilogue.gated(attrs):
        shape = tuple(shape[:-1]) + (shape[-1] // 2,)
    return [TensorType(np.dtype(x.dtype), shape)]


def gemm_work(inputs, outputs, attrs: dict, a_onchip: bool = False):
    """Cube MACs of the product (x's leading axes are rows of one GEMM with the 2-D weight)
    and the epilogue (the bias is its own stage: MatMul + Add).  `a_onchip`: x is produced
    inside the kernel (LayerNormMatMul's prologue), not read from memory."""
    s, out = SLOTS.read(inputs), outputs[0]
    product = tuple(out.shape[:-1]) + (int(out.shape[-1]) * (2 if epilogue.gated(attrs) else 1),)   # gated: g|u
    cube = Work.of_gemms(replace(matmul_gemm(s["x"].shape, s["w"].shape, product), a_onchip=a_onchip))
    return cube + epilogue.work(out, attrs, bias=s["bias"] is not None, residual=s["residual"] is not None,
                                bias_is_a_stage=True)


def _register(op_type: str) -> None:
    register(OpDef(op_type=op_type, kind=OpKind.OUT_EWISE_FUSABLE,
                   infer=lambda inputs, attrs: gemm_infer(inputs, epilogue_attrs(op_type, attrs)),
                   compute=lambda inputs, attrs: gemm_compute(inputs, epilogue_attrs(op_type, attrs))),
             work=lambda inputs, outputs, attrs: gemm_work(inputs, outputs, epilogue_attrs(op_type, attrs)))


for _op_type in MATMUL_BIAS_OPS:
    _register(_op_type)
