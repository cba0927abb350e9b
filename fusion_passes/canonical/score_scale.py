"""Split Q/K scales merged into one score scale.

PyTorch's SDPA decomposition (both exporters, transformers' default `sdpa` attention, timm,
nn.MultiheadAttention) scales Q and K each by sqrt(scale) before Q.K^T, for fp16 range; the
eager forms scale the scores once.  Scalars commute with the views and the product, so
`(a*Q) . (b*K)^T = (a*b) * (Q . K^T)`: the two scalings are dropped and one Mul of the
scores takes their product (merged with a scalar Mul/Div already on the scores).  Only
products of two computed tensors that feed a Softmax are touched (attention scores).
"""
from __future__ import annotations

from typing import Optional

import numpy as np

from fusion_passes.base import scalar_const
from fusion_passes.canonical.rewrite import Rewrite, add_node, can_bypass, replace_value
from fusion_passes.layout import is_view
from ge.ir import Graph, Node, Value

SOFTMAX_DISTANCE = 8        # nodes between Q.K^T and its Softmax (scale, biases, masks, views)


def scalar_factor(node: Optional[Node], value: Value) -> Optional[float]:
    """f when `node` computes value * f (Mul by a one-element constant, either order, or
    Div by one), else None."""
    if node is None or len(node.inputs) != 2:
        return None
    if node.op_type == "Mul":
        other = node.inputs[1] if node.inputs[0] is value else node.inputs[0]
        c = scalar_const(other)
        return c if c is not None and other is not value else None
    if node.op_type == "Div" and node.inputs[0] is value:
        c = scalar_const(node.inputs[1])
        return 1.0 / c if c not in (None, 0.0) else None
    return None


def _keeps_shape(node: Node) -> bool:
    """A scalar that broadcasts the operand up (a [1,1,1,1] constant on a 3-D tensor) is not
    a scale but a view change; keep those."""
    return tuple(node.outputs[0].desc.shape) == tuple(_variable(node).desc.shape)


def _variable(node: Node) -> Value:
    return node.inputs[0] if not node.inputs[0].is_const else node.inputs[1]


def feeds_softmax(value: Value, depth: int = SOFTMAX_DISTANCE) -> bool:
    frontier = [value]
    for _ in range(depth):
        frontier = [u.outputs[0] for v in frontier for u in v.consumers if u.outputs]
        if any(v.producer.op_type == "Softmax" for v in frontier):
            return True
    return False


def operand_scale(value: Value):
    """(scale node, factor) of a single-use scalar scale on the way up from a Q.K^T operand
    through single-use views, or None."""
    while True:
        node = value.producer
        if node is None or len(value.uses) != 1 or value.is_graph_output:
            return None
        if node.op_type in ("Mul", "Div"):
            factor = scalar_factor(node, _variable(node))
            return (node, factor) if factor is not None and _keeps_shape(node) else None
        if not is_view(node):
            return None
        value = node.inputs[0]


class ScoreScale(Rewrite):
    name = "ScoreScale"
    anchor_types = ("MatMul",)

    def apply(self, graph: Graph, mm: Node) -> bool:
        if len(mm.inputs) != 2 or any(v is None or v.is_const for v in mm.inputs):
            return False
        scales = [s for s in (operand_scale(mm.inputs[0]), operand_scale(mm.inputs[1])) if s is not None]
        scores = mm.outputs[0]
        if not scales or scores.is_graph_output or not feeds_softmax(scores):
            return False
        if not all(can_bypass(node.outputs[0], _variable(node)) for node, _ in scales):
            return False
        factor, origin = 1.0, [node for node, _ in scales]
        for node, f in scales:
            factor *= f
            replace_value(graph, node.outputs[0], _variable(node))
        after = scores.uses[0][0] if len(scores.uses) == 1 else None
        existing = scalar_factor(after, scores) if after is not None else None
        if existing is not None and _keeps_shape(after):
            factor *= existing
            origin.append(after)
        const = graph.constant(f"{mm.name}/scale", np.asarray(factor, dtype=scores.desc.dtype))
        mul = add_node(graph, "Mul", [scores, const], {}, f"{mm.name}/scale", origin)
        if existing is not None and _keeps_shape(after):
            replace_value(graph, after.outputs[0], mul.outputs[0])
        else:
            for user, i in [u for u in scores.uses if u[0] is not mul]:
                user.set_input(i, mul.outputs[0])
        return True
