"""A NaN guard on a dequantized integer tensor dropped: it can never fire.

PyTorch's SDPA decomposition writes `Where(IsNaN(p), 0, p)` after the Softmax p.  In a
quantize_static QDQ graph p is requantized first (Softmax -> Q -> DQ -> IsNaN/Where -> Q ->
DQ -> P.V), so the guard reads DequantizeLinear(p_int8): `(p_int8 - zero_point) * scale`
with a finite per-tensor scale is finite for every integer value, IsNaN is all false, and
the Where returns its input.  Dropping it leaves the Q -> DQ rounding points the int8
attention kernel takes (fusion_passes/quant_attention.py; before, its NF2001 miss: "every
score value must feed one op on the way to P.V").  A float8 input, a non-finite scale or a
graph-output IsNaN keep the guard.
"""
from __future__ import annotations

import numpy as np

from fusion_passes.canonical.rewrite import Rewrite, bypass
from ge.ir import Graph, Node, Value


def dequantized_integer(value: Value) -> bool:
    """`value` is DequantizeLinear of an integer tensor with finite scales and zero points."""
    dq = value.producer
    if dq is None or dq.op_type != "DequantizeLinear" or np.dtype(dq.inputs[0].desc.dtype).kind not in "iu":
        return False
    scale, zero = dq.attrs.get("x_scale"), dq.attrs.get("x_zero_point")
    return scale is not None and bool(np.all(np.isfinite(np.asarray(scale, np.float64)))) and \
        (zero is None or np.asarray(zero).dtype.kind in "iu")


class DequantizedNanGuard(Rewrite):
    name = "DequantizedNanGuard"
    anchor_types = ("Where",)

    def apply(self, graph: Graph, where: Node) -> bool:
        if len(where.inputs) != 3 or any(v is None for v in where.inputs):
            return False
        cond, fill, x = where.inputs
        isnan = cond.producer
        if isnan is None or isnan.op_type != "IsNaN" or isnan.inputs[0] is not x or len(cond.uses) != 1 \
                or cond.is_graph_output or not fill.is_const:
            return False
        out = where.outputs[0]
        if tuple(out.desc.shape) != tuple(x.desc.shape) or np.dtype(out.desc.dtype) != np.dtype(x.desc.dtype):
            return False
        if not dequantized_integer(x):
            return False
        return bypass(graph, where, x, [isnan])
