"""Slices that cut one tensor into consecutive pieces along one axis are one Split.

torch's ``x.chunk(2, dim=1)`` (ShuffleNetV2's stride-1 unit) is one Split in a dynamo export
and two Slices in a TorchScript one: two copy kernels where one does.  When every Slice
reading a feature map (rank >= 3; constant bounds, step 1) cuts its channel axis (1) and
their ranges tile it exactly -- no gap, no overlap, in any order -- they are the Split of the
channels into those sizes, and each Slice's output is the Split's output of its range.
Other axes keep their Slices: the rotary idiom's rotate_half halves the last axis by two
Slices, and RotaryEmbedding (rotary.py) matches it by them.  Anchored on the Slice; last in
the stage's list, so the idioms read by their Slices are rewritten first.
"""
from __future__ import annotations

from typing import Optional

import numpy as np

from fusion_passes.canonical.rewrite import Rewrite, add_node, replace_value


def _range(node, rank: int, shape) -> Optional[tuple]:
    """(axis, begin, stop) of a constant step-1 Slice that cuts exactly one axis, else None."""
    if len([v for v in node.inputs if v is not None]) != 1:
        return None                                  # bounds still run-time inputs
    starts, ends = node.attrs.get("starts"), node.attrs.get("ends")
    if starts is None or ends is None or len(starts) != len(ends):
        return None
    axes = node.attrs.get("axes")
    axes = [int(a) % rank for a in axes] if axes is not None and len(axes) else list(range(len(starts)))
    steps = node.attrs.get("steps")
    if steps is not None and len(steps) and any(int(s) != 1 for s in steps):
        return None
    cut = None
    for axis, start, end in zip(axes, starts, ends):
        dim = int(shape[axis])
        begin = max(0, min(dim, int(start) + dim if int(start) < 0 else int(start)))
        stop = max(0, min(dim, int(end) + dim if int(end) < 0 else int(end)))
        if (begin, stop) == (0, dim):
            continue
        if cut is not None or stop <= begin:
            return None                              # two cut axes, or an empty piece
        cut = (axis, begin, stop)
    return cut


class SlicesAsSplit(Rewrite):
    name = "SlicesAsSplit"
    anchor_types = ("Slice",)

    def apply(self, graph, node):
        data = node.inputs[0]
        if data is None or any(not isinstance(d, (int, np.integer)) for d in data.desc.shape):
            return False
        shape, rank = tuple(data.desc.shape), len(data.desc.shape)
        slices = [u for u, i in data.uses if u.op_type == "Slice" and i == 0]
        if len(slices) < 2 or len({id(s) for s in slices}) != len(slices):
            return False
        cuts = [_range(s, rank, shape) for s in slices]
        if any(c is None for c in cuts) or len({c[0] for c in cuts}) != 1:
            return False
        axis = cuts[0][0]
        if axis != 1 or rank < 3:
            return False                             # not the channels of a feature map
        pieces = sorted(zip(cuts, slices), key=lambda p: p[0][1])
        edge = 0
        for (_, begin, stop), _ in pieces:
            if begin != edge:
                return False                         # a gap or an overlap: not a split
            edge = stop
        if edge != shape[axis]:
            return False
        ordered = [s for _, s in pieces]
        position = {id(n): i for i, n in enumerate(graph.nodes)}
        first = min(ordered, key=lambda s: position[id(s)])
        split = add_node(graph, "Split", [data], {"axis": axis, "split": [stop - begin for (_, begin, stop), _ in pieces]},
                         f"{first.name}/split", ordered, before=first, n_outputs=len(ordered))
        for piece, out in zip(ordered, split.outputs):
            replace_value(graph, piece.outputs[0], out)
        return True
