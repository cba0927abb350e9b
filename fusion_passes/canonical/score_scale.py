"""Split Q/K scales merged into one score scale.

PyTorch's SDPA decomposition (both exporters, transformers' default `sdpa` attention, timm,
nn.MultiheadAttention) scales Q and K each by sqrt(scale) before Q.K^T, for fp16 range; the
eager forms scale the scores once.  Scalars commute with the views and the product, so
`(a*Q) . (b*K)^T = (a*b) * (Q . K^T)`: the two scalings are dropped and one Mul of the
scores takes their product (merged with a scalar Mul/Div already on the scores).  Only
products of two computed tensors that feed a Softmax are touched (attention scores).

The move serves the attention fusion, whose kernel computes the scores in float32.  Where no
attention kernel takes the block, Q.K^T unscaled can overflow float16 where the scaled
operands did not (|Q|,|K| ~ 60 over 64 dims: 230k > 65504, scaled by 64^-1/4 each: 29k), so
`ScoreScaleRestorePass` runs right after the attention passes and puts each factor back on
the operand it came from.
"""
from __future__ import annotations

from typing import Optional

import numpy as np

from fusion_passes.base import scalar_const
from fusion_passes.canonical.rewrite import Rewrite, add_node, can_bypass, replace_value
from fusion_passes.layout import is_view
from ge.ir import Graph, Node, Value
from ge.passes.contract import CANONICAL, TYPED, GraphPass, PassResult
from ge.passes.dead_code import remove_dead_nodes

MARK = "score_scale"        # provenance of the scores' Mul: what each operand was scaled by

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
        operand_scales = [operand_scale(v) for v in mm.inputs]
        scales = [s for s in operand_scales if s is not None]
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
        merged = existing is not None and _keeps_shape(after)
        if merged:
            factor *= existing
            origin.append(after)
        const = graph.constant(f"{mm.name}/scale", np.asarray(factor, dtype=scores.desc.dtype))
        mul = add_node(graph, "Mul", [scores, const], {}, f"{mm.name}/scale", origin)
        mul.provenance[MARK] = (tuple(_undo(s) for s in operand_scales),
                                (existing, list(after.origin)) if merged else None)
        if merged:
            replace_value(graph, after.outputs[0], mul.outputs[0])
        else:
            for user, i in [u for u in scores.uses if u[0] is not mul]:
                user.set_input(i, mul.outputs[0])
        return True


def _undo(scale) -> Optional[tuple]:
    """(op type, constant, origin) that re-applies one operand's scale, or None."""
    if scale is None:
        return None
    node, _ = scale
    const = node.inputs[1] if node.inputs[0] is _variable(node) else node.inputs[0]
    return node.op_type, np.asarray(const.const).reshape(()), list(node.origin)


def restore_operand_scales(graph: Graph, mul: Node) -> bool:
    """Undo ScoreScale on one block no attention kernel took: each operand of Q.K^T is
    scaled again as the exporter scaled it (a scalar Mul/Div commutes with the views in
    between, so right above the product is as good), and the scores keep only the scale that
    was on them, if any."""
    mark = mul.provenance.pop(MARK, None)
    if mark is None or mul.graph is not graph:
        return False
    undo, after = mark
    scores = mul.inputs[0]
    mm = scores.producer
    if mm is None or mm.op_type != "MatMul" or len(scores.uses) != 1:
        return False
    for index, item in enumerate(undo):
        if item is None:
            continue
        op_type, const, origin = item
        operand = mm.inputs[index]
        value = graph.constant(f"{mm.name}/operand_scale", const.astype(operand.desc.dtype))
        scaled = add_node(graph, op_type, [operand, value], {}, f"{mm.name}/operand_scale", [], before=mm)
        scaled.provenance["origin"] = origin
        mm.set_input(index, scaled.outputs[0])
    if after is None and can_bypass(mul.outputs[0], scores):
        replace_value(graph, mul.outputs[0], scores)
        return True
    factor, origin = after if after is not None else (1.0, [])
    mul.set_input(1, graph.constant(f"{mm.name}/scale", np.asarray(factor, dtype=scores.desc.dtype)))
    mul.provenance["origin"] = origin or mul.origin      # the scores' own scale, no longer Q's and K's
    return True


class ScoreScaleRestorePass(GraphPass):
    """After the attention passes: every ScoreScale move whose block they did not take is
    undone (see the module docstring).  Not a fusion pass: not switchable, not reported."""

    name = pass_name = "ScoreScaleRestorePass"
    requires = frozenset({TYPED, CANONICAL})

    def __init__(self, switches=None):
        pass

    def run(self, graph: Graph) -> PassResult:
        result = PassResult(self.name)
        for node in [n for n in graph.nodes if n.op_type == "Mul" and MARK in n.provenance]:
            result.changes += restore_operand_scales(graph, node)
        if result.changes:
            while remove_dead_nodes(graph):
                pass
        return result
