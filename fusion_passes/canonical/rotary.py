"""Rotary position embedding recognised: `x*cos + rotate_half(x)*sin` -> RotaryEmbedding.

transformers (Llama, Qwen2, Mistral, GPT-NeoX, Phi, ...) apply RoPE to Q and K as
    x * cos + cat(-x[..., h:], x[..., :h]) * sin          (h = half the rotated features)
and with a partial rotary factor (GPT-NeoX, Phi) on the first R features only:
    cat(rope(x[..., :R]), x[..., R:])
both exporters write that as Slice/Neg/Concat/Mul/Add, 7 to 10 kernels per tensor.  It becomes
one RotaryEmbedding node (ONNX opset 23, ge/ops/rotary.py) with cos/sin caches [B|1, S, R/2],
which the attention pass takes into its kernel, or which runs as one kernel.

Recognised when x is [B, H, S, D] (heads before the sequence), cos and sin are constants
that do not vary over the heads, and their two halves are equal (transformers builds them
as cat(freqs, freqs)); anything else stays as the exporter wrote it.
"""
from __future__ import annotations

from typing import Optional

import numpy as np

from fusion_passes.canonical.rewrite import Rewrite, add_node, replace_value
from ge.ir import Graph, Node, Value


def _last_axis_slice(node: Optional[Node], source: Value) -> Optional[tuple]:
    """(start, stop) when `node` is Slice(source) on the last axis only, step 1."""
    if node is None or node.op_type != "Slice" or node.inputs[0] is not source:
        return None
    rank = len(source.desc.shape)
    axes = [int(a) % rank for a in (node.attrs.get("axes") or range(len(node.attrs.get("starts", []))))]
    steps = [int(s) for s in (node.attrs.get("steps") or [1] * len(axes))]
    if axes != [rank - 1] or steps != [1]:
        return None
    start, stop, _ = slice(int(node.attrs["starts"][0]), int(node.attrs["ends"][0])).indices(source.desc.shape[-1])
    return start, stop


def _mul_by_const(node: Optional[Node]) -> Optional[tuple]:
    """(variable, constant) of a Mul with one constant operand."""
    if node is None or node.op_type != "Mul":
        return None
    a, b = node.inputs
    if b.is_const and not a.is_const:
        return a, b
    if a.is_const and not b.is_const:
        return b, a
    return None


def _rotate_half_of(value: Value) -> Optional[Value]:
    """x when `value` = Concat(Neg(x[..., h:]), x[..., :h]) on the last axis."""
    cat = value.producer
    if cat is None or cat.op_type != "Concat" or len(cat.inputs) != 2:
        return None
    rank = len(value.desc.shape)
    if int(cat.attrs.get("axis", 0)) % rank != rank - 1:
        return None
    neg, low = cat.inputs[0].producer, cat.inputs[1].producer
    if neg is None or neg.op_type != "Neg" or low is None or neg.inputs[0].producer is None:
        return None
    high = neg.inputs[0].producer
    x = low.inputs[0] if low.op_type == "Slice" else None
    if x is None:
        return None
    d = x.desc.shape[-1]
    if d % 2 or _last_axis_slice(low, x) != (0, d // 2) or _last_axis_slice(high, x) != (d // 2, d):
        return None
    return x


def half_cache(table: np.ndarray, shape: tuple) -> Optional[np.ndarray]:
    """The [B|1, S, D/2] cache of a cos/sin constant broadcasting to x's [B, H, S, D], or None
    when it varies over the heads or its halves differ."""
    try:
        full = np.broadcast_to(table, (max(table.shape[0] if table.ndim == 4 else 1, 1),) + tuple(shape[1:]))
    except ValueError:
        return None
    if table.ndim > 4 or (table.ndim == 4 and table.shape[0] not in (1, shape[0])):
        return None
    if not np.all(full == full[:, :1]):
        return None
    per_row = full[:, 0]                                            # [B|1, S, D]
    half = shape[-1] // 2
    if not np.array_equal(per_row[..., :half], per_row[..., half:]):
        return None
    return np.ascontiguousarray(per_row[..., :half])


def match_rope(add: Node):
    """(x, cos cache, sin cache, nodes) when `add` computes x*cos + rotate_half(x)*sin."""
    if len(add.inputs) != 2:
        return None
    for first, second in ((0, 1), (1, 0)):
        plain, rotated = _mul_by_const(add.inputs[first].producer), _mul_by_const(add.inputs[second].producer)
        if plain is None or rotated is None:
            continue
        x, cos = plain
        x_rot = _rotate_half_of(rotated[0])
        if x_rot is not x or len(x.desc.shape) != 4:
            continue
        shape = tuple(x.desc.shape)
        cos_c, sin_c = half_cache(cos.const, shape), half_cache(rotated[1].const, shape)
        if cos_c is None or sin_c is None or cos_c.shape != sin_c.shape:
            continue
        cat = rotated[0].producer
        nodes = [add, add.inputs[first].producer, add.inputs[second].producer, cat,
                 cat.inputs[0].producer, cat.inputs[0].producer.inputs[0].producer, cat.inputs[1].producer]
        return x, cos_c, sin_c, nodes
    return None


class RotaryEmbedding(Rewrite):
    name = "RotaryEmbedding"
    anchor_types = ("Add",)

    def apply(self, graph: Graph, add: Node) -> bool:
        found = match_rope(add)
        if found is None:
            return False
        x, cos_c, sin_c, nodes = found
        dtype = x.desc.dtype
        rot = x.desc.shape[-1]
        target, source = add.outputs[0], x
        partial = _last_axis_slice(x.producer, x.producer.inputs[0]) if x.producer is not None else None
        if partial == (0, rot):
            full = x.producer.inputs[0]
            cat = next((u for u in target.consumers if u.op_type == "Concat" and len(u.inputs) == 2
                        and u.inputs[0] is target
                        and _last_axis_slice(u.inputs[1].producer, full) == (rot, full.desc.shape[-1])), None)
            if cat is not None:
                nodes += [x.producer, cat, cat.inputs[1].producer]
                target, source = cat.outputs[0], full
        cos = graph.constant(f"{add.name}/cos_cache", cos_c.astype(dtype))
        sin = graph.constant(f"{add.name}/sin_cache", sin_c.astype(dtype))
        attrs = {"interleaved": 0, "rotary_embedding_dim": int(rot) if source is not x else 0}
        node = add_node(graph, "RotaryEmbedding", [source, cos, sin], attrs, f"{add.name}/RotaryEmbedding", nodes)
        replace_value(graph, target, node.outputs[0])
        return True
