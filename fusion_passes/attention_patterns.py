"""Walkers that read an attention block off the graph, from its Softmax outwards.

Why walkers instead of fixed node lists: exporters differ in where they put the scale
(on the scores or on Q and K), how they transpose K, whether QKV is one packed GEMM,
and how they mask.  Each walker accepts the variants by what they compute (perms are
composed, scalar scales multiplied, Reshape shapes read from the graph) and raises
`Reject` with an NF code and the failed check in words when a piece does not fit.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

import numpy as np

from fusion_passes import reasons
from fusion_passes.base import operands, producer, scalar_const
from ge.ir import Node, Value

Q_PERM = (0, 2, 1, 3)    # [B,S,H,D] -> [B,H,S,D]   (Q and V)
K_PERM = (0, 2, 3, 1)    # [B,S,H,D] -> [B,H,D,S]   (K transposed)
MAX_SCORE_STEPS = 6      # scale / mask nodes between Q.K^T and Softmax


class Reject(Exception):
    """A structural candidate failed a check: NF code, the check in words, the nodes and
    values involved."""

    def __init__(self, code: str, constraint: str, nodes=(), values=()):
        super().__init__(constraint)
        self.code, self.constraint = code, constraint
        self.nodes, self.values = list(nodes), list(values)


def _variable(value: Optional[Value]) -> bool:
    return value is not None and not value.is_const


def is_qk_matmul(node: Optional[Node]) -> bool:
    return (node is not None and node.op_type == "MatMul" and len(node.inputs) == 2
            and all(_variable(v) for v in node.inputs))


def find_qk(value: Value, depth: int = 4) -> Optional[Node]:
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


# -- scores: Q.K^T -> scale -> mask -> Softmax ----------------------------------------------
@dataclass
class ScoreChain:
    qk: Node
    nodes: list = field(default_factory=list)     # between Q.K^T and Softmax
    scale: float = 1.0
    mask_kind: str = "none"                       # an all-zero constant Add counts as none
    mask: Optional[Value] = None                  # Add operand, or Where condition
    mask_value: float = 0.0                       # Where's fill value
    mask_inverted: bool = False                   # Where(cond, fill, scores)


def walk_scores(start: Value) -> ScoreChain:
    """Walk up from the Softmax input to the Q.K^T MatMul through scalar scales and one mask."""
    chain = ScoreChain(qk=None)
    value, scale_seen = start, False
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
        if node.op_type in ("Mul", "Div"):
            scores, factor = _scalar_scale(node, "scores")
            chain.scale *= factor
            scale_seen = True
            value = scores
        elif node.op_type == "Add" and _zero_add(node) is not None:
            value = _zero_add(node)         # x + 0 (ViT dynamo's folded "no mask"): nothing to apply
        elif node.op_type in ("Add", "Where"):
            if chain.mask_kind != "none":
                raise Reject(reasons.UNSUPPORTED_VARIANT,
                             f"mask: a second mask {node.op_type} {node.name}; the kernel applies one", [node])
            if scale_seen:
                raise Reject(reasons.UNSUPPORTED_VARIANT,
                             f"mask: {node.op_type} {node.name} is applied before the scale; the kernel "
                             "scales Q.K^T first, then masks", [node])
            value = _mask(node, chain)
        else:
            raise Reject(reasons.UNSUPPORTED_VARIANT,
                         f"scores: unexpected {node.op_type} {node.name} between Q.K^T and Softmax "
                         "(only scalar Mul/Div scale, Add mask, Where mask)", [node])
        chain.nodes.append(node)
    return chain


def _scalar_scale(node: Node, where: str):
    """(scaled input, factor) of Mul/Div by a scalar constant, else Reject."""
    if node.op_type == "Div":
        c = scalar_const(node.inputs[1])
        if c is None or not _variable(node.inputs[0]) or c == 0.0:
            raise Reject(reasons.UNSUPPORTED_VARIANT,
                         f"{where} scale: divisor of Div {node.name} is not a non-zero scalar constant",
                         [node], node.inputs)
        return node.inputs[0], 1.0 / c
    pair = operands(node, _variable)
    c = scalar_const(pair.other) if pair else None
    if c is None:
        raise Reject(reasons.UNSUPPORTED_VARIANT,
                     f"{where} scale: Mul {node.name} is not a multiplication by a scalar constant",
                     [node], node.inputs)
    return pair.first, c


def _broadcasts_to(shape, target) -> bool:
    try:
        return tuple(np.broadcast_shapes(tuple(shape), tuple(target))) == tuple(target)
    except ValueError:
        return False


def _zero_add(node: Node) -> Optional[Value]:
    """The computed operand of `Add(x, all-zero constant)` that keeps x's shape, else None."""
    pair = operands(node, _variable)
    if pair is None or not pair.other.is_const or np.any(pair.other.const):
        return None
    same = tuple(pair.first.desc.shape) == tuple(node.outputs[0].desc.shape)
    return pair.first if same and pair.first.desc.dtype == node.outputs[0].desc.dtype else None


