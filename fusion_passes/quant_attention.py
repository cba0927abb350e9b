"""QuantMultiHeadAttention: attention whose graph quantizes Q, K, P and V ->
QuantMultiHeadAttentionFusionOp (codegen/fused/quant_attention.py), both products on the
int8 cube.

Pattern (anchor: the score MatMul, both operands DequantizeLinear of int8 activations, one
scale each), as onnxruntime's quantize_static writes BERT's self-attention:
    [int8 views] -> DQ(q) --+
    [int8 views] -> DQ(k) --+-> MatMul -> { Q -> DQ | Div/Mul by a constant | Add(mask) }
        -> Softmax -> Q -> DQ --+
    [int8 views] -> DQ(v) ------+-> MatMul -> [ Q -> [int8 views] ]
and as its QOperator form writes it (the ops kept as written, their own integer numerics):
    QLinearMatMul(q, k) -> { DQ | Div/Mul | Q | QLinearMul(scale) | QLinearAdd(mask) } -> QLinearSoftmax
        -> QLinearMatMul(p, v) -> [int8 views]
The int8 views before the operands (head split) and after the output (head merge) join the
kernel when nothing else reads them; a DequantizeLinear read elsewhere too stays, and the
kernel reads its int8 input.  Every rounding point the graph has stays in the kernel.
Misses (the score MatMul is act x act int8 but the rest does not follow): a value read
outside the chain (NF2001), an op the chain does not take (NF2006), P not requantized to
int8 before P.V or V not a dequantized int8 activation (NF2005).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

import numpy as np

from codegen.fused.quant_attention import QUANT_ATTENTION, QUANT_BATCH_MATMUL
from fusion_passes import reasons
from fusion_passes.base import FusionPass, Match, fuse, scalar_const, single_consumer
from fusion_passes.canonical.quant_views import same_quantization
from fusion_passes.quant_chain import dequant_source, is_int8, per_tensor_unblocked
from fusion_passes.subgraph import SubGraphBuilder
from ge.ir import Graph, Node, Value
from ge.ops.quant import F32

INT8_VIEWS = ("Reshape", "Transpose")


@dataclass
class Operand:
    """One int8 operand of a product: its DequantizeLinear (QDQ; None for QLinearMatMul's own
    int8 input), the int8 tensor the kernel reads, the int8 views between them that join the
    kernel."""
    dq: Optional[Node]
    source: Value
    views: list
    absorbed: bool          # the DQ (and the views) are read by this product only


@dataclass
class QuantAttentionMatch(Match):
    q: Optional[Operand] = None
    k: Optional[Operand] = None
    v: Optional[Operand] = None
    scores: Optional[Node] = None
    chain: list = field(default_factory=list)        # score ops from the first MatMul to P's DQ
    context: Optional[Node] = None
    tail: list = field(default_factory=list)         # output Q and int8 views


def int8_operand(value: Value, qoperator: bool = False) -> Optional[Operand]:
    """The int8 activation behind `value`: DequantizeLinear(int8, one scale) of it (QDQ), or
    `value` itself (QLinearMatMul's operand); None if it is not one."""
    if qoperator:
        if value is None or value.is_const or not is_int8(value):
            return None
        dq, int8, absorbed = None, value, True
    else:
        dq = dequant_source(value)
        if dq is None or dq.inputs[0].is_const or not is_int8(dq.inputs[0]) or not per_tensor_unblocked(dq):
            return None
        int8, absorbed = dq.inputs[0], single_consumer(dq.outputs[0]) is not None
    views, node = [], int8.producer
    while absorbed and node is not None and node.op_type in INT8_VIEWS and single_consumer(node.outputs[0]) \
            and all(v is None or v.is_const for v in node.inputs[1:]):
        views.append(node)
        node = node.inputs[0].producer
    views.reverse()
    return Operand(dq, views[0].inputs[0] if views else int8, views, absorbed)


def _operands(mm: Node) -> Optional[tuple]:
    """The two int8 operands of a product of activations (MatMul of DQs, or QLinearMatMul)."""
    if mm.op_type == "QLinearMatMul":
        pair = int8_operand(mm.inputs[0], True), int8_operand(mm.inputs[3], True)
    else:
        pair = int8_operand(mm.inputs[0]), int8_operand(mm.inputs[1])
    return None if None in pair else pair


def _score_step(node: Node, cur: Value, after_softmax: bool) -> Optional[str]:
    """None if `node` may follow `cur` in the score chain, else why not."""
    t = node.op_type
    if t == "QuantizeLinear":
        return None if per_tensor_unblocked(node) else "a per-axis or blocked QuantizeLinear"
    if t == "DequantizeLinear":
        return None if per_tensor_unblocked(node) and is_int8(cur) else "a per-axis DequantizeLinear"
    if after_softmax:
        return f"{t} after Softmax"
    if t in ("Div", "Mul"):
        other = node.inputs[1] if node.inputs[0] is cur else node.inputs[0]
        return None if scalar_const(other) is not None else f"{t} by a tensor"
    if t == "QLinearMul":           # QOperator's scale: an int8 constant times the int8 scores
        other = node.inputs[3] if node.inputs[0] is cur else node.inputs[0]
        return None if scalar_const(other) is not None else "QLinearMul by a tensor"
    if t in ("Add", "QLinearAdd"):
        same = tuple(node.outputs[0].desc.shape) == tuple(cur.desc.shape)
        return None if same else "an Add that broadcasts the scores"
    if t in ("Softmax", "QLinearSoftmax"):
        axis = int(node.attrs.get("axis", -1))
        return None if axis in (-1, len(cur.desc.shape) - 1) else "Softmax over another axis than the keys"
    return f"{t} in the score chain"


class QuantAttentionFusionPass(FusionPass):
    pattern_name = "QuantMultiHeadAttention"
    pass_name = "QuantMultiHeadAttentionFusionPass"
    fused_ops = (QUANT_ATTENTION,)
    anchor_types = ("MatMul", "QLinearMatMul")

    def match(self, graph: Graph, mm: Node):
        pair = _operands(mm)
        if pair is None:
            return None
        q, k = pair
        chain, cur, softmax = [], mm.outputs[0], False
        while True:
            node = single_consumer(cur)
            if node is None:
                return self.miss(reasons.OTHER_CONSUMERS, mm, [mm] + chain, "every score value must feed one op "
                                 "on the way to P.V", [cur])
            if node.op_type in ("MatMul", "QLinearMatMul") and softmax and node.inputs[0] is cur:
                break
            why = _score_step(node, cur, softmax)
            if why is not None:
                return self.miss(reasons.UNSUPPORTED_VARIANT, mm, [mm] + chain + [node],
                                 f"the score chain takes rounding points, a constant scale, a mask Add and "
                                 f"Softmax; found {why}", [cur])
            softmax = softmax or node.op_type in ("Softmax", "QLinearSoftmax")
            chain.append(node)
            cur = node.outputs[0]
        context = node
        if context.op_type == "QLinearMatMul":
            v, p_int8 = int8_operand(context.inputs[3], True), is_int8(cur)
        else:
            v = int8_operand(context.inputs[1])
            p_int8 = chain[-1].op_type == "DequantizeLinear" and len(chain) > 1 and \
                chain[-2].op_type == "QuantizeLinear"
            if p_int8 and not same_quantization(chain[-1], chain[-2]):   # the kernel uses the Q's parameters
                return self.miss(reasons.UNSUPPORTED_VARIANT, mm, [mm] + chain + [context],
                                 "P's DequantizeLinear must use the scale and zero point P was quantized with",
                                 [chain[-2].outputs[0], chain[-1].outputs[0]])
        if not p_int8 or v is None:
            return self.miss(reasons.DTYPE_MISMATCH, mm, [mm] + chain + [context], "P must be requantized to int8 "
                             "(Softmax -> Q -> DQ) and V a dequantized int8 activation", [cur, context.inputs[1]])
        tail, out = [], context.outputs[0]
        nxt = single_consumer(out)
        if nxt is not None and nxt.op_type == "QuantizeLinear" and per_tensor_unblocked(nxt):
            tail.append(nxt)
            out = nxt.outputs[0]
            nxt = single_consumer(out)
        while is_int8(out) and nxt is not None and nxt.op_type in INT8_VIEWS and \
                all(x is None or x.is_const for x in nxt.inputs[1:]):
            tail.append(nxt)
            out = nxt.outputs[0]
            nxt = single_consumer(out)
        nodes = [n for op in (q, k, v) if op.absorbed for n in op.views + ([op.dq] if op.dq else [])]
        nodes = list(dict.fromkeys(nodes + [mm] + chain + [context] + tail))
        return QuantAttentionMatch(nodes, QUANT_ATTENTION, [out], q=q, k=k, v=v, scores=mm, chain=chain,
                                   context=context, tail=tail)

    def rewrite(self, graph: Graph, match: QuantAttentionMatch) -> Node:
        builder = SubGraphBuilder()
        for operand in (match.q, match.k, match.v):
            builder.ref(operand.source)
        q, k = _operand_ref(builder, match.q), _operand_ref(builder, match.k)
        if match.scores.op_type == "QLinearMatMul":         # QOperator: the ops as written
            builder.copy(match.scores, {0: q, 3: k})
            for node in match.chain:
                builder.copy(node)
            builder.copy(match.context, {0: builder.refs[id(match.chain[-1].outputs[0])],
                                         3: _operand_ref(builder, match.v)})
        else:                                               # QDQ: both products on int8
            builder.refs[id(match.scores.outputs[0])] = _int8_product(builder, q, k, match.q, match.k)
            p_q = match.chain[-2]
            for node in match.chain[:-1]:                   # P's DQ goes: P.V reads P's int8
                builder.copy(node)
            builder.refs[id(match.context.outputs[0])] = _int8_product(
                builder, builder.refs[id(p_q.outputs[0])], _operand_ref(builder, match.v), _as_operand(p_q), match.v)
        for node in match.tail:
            builder.copy(node)
        out = builder.refs[id(match.outputs[0])]
        attrs = {"subgraph": builder.encode([out])}
        shape = match.scores.outputs[0].desc.shape
        if len(shape) == 4:
            attrs["head_num"] = int(shape[1])
        return fuse(graph, match.nodes, QUANT_ATTENTION, builder.inputs, match.outputs, attrs, self.pass_name)


@dataclass
class _PQuant:
    """P's QuantizeLinear seen as an operand: its scale and zero point are P's."""
    scale: np.ndarray
    zero_point: Optional[np.ndarray]


def _as_operand(q: Node) -> _PQuant:
    return _PQuant(q.attrs["y_scale"], q.attrs.get("y_zero_point"))


def _quant_params(operand) -> tuple:
    if isinstance(operand, _PQuant):
        return operand.scale, operand.zero_point
    return operand.dq.attrs["x_scale"], operand.dq.attrs.get("x_zero_point")


def _operand_ref(builder: SubGraphBuilder, operand: Operand):
    """The kernel's ref of `operand`: its int8 source through its absorbed views."""
    return builder.views(builder.ref(operand.source), operand.views)


def _int8_product(builder: SubGraphBuilder, a, b, a_operand, b_operand):
    """A QuantBatchMatMul of refs `a` and `b` on int8, dequantized by both operands' scales."""
    (sa, za), (sb, zb) = _quant_params(a_operand), _quant_params(b_operand)
    attrs = {"deq_scale": (np.asarray(sa, F32).reshape(()) * np.asarray(sb, F32).reshape(())).astype(F32)}
    if za is not None:
        attrs["a_zero_point"] = np.asarray(za).reshape(())
    if zb is not None:
        attrs["b_zero_point"] = np.asarray(zb).reshape(())
    return builder.emit(QUANT_BATCH_MATMUL, attrs, [a, b])
