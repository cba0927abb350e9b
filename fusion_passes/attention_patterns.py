"""Reading an attention block off the graph, from its Softmax outwards, by what it computes.

After canonicalization (fusion_passes/canonical/) an attention block is
    scores = Q . K^T  [* scale]  [+ bias ...]  [Where(mask, scores, fill)]  -> Softmax [-> NaN guard]
    out    = P . V -> views -> merged heads
where Q, K and V are views of linear projections (possibly rotated by a RotaryEmbedding) or
of a projection an int8 GEMM kernel computed (`ComputedProjection`: the kernel reads it),
or K and V are views of a KV cache: a [B, Hkv, T, D] tensor written as Concat(past, new)
along its sequence axis (a decoder's `present`), or given as a graph input.
The views are read with the view algebra (fusion_passes/layout.py), not matched op by op:
for each operand the walker proves which projection columns every head reads, which
batch and sequence rows, in which order -- so 4-D and 3-D head layouts, packed or separate
QKV, heads taken by Split/Gather/Squeeze, GQA's repeated KV heads (a stride-0 axis) and any
merge that writes the kernel's [B,S,H*D] order all read the same way.  A scalar scale on Q
or K among their views (PyTorch's SDPA multiplies each by sqrt(scale), BART's eager
attention Q by 1/sqrt(D) after its projection) commutes with the views and with Q.K^T: the
walker reads it as part of the operand and the kernel applies it with its score scale, in
float32 (`Heads.scale`).  The graph is never rewritten for it, so a block no kernel takes
keeps its scales where the exporter put them (an fp16 Q.K^T unscaled can overflow).

Each walker raises `Reject` (fusion_passes/base.py) with an NF code and the failed check
in words when a piece does not fit; the pass turns it into the candidate's Miss.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from math import prod
from typing import Optional

import numpy as np

from fusion_passes import reasons
from fusion_passes.base import Reject, producer, scalar_const
from fusion_passes.canonical.softmax_guard import nan_guard
from fusion_passes.layout import (Layout, NotAffine, ViewChain, apply, is_view, more_than_one, probe, trace_down,
                                  trace_up)
from fusion_passes.linear import Linear, linear_producing
from ge.ir import Node, Value
from ge.symbolic import mod

MAX_SCORE_STEPS = 8      # scale / bias / mask nodes between Q.K^T and Softmax
MAX_TERMS = 2            # additive terms the kernel takes (bias, mask)
SCALED_ROLES = ("Q", "K")  # operands whose scalar scales are the scores' (one on V scales the output)


def _variable(value: Optional[Value]) -> bool:
    return value is not None and not value.is_const


def is_qk_matmul(node: Optional[Node]) -> bool:
    return (node is not None and node.op_type == "MatMul" and len(node.inputs) == 2
            and all(_variable(v) for v in node.inputs))


def find_qk(value: Value, depth: int = 6) -> Optional[Node]:
    """A MatMul of two computed tensors at most `depth` producers above `value`: the loose
    test that a Softmax sits in an attention block at all."""
    frontier = [value]
    for _ in range(depth):
        nxt = []
        for v in frontier:
            node = producer(v)
            if node is None:
                continue
            if is_qk_matmul(node):
                return node
            nxt.extend(i for i in node.inputs if _variable(i))
        frontier = nxt
    return None


def regroups_batch(node: Optional[Node]) -> bool:
    """A Reshape that only regroups the batch axes of [.., rows, cols] scores (the flat
    batch order, and so which head each matrix is, stays)."""
    if node is None or node.op_type != "Reshape":
        return False
    src, out = node.inputs[0].desc.shape, node.outputs[0].desc.shape
    return len(src) >= 2 and len(out) >= 2 and tuple(src[-2:]) == tuple(out[-2:])


def probs_reader(softmax: Node):
    """(P.V MatMul, nodes between) reading the Softmax's probabilities (through SDPA's NaN
    guard when it is still there, and batch-regrouping views), or (None, [])."""
    probs, between = softmax.outputs[0], []
    where = nan_guard(softmax)
    if where is not None and len(probs.uses) == 2:
        between, probs = [where.inputs[0].producer, where], where.outputs[0]
    while len(probs.uses) == 1 and not probs.is_graph_output and regroups_batch(probs.uses[0][0]):
        between.append(probs.uses[0][0])
        probs = probs.uses[0][0].outputs[0]
    pv = next((user for user, i in probs.uses if user.op_type == "MatMul" and i == 0
               and _variable(user.inputs[1])), None)
    return pv, between


# -- scores: Q.K^T -> scale -> additive terms -> Where mask -> Softmax ---------------------
@dataclass
class ScoreChain:
    qk: Node
    nodes: list = field(default_factory=list)     # between Q.K^T and Softmax
    scale: float = 1.0
    terms: list = field(default_factory=list)     # (additive tensor, factor, scores batch axes
                                                  # where it is added), in the order they are
                                                  # added: a constant added before a scale s
                                                  # is term * s added after it
    where: Optional[Value] = None                 # bool condition of a Where mask
    where_batch: tuple = ()                       # the scores batch axes where it applies
    where_fill: float = 0.0
    where_keep: bool = True                       # the scores are kept where the condition is True


def walk_scores(start: Value) -> ScoreChain:
    """Up from the Softmax input to the Q.K^T MatMul through scalar scales, additive terms
    (a constant term added before a scale is scaled with it) and one Where mask."""
    chain = ScoreChain(qk=None)
    value, later_scale = start, 1.0            # the product of scales applied after this point
    while True:
        node = producer(value)
        if node is None:
            raise Reject(reasons.UNSUPPORTED_VARIANT, f"scores: {value.name} is not computed from a Q.K^T MatMul")
        if is_qk_matmul(node):
            chain.qk = node
            break
        if len(chain.nodes) >= MAX_SCORE_STEPS:
            raise Reject(reasons.UNSUPPORTED_VARIANT,
                         f"scores: more than {MAX_SCORE_STEPS} nodes between Q.K^T and Softmax", [node])
        chain.nodes.insert(0, node)
        if regroups_batch(node):
            value = node.inputs[0]
        elif node.op_type in ("Mul", "Div"):
            value, factor = _scalar_scale(node)
            chain.scale *= factor
            later_scale *= factor
        elif node.op_type == "Add":
            value = _term(node, chain, later_scale)
        elif node.op_type == "Where":
            if chain.where is not None or chain.terms:
                raise Reject(reasons.UNSUPPORTED_VARIANT,
                             f"mask: Where {node.name} is followed by another mask; the kernel applies one "
                             "Where after its additive terms", [node])
            value = _where(node, chain, later_scale)
        else:
            raise Reject(reasons.UNSUPPORTED_VARIANT,
                         f"scores: {node.op_type} {node.name} between Q.K^T and Softmax is not a scalar scale, "
                         "an additive bias/mask or a Where mask", [node], [node.outputs[0]])
    if len(chain.terms) + (chain.where is not None) > MAX_TERMS:
        raise Reject(reasons.UNSUPPORTED_VARIANT,
                     f"scores: {len(chain.terms)} additive terms and {int(chain.where is not None)} Where mask; "
                     f"the kernel takes at most {MAX_TERMS} (bias and mask)", chain.nodes,
                     [t for t, _, _ in chain.terms] + ([chain.where] if chain.where is not None else []))
    return chain


def scalar_scale(node: Node) -> Optional[tuple]:
    """(scaled tensor, factor) when `node` is a Mul (either order) or Div of a computed tensor
    by a one-element constant, else None."""
    if node.op_type not in ("Mul", "Div") or len(node.inputs) != 2:
        return None
    a, b = node.inputs
    for x, k in ((a, b),) if node.op_type == "Div" else ((a, b), (b, a)):
        c = scalar_const(k)
        if _variable(x) and c is not None and (node.op_type == "Mul" or c != 0.0):
            return x, (1.0 / c if node.op_type == "Div" else c)
    return None


def _scalar_scale(node: Node):
    """(scaled operand, factor) of a scale of the scores."""
    found = scalar_scale(node)
    if found is None:
        raise Reject(reasons.UNSUPPORTED_VARIANT, f"scores: {node.op_type} {node.name} is not a scale by a "
                     "one-element constant", [node], node.inputs)
    return found


def _leads_to_qk(value: Value) -> bool:
    return _variable(value) and find_qk(value, MAX_SCORE_STEPS) is not None


def _term(node: Node, chain: ScoreChain, later_scale: float) -> Value:
    """Record the additive term of Add `node`; returns the scores operand."""
    leads = [v for v in node.inputs if _leads_to_qk(v)]
    if len(leads) != 1:
        raise Reject(reasons.UNSUPPORTED_VARIANT,
                     f"bias: cannot tell the scores from the added term in Add {node.name} "
                     f"({len(leads)} operands come from a Q.K^T MatMul)", [node], node.inputs)
    scores = leads[0]
    term = node.inputs[1] if node.inputs[0] is scores else node.inputs[0]
    if np.dtype(term.desc.dtype).kind != "f":
        raise Reject(reasons.DTYPE_MISMATCH, f"bias: term {term.name} of Add {node.name} is not a float tensor",
                     [node], [term])
    if term.is_const and not np.any(term.const):
        return scores                                        # + 0 (ViT dynamo's folded "no mask")
    if later_scale != 1.0 and not term.is_const:
        raise Reject(reasons.UNSUPPORTED_VARIANT,
                     f"bias: {term.name} is added before the scale {later_scale:g}; the kernel adds its "
                     "bias after scaling the scores", [node], [term])
    chain.terms.insert(0, (term, later_scale, tuple(node.outputs[0].desc.shape[:-2])))
    return scores


def _where(node: Node, chain: ScoreChain, later_scale: float) -> Value:
    cond, a, b = node.inputs
    if cond.desc.dtype is None or np.dtype(cond.desc.dtype) != np.bool_:
        raise Reject(reasons.DTYPE_MISMATCH, f"mask: condition {cond.name} of Where {node.name} is not bool",
                     [node], [cond])
    fill_a, fill_b = scalar_const(a), scalar_const(b)
    if _leads_to_qk(a) and fill_b is not None:
        scores, fill, keep = a, fill_b, True
    elif _leads_to_qk(b) and fill_a is not None:
        scores, fill, keep = b, fill_a, False
    else:
        raise Reject(reasons.UNSUPPORTED_VARIANT,
                     f"mask: Where {node.name} must select between the scores and a scalar constant fill",
                     [node], node.inputs)
    chain.where, chain.where_fill, chain.where_keep = cond, fill * later_scale, keep
    chain.where_batch = tuple(node.outputs[0].desc.shape[:-2])
    return scores


# -- heads: projection -> views [-> RotaryEmbedding -> views] -> Q.K^T / P.V ---------------
@dataclass
class Heads:
    """What one operand of Q.K^T or P.V reads from its projection."""

    role: str
    linear: Optional[Linear]  # None for a KV cache read as it is (`head_major`)
    nodes: list               # views and RotaryEmbedding between the projection and the operand
    rope: Optional[Node]
    rope_layout: Optional[Layout]
    batch: int                # B: the projection's rows read as B blocks of S (the kernel's
    seq: int                  # S   [B, S, K] view of the projection's input)
    dim: int                  # D (the head size this operand reads)
    rows: np.ndarray          # per operand batch index (flattened): its block of S rows
    cols: np.ndarray          # per operand batch index: the first projection column of its head
    batch_shape: tuple        # the operand's batch axes (before the [S,D] / [D,S] matrix)
    width: int = 0            # the projection's outputs (a cache: Hkv * D, head h at column h * D)
    source: Optional[Value] = None      # the projection's output, or the cache
    head_major: bool = False  # the source is a [B, Hkv, T, D] KV cache, not a projection
    scale: float = 1.0        # product of the scalar scales among the views (Q and K only)


def read_heads(value: Value, role: str, seq_axis: int, dim_axis: int) -> Heads:
    """Which projection rows and columns the Q.K^T / P.V operand `value` reads."""
    rope = rope_layout = None
    nodes: list = []
    try:
        chain, scale, scales = trace_operand(value, role)
        nodes, layout, source = list(chain.nodes), chain.layout, chain.source
        if source.producer is not None and source.producer.op_type == "RotaryEmbedding":
            rope = source.producer
            inner = trace_up(rope.inputs[0])
            rope_layout = inner.layout
            layout = chain.replay(inner.layout)        # the rotation keeps positions: a view's view
            nodes = inner.nodes + [rope] + nodes
            source = inner.source
        nodes += scales
    except NotAffine as err:
        raise Reject(reasons.UNSUPPORTED_VARIANT, f"{role}: the head views are not a strided view of the "
                     f"projection ({err})", nodes, [value])
    heads = _read_heads(value, role, seq_axis, dim_axis, nodes, layout, source, rope, rope_layout)
    heads.scale = scale
    return heads


def trace_operand(value: Value, role: str) -> tuple:
    """(view chain, scale, scale nodes): up from `value` through views -- and, for Q and K,
    through scalar scales (their product is `scale`) -- to the first value that is neither.
    The chain holds the views only (a scale keeps the shape): its layout is the operand's."""
    outputs, scales, scale = [], [], 1.0
    while True:
        node = value.producer
        if is_view(node):
            outputs.append(value)
            value = node.inputs[0]
        elif role in SCALED_ROLES and node is not None and node.op_type in ("Mul", "Div"):
            value, factor = operand_scale(node, role)
            scale *= factor
            scales.insert(0, node)
        else:
            break
    outputs.reverse()
    views = [v.producer for v in outputs]
    found = ViewChain(value, Layout.of_shape(value.desc.shape), views, outputs)
    return ViewChain(value, found.replay(found.layout), views, outputs), scale, scales


