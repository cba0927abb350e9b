"""Swish: x * sigmoid(alpha * x) -> Swish(x, alpha) (ONNX opset 24).

One op for SiLU (alpha 1: nn.SiLU, EfficientNet, YOLO, the gated MLPs of LLMs) and
QuickGelu (alpha 1.702: CLIP), which both exporters write as Sigmoid and Mul (QuickGelu with
a Mul by 1.702 first), the operands of the last Mul in either order.  Anchored on the Sigmoid.
"""
from __future__ import annotations

from fusion_passes.base import scalar_const
from fusion_passes.canonical.idioms import become, other, sole
from fusion_passes.canonical.rewrite import Rewrite


class Swish(Rewrite):
    name = "Swish"
    anchor_types = ("Sigmoid",)

    def apply(self, graph, sigmoid):
        t = sigmoid.inputs[0]
        mul = sole(sigmoid.outputs[0], "Mul")
        x = other(mul, sigmoid.outputs[0])
        if x is None:
            return False
        if x is t:
            return become(graph, "Swish", x, {}, mul.outputs[0], [sigmoid, mul])
        scale = t.producer
        alpha = scalar_const(other(scale, x)) if scale is not None and scale.op_type == "Mul" else None
        if alpha is None:
            return False
        return become(graph, "Swish", x, {"alpha": alpha}, mul.outputs[0], [scale, sigmoid, mul])
