"""DepthwiseConvBNReLU: a depthwise conv block (group = input channels: MobileNet, EfficientNet,
MNASNet, ShuffleNet, ConvNeXt) -> DepthwiseConvBNReluFusionOp.

GE leaves these out of ConvBNReluFusionPass; here they fuse under their own pass and op name
so the report tells them apart, with the same walk, checks and kernel as a plain conv block
(fusion_passes/conv_block.py, codegen/fused/conv.py).  Dilated depthwise convs (DeepLab's
MobileNetV3 backbone) are depthwise here.
"""
from __future__ import annotations

from fusion_passes.conv_block import DEPTHWISE, ConvBlockPass


class DepthwiseConvBNReluFusionPass(ConvBlockPass):
    pattern_name = "DepthwiseConvBNReLU"
    pass_name = "DepthwiseConvBNReluFusionPass"
    fused_ops = ("DepthwiseConvBNReluFusionOp",)
    variant = DEPTHWISE