def operand_scale(node: Node, role: str) -> tuple:
    """(scaled tensor, factor) of a Mul/Div on Q or K: a scale by a one-element constant that
    keeps the tensor's shape; anything else raises Reject saying why it does not fold."""
    found = scalar_scale(node)
    if found is not None:
        x = found[0]
        if tuple(node.outputs[0].desc.shape) != tuple(x.desc.shape):
            raise Reject(reasons.UNSUPPORTED_VARIANT,
                         f"{role}: {node.op_type} {node.name} by a one-element constant broadcasts "
                         f"{x.name} {list(x.desc.shape)} to {list(node.outputs[0].desc.shape)}; only a "
                         "scale that keeps the heads' shape folds into the kernel's scale", [node], [x])
        return found
    factors = [v for v in node.inputs[1 if node.op_type == "Div" else 0:] if v is not None and v.is_const]
    if not factors:
        raise Reject(reasons.NON_CONSTANT,
                     f"{role}: {node.op_type} {node.name} scales the heads by a computed tensor; only a "
                     "one-element constant folds into the kernel's scale", [node], list(node.inputs))
    what = (f"a {list(factors[0].const.shape)} constant, not one element" if factors[0].const.size != 1
            else "zero" if node.op_type == "Div" else "a constant, and its other operand too")
    raise Reject(reasons.UNSUPPORTED_VARIANT,
                 f"{role}: {node.op_type} {node.name} scales the heads by {what}; only a one-element "
                 "constant folds into the kernel's scale", [node], factors[:1])


