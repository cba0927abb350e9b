"""GELU, erf form: x * 0.5 * (1 + erf(x / sqrt2)) -> Gelu(x).

Both torch exporters write nn.GELU() this way below opset 20 (TorchScript with Div by
1.4142135, dynamo likewise; transformers' GELUActivation too), with the 0.5 anywhere in the
product.  Anchored on the Erf, the one node the form is sure to have.
"""
from __future__ import annotations

import math

from fusion_passes.canonical.idioms import become, close, half_product, is_reciprocal_of, other, sole
from fusion_passes.canonical.rewrite import Rewrite

SQRT2 = math.sqrt(2.0)


class GeluErf(Rewrite):
    name = "GeluErf"
    anchor_types = ("Erf",)

    def apply(self, graph, erf):
        scale = erf.inputs[0].producer
        if scale is None or scale.op_type not in ("Div", "Mul"):
            return False
        for x in scale.inputs:
            if x is None or x.is_const or not is_reciprocal_of(scale, x, SQRT2):
                continue
            add = sole(erf.outputs[0], "Add")
            if add is None or not close(other(add, erf.outputs[0]), 1.0):
                return False
            product = half_product(x, add.outputs[0])
            if product is None:
                return False
            out, halving = product
            return become(graph, "Gelu", x, {}, out, [scale, erf, add] + halving)
        return False
