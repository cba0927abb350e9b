"""Rotary position embedding recognised: `x*cos + rotate_half(x)*sin` -> RotaryEmbedding.

transformers (Llama, Qwen2, Mistral, GPT-NeoX, Phi, ...) apply RoPE to Q and K as
    x * cos + cat(-x[..., h:], x[..., :h]) * sin          (h = half the rotated features)
and with a partial rotary factor (GPT-NeoX, Phi) on the first R features only:
    cat(rope(x[..., :R]), x[..., R:])
and timm (EVA-02) rotates feature pairs, `x * cos + stack(-x[..., 1::2], x[..., ::2]) * sin`,
leaving its class token out: `cat(x[:, :, :1], rope(x[:, :, 1:]), dim=2)`.  Both exporters
write these as Slice/Neg/Concat/Mul/Add, 7 to 12 kernels per tensor.  Each becomes one
RotaryEmbedding node (ONNX opset 23, ge/ops/rotary.py; `interleaved` for the pair form) with
cos/sin caches [B|1, S, R/2] -- a token left out rotates by angle 0 (cos 1, sin 0) -- which
the attention pass takes into its kernel, or which runs as one kernel.

Recognised when x is [B, H, S, D] (heads before the sequence), cos and sin do not vary over
the heads, and the two entries of each rotated pair are equal (halves for rotate_half:
transformers builds them as cat(freqs, freqs); neighbours for the pair form); anything else
stays as the exporter wrote it.  The tables are constants (folded from the positions of a
static export), or -- a decoder exported with position_ids -- computed at run time; then the
halves are proved equal from the graph (`equal_halves`: elementwise ops over
Concat(freqs, freqs)) and the op reads the first half through one Slice the layers share.
"""
from __future__ import annotations

from typing import Optional

import numpy as np

from fusion_passes.canonical.rewrite import Rewrite, add_node, replace_value
from ge.ir import Graph, Node, Value


def _slice(node: Optional[Node], source: Value, axis: int = -1) -> Optional[tuple]:
    """(start, stop, step) when `node` is Slice(source) on `axis` only."""
    if node is None or node.op_type != "Slice" or node.inputs[0] is not source:
        return None
    rank = len(source.desc.shape)
    axes = [int(a) % rank for a in (node.attrs.get("axes") or range(len(node.attrs.get("starts", []))))]
    steps = [int(s) for s in (node.attrs.get("steps") or [1] * len(axes))]
    if axes != [axis % rank] or steps[0] < 1:
        return None
    return slice(int(node.attrs["starts"][0]), int(node.attrs["ends"][0]), steps[0]).indices(source.desc.shape[axis])


def _last_axis_slice(node: Optional[Node], source: Value) -> Optional[tuple]:
    """(start, stop) when `node` is Slice(source) on the last axis only, step 1."""
    found = _slice(node, source)
    return found[:2] if found is not None and found[2] == 1 else None


def _mul_operands(node: Optional[Node]) -> list:
    """The (variable, table) readings of a Mul: its constant operand is the table when it has
    one; with two computed operands, either may be."""
    if node is None or node.op_type != "Mul":
        return []
    a, b = node.inputs
    if a.is_const and b.is_const:
        return []
    if b.is_const or a.is_const:
        return [(a, b)] if b.is_const else [(b, a)]
    return [(a, b), (b, a)]


# Ops that keep "the two halves of every row are equal" of their input (a scalar constant
# operand aside): what transformers applies to cat(freqs, freqs) to get its cos/sin tables.
_ROW_PRESERVING = frozenset({"Cos", "Sin", "Neg", "Cast", "Identity", "Mul", "Div", "Add", "Sub"})


def equal_halves(value: Value) -> bool:
    """Proved: each row of `value` (its last axis) is [h, h] -- it is computed from
    Concat(f, f) on the last axis by elementwise ops (with one-element constants) and views
    that keep the last axis."""
    for _ in range(16):
        node = value.producer
        if node is None:
            return False
        if node.op_type == "Concat":
            rank = len(value.desc.shape)
            return (len(node.inputs) == 2 and node.inputs[0] is node.inputs[1]
                    and int(node.attrs.get("axis", 0)) % rank == rank - 1)
        if node.op_type == "Reshape":
            if node.inputs[0].desc.shape[-1] != value.desc.shape[-1]:
                return False
            value = node.inputs[0]
            continue
        if node.op_type not in _ROW_PRESERVING:
            return False
        variables = [v for v in node.inputs if v is not None and not v.is_const]
        constants = [v for v in node.inputs if v is not None and v.is_const]
        if len(variables) != 1 or any(c.const.size != 1 for c in constants) \
                or tuple(variables[0].desc.shape) != tuple(value.desc.shape):
            return False
        value = variables[0]
    return False