def _mask(node: Node, chain: ScoreChain) -> Value:
    """Record an Add or Where mask in `chain`; returns the scores operand."""
    out_shape = node.outputs[0].desc.shape
    if node.op_type == "Add":
        leads = [v for v in node.inputs if _variable(v) and find_qk(v, MAX_SCORE_STEPS) is not None]
        if len(leads) != 1:
            raise Reject(reasons.UNSUPPORTED_VARIANT,
                         f"mask: cannot tell scores from mask in Add {node.name} "
                         f"({len(leads)} operands come from a Q.K^T MatMul)", [node], node.inputs)
        scores = leads[0]
        mask = node.inputs[1] if node.inputs[0] is scores else node.inputs[0]
        if not _broadcasts_to(mask.desc.shape, out_shape) or np.dtype(mask.desc.dtype).kind != "f":
            raise Reject(reasons.UNSUPPORTED_VARIANT,
                         f"mask: additive mask {mask.name} {list(mask.desc.shape)} of Add {node.name} is not a "
                         f"float tensor broadcasting to the scores {list(out_shape)}", [node], [mask])
        chain.mask_kind, chain.mask = "add", mask
        return scores
    cond, a, b = node.inputs
    if not (cond.is_const and cond.const.dtype == np.bool_):
        raise Reject(reasons.UNSUPPORTED_VARIANT,
                     f"mask: condition {cond.name} of Where {node.name} is not a constant bool tensor "
                     "(only a constant causal mask is supported)", [node], [cond])
    if not _broadcasts_to(cond.desc.shape, out_shape):
        raise Reject(reasons.UNSUPPORTED_VARIANT,
                     f"mask: condition {cond.name} {list(cond.desc.shape)} of Where {node.name} does not "
                     f"broadcast to the scores {list(out_shape)}", [node], [cond])
    fill_a, fill_b = scalar_const(a), scalar_const(b)
    if _variable(a) and fill_b is not None:
        scores, fill, inverted = a, fill_b, False
    elif _variable(b) and fill_a is not None:
        scores, fill, inverted = b, fill_a, True
    else:
        raise Reject(reasons.UNSUPPORTED_VARIANT,
                     f"mask: Where {node.name} must select between the scores and a scalar constant fill",
                     [node], node.inputs)
    chain.mask_kind, chain.mask, chain.mask_value, chain.mask_inverted = "where_causal", cond, fill, inverted
    return scores


# -- heads: projection -> Reshape [B,S,H,D] -> Transpose(s) -> Q.K^T / P.V -------------------
@dataclass
class HeadPath:
    nodes: list
    heads: int
    head_dim: int
    scale: float
    projected: Value          # the [B,S,H*D] tensor that was reshaped


