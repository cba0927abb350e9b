"""Clip: Min/Max with a constant bound -> Clip, and two bounds in a row -> one Clip.

ReLU6 and hardtanh are Clip(0, 6) / Clip(lo, hi) from both exporters, but hand-written
clamps arrive as Max(x, lo) and Min(x, hi) (torch.clamp with tensor bounds, TF-converted
graphs), and Relu then Min(6) is ReLU6 too.  One Clip is what the conv and GEMM epilogues
take.  Anchored on Min, Max and Clip: a bound becomes a Clip, and a Clip (or Relu) reading
a Clip merges into one.
"""
from __future__ import annotations

import numpy as np

from fusion_passes.base import scalar_const
from fusion_passes.canonical.idioms import is_float, same_type
from fusion_passes.canonical.rewrite import Rewrite, add_node, replace_value


def _bounds(node):
    """(lo, hi) of a Clip with constant bounds, Relu's (0, None), or None."""
    if node.op_type == "Relu":
        return 0.0, None
    if node.op_type != "Clip" or len([v for v in node.inputs if v is not None]) != 1:
        return None
    lo, hi = node.attrs.get("min"), node.attrs.get("max")
    return (None if lo is None else float(np.asarray(lo).reshape(()))), \
           (None if hi is None else float(np.asarray(hi).reshape(())))


class Clip(Rewrite):
    name = "Clip"
    anchor_types = ("Min", "Max", "Clip")

    def apply(self, graph, node):
        out = node.outputs[0]
        if node.op_type in ("Min", "Max"):
            if len(node.inputs) != 2:
                return False
            x, bound = (node.inputs[0], node.inputs[1]) if node.inputs[1].is_const else (node.inputs[1], node.inputs[0])
            value = scalar_const(bound)
            if value is None or x.is_const or not is_float(x) or not same_type(x, out):
                return False
            lo, hi = (value, None) if node.op_type == "Max" else (None, value)
            inner, sources = x, [node]
        else:
            bounds = _bounds(node)
            inner_node = node.inputs[0].producer
            inner_bounds = _bounds(inner_node) if inner_node is not None else None
            if bounds is None or inner_bounds is None or len(node.inputs[0].uses) != 1 \
                    or node.inputs[0].is_graph_output:
                return False
            tight = _tighter(inner_bounds, bounds)
            if tight is None:
                return False
            lo, hi = tight
            inner, sources = inner_node.inputs[0], [inner_node, node]
        attrs = {k: v for k, v in (("min", lo), ("max", hi)) if v is not None}     # as the importer writes them
        new = add_node(graph, "Clip", [inner], attrs, f"{node.name}/Clip", sources, before=node)
        replace_value(graph, out, new.outputs[0])
        return True


def _tighter(first, second):
    """Bounds of clip(clip(x, first), second): the higher low and the lower high -- or None
    when the ranges do not meet (then the result is a constant the merge would get wrong)."""
    lo = max((b for b in (first[0], second[0]) if b is not None), default=None)
    hi = min((b for b in (first[1], second[1]) if b is not None), default=None)
    for a, b in ((first[0], second[1]), (second[0], first[1]), (first[0], first[1]), (second[0], second[1])):
        if a is not None and b is not None and a > b:
            return None
    return lo, hi
