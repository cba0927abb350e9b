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
(QDQ after canonical int8 views, QOperator: the same shape.)  Each projection keeps its own
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
from fusion_passes.base import FusionPass, Match, fuse, single_consumer
from fusion_passes.quant_attention import SubGraphBuilder
from ge.ir import Graph, Node, Value

ROLES = ("Q", "K", "V")


@dataclass
class Projection:
    gemm: Node
    views: list              # constant-shape Reshapes between the shared input and the GEMM
    absorbed_views: list     # the views read by this GEMM alone (they join the kernel)


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
        gemms = [v.producer if v is not None and v.producer is not None and v.producer.op_type == QUANT_MATMUL
                 else None for v in operands]
        if not any(gemms):
            return None
        nodes = [attention] + [g for g in gemms if g is not None]
        if None in gemms or len({id(v) for v in operands}) != 3:
            missing = [r for r, g in zip(ROLES, gemms) if g is None]
            return self.miss(reasons.UNSUPPORTED_VARIANT, attention, nodes, f"the attention's {', '.join(missing) or 'Q, K, V'} "
                             "operand is not the int8 result of its own QuantMatMulBiasAct projection", operands)
        for role, value in zip(ROLES, operands):
            if single_consumer(value) is not attention:
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
        for gemm, (_, views) in zip(gemms, sources):
            absorbed = []
            for view in reversed(views):             # from the GEMM up, while read by this path alone
                if single_consumer(view.outputs[0]) is None:
                    break
                absorbed.append(view)
            projections.append(Projection(gemm, views, absorbed))
        members = [n for p in projections for n in p.absorbed_views + [p.gemm]] + [attention]
        return ProjectionMatch(list(dict.fromkeys(members)), QUANT_ATTENTION, list(attention.outputs),
                               attention=attention, source=sources[0][0], projections=projections)

    def rewrite(self, graph: Graph, match: ProjectionMatch) -> Node:
        builder = SubGraphBuilder()
        source = builder.ref(match.source)
        for p in match.projections:
            cur = source
            for view in p.views:
                cur = builder.emit(view.op_type, dict(view.attrs), [cur] + [builder.ref(v) for v in view.inputs[1:] if v])
            builder.copy(p.gemm, {0: cur})
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
        attrs["subgraph"] = autofused.encode_subgraph(builder.types_in, builder.ops, outputs)
        return fuse(graph, match.nodes, QUANT_ATTENTION, builder.inputs, match.outputs, attrs, self.pass_name,
                    name=attention.name)
