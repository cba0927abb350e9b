"""MHA fusion: softmax(Q.K^T * scale + bias) . V, its projections and head views ->
one MultiHeadAttentionFusionOp (codegen/fused/attention.py).

Found by what it computes, whatever the views around it (fusion_passes/attention_patterns.py):
anchored on the Softmax, the scores are walked up to Q.K^T (scalar scales, additive
bias/mask terms, a Where mask), each of Q, K^T and V is read through its views (and an
optional RotaryEmbedding; scalar scales on Q and K, which join the kernel's score scale) as
heads of a linear projection, and the P.V output is read
down through the merge views.  So eager and SDPA exports of both torch exporters, 4-D
[B,H,S,D] and 3-D [B*H,S,D] head layouts, packed or separate QKV, heads selected by Split,
Gather or Squeeze, self- and cross-attention, grouped- and multi-query attention (KV heads
repeated by Expand/Tile views, not copied by the kernel), relative position biases and
masks (kernel inputs), rotary embeddings (in the kernel) and merges in any view order land
on one kernel.  The head count, KV head count and head sizes come from the views.

Decisions: the kernel takes the three projections (their columns gathered per head, so a
packed or head-interleaved QKV weight becomes per-role weights); RoPE goes into the
kernel (bench/RESULTS.md "Rotary embedding: in the attention kernel" has the cost-model
comparison with a separate RotaryEmbedding kernel); the output projection is left to
MatMulBiasAct.

A Softmax is a candidate (counted in match_times) when a MatMul of two computed tensors
feeds it within a few nodes and its probabilities (after SDPA's NaN guard, if still
there) are the left operand of another such MatMul; any failed check after that is a Miss
with its NF code.
"""
from __future__ import annotations

from dataclasses import dataclass
from math import prod
from typing import Optional

import numpy as np

from codegen.fused.attention import OP_TYPE, SLOTS
from fusion_passes import reasons
from fusion_passes.attention_patterns import (ComputedProjection, Heads, ScoreChain, batch_index, find_qk,
                                              head_columns, kv_groups, merge_heads, probs_reader, read_heads,
                                              walk_scores)
from fusion_passes.base import FusionPass, Match, Reject, fuse
from fusion_passes.layout import more_than_one
from ge.ir import Graph, Node, TensorDesc, Value
from ge.symbolic import mod