def compose(perms) -> tuple:
    """Net permutation of Transposes applied in order."""
    net = list(range(len(perms[0]))) if perms else [0, 1, 2, 3]
    for perm in perms:
        net = [net[j] for j in perm]
    return tuple(net)


def walk_heads(value: Value, role: str, want_perm: tuple) -> HeadPath:
    """Walk up from a Q.K^T / P.V operand through Transposes and scalar scales to the head
    Reshape; the Transposes must compose to `want_perm`."""
    nodes, perms, scale = [], [], 1.0
    while True:
        node = producer(value)
        if node is not None and node.op_type == "Transpose":
            perms.insert(0, tuple(int(p) for p in node.attrs.get("perm", ())))
            value = node.inputs[0]
        elif node is not None and node.op_type in ("Mul", "Div") and len(nodes) < 8:
            value, factor = _scalar_scale(node, role)
            scale *= factor
        elif node is not None and node.op_type == "Reshape":
            break
        else:
            found = f"{node.op_type} {node.name}" if node is not None else f"input {value.name}"
            raise Reject(reasons.UNSUPPORTED_VARIANT,
                         f"{role}: expected the head split Reshape [B,S,H,D] + Transpose, found {found}",
                         nodes + ([node] if node is not None else []))
        nodes.append(node)
    nodes.append(node)
    src, dst = node.inputs[0].desc.shape, node.outputs[0].desc.shape
    if len(src) != 3 or len(dst) != 4 or tuple(src[:2]) != tuple(dst[:2]) or dst[2] * dst[3] != src[2]:
        raise Reject(reasons.UNSUPPORTED_VARIANT,
                     f"{role}: Reshape {node.name} {list(src)} -> {list(dst)} is not a head split "
                     "[B,S,H*D] -> [B,S,H,D]", [node], [node.inputs[0], node.outputs[0]])
    if any(len(p) != 4 for p in perms) or compose(perms) != tuple(want_perm):
        raise Reject(reasons.UNSUPPORTED_VARIANT,
                     f"{role}: head Transposes {[list(p) for p in perms]} compose to "
                     f"{list(compose(perms)) if perms else 'no transpose'}, expected {list(want_perm)}",
                     nodes)
    return HeadPath(nodes, int(dst[2]), int(dst[3]), scale, node.inputs[0])


# -- projections: x @ W (+ b) [-> Split / Slice of a packed QKV] ----------------------------
@dataclass
class Projection:
    nodes: list
    x: Value
    weight: Value             # constant [hidden, n] ([n, hidden] when trans_b)
    bias: Optional[Value]     # [n] constant (any shape of n elements on the last axis) or None
    start: int                # the columns of weight/bias this branch uses
    stop: int
    trans_b: bool = False     # Gemm transB=1
    alpha: float = 1.0        # Gemm alpha (scales x @ W) and beta (scales the bias)
    beta: float = 1.0

    @property
    def plain(self) -> bool:
        """The graph's weight/bias constants are the kernel's as they are (no transB/alpha/beta)."""
        return not self.trans_b and self.alpha == 1.0 and self.beta == 1.0

    def matrix(self) -> np.ndarray:
        """The effective [hidden, n] weight, Gemm's transB and alpha folded in."""
        w = self.weight.const.T if self.trans_b else self.weight.const
        return w if self.alpha == 1.0 else (w.astype(np.float64) * self.alpha).astype(w.dtype)

    def bias_vector(self) -> Optional[np.ndarray]:
        """The effective [n] bias, Gemm's beta folded in."""
        if self.bias is None:
            return None
        b = self.bias.const.reshape(-1)
        return b if self.beta == 1.0 else (b.astype(np.float64) * self.beta).astype(b.dtype)


