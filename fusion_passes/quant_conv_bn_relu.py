"""QuantConvBNReLU: an int8 convolution and its epilogue -> QuantConvBNReluFusionOp.

Pattern (anchor: Conv whose data is DequantizeLinear(int8) or int8 itself, or QLinearConv):
    DQ(x_q) -> Conv(DQ(W_q), DQ(b_q)) -> [BatchNormalization] -> [act] -> [Add(residual)]
            -> [QuantizeLinear [-> DequantizeLinear -> Add(DQ(r_q)) | act -> ...] ]
    x_q -> Conv(W_q int8, b_q int32) -> AscendDequant -> ... -> [AscendQuant]      (AMCT)
    QLinearConv -> [QLinearAdd]                                                  (QOperator)
The kernel convolves int8 x int8 into int32, dequantizes with x_scale * w_scale per channel
(BatchNorm folded into that scale and a float bias), and runs the rest of the chain on chip
(fusion_passes/quant_chain.py walks it; codegen/fused/quant_cube.py runs it), so a
ResNet block's conv, bias, ReLU, residual add and requantize are one launch reading and
writing int8.  A float Conv (no quantized input) is not a candidate: ConvBNReLU takes it.
Misses: weight not DequantizeLinear of a constant int8 tensor (NF2002), data quantized per
axis or weights per another axis than the output channel (NF2006), an int8 Conv whose
int32 result does not feed one AscendDequant (NF2006), non-constant bias (NF2002).
"""
from __future__ import annotations

from codegen.fused.quant_cube import QUANT_CONV
from fusion_passes.base import FusionPass
from fusion_passes.quant_chain import QuantMatch, match_plan, rewrite_plan
from ge.ir import Graph, Node


class QuantConvBNReluFusionPass(FusionPass):
    pattern_name = "QuantConvBNReLU"
    pass_name = "QuantConvBNReluFusionPass"
    fused_ops = (QUANT_CONV,)
    anchor_types = ("Conv", "QLinearConv")

    def match(self, graph: Graph, conv: Node):
        return match_plan(self, conv, True, QUANT_CONV)

    def rewrite(self, graph: Graph, match: QuantMatch) -> Node:
        return rewrite_plan(graph, match, self.pass_name)