def _read_heads(value: Value, role: str, seq_axis: int, dim_axis: int, nodes: list, layout: Layout,
                source: Value, rope: Optional[Node], rope_layout: Optional[Layout]) -> Heads:
    if role != "Q" and linear_producing(source) is None and is_kv_cache(source):
        return _cache_heads(value, role, nodes, layout, source, seq_axis, dim_axis)
    linear = _projection(source, role, nodes)
    shape = tuple(source.desc.shape)
    width = shape[-1]
    tokens = prod(shape[:-1])                                   # the projection's rows, flattened
    op_shape = layout.shape
    dim, seq = op_shape[dim_axis], op_shape[seq_axis]
    dim_pieces, seq_pieces = layout.axis(dim_axis % len(op_shape)), layout.axis(seq_axis % len(op_shape))
    if dim_pieces != (((dim, 1),) if more_than_one(dim) else ()) or \
            seq_pieces != (((seq, width),) if more_than_one(seq) else ()) or mod(tokens, seq) != 0:
        raise Reject(reasons.UNSUPPORTED_VARIANT,
                     f"{role}: operand {value.name} {list(op_shape)} does not read [S, D] head matrices of "
                     f"consecutive rows of the projection {source.name} {list(shape)} (sequence axis reads "
                     f"{list(seq_pieces)}, head axis {list(dim_pieces)} as (size, stride) pieces)",
                     nodes, [value, source])
    batch_axes = [k for k in range(len(op_shape)) if k not in (seq_axis % len(op_shape), dim_axis % len(op_shape))]
    offsets = Layout(layout.offset, tuple(layout.axes[k] for k in batch_axes)).indices().reshape(-1)
    rows, rest = np.divmod(offsets, probe(seq * width))   # which block of `seq` rows, which column
    if np.any(rest >= width):
        raise Reject(reasons.UNSUPPORTED_VARIANT, f"{role}: operand {value.name} starts inside a block of "
                     f"{seq} rows", nodes, [value])
    batch = tokens // seq
    return Heads(role, linear, nodes, rope, rope_layout, batch, seq, dim, rows, rest,
                 tuple(op_shape[k] for k in batch_axes), width, source)


