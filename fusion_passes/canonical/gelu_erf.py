"""GELU, erf form: x * 0.5 * (1 + erf(x / sqrt2)) -> Gelu(x).

Both torch exporters write nn.GELU() this way below opset 20 (TorchScript with Div by
1.4142135, dynamo likewise; transformers' GELUActivation too), with the 0.5 anywhere in the
product.  Anchored on the Erf, the one node the form is sure to have.
"""
from __future__ import annotations

import math

from fusion_passes.canonical.idioms import become, is_reciprocal_of, one_plus_half_product
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
            outer = one_plus_half_product(x, erf)
            return outer is not None and become(graph, "Gelu", x, {}, outer[0], [scale, erf] + outer[1])
        return False