def walk_projection(value: Value, role: str) -> Projection:
    """Up from the head Reshape's input to the projection: MatMul(x, W) (+ bias Add), or the
    Conv1D form Reshape[B*S,hidden] -> Gemm(W, C) -> Reshape[B,S,n] (a MatMul on flattened
    rows: the two Reshapes are views), optionally then Split/Slice of a packed QKV."""
    nodes: list = []
    node = producer(value)
    start = stop = None
    if node is not None and node.op_type in ("Split", "Slice"):
        start, stop = _packed_columns(node, value, role)
        nodes.append(node)
        value = node.inputs[0]
        node = producer(value)
    if node is not None and node.op_type == "Reshape":
        return _gemm_bracket(node, nodes, role, start, stop)
    bias = None
    if node is not None and node.op_type == "Add":
        pair = operands(node, lambda v: producer(v, "MatMul") is not None)
        if pair is None:
            raise Reject(reasons.UNSUPPORTED_VARIANT,
                         f"{role} projection: Add {node.name} has no MatMul operand", [node])
        mm_out, bias = pair
        if not bias.is_const:
            raise Reject(reasons.NON_CONSTANT, f"{role} projection: bias {bias.name} of Add {node.name} "
                         "is not a constant", [node], [bias])
        nodes.append(node)
        node = mm_out.producer
    if node is None or node.op_type != "MatMul":
        found = f"{node.op_type} {node.name}" if node is not None else f"input {value.name}"
        raise Reject(reasons.UNSUPPORTED_VARIANT,
                     f"{role} projection: expected MatMul(+bias Add), or Reshape -> Gemm -> Reshape, "
                     f"before the head Reshape, found {found}",
                     nodes + ([node] if node is not None else []))
    nodes.append(node)
    x, weight = node.inputs
    if not weight.is_const:
        raise Reject(reasons.NON_CONSTANT, f"{role} projection: weight {weight.name} of MatMul {node.name} "
                     "is not a constant", nodes, [weight])
    n = weight.desc.shape[-1]
    if weight.const.ndim != 2 or len(x.desc.shape) != 3:
        raise Reject(reasons.SHAPE_MISMATCH, f"{role} projection: MatMul {node.name} is not "
                     "[B,S,hidden] x [hidden, n]", nodes, [x, weight])
    _check_bias(bias, n, role, nodes)
    if start is None:
        start, stop = 0, n
    return Projection(nodes, x, weight, bias, start, stop)


def _check_bias(bias: Optional[Value], n: int, role: str, nodes: list) -> None:
    if bias is not None and (bias.const.size != n or bias.const.shape[-1] != n):
        raise Reject(reasons.SHAPE_MISMATCH, f"{role} projection: bias {bias.name} "
                     f"{list(bias.desc.shape)} is not one value per output column ({n})", nodes, [bias])