class MultiHeadAttentionFusionPass(FusionPass):
    pattern_name = "MHA"
    pass_name = "MultiHeadAttentionFusionPass"
    fused_ops = (OP_TYPE,)
    anchor_types = ("Softmax",)

    def match(self, graph: Graph, softmax: Node):
        pv, between = probs_reader(softmax)
        if pv is None or find_qk(softmax.inputs[0]) is None:
            return None
        scores = walk_scores(softmax.inputs[0])
        qk = scores.qk
        shape = tuple(softmax.inputs[0].desc.shape)
        axis = int(softmax.attrs.get("axis", -1)) % len(shape)
        if axis != len(shape) - 1 or len(shape) < 3:
            raise Reject(reasons.UNSUPPORTED_ATTRIBUTE,
                         f"Softmax {softmax.name} axis={softmax.attrs.get('axis', -1)} over rank-{len(shape)} scores: "
                         "the kernel normalises the last (key) axis of [.., Sq, Skv] scores",
                         [qk, pv], [softmax.inputs[0]])
        q = read_heads(qk.inputs[0], "Q", -2, -1)
        k = read_heads(qk.inputs[1], "K", -1, -2)
        v = read_heads(pv.inputs[1], "V", -2, -1)
        plan = _plan(q, k, v, tuple(qk.outputs[0].desc.shape[:-2]), tuple(pv.outputs[0].desc.shape[:-2]))
        merge, out = merge_heads(pv, plan.batch, plan.heads, q.seq, v.dim)
        rope, rotate_k = _rope(q, k)
        core = [qk] + scores.nodes + [softmax] + between + [pv] + merge
        members, projected = _members(core, (q, k, v))
        for heads, cols, count in ((q, plan.q_cols, plan.heads), (k, plan.kv_cols_k, plan.kv_heads),
                                   (v, plan.kv_cols_v, plan.kv_heads)):
            if heads.head_major:
                x = heads.source
            else:
                if heads.role in projected and not np.array_equal(cols, cols[0] + np.arange(count) * heads.dim):
                    raise Reject(reasons.OTHER_CONSUMERS,
                                 f"{heads.role} projection {heads.linear.output.name} is also read outside the "
                                 "attention block, and its columns are not the kernel's heads in order (it cannot be "
                                 "a kernel input as it is)", heads.nodes, [heads.linear.output])
                x = heads.linear.output if heads.role in projected else heads.linear.x
                if prod(x.desc.shape[:-1]) != heads.batch * heads.seq:
                    raise Reject(reasons.SHAPE_MISMATCH,
                                 f"{heads.role} projection input {x.name} {list(x.desc.shape)} does not hold "
                                 f"[B, S] = [{heads.batch}, {heads.seq}] rows", [heads.linear.matmul], [x])
            if np.dtype(x.desc.dtype).kind != "f":
                raise Reject(reasons.DTYPE_MISMATCH, f"{heads.role} hidden states {x.name} are not a float type",
                             [heads.linear.matmul] if heads.linear is not None else heads.nodes, [x])
        for term, _, batch_shape in scores.terms:
            _term_shape(term, batch_shape, plan)
        if scores.where is not None:
            _term_shape(scores.where, scores.where_batch, plan)
        nodes = sorted(members, key=_position(graph))
        return AttentionMatch(nodes, OP_TYPE, [out], q=q, k=k, v=v, plan=plan, scores=scores,
                              nan_guard=any(n.op_type == "IsNaN" for n in between), rope=rope, rotate_k=rotate_k,
                              projected=projected)

    def rewrite(self, graph: Graph, match: "AttentionMatch") -> Node:
        plan, q, k, v, scores = match.plan, match.q, match.k, match.v, match.scores
        base = match.nodes[-1].name
        attrs = {"num_heads": plan.heads, "kv_heads": plan.kv_heads, "head_dim": q.dim, "v_head_dim": v.dim,
                 "scale": float(scores.scale * q.scale * k.scale), "mask_kind": "none", "nan_guard": int(match.nan_guard),
                 "rotary_dim": 0}
        slots, rows = {}, {}
        if k.head_major:
            attrs["kv_layout"] = "bhsd"
        for heads, cols in ((q, plan.q_cols), (k, plan.kv_cols_k), (v, plan.kv_cols_v)):
            r = heads.role.lower()
            if heads.head_major:                      # the cache as it is: [B, Hkv, T, D]
                slots[f"x_{r}"] = heads.source
                continue
            x = heads.linear.output if heads.role in match.projected else heads.linear.x
            if heads.role not in match.projected:
                slots[f"w_{r}"], slots[f"b_{r}"] = _weights(graph, heads.linear, cols, heads.dim, f"{base}/{r}")
            elif int(cols[0]) or heads.width != len(cols) * heads.dim:
                attrs[f"{r}_offset"] = int(cols[0])   # its heads are columns of a wider projection
            kernel_x = (heads.batch, heads.seq, x.desc.shape[-1])
            if tuple(x.desc.shape) != kernel_x:      # rows regrouped (windows): a view of x, once per tensor
                key = (id(x), kernel_x)
                if key not in rows:
                    rows[key] = graph.make_node("Reshape", [x], attrs={"shape": list(kernel_x), "allowzero": 0},
                                                name=graph.unique_name(f"{base}/{r}_rows"),
                                                descs=[TensorDesc(x.desc.dtype, kernel_x)]).outputs[0]
                x = rows[key]
            slots[f"x_{r}"] = x
        terms = [_score_input(graph, t, f, shape, plan, f"{base}/bias") for t, f, shape in scores.terms]
        if terms:
            slots["bias"] = terms[0]
        if len(terms) > 1:
            slots["mask"], attrs["mask_kind"] = terms[1], "add"
        if scores.where is not None:
            slots["mask"] = _score_input(graph, scores.where, 1.0, scores.where_batch, plan, f"{base}/mask")
            attrs.update(mask_kind="where", mask_value=float(scores.where_fill), mask_keep=int(scores.where_keep))
        if match.rope is not None:
            rope = match.rope
            slots.update(rope_cos=rope.inputs[1], rope_sin=rope.inputs[2])
            attrs.update(rotary_dim=int(rope.attrs.get("rotary_embedding_dim", 0)) or q.dim,
                         rotary_interleaved=int(rope.attrs.get("interleaved", 0)))
            if not match.rotate_k:
                attrs["rotary_k"] = 0
        out = match.outputs[0]
        merge_origin = out.producer.origin if out.producer is not None and out.producer.op_type != "MatMul" else []
        fused = fuse(graph, match.nodes, OP_TYPE, SLOTS.pack(**slots), match.outputs, attrs, self.pass_name)
        kernel_shape = (plan.batch, q.seq, plan.heads * v.dim)
        if tuple(out.desc.shape) != kernel_shape:
            _output_view(graph, fused, merge_origin, kernel_shape)
        return fused