def is_kv_cache(value: Value) -> bool:
    """A [B, Hkv, T, D] tensor a decoder attends to as it is: the cache concatenated with the
    new tokens' heads along its sequence axis (transformers' `present`), or a graph input."""
    shape = value.desc.shape
    if shape is None or len(shape) != 4 or value.is_const or np.dtype(value.desc.dtype).kind != "f":
        return False
    node = value.producer
    return node is None or (node.op_type == "Concat" and int(node.attrs.get("axis", 0)) % 4 == 2)


def _cache_heads(value: Value, role: str, nodes: list, layout: Layout, source: Value, seq_axis: int,
                 dim_axis: int) -> Heads:
    """K or V read from a [B, Hkv, T, D] cache: every operand matrix must be one head's [T, D]
    (or [D, T]) block of it, the batch index running over (batch, head)."""
    batch, kv_heads, length, dim = source.desc.shape
    op_shape = layout.shape
    rank = len(op_shape)
    dim_pieces, seq_pieces = layout.axis(dim_axis % rank), layout.axis(seq_axis % rank)
    if op_shape[dim_axis] != dim or op_shape[seq_axis] != length or \
            dim_pieces != (((dim, 1),) if more_than_one(dim) else ()) or \
            seq_pieces != (((length, dim),) if more_than_one(length) else ()):
        raise Reject(reasons.UNSUPPORTED_VARIANT,
                     f"{role}: operand {value.name} {list(op_shape)} does not read whole [T, D] head matrices of "
                     f"the KV cache {source.name} {list(source.desc.shape)} (sequence axis reads {list(seq_pieces)}, "
                     f"head axis {list(dim_pieces)} as (size, stride) pieces)", nodes, [value, source])
    batch_axes = [k for k in range(rank) if k not in (seq_axis % rank, dim_axis % rank)]
    offsets = Layout(layout.offset, tuple(layout.axes[k] for k in batch_axes)).indices().reshape(-1)
    rows, rest = np.divmod(offsets, probe(kv_heads * length * dim))
    head, inside = np.divmod(rest, probe(length * dim))
    if np.any(inside):
        raise Reject(reasons.UNSUPPORTED_VARIANT, f"{role}: operand {value.name} starts inside a head of the KV "
                     f"cache {source.name}", nodes, [value])
    return Heads(role, None, nodes, None, None, batch, length, dim, rows, head * dim,
                 tuple(op_shape[k] for k in batch_axes), kv_heads * dim, source, head_major=True)


