"""ConvBNReLU: Conv [+ BatchNormalization] [+ residual Add] [+ activation] [+ stores] ->
ConvBNReluFusionOp, for plain convs (group 1, dilation 1).

GE's own constraint, as the seed's report documents ("dilation != 1, group != 1 cannot be
fused"): a depthwise, grouped or dilated conv block is a miss here (NF2003), and its own pass
(DepthwiseConvBNRelu, GroupConvBNRelu, DilatedConvBNRelu, run right after) fuses it.  The
walk, the checks and the rewrite are the conv block's (fusion_passes/conv_block.py).
"""
from __future__ import annotations

from fusion_passes.conv_block import PLAIN, ConvBlockPass


class ConvBNReluFusionPass(ConvBlockPass):
    pattern_name = "ConvBNReLU"
    pass_name = "ConvBNReluFusionPass"
    fused_ops = ("ConvBNReluFusionOp",)
    variant = PLAIN
