"""GELU, tanh form: 0.5 * x * (1 + tanh(sqrt(2/pi) * (x + 0.044715 * x^3))) -> Gelu(x,
approximate="tanh") (FastGelu).

GPT-2's and transformers' NewGELUActivation, nn.GELU(approximate="tanh"): x^3 as Pow(x, 3)
(dynamo) or x*x*x (TorchScript), the 0.5 anywhere in the outer product.  Anchored on the Tanh.
"""
from __future__ import annotations

import math

from fusion_passes.canonical.idioms import become, close, one_plus_half_product, other
from fusion_passes.canonical.rewrite import Rewrite

TANH_GELU_SCALE = math.sqrt(2.0 / math.pi)
TANH_GELU_CUBIC = 0.044715


def _cube_of(value):
    """(x, nodes) if `value` is x^3 as Pow(x, 3) or Mul(Mul(x, x), x), else None."""
    node = value.producer
    if node is None:
        return None
    if node.op_type == "Pow" and close(node.inputs[1], 3.0):
        return node.inputs[0], [node]
    if node.op_type == "Mul":
        for square, x in ((node.inputs[0], node.inputs[1]), (node.inputs[1], node.inputs[0])):
            inner = square.producer
            if inner is not None and inner.op_type == "Mul" and inner.inputs[0] is x and inner.inputs[1] is x:
                return x, [inner, node]
    return None


class GeluTanh(Rewrite):
    name = "GeluTanh"
    anchor_types = ("Tanh",)

    def apply(self, graph, tanh):
        mul = tanh.inputs[0].producer
        if mul is None or mul.op_type != "Mul":
            return False
        inner = next((v for v in mul.inputs if close(other(mul, v), TANH_GELU_SCALE)), None)
        add = inner.producer if inner is not None else None
        if add is None or add.op_type != "Add":
            return False
        for scaled, x in ((add.inputs[0], add.inputs[1]), (add.inputs[1], add.inputs[0])):
            smul = scaled.producer
            if smul is None or smul.op_type != "Mul":
                continue
            cube = next((v for v in smul.inputs if close(other(smul, v), TANH_GELU_CUBIC)), None)
            found = _cube_of(cube) if cube is not None else None
            if found is None or found[0] is not x:
                continue
            outer = one_plus_half_product(x, tanh)
            return outer is not None and become(graph, "Gelu", x, {"approximate": "tanh"}, outer[0],
                                                found[1] + [smul, add, mul, tanh] + outer[1])
        return False