def _members(core: list, roles) -> tuple:
    """The block's nodes and the roles whose projection stays outside it.

    Everything from the projections to the merge is fused, except what something outside
    the block reads: a role whose projection or head views are read elsewhere (DeBERTa's
    relative-position bias reads Q and K) keeps its projection as its own GEMM and the
    views the outside reads; the kernel reads the projection's output instead."""
    members = {id(n): n for n in core}
    for heads in roles:
        for n in _path(heads):
            members[id(n)] = n
    # an int8 GEMM's float output (AMCT) is a kernel input from the start
    projected: set = {h.role for h in roles if isinstance(h.linear, ComputedProjection)}

    def read_outside(node: Node) -> bool:
        return any(v.is_graph_output or any(id(u) not in members for u, _ in v.uses) for v in node.outputs)

    changed = True
    while changed:
        changed = False
        for heads in roles:
            path = _path(heads)
            if heads.head_major:
                outside = [n for n in path if read_outside(n)]
                if outside:
                    raise Reject(reasons.OTHER_CONSUMERS,
                                 f"{heads.role}: view {outside[0].name} of the KV cache {heads.source.name} is also "
                                 "read outside the attention block", outside, list(outside[0].outputs))
                continue
            if heads.role not in projected and any(id(n) in members and read_outside(n) for n in path):
                projected.add(heads.role)
                changed = True
            if heads.role in projected:
                for n in path:
                    if id(n) in members and (n in heads.linear.nodes or read_outside(n)):
                        del members[id(n)]
                        changed = True
    return list(members.values()), projected


def _path(heads: Heads) -> list:
    """The nodes from the projection (or the cache) to the operand."""
    return (heads.linear.nodes if heads.linear is not None else []) + heads.nodes


@dataclass
class Plan:
    """The heads of one attention block, as the kernel computes them."""

    batch: int
    heads: int
    kv_heads: int
    q_cols: np.ndarray         # first projection column of each query head
    kv_cols_k: np.ndarray      # ... of each KV head, in K's and V's projections
    kv_cols_v: np.ndarray


