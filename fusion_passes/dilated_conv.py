"""DilatedConvBNReLU: a dilated (atrous) conv block with group 1 (FCN's and DeepLab's
backbones and ASPP) -> DilatedConvBNReluFusionOp.

GE leaves these out of ConvBNReluFusionPass; here they fuse under their own pass and op name
with the conv block's walk, checks and kernel (fusion_passes/conv_block.py).  A dilated
depthwise conv is DepthwiseConvBNReLU's.
"""
from __future__ import annotations

from fusion_passes.conv_block import DILATED, ConvBlockPass


class DilatedConvBNReluFusionPass(ConvBlockPass):
    pattern_name = "DilatedConvBNReLU"
    pass_name = "DilatedConvBNReluFusionPass"
    fused_ops = ("DilatedConvBNReluFusionOp",)
    variant = DILATED