def _gemm_bracket(unflatten: Node, nodes: list, role: str, start, stop) -> Projection:
    """GPT-2's Conv1D linear: Reshape [B,S,hidden]->[B*S,hidden] -> Gemm -> Reshape ->[B,S,n]."""
    nodes.append(unflatten)
    flat = unflatten.inputs[0]
    gemm = producer(flat)
    if gemm is None or gemm.op_type != "Gemm":
        found = f"{gemm.op_type} {gemm.name}" if gemm is not None else f"input {flat.name}"
        raise Reject(reasons.UNSUPPORTED_VARIANT,
                     f"{role} projection: Reshape {unflatten.name} must unflatten the rows of a Gemm "
                     f"(Reshape -> Gemm -> Reshape), found {found}", nodes + ([gemm] if gemm else []), [flat])
    nodes.append(gemm)
    rows, out = flat.desc.shape, unflatten.outputs[0].desc.shape
    if len(rows) != 2 or len(out) != 3 or out[-1] != rows[-1] or out[0] * out[1] != rows[0]:
        raise Reject(reasons.SHAPE_MISMATCH,
                     f"{role} projection: Reshape {unflatten.name} {list(rows)} -> {list(out)} is not "
                     "[B*S,n] -> [B,S,n]", nodes, [flat, unflatten.outputs[0]])
    if int(gemm.attrs.get("transA", 0)):
        raise Reject(reasons.UNSUPPORTED_ATTRIBUTE, f"{role} projection: Gemm {gemm.name} has transA=1 "
                     "(the kernel reads x row-major)", nodes, [gemm.inputs[0]])
    a, weight = gemm.inputs[0], gemm.inputs[1]
    bias = gemm.inputs[2] if len(gemm.inputs) > 2 else None
    for what, v in (("weight", weight), ("bias C", bias)):
        if v is not None and not v.is_const:
            raise Reject(reasons.NON_CONSTANT, f"{role} projection: {what} {v.name} of Gemm {gemm.name} "
                         "is not a constant", nodes, [v])
    flatten = producer(a, "Reshape")
    x = flatten.inputs[0] if flatten is not None else a
    if flatten is None or tuple(x.desc.shape) != (out[0], out[1], a.desc.shape[-1]):
        found = f"{list(x.desc.shape)} from {a.producer.op_type if a.producer else 'input'} {a.name}"
        raise Reject(reasons.UNSUPPORTED_VARIANT,
                     f"{role} projection: Gemm {gemm.name} input A must be a Reshape of [B,S,hidden] "
                     f"= [{out[0]},{out[1]},{a.desc.shape[-1]}] to [B*S,hidden], found {found}",
                     nodes + ([flatten] if flatten else []), [a, x])
    if len(a.uses) == 1 and not a.is_graph_output:
        nodes.append(flatten)          # else the view stays for its other readers
    trans_b = bool(int(gemm.attrs.get("transB", 0)))
    n = weight.desc.shape[0] if trans_b else weight.desc.shape[-1]
    if weight.const.ndim != 2 or n != rows[-1]:
        raise Reject(reasons.SHAPE_MISMATCH, f"{role} projection: Gemm {gemm.name} weight "
                     f"{list(weight.desc.shape)} (transB={int(trans_b)}) is not [hidden, n]", nodes, [weight])
    _check_bias(bias, n, role, nodes)
    if start is None:
        start, stop = 0, n
    return Projection(nodes, x, weight, bias, start, stop, trans_b,
                      float(gemm.attrs.get("alpha", 1.0)), float(gemm.attrs.get("beta", 1.0)))


def _packed_columns(node: Node, value: Value, role: str) -> tuple:
    """The last-axis column range a Split output / Slice takes from the packed QKV tensor."""
    shape = node.inputs[0].desc.shape
    rank = len(shape)
    if node.op_type == "Split":
        axis = int(node.attrs.get("axis", 0))
        split = node.attrs.get("split")
        if split is None or len(split) == 0:
            n = len(node.outputs)
            chunk = -(-shape[axis] // n)
            split = [min(chunk, max(shape[axis] - i * chunk, 0)) for i in range(n)]
        split = [int(s) for s in split]
        start = sum(split[:value.index])
        stop = start + split[value.index]
        axes = [axis]
    else:
        starts, ends = list(node.attrs.get("starts", [])), list(node.attrs.get("ends", []))
        axes = list(node.attrs.get("axes") or range(len(starts)))
        steps = list(node.attrs.get("steps") or [1] * len(starts))
        if len(starts) != 1 or int(steps[0]) != 1:
            raise Reject(reasons.UNSUPPORTED_VARIANT, f"{role}: Slice {node.name} of the packed QKV must "
                         "cut one axis with step 1", [node])
        start, stop, _ = slice(int(starts[0]), int(ends[0])).indices(shape[int(axes[0]) % rank])
    if [int(a) % rank for a in axes] != [rank - 1]:
        raise Reject(reasons.UNSUPPORTED_VARIANT, f"{role}: {node.op_type} {node.name} of the packed QKV "
                     f"is not on the last axis", [node])
    return start, stop
