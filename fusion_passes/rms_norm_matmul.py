"""RmsNormMatMul: an RMSNormalization whose output feeds a GEMM -> RmsNormMatMulFusionOp.

LayerNormMatMul's pattern, checks and decisions (fusion_passes/layer_norm_matmul.py) with an
RMS norm first: the GEMM is a MatMul with a constant 2-D weight or a fused MatMulBias* /
gated GEMM kernel (bias, activation, gate and residual come along); with several GEMM
readers (a decoder's Q/K/V projections, or the gate and up projections before
GatedMlpFusionPass packs them) the first is fused and the kernel also writes the normalized
rows once for the others.  Before the norm reaches a GEMM it may feed the attention kernel,
which takes the Q/K/V projections itself; the norm then stays one RmsNorm kernel.
"""
from __future__ import annotations

from codegen.fused.layer_norm import RMS_OP_TYPE
from fusion_passes.layer_norm_matmul import LayerNormMatMulFusionPass


class RmsNormMatMulFusionPass(LayerNormMatMulFusionPass):
    pattern_name = "RmsNormMatMul"
    pass_name = "RmsNormMatMulFusionPass"
    fused_ops = (RMS_OP_TYPE,)
    anchor_types = ("RMSNormalization",)