def _plan(q: Heads, k: Heads, v: Heads, scores_batch: tuple, context_batch: tuple) -> Plan:
    """Check Q, K and V agree on the (batch, head) each scores batch index computes (the
    P.V batch axes may regroup the scores' ones: the flat order is the same)."""
    if q.batch != k.batch or k.batch != v.batch:
        raise Reject(reasons.SHAPE_MISMATCH, f"Q, K and V projections have batch sizes {q.batch}, {k.batch}, "
                     f"{v.batch}", [], [])
    if k.seq != v.seq:
        raise Reject(reasons.SHAPE_MISMATCH, f"K reads {k.seq} positions but V {v.seq}", [], [])
    if q.dim != k.dim:
        raise Reject(reasons.SHAPE_MISMATCH, f"Q heads have {q.dim} features but K heads {k.dim}", [], [])
    total = prod(scores_batch) if scores_batch else 1
    if mod(total, q.batch) != 0:
        raise Reject(reasons.SHAPE_MISMATCH, f"scores batch {list(scores_batch)} is not batch {q.batch} x heads",
                     q.nodes, [])
    heads = total // q.batch
    q_cols = head_columns(q, batch_index(q.batch_shape, scores_batch), heads)
    k_cols = head_columns(k, batch_index(k.batch_shape, scores_batch), heads)
    v_cols = head_columns(v, batch_index(v.batch_shape, context_batch), heads)
    if len(set(q_cols.tolist())) != heads:
        raise Reject(reasons.UNSUPPORTED_VARIANT, f"Q: two heads read the same columns {q_cols.tolist()}",
                     q.nodes, [])
    kv_heads, group = kv_groups(k_cols, "K", k.nodes)
    kv_heads_v, group_v = kv_groups(v_cols, "V", v.nodes)
    if (kv_heads_v, group_v) != (kv_heads, group):
        raise Reject(reasons.UNSUPPORTED_VARIANT, f"K and V group the {heads} query heads differently "
                     f"({kv_heads} vs {kv_heads_v} KV heads)", k.nodes + v.nodes, [])
    for heads_of, cols, dim in ((q, q_cols, q.dim), (k, k_cols, k.dim), (v, v_cols, v.dim)):
        if np.any(cols + dim > heads_of.width):
            raise Reject(reasons.SHAPE_MISMATCH, f"{heads_of.role}: head columns run past the projection's "
                         f"{heads_of.width} outputs", heads_of.nodes, [])
    if k.head_major != v.head_major:
        cache, other = (k, v) if k.head_major else (v, k)
        raise Reject(reasons.UNSUPPORTED_VARIANT, f"{cache.role} reads the KV cache {cache.source.name} but "
                     f"{other.role} a projection; the kernel reads both from the cache or both from projections",
                     k.nodes + v.nodes, [cache.source])
    for heads_of, cols in ((k, k_cols[::group]), (v, v_cols[::group])):
        if heads_of.head_major and (kv_heads != heads_of.width // heads_of.dim
                                    or not np.array_equal(cols, np.arange(kv_heads) * heads_of.dim)):
            raise Reject(reasons.UNSUPPORTED_VARIANT,
                         f"{heads_of.role}: the query heads read KV heads {(cols // heads_of.dim).tolist()} of the "
                         f"cache {heads_of.source.name} {list(heads_of.source.desc.shape)}; the kernel reads every "
                         "cache head in order", heads_of.nodes, [heads_of.source])
    return Plan(q.batch, heads, kv_heads, q_cols, k_cols[::group], v_cols[::group])


