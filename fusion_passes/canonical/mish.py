"""Mish: x * tanh(softplus(x)) -> Mish(x) (ONNX opset 18).

The TorchScript exporter writes F.mish as Softplus, Tanh, Mul (dynamo emits the Mish op
itself).  Anchored on the Softplus.
"""
from __future__ import annotations

from fusion_passes.canonical.idioms import become, other, sole
from fusion_passes.canonical.rewrite import Rewrite


class Mish(Rewrite):
    name = "Mish"
    anchor_types = ("Softplus",)

    def apply(self, graph, softplus):
        x = softplus.inputs[0]
        tanh = sole(softplus.outputs[0], "Tanh")
        mul = sole(tanh.outputs[0], "Mul") if tanh is not None else None
        if mul is None or other(mul, tanh.outputs[0]) is not x:
            return False
        return become(graph, "Mish", x, {}, mul.outputs[0], [softplus, tanh, mul])
