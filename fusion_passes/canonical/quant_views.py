"""Quantized views: DequantizeLinear -> views -> QuantizeLinear with the same scale and zero
point is the same views on the int8 tensor.

Why: onnxruntime's quantize_static wraps every op in Q/DQ, data movement included, so BERT's
head split (Reshape, Transpose) reads as int8 -> float -> view -> int8 -> float.  Left so,
each view is a float kernel between two quantize kernels and the int8 GEMMs before and after
never meet an int8 operand.  A Gather is a view too (of rows its indices pick): an embedding
lookup reads the int8 table, which stays int8.  Moved onto the int8 tensor, the view moves a quarter of the
bytes, the Q/DQ pair around it disappears, and the int8 GEMM that writes the tensor and the
one that reads it see each other.

Exact: for an integer q with |q - zp| <= 65535, float32 rounding of (q - zp) * s and of its
division by s errs by far less than half a unit, so Q(DQ(q)) = q; a view only moves
elements.  Only per-tensor, unblocked Q/DQ with identical parameters and output type."""
from __future__ import annotations

from typing import Optional

import numpy as np

from fusion_passes.canonical.rewrite import Rewrite, add_node, replace_value
from ge.ir import Graph, Node, Value

VIEWS = ("Reshape", "Transpose", "Squeeze", "Unsqueeze", "Flatten", "Identity", "Gather")
RUNTIME_INDICES = ("Gather",)       # views whose other input (the indices) may be computed


def _param(node: Node, name: str) -> Optional[np.ndarray]:
    value = node.attrs.get(name)
    return None if value is None else np.asarray(value)


def same_quantization(dq: Node, q: Node) -> bool:
    """Whether `dq` and `q` use one quantization: per-tensor, unblocked, the same scale and
    zero point, the same integer type (then Q(DQ(q)) = q)."""
    if int(dq.attrs.get("block_size", 0) or 0) or int(q.attrs.get("block_size", 0) or 0):
        return False
    ds, qs = _param(dq, "x_scale"), _param(q, "y_scale")
    dz, qz = _param(dq, "x_zero_point"), _param(q, "y_zero_point")
    if ds is None or qs is None or ds.size != 1 or qs.size != 1 or ds.dtype != qs.dtype or ds.item() != qs.item():
        return False
    dz = np.zeros((), np.uint8) if dz is None else dz       # ONNX's default zero point: uint8 0
    qz = np.zeros((), np.uint8) if qz is None else qz
    if dz.size != 1 or qz.size != 1 or dz.item() != qz.item():
        return False
    return np.dtype(dq.inputs[0].desc.dtype) == np.dtype(q.outputs[0].desc.dtype)


def _view_chain(value: Value) -> Optional[tuple]:
    """(DequantizeLinear, [views from it to `value`]) when `value` is views of a DQ output."""
    chain = []
    node = value.producer
    while node is not None and node.op_type in VIEWS:
        if node.op_type not in RUNTIME_INDICES and any(v is not None and not v.is_const for v in node.inputs[1:]):
            return None                    # a shape or axes computed at run time
        chain.append(node)
        node = node.inputs[0].producer if node.inputs[0] is not None else None
    if not chain or node is None or node.op_type != "DequantizeLinear":
        return None
    return node, chain[::-1]


class QuantizedView(Rewrite):
    name = "QuantizedView"
    anchor_types = ("QuantizeLinear",)

    def apply(self, graph: Graph, node: Node) -> bool:
        found = _view_chain(node.inputs[0])
        if found is None:
            return False
        dq, views = found
        if not same_quantization(dq, node):
            return False
        current = dq.inputs[0]
        for view in views:
            moved = add_node(graph, view.op_type, [current] + list(view.inputs[1:]), dict(view.attrs),
                             f"{view.name}/int8", [dq, view, node], before=node)
            current = moved.outputs[0]
        replace_value(graph, node.outputs[0], current)
        return True
