"""QuantAttentionProjection: the int8 Q, K, V projections that read one tensor join the int8
attention kernel they feed -> one QuantMultiHeadAttentionFusionOp from the hidden states to
the merged heads, as the fp16 MultiHeadAttentionFusionOp takes its projections.

Why: after QuantMultiHeadAttention and QuantMatMulBiasAct an int8 BERT layer still runs three
int8 GEMM kernels (each a launch, each reading the same int8 input and writing an int8
tensor the attention kernel reads back) before its attention kernel.  In one kernel the
input is read once, Q, K and V stay on chip, and two launches go.

Pattern (anchor: a QuantMultiHeadAttentionFusionOp):
    x_q -> [Reshape] -> QuantMatMulBiasActFusionOp (Q) --+
    x_q -> [Reshape] -> QuantMatMulBiasActFusionOp (K) --+-> QuantMultiHeadAttentionFusionOp
    x_q -> [Reshape] -> QuantMatMulBiasActFusionOp (V) --+
(QDQ after canonical int8 views, QOperator: the same shape.)  Between a projection and the
attention's operand the kernel also takes rescaling steps as written (per-tensor Q/DQ, Mul/Div
or QLinearMul by a scalar constant, int8 views): SDPA exports scale Q and K by sqrt(scale) there.  Each projection keeps its own
weight, int32 bias, scales and requantizing epilogue as a member of the kernel's sub-graph
(codegen/fused/quant_cube.py's op, run as written), so the numbers are the unmerged ones.
Misses: a projection's int8 result is read elsewhere too (NF2001), the three projections
read different tensors (NF1001), the attention's sub-graph has dynamic dims (NF2008).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

from codegen.fused import autofused
from codegen.fused.quant_attention import QUANT_ATTENTION
from codegen.fused.quant_cube import QUANT_MATMUL
from fusion_passes import reasons
from fusion_passes.base import FusionPass, Match, fuse, scalar_const, single_consumer
from fusion_passes.quant_chain import per_tensor_unblocked
from fusion_passes.subgraph import SubGraphBuilder
from ge.ir import Graph, Node, Value

ROLES = ("Q", "K", "V")


MAX_RESCALE = 8          # ops between a projection's int8 result and the attention's operand
RESCALE_VIEWS = ("Reshape", "Transpose")


@dataclass
class Projection:
    gemm: Node
    views: list              # constant-shape Reshapes between the shared input and the GEMM
    absorbed_views: list     # the views read by this GEMM alone (they join the kernel)
    rescale: list = field(default_factory=list)   # [(node, its operand slot)] from the GEMM on


def _operand_slot(node: Node) -> Optional[int]:
    """The activation slot of a rescaling step the kernel takes as written, or None: a
    per-tensor QuantizeLinear / DequantizeLinear, a Mul/Div (QLinearMul) by a scalar constant,
    an int8 view."""
    t = node.op_type
    if t in ("QuantizeLinear", "DequantizeLinear"):
        return 0 if per_tensor_unblocked(node) else None
    if t in RESCALE_VIEWS:
        return 0 if all(v is None or v.is_const for v in node.inputs[1:]) else None
    if t == "QLinearMul" and len(node.inputs) > 3 and node.inputs[0] is not None and node.inputs[3] is not None:
        a, b = node.inputs[0], node.inputs[3]          # QOperator's form of the same scale
        return 0 if scalar_const(b) is not None else 3 if scalar_const(a) is not None else None
    if t in ("Mul", "Div") and len(node.inputs) == 2:
        a, b = node.inputs
        if scalar_const(b) is not None:
            return 0
        if t == "Mul" and scalar_const(a) is not None:
            return 1
    return None


def _projection_behind(value: Value):
    """(the QuantMatMulBiasAct whose int8 result reaches `value`, the rescaling steps between
    them in order) -- SDPA multiplies Q and K by sqrt(scale) after their projection, which
    quantize_static writes as DQ -> Mul -> Q -- or (None, [])."""
    steps, cur = [], value
    for _ in range(MAX_RESCALE + 1):
        node = cur.producer
        if node is None:
            return None, []
        if node.op_type == QUANT_MATMUL:
            return node, list(reversed(steps))
        slot = _operand_slot(node)
        if slot is None or (steps and single_consumer(cur) is not steps[-1][0]):
            return None, []
        steps.append((node, slot))
        cur = node.inputs[slot]
    return None, []


@dataclass
class ProjectionMatch(Match):
    attention: Optional[Node] = None
    source: Optional[Value] = None
    projections: list = field(default_factory=list)


def _viewed_source(value: Value):
    """(the tensor behind constant-shape Reshapes, the Reshapes from it to `value`)."""
    views = []
    node = value.producer
    while node is not None and node.op_type == "Reshape" and all(v is None or v.is_const for v in node.inputs[1:]):
        views.append(node)
        node = node.inputs[0].producer
    views.reverse()
    return (views[0].inputs[0] if views else value), views


class QuantAttentionProjectionFusionPass(FusionPass):
    pattern_name = "QuantAttentionProjection"
    pass_name = "QuantAttentionProjectionFusionPass"
    fused_ops = (QUANT_ATTENTION,)
    anchor_types = (QUANT_ATTENTION,)

    def match(self, graph: Graph, attention: Node):
        operands = attention.inputs[:3]
        found = [_projection_behind(v) if v is not None else (None, []) for v in operands]
        gemms = [g for g, _ in found]
        if not any(gemms):
            return None
        nodes = [attention] + [g for g in gemms if g is not None]
        if None in gemms or len({id(v) for v in operands}) != 3:
            missing = [r for r, g in zip(ROLES, gemms) if g is None]
            return self.miss(reasons.UNSUPPORTED_VARIANT, attention, nodes, f"the attention's {', '.join(missing) or 'Q, K, V'} "
                             "operand is not the int8 result of its own QuantMatMulBiasAct projection", operands)
        for role, value in zip(ROLES, operands):
            if single_consumer(value) is not attention or any(single_consumer(r.outputs[0]) is None
                                                               for r, _ in found[ROLES.index(role)][1]):
                return self.miss(reasons.OTHER_CONSUMERS, attention, nodes, f"the {role} projection's int8 result "
                                 "is read outside the attention (it must stay a kernel output)", [value])
        sources = [_viewed_source(g.inputs[0]) for g in gemms]
        if len({id(s) for s, _ in sources}) != 1:
            return self.miss(reasons.NO_SHARED_DATA, attention, nodes, "the Q, K and V projections do not read one "
                             "int8 tensor (through views)", [g.inputs[0] for g in gemms])
        sub = autofused.decode_subgraph(attention.attrs["subgraph"])
        if sub.symbols:
            return self.miss(reasons.DYNAMIC_DIM, attention, nodes, "the attention's sub-graph has dynamic dims",
                             attention.inputs[:3])
        if any(r is not None and r[0] == "o" and r[2] != 0 for _, _, refs, _ in sub.ops for r in list(refs) + sub.outputs):
            return self.miss(reasons.UNSUPPORTED_VARIANT, attention, nodes, "a member of the attention's sub-graph "
                             "has several outputs", [])
        projections = []
        for gemm, (_, views), (_, rescale) in zip(gemms, sources, found):
            absorbed = []
            for view in reversed(views):             # from the GEMM up, while read by this path alone
                if single_consumer(view.outputs[0]) is None:
                    break
                absorbed.append(view)
            projections.append(Projection(gemm, views, absorbed, rescale))
        members = [n for p in projections for n in p.absorbed_views + [p.gemm] + [r for r, _ in p.rescale]]
        members.append(attention)
        return ProjectionMatch(list(dict.fromkeys(members)), QUANT_ATTENTION, list(attention.outputs),
                               attention=attention, source=sources[0][0], projections=projections)

    def rewrite(self, graph: Graph, match: ProjectionMatch) -> Node:
        builder = SubGraphBuilder()
        source = builder.ref(match.source)
        for p in match.projections:
            builder.copy(p.gemm, {0: builder.views(source, p.views)})
            for node, slot in p.rescale:
                builder.copy(node, {slot: builder.refs[id(node.inputs[slot])]})
        attention = match.attention
        sub = autofused.decode_subgraph(attention.attrs["subgraph"])
        given = [builder.refs[id(v)] if i < 3 else (None if v is None else builder.ref(v))
                 for i, v in enumerate(attention.inputs)]
        made = []
        for op_type, attrs, refs, _ in sub.ops:
            args = [None if r is None else given[r[1]] if r[0] == "i" else made[r[1]] for r in refs]
            made.append(builder.emit(op_type, attrs, args))
        outputs = [given[r[1]] if r[0] == "i" else made[r[1]] for r in sub.outputs]
        attrs = {k: v for k, v in attention.attrs.items() if k != "subgraph"}
        attrs["subgraph"] = builder.encode(outputs)
        return fuse(graph, match.nodes, QUANT_ATTENTION, builder.inputs, match.outputs, attrs, self.pass_name,
                    name=attention.name)
