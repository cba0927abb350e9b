"""GroupConvBNReLU: a grouped conv block (1 < group < input channels: ResNeXt, RegNet) ->
GroupConvBNReluFusionOp.

GE leaves these out of ConvBNReluFusionPass; here they fuse under their own pass and op name
with the conv block's walk, checks and kernel (fusion_passes/conv_block.py).
"""
from __future__ import annotations

from fusion_passes.conv_block import GROUPED, ConvBlockPass


class GroupConvBNReluFusionPass(ConvBlockPass):
    pattern_name = "GroupConvBNReLU"
    pass_name = "GroupConvBNReluFusionPass"
    fused_ops = ("GroupConvBNReluFusionOp",)
    variant = GROUPED