# Kernels whose float output is a projection computed apart: an int8 GEMM (AMCT deploy
# graphs quantize the Q/K/V GEMMs but not attention) cannot put its int8 weight into the float
# attention kernel, which reads its output as it is (as it does a projection read elsewhere).
COMPUTED_PROJECTIONS = ("QuantMatMulBiasActFusionOp",)


@dataclass
class ComputedProjection(Linear):
    """Q, K or V computed by a kernel of its own: the attention kernel reads it as it is."""

    @property
    def width(self) -> int:
        return int(self.output.desc.shape[-1])

    @property
    def matmul(self) -> Node:
        return self.output.producer


def _projection(source: Value, role: str, nodes: list) -> Linear:
    linear = linear_producing(source)
    if linear is not None:
        return linear
    node = source.producer
    if node is not None and node.op_type in COMPUTED_PROJECTIONS and np.dtype(source.desc.dtype).kind == "f" \
            and source.desc.shape is not None and len(source.desc.shape) >= 2:
        return ComputedProjection(None, None, None, [], source)
    found = f"{node.op_type} {node.name}" if node is not None else f"input {source.name}"
    mm = node if node is not None and node.op_type in ("MatMul", "Gemm") else None
    if node is not None and node.op_type == "Add":
        mm = next((v.producer for v in node.inputs if v is not None and producer(v, "MatMul") is not None), None)
    if mm is not None and not mm.inputs[1].is_const:
        raise Reject(reasons.NON_CONSTANT, f"{role} projection: weight {mm.inputs[1].name} of {mm.op_type} "
                     f"{mm.name} is not a constant", nodes + [mm], [mm.inputs[1]])
    if mm is not None and mm.op_type == "Gemm":
        raise Reject(reasons.UNSUPPORTED_ATTRIBUTE, f"{role} projection: Gemm {mm.name} with transA=1 is not a "
                     "linear layer on rows", nodes + [mm], [mm.inputs[0]])
    if role not in SCALED_ROLES and node is not None and node.op_type in ("Mul", "Div"):
        c = next((scalar_const(v) for v in node.inputs if scalar_const(v) is not None), None)
        if c is not None:
            factor = 1.0 / c if node.op_type == "Div" and c else c
            raise Reject(reasons.UNSUPPORTED_VARIANT,
                         f"{role} is scaled by {factor:g}: a scale on V scales the output, not the scores, "
                         "and the kernel has no output scale", nodes + [node], [source])
    raise Reject(reasons.UNSUPPORTED_VARIANT,
                 f"{role}: expected a linear projection (MatMul by a constant weight [+ bias]) before the head "
                 f"views, found {found}", nodes + ([node] if node is not None else []), [source])