def _rope(q: Heads, k: Heads) -> tuple:
    """(the RotaryEmbedding the kernel applies, whether it rotates K too): None for none; the
    one applied to both Q and K (the same tables); or Q's alone when K is read from a KV
    cache (its new heads were rotated before they were written to the cache, outside)."""
    if q.rope is None and k.rope is None:
        return None, False
    if k.head_major:
        rotated = (q,)
    elif q.rope is None or k.rope is None:
        only = "Q" if k.rope is None else "K"
        raise Reject(reasons.UNSUPPORTED_VARIANT, f"a rotary embedding rotates {only} only; the kernel rotates "
                     "both Q and K (or Q alone when K comes from a KV cache)", [q.rope or k.rope], [])
    else:
        rotated = (q, k)
        for attr in ("rotary_embedding_dim", "interleaved"):
            if q.rope.attrs.get(attr, 0) != k.rope.attrs.get(attr, 0):
                raise Reject(reasons.UNSUPPORTED_VARIANT, f"Q and K rotary embeddings differ in {attr}",
                             [q.rope, k.rope], [])
        same = all(a is b or (a.is_const and b.is_const and np.array_equal(a.const, b.const))
                   for a, b in zip(q.rope.inputs[1:3], k.rope.inputs[1:3]))
        if not same or len(k.rope.inputs) > 3:
            raise Reject(reasons.UNSUPPORTED_VARIANT, "Q and K are rotated with different (or position-indexed) "
                         "tables; the kernel takes one [B|1,S,R/2] cos/sin pair", [q.rope, k.rope], [])
    if len(q.rope.inputs) > 3:
        raise Reject(reasons.UNSUPPORTED_VARIANT, "Q is rotated with position-indexed tables; the kernel takes "
                     "[B|1,S,R/2] cos/sin tables", [q.rope], [])
    for heads in rotated:
        layout = heads.rope_layout
        width = heads.linear.width
        shape = layout.shape
        ok = len(shape) == 4 and layout.axis(3) == ((heads.dim, 1),) and shape[2] == heads.seq and \
            layout.axis(2) == (((heads.seq, width),) if more_than_one(heads.seq) else ()) and \
            (q.rope.inputs[1].desc.shape[0] == 1 or layout.axis(0) == ((heads.batch, heads.seq * width),))
        if not ok:
            raise Reject(reasons.UNSUPPORTED_VARIANT,
                         f"{heads.role}: the rotary embedding does not rotate [B, H, S, D] heads of the projection "
                         f"(it rotates {list(shape)})", [heads.rope], [heads.rope.inputs[0]])
    return q.rope, len(rotated) == 2


def _weights(graph: Graph, linear, cols: np.ndarray, dim: int, base: str):
    """The kernel's [K, heads*dim] weight and [heads*dim] bias: the projection's columns of
    each head in kernel order; the projection's own constants when that is all of them."""
    width = linear.width
    whole = len(cols) * dim == width and np.array_equal(cols, np.arange(len(cols)) * dim)
    if whole:
        weight = linear.weight
    else:
        index = (cols[:, None] + np.arange(dim)[None, :]).reshape(-1)
        weight = graph.constant(f"{base}/weight", np.ascontiguousarray(linear.weight.const[:, index]))
    vector = linear.bias_vector()
    if vector is None:
        return weight, None
    if whole and linear.bias.const.ndim == 1 and linear.bias.const.size == width:
        return weight, linear.bias
    index = (cols[:, None] + np.arange(dim)[None, :]).reshape(-1)
    return weight, graph.constant(f"{base}/bias", np.ascontiguousarray(vector[index]))


def _term_shape(term: Value, batch_shape: tuple, plan: Plan) -> tuple:
    """The [B|1, H|1, Sq|1, Skv|1] shape a bias/mask term of the [*batch_shape, Sq, Skv] scores
    takes as a kernel input (the flat batch index is batch-major, then head: `_plan`).
    Raises Reject when a computed term broadcasts over only part of the batch or the heads."""
    shape = tuple(term.desc.shape)
    rank = len(batch_shape) + 2
    if len(shape) > rank:
        raise Reject(reasons.SHAPE_MISMATCH, f"bias {term.name} {list(shape)} has more axes than the scores",
                     [], [term])
    padded = (1,) * (rank - len(shape)) + shape
    lead, matrix = padded[:-2], padded[-2:]
    if all(d == 1 for d in lead):
        return (1, 1) + matrix
    if tuple(lead) == tuple(batch_shape) or term.is_const:   # a constant varying over part is expanded
        split = _batch_split(batch_shape, plan)
        if split is None or tuple(lead) == tuple(batch_shape):
            return (plan.batch, plan.heads) + matrix
        return tuple(1 if all(d == 1 for d in lead[part]) else size
                     for part, size in ((slice(0, split), plan.batch), (slice(split, None), plan.heads))) + matrix
    split = _batch_split(batch_shape, plan)
    if split is not None and all(all(d == 1 for d in lead[part]) or tuple(lead[part]) == tuple(batch_shape[part])
                                 for part in (slice(0, split), slice(split, None))):
        return (plan.batch if lead[:split] != (1,) * split else 1,
                plan.heads if lead[split:] != (1,) * (len(lead) - split) else 1) + matrix
    raise Reject(reasons.UNSUPPORTED_VARIANT,
                 f"bias {term.name} {list(shape)} broadcasts over part of the scores' batch axes "
                 f"{list(batch_shape)}; the kernel takes [B|1, H|1, Sq, Skv]", [], [term])


