"""QuantMatMulBiasAct: an int8 GEMM with a constant weight and its epilogue ->
QuantMatMulBiasActFusionOp.

Pattern (anchor: MatMul or Gemm whose data is DequantizeLinear(int8) or int8, QLinearMatMul,
QGemm), the weight a constant int8 [K, N] (Gemm's transB applied at compile time):
    DQ(x_q) -> MatMul|Gemm(DQ(W_q), DQ(b_q)) -> [act] -> [Add(residual)] -> [QuantizeLinear ...]
    x_q -> Gemm(W_q, b_q int32) -> AscendDequant -> ... -> [AscendQuant]           (AMCT)
    QLinearMatMul | QGemm -> [QLinearAdd]                                        (QOperator)
The same plan and kernel as QuantConvBNReLU (fusion_passes/quant_chain.py), with a GEMM on
the cube.  Products of two activations (attention's Q.K^T and P.V) are not int8-weight
GEMMs: they are misses here (NF2002) and stay as their own kernels.
Misses: weight not a constant int8 tensor (NF2002), Gemm transA = 1 or alpha/beta != 1
(NF2003), per-axis data or weights per the reduction axis (NF2006), an int8 GEMM whose int32
result does not feed one AscendDequant (NF2006).
"""
from __future__ import annotations

from codegen.fused.quant_cube import QUANT_MATMUL
from fusion_passes.base import FusionPass
from fusion_passes.quant_chain import QuantMatch, match_plan, rewrite_plan
from ge.ir import Graph, Node


class QuantMatMulBiasActFusionPass(FusionPass):
    pattern_name = "QuantMatMulBiasAct"
    pass_name = "QuantMatMulBiasActFusionPass"
    fused_ops = (QUANT_MATMUL,)
    anchor_types = ("MatMul", "Gemm", "QLinearMatMul", "QGemm")

    def match(self, graph: Graph, mm: Node):
        return match_plan(self, mm, False, QUANT_MATMUL)

    def rewrite(self, graph: Graph, match: QuantMatch) -> Node:
        return rewrite_plan(graph, match, self.pass_name)