def head_columns(heads: Heads, batch_index: np.ndarray, n_heads: int) -> np.ndarray:
    """The first column of each of the n_heads heads, checking that operand batch index i
    is (batch i // n_heads, head i % n_heads) and every batch row uses the same columns."""
    rows, cols = heads.rows[batch_index], heads.cols[batch_index]
    expect_rows = np.arange(rows.size) // n_heads
    if not np.array_equal(rows, expect_rows):
        raise Reject(reasons.UNSUPPORTED_VARIANT,
                     f"{heads.role}: its batch index does not run over (batch, head) with the batch outermost "
                     f"(rows {rows[:8].tolist()}...)", heads.nodes, [])
    per_batch = cols.reshape(-1, n_heads)
    if not np.all(per_batch == per_batch[:1]):
        raise Reject(reasons.UNSUPPORTED_VARIANT, f"{heads.role}: batch rows read different head columns",
                     heads.nodes, [])
    return per_batch[0]


def kv_groups(cols: np.ndarray, role: str, nodes: list) -> tuple:
    """(KV heads, group size) when query head j reads KV head j // group: consecutive query
    heads share a KV head (GQA's repeat_interleave), and the groups are distinct heads."""
    distinct = list(dict.fromkeys(cols.tolist()))
    heads = len(cols)
    if heads % len(distinct):
        raise Reject(reasons.SHAPE_MISMATCH, f"{role}: {len(distinct)} KV heads do not divide {heads} query heads",
                     nodes, [])
    group = heads // len(distinct)
    if not np.array_equal(cols, np.repeat(cols[::group], group)) or len(set(cols[::group].tolist())) != len(distinct):
        raise Reject(reasons.UNSUPPORTED_VARIANT,
                     f"{role}: query heads map to KV head columns {cols.tolist()}, not in groups of {group} "
                     "consecutive heads (the kernel reads KV head h // group)", nodes, [])
    return len(distinct), group


# -- merge: P.V -> views -> [B, S, H*Dv] ---------------------------------------------------
def merge_heads(pv: Node, batch: int, heads: int, seq: int, dim: int):
    """(nodes, output) of the views after P.V whose result is the kernel's [B, S, H*Dv]
    output, read as one of its reshapes; the longest such chain."""
    ctx = pv.outputs[0]
    chain = trace_down(ctx, stop=lambda node: False)
    kernel = Layout(0, (((batch, heads * seq * dim),), ((seq, dim),), ((heads, seq * dim), (dim, 1))))
    layout = Layout.of_shape(ctx.desc.shape)
    prefixes = [(0, ctx, layout)]
    for i, node in enumerate(chain.nodes):
        try:
            layout = apply(layout, node, node.outputs[0])
        except NotAffine:
            break
        prefixes.append((i + 1, node.outputs[0], layout))
    for count, value, layout in reversed(prefixes):
        try:
            if kernel.reshape(value.desc.shape).flat() == layout.flat():
                return chain.nodes[:count], value
        except NotAffine:
            continue
    raise Reject(reasons.UNSUPPORTED_VARIANT,
                 f"merge heads: no view of the P.V output {ctx.name} {list(ctx.desc.shape)} "
                 f"({', '.join(n.op_type for n in chain.nodes) or 'none'} after it) is the heads merged as "
                 f"[B, S, H*Dv] = [{batch}, {seq}, {heads * dim}]", [pv] + chain.nodes, [ctx])


def batch_index(operand_batch: tuple, scores_batch: tuple) -> np.ndarray:
    """Operand batch index of every scores batch index (MatMul broadcasts batch axes)."""
    operand_batch, scores_batch = probe(tuple(operand_batch)), probe(tuple(scores_batch))
    grid = np.arange(prod(operand_batch), dtype=np.int64).reshape(operand_batch) if operand_batch \
        else np.zeros((), np.int64)
    return np.broadcast_to(grid, scores_batch).reshape(-1)