def _batch_split(batch_shape: tuple, plan: Plan):
    """k such that batch_shape[:k] are the batch axes and batch_shape[k:] the heads, or None."""
    return next((k for k in range(len(batch_shape) + 1)
                 if prod(batch_shape[:k]) == plan.batch), None)


def _score_input(graph: Graph, term: Value, factor: float, batch_shape: tuple, plan: Plan, name: str) -> Value:
    """A bias/mask term as the kernel's input: scaled when it was added before a scale (a
    constant), reshaped (a view) or expanded (a constant) when the scores' batch axes are not
    [B, H] (`_term_shape`, checked at match time)."""
    target = _term_shape(term, batch_shape, plan)
    if term.is_const:
        array = term.const
        if factor != 1.0:
            array = (array.astype(np.float64) * factor).astype(array.dtype)
        rank = len(batch_shape) + 2
        full = np.broadcast_to(array.reshape((1,) * (rank - array.ndim) + array.shape),
                               tuple(batch_shape) + tuple(target[2:]) if array.ndim else array.shape)
        as_kernel = np.ascontiguousarray(full).reshape((plan.batch, plan.heads) + tuple(full.shape[-2:]))
        for axis in (0, 1):                 # keep axes the term does not vary along at size 1
            if target[axis] == 1:
                as_kernel = as_kernel[:1] if axis == 0 else as_kernel[:, :1]
        if as_kernel.shape == array.shape and factor == 1.0:
            return term
        return graph.constant(f"{name}/as_bhss", np.ascontiguousarray(as_kernel))
    if tuple(term.desc.shape) == target or len(batch_shape) == 2 and tuple(batch_shape) == (plan.batch, plan.heads):
        return term
    view = graph.make_node("Reshape", [term], attrs={"shape": list(target), "allowzero": 0},
                           name=graph.unique_name(f"{name}/as_bhss"),
                           descs=[TensorDesc(term.desc.dtype, target)])
    return view.outputs[0]


def _output_view(graph: Graph, fused: Node, origin: list, kernel_shape: tuple) -> Node:
    """The kernel writes [B,S,H*Dv]; a graph whose merge ends in another shape (GPT-2 dynamo's
    [B*S,H*D], a 3-D [S,B,..] view) reads it through a Reshape (a view: no kernel, no copy)
    that keeps the output value and its name.  The view stands for the exporter's last
    merge view (`origin`), not for the kernel."""
    out = fused.outputs[0]
    fused.provenance["origin"] = [o for o in fused.origin if o not in origin]
    merged = graph.new_value(f"{fused.name}:merged", TensorDesc(out.desc.dtype, kernel_shape))
    out.producer = None
    fused.outputs[0] = merged
    merged.producer, merged.index = fused, 0
    view = Node("Reshape", [merged], [out], {"shape": list(out.desc.shape), "allowzero": 0},
                name=graph.unique_name(f"{fused.name}/rows"), provenance={"origin": list(origin)})
    return graph.add_node(view)


@dataclass
class AttentionMatch(Match):
    """One attention block, from the projections' inputs to the merged heads (`outputs[0]`)."""

    q: Heads
    k: Heads
    v: Heads
    plan: Plan
    scores: ScoreChain
    nan_guard: bool
    rope: Optional[Node]
    rotate_k: bool             # the kernel rotates K too (not when K comes from a KV cache)
    projected: set             # roles ("Q", "K", "V") whose projection stays outside the kernel


def _position(graph: Graph):
    index = {id(n): i for i, n in enumerate(graph.nodes)}
    return lambda n: index.get(id(n), len(index))
