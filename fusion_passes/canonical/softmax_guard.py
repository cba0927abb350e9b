"""No-op guards after Softmax dropped -- when proved to be no-ops.

PyTorch's SDPA decomposition writes `Where(IsNaN(p), 0, p)` after the Softmax p: a row whose
scores are all -inf (every key masked with -inf) gives NaN, which the guard turns into zeros.
The guard changes nothing when no Softmax row can be NaN, which holds when the Softmax input
is finite.  `finite` proves that from the graph: the scores are products of activations,
scaled by finite constants, plus masks whose every value is a finite constant or a choice
(Where) between finite constants -- transformers' masks use the dtype's lowest finite value,
so their guards go; TorchScript's SDPA mask uses -inf, whose guard stays (the attention
kernel then applies it, MultiHeadAttentionFusionOp's nan_guard).

What "finite" assumes: the activations themselves are finite (a NaN input is not made
finite by the guard either: it reaches the output through the other rows) and the scores
stay below the float range once a mask is added (|scores| < 1e31 in float32).  Sums of
two masks are bounded by interval arithmetic (two finfo.min masks overflow: not proved).
"""
from __future__ import annotations

from typing import Optional, Union

import numpy as np

from fusion_passes.canonical.rewrite import Rewrite, bypass
from fusion_passes.layout import is_view
from ge.ir import Graph, Node, Value

ACTIVATION = "activation"           # a finite, unbounded activation
MAX_DEPTH = 16
_ACTIVATION_OPS = frozenset({"MatMul", "Gather", "Softmax", "LayerNormalization"})


def finite(value: Value, depth: int = 0) -> Union[tuple, str, None]:
    """(lo, hi) for a value built from finite constants, ACTIVATION for an activation plus
    finite terms, None when finiteness is not proved."""
    if depth > MAX_DEPTH:
        return None
    if value.is_const:
        c = value.const
        if c.dtype == np.bool_:
            return (0.0, 1.0)
        if c.size == 0 or not np.all(np.isfinite(c)):
            return None
        return (float(np.min(c)), float(np.max(c)))
    node = value.producer
    if node is None:
        return ACTIVATION if np.dtype(value.desc.dtype).kind in "fiub" else None
    op = node.op_type
    if is_view(node) or op == "Cast":
        return finite(node.inputs[0], depth + 1)
    if op in _ACTIVATION_OPS:
        return ACTIVATION
    if op in ("Add", "Sub"):
        a, b = finite(node.inputs[0], depth + 1), finite(node.inputs[1], depth + 1)
        if a is None or b is None:
            return None
        if a == ACTIVATION or b == ACTIVATION:
            bound = [t for t in (a, b) if t != ACTIVATION]
            return ACTIVATION if all(_in_range(t, value) for t in bound) else None
        lo, hi = (a[0] + b[0], a[1] + b[1]) if op == "Add" else (a[0] - b[1], a[1] - b[0])
        return (lo, hi) if _in_range((lo, hi), value) else None
    if op in ("Mul", "Div") and len(node.inputs) == 2:
        consts = [v for v in node.inputs if v.is_const and v.const.size == 1]
        if not consts or (op == "Div" and not node.inputs[1].is_const):
            return None
        c = float(consts[0].const.reshape(()))
        if op == "Div":
            if c == 0.0:
                return None
            c = 1.0 / c
        other = node.inputs[0] if node.inputs[1] is consts[0] else node.inputs[1]
        t = finite(other, depth + 1)
        if t is None or t == ACTIVATION:
            return t
        lo, hi = sorted((t[0] * c, t[1] * c))
        return (lo, hi) if _in_range((lo, hi), value) else None
    if op == "Where":
        a, b = finite(node.inputs[1], depth + 1), finite(node.inputs[2], depth + 1)
        if a is None or b is None:
            return None
        if a == ACTIVATION or b == ACTIVATION:
            return ACTIVATION
        return (min(a[0], b[0]), max(a[1], b[1]))
    return None


def _in_range(bound: tuple, value: Value) -> bool:
    dtype = np.dtype(value.desc.dtype)
    if dtype.kind != "f":
        return True
    top = float(np.finfo(dtype).max)
    return -top <= bound[0] and bound[1] <= top


def nan_guard(softmax: Node) -> Optional[Node]:
    """The `Where(IsNaN(p), 0, p)` reading Softmax output p, if any."""
    p = softmax.outputs[0]
    for isnan in p.consumers:
        if isnan.op_type != "IsNaN" or len(isnan.outputs[0].uses) != 1 or isnan.outputs[0].is_graph_output:
            continue
        where = isnan.outputs[0].uses[0][0]
        if (where.op_type == "Where" and where.inputs[0] is isnan.outputs[0] and where.inputs[2] is p
                and where.inputs[1].is_const and not np.any(where.inputs[1].const)
                and tuple(where.outputs[0].desc.shape) == tuple(p.desc.shape)):
            return where
    return None


class SoftmaxNanGuard(Rewrite):
    name = "SoftmaxNanGuard"
    anchor_types = ("Softmax",)

    def apply(self, graph: Graph, softmax: Node) -> bool:
        where = nan_guard(softmax)
        if where is None or finite(softmax.inputs[0]) is None:
            return False
        return bypass(graph, where, softmax.outputs[0], [where.inputs[0].producer])