def _computed_table(table: Value, shape: tuple) -> bool:
    """A computed [B|1, 1, S, D] cos/sin table of x's [B, H, S, D] (the same for every head)
    whose two halves are proved equal."""
    t = tuple(table.desc.shape)
    return (len(t) == 4 and t[1] == 1 and t[2] == shape[2] and t[3] == shape[3]
            and (t[0] == 1 or t[0] == shape[0]) and table.desc.dtype is not None
            and np.dtype(table.desc.dtype).kind == "f" and equal_halves(table))


def half_table(graph: Graph, table: Value, origin: list) -> Value:
    """The [B|1, S, D/2] first half of a computed [B|1, 1, S, D] table: a view, then a Slice
    (shared by every rotation that reads the table)."""
    b, _, seq, d = table.desc.shape
    flat = next((u.outputs[0] for u, _ in table.uses if u.op_type == "Reshape"
                 and list(u.attrs.get("shape", [])) == [b, seq, d]), None)
    if flat is None:
        flat = add_node(graph, "Reshape", [table], {"shape": [b, seq, d], "allowzero": 0},
                        f"{table.name}/rows", origin).outputs[0]
    attrs = {"starts": [0], "ends": [d // 2], "axes": [2], "steps": [1]}
    half = next((u.outputs[0] for u, _ in flat.uses if u.op_type == "Slice" and u.attrs == attrs), None)
    if half is None:
        half = add_node(graph, "Slice", [flat], attrs, f"{table.name}/half", origin).outputs[0]
    return half


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


def _rotate_pairs_of(value: Value) -> Optional[Value]:
    """x when `value` = Reshape(Concat(Unsqueeze(-x[..., 1::2]), Unsqueeze(x[..., ::2]), -1)) to
    x's shape: timm's pair rotation (the Unsqueezes are Reshapes in canonical form)."""
    flat = value.producer
    if flat is None or flat.op_type != "Reshape":
        return None
    cat = flat.inputs[0].producer
    if cat is None or cat.op_type != "Concat" or len(cat.inputs) != 2 or cat.inputs[0].desc.shape[-1] != 1:
        return None
    if int(cat.attrs.get("axis", 0)) % len(cat.outputs[0].desc.shape) != len(cat.outputs[0].desc.shape) - 1:
        return None
    first, second = (v.producer for v in cat.inputs)
    if first is None or second is None or first.op_type != "Reshape" or second.op_type != "Reshape":
        return None
    neg, even = first.inputs[0].producer, second.inputs[0].producer
    if neg is None or neg.op_type != "Neg" or even is None or even.op_type != "Slice":
        return None
    x, odd = even.inputs[0], neg.inputs[0].producer
    d = x.desc.shape[-1]
    if tuple(value.desc.shape) != tuple(x.desc.shape) or d % 2 \
            or _slice(even, x) != (0, d, 2) or _slice(odd, x) != (1, d, 2):
        return None
    return x


def _pair_nodes(value: Value) -> list:
    flat = value.producer
    cat = flat.inputs[0].producer
    first, second = (v.producer for v in cat.inputs)
    neg = first.inputs[0].producer
    return [flat, cat, first, second, neg, neg.inputs[0].producer, second.inputs[0].producer]


def half_cache(table: np.ndarray, shape: tuple, interleaved: bool = False) -> Optional[np.ndarray]:
    """The [B|1, S, D/2] cache of a cos/sin constant broadcasting to x's [B, H, S, D], or None
    when it varies over the heads or the two entries of a rotated pair differ."""
    try:
        full = np.broadcast_to(table, (max(table.shape[0] if table.ndim == 4 else 1, 1),) + tuple(shape[1:]))
    except ValueError:
        return None
    if table.ndim > 4 or (table.ndim == 4 and table.shape[0] not in (1, shape[0])):
        return None
    if not np.all(full == full[:, :1]):
        return None
    per_row = full[:, 0]                                            # [B|1, S, D]
    if interleaved:
        first, second = per_row[..., 0::2], per_row[..., 1::2]
    else:
        half = shape[-1] // 2
        first, second = per_row[..., :half], per_row[..., half:]
    if not np.array_equal(first, second):
        return None
    return np.ascontiguousarray(first)


def match_rope(add: Node):
    """(x, cos cache, sin cache, interleaved, nodes) when `add` computes x*cos + rot(x)*sin,
    rot being rotate_half or the pair rotation.  The caches are [B|1, S, R/2] arrays for
    constant tables, or the computed [B|1, 1, S, R] table values (a decoder's, from its
    position ids) when their halves are proved equal (see `half_table`)."""
    if len(add.inputs) != 2:
        return None
    for first, second in ((0, 1), (1, 0)):
        plain_node, rotated_node = add.inputs[first].producer, add.inputs[second].producer
        for x, cos in _mul_operands(plain_node):
            for rotated, sin in _mul_operands(rotated_node):
                interleaved = _rotate_half_of(rotated) is not x
                if (_rotate_pairs_of(rotated) if interleaved else x) is not x or len(x.desc.shape) != 4:
                    continue
                shape = tuple(x.desc.shape)
                if cos.is_const and sin.is_const:
                    cos_c, sin_c = half_cache(cos.const, shape, interleaved), half_cache(sin.const, shape, interleaved)
                    if cos_c is None or sin_c is None or cos_c.shape != sin_c.shape:
                        continue
                elif interleaved or cos.is_const or sin.is_const or \
                        not (_computed_table(cos, shape) and _computed_table(sin, shape)) or \
                        tuple(cos.desc.shape) != tuple(sin.desc.shape):
                    continue
                else:
                    cos_c, sin_c = cos, sin
                nodes = [add, plain_node, rotated_node]
                if interleaved:
                    nodes += _pair_nodes(rotated)
                else:
                    cat = rotated.producer
                    nodes += [cat, cat.inputs[0].producer, cat.inputs[0].producer.inputs[0].producer,
                              cat.inputs[1].producer]
                return x, cos_c, sin_c, interleaved, nodes
    return None


class RotaryEmbedding(Rewrite):
    name = "RotaryEmbedding"
    anchor_types = ("Add",)

    def apply(self, graph: Graph, add: Node) -> bool:
        found = match_rope(add)
        if found is None:
            return False
        x, cos_c, sin_c, interleaved, nodes = found
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
        if isinstance(cos_c, Value):               # computed tables: their first halves
            if np.dtype(cos_c.desc.dtype) != np.dtype(dtype):
                return False
            cos, sin = half_table(graph, cos_c, [cos_c.producer]), half_table(graph, sin_c, [sin_c.producer])
        else:
            cos = graph.constant(f"{add.name}/cos_cache", cos_c.astype(dtype))
            sin = graph.constant(f"{add.name}/sin_cache", sin_c.astype(dtype))
        attrs = {"interleaved": int(interleaved), "rotary_embedding_dim": int(rot) if source is not x else 0}
        node = add_node(graph, "RotaryEmbedding", [source, cos, sin], attrs, f"{add.name}/RotaryEmbedding", nodes)
        replace_value(graph, target, node.outputs[0])
        return True


class RotaryPrefix(Rewrite):
    """`cat(x[:, :, :p], RotaryEmbedding(x[:, :, p:]), dim=2)` -> RotaryEmbedding(x): the
    first p tokens (EVA-02's class token) rotate by angle 0, cos 1 and sin 0."""

    name = "RotaryPrefix"
    anchor_types = ("Concat",)

    def apply(self, graph: Graph, cat: Node) -> bool:
        out = cat.outputs[0]
        if len(cat.inputs) != 2 or len(out.desc.shape) != 4 or int(cat.attrs.get("axis", 0)) % 4 != 2:
            return False
        head, rope = cat.inputs[0].producer, cat.inputs[1].producer
        if head is None or rope is None or rope.op_type != "RotaryEmbedding" or len(rope.inputs) != 3:
            return False
        tail = rope.inputs[0].producer
        x = head.inputs[0] if head.op_type == "Slice" else None
        seq = out.desc.shape[2]
        if x is None or tail is None or _slice(head, x, 2) is None or _slice(tail, x, 2) is None:
            return False
        (p0, p1, s0), (t0, t1, s1) = _slice(head, x, 2), _slice(tail, x, 2)
        if (p0, s0, s1, t0, t1) != (0, 1, 1, p1, seq) or tuple(x.desc.shape) != tuple(out.desc.shape):
            return False
        cos, sin = rope.inputs[1].const, rope.inputs[2].const
        if cos is None or sin is None:
            return False
        pad = (cos.shape[0], p1, cos.shape[2])
        cos = np.concatenate([np.ones(pad, cos.dtype), cos], axis=1)
        sin = np.concatenate([np.zeros(pad, sin.dtype), sin], axis=1)
        node = add_node(graph, "RotaryEmbedding",
                        [x, graph.constant(f"{rope.name}/cos_cache", cos), graph.constant(f"{rope.name}/sin_cache", sin)],
                        dict(rope.attrs), f"{rope.name}/whole", [cat, head, tail, rope])
        replace_value(graph, out, node.outputs[0])
        return True
