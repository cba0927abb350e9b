"""HardSwish: x * hard_sigmoid(x) -> HardSwish(x).

Forms: Mul(x, HardSigmoid(x; alpha 1/6, beta 0.5)) (torchvision's SE-free blocks written by
hand, and what the HardSigmoid rewrite leaves of ``x * relu6(x + 3) / 6`` grouped that way)
and (x * relu6(x + 3)) / 6, the Div after the product.  Anchored on the HardSigmoid or Clip.
"""
from __future__ import annotations

from fusion_passes.canonical.hard_sigmoid import relu6_of_shift
from fusion_passes.canonical.idioms import become, is_reciprocal_of, other, sole
from fusion_passes.canonical.rewrite import Rewrite


class HardSwish(Rewrite):
    name = "HardSwish"
    anchor_types = ("HardSigmoid", "Clip")

    def apply(self, graph, node):
        mul = sole(node.outputs[0], "Mul")
        if node.op_type == "HardSigmoid":
            x = node.inputs[0]
            standard = close_attr(node, "alpha", 1.0 / 6.0, 0.2) and close_attr(node, "beta", 0.5, 0.5)
            if not standard or mul is None or other(mul, node.outputs[0]) is not x:
                return False
            return become(graph, "HardSwish", x, {}, mul.outputs[0], [node, mul])
        x = relu6_of_shift(node)
        if x is None or mul is None or other(mul, node.outputs[0]) is not x:
            return False
        div = sole(mul.outputs[0], "Div", "Mul")
        if div is None or not is_reciprocal_of(div, mul.outputs[0], 6.0):
            return False
        return become(graph, "HardSwish", x, {}, div.outputs[0], [node.inputs[0].producer, node, mul, div])


def close_attr(node, name: str, target: float, default: float) -> bool:
    value = float(node.attrs.get(name, default))
    return abs(value - target) <= 1e-6 * abs(target)
