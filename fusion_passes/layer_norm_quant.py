"""LayerNormQuant: a LayerNormalization read by quantizers -> LayerNormQuantFusionOp
(codegen/fused/layer_norm_quant.py), one vector kernel that writes int8.

Pattern (anchor: LayerNormalization, the ONNX op or what LayerNormFusionPass recognised,
normalizing the last axis), as the three int8 forms write a transformer's LayerNorm:
    LN -> QuantizeLinear -> [int8 views, DQ ...]                  (QDQ, after canonical views)
    LN -> { Reshape -> QuantizeLinear, QuantizeLinear, ... }      (QOperator: one per reader)
    LN -> AscendQuant, LN -> float readers (the residual Add)    (AMCT)
Every quantizing reader (a per-tensor QuantizeLinear to an integer type or an AscendQuant,
straight or through one constant-shape Reshape read by it alone) joins the kernel; other
readers (a float residual, a graph output) get the normalized tensor as a second output.
Readers that compute the same int8 tensor (QOperator quantizes the Q, K and V inputs apart,
with equal views and parameters) share one output, so the projections read one tensor.
Misses (a LayerNorm some quantizer reads, which stays two kernels): the quantizer is per
axis or blocked, or quantizes to a float type (NF2006); the LayerNorm normalizes more than
the last axis or its Mean/InvStdDev are read (NF2003).  A LayerNorm no quantizer reads is
not a candidate (the float LayerNorm passes own it).
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from codegen.fused import autofused
from codegen.fused.layer_norm_quant import OP_TYPE
from fusion_passes import reasons
from fusion_passes.base import FusionPass, Match, fuse, single_consumer
from fusion_passes.quant_chain import QUANTIZERS, per_tensor_unblocked
from fusion_passes.subgraph import SubGraphBuilder
from ge.ir import Graph, Node, Value
from ge.ops.common import normalize_axis


@dataclass
class LayerNormQuantMatch(Match):
    ln: Node = None
    chains: list = field(default_factory=list)      # [view..., quantizer] per quantizing reader
    emit_normalized: bool = False
    duplicates: list = field(default_factory=list)  # (chain, the equal chain whose output it reads)


def _quantizer(node: Node, value: Value) -> bool:
    return node.op_type in QUANTIZERS and node.inputs[0] is value


def _quant_chain(node: Node, norm: Value):
    """[quantizer] or [Reshape, quantizer] if `node` quantizes `norm`, else None."""
    if _quantizer(node, norm):
        return [node]
    if node.op_type == "Reshape" and node.inputs[0] is norm and all(v is None or v.is_const for v in node.inputs[1:]):
        q = single_consumer(node.outputs[0])
        if q is not None and _quantizer(q, node.outputs[0]):
            return [node, q]
    return None


def _same_chain(a: list, b: list) -> bool:
    """Two readers that compute the same int8 tensor: the same views and the same quantizer
    (QOperator graphs quantize the Q, K and V inputs apart, with equal parameters)."""
    if len(a) != len(b) or any(x.outputs[0].is_graph_output for x in a + b):
        return False
    for x, y in zip(a, b):
        if x.op_type != y.op_type or tuple(x.outputs[0].desc.shape) != tuple(y.outputs[0].desc.shape) or \
                np.dtype(x.outputs[0].desc.dtype) != np.dtype(y.outputs[0].desc.dtype):
            return False
        if autofused.to_json(x.attrs) != autofused.to_json(y.attrs):
            return False
    return True


def _unsupported(q: Node):
    """Why the kernel cannot take this quantizer, or None."""
    if q.op_type != "QuantizeLinear":
        return None
    if not per_tensor_unblocked(q):
        return "a per-axis or blocked QuantizeLinear (the kernel quantizes each row with one scale)"
    if np.dtype(q.outputs[0].desc.dtype).kind not in "iu":
        return f"a QuantizeLinear to {np.dtype(q.outputs[0].desc.dtype)}, not to an integer type"
    return None


class LayerNormQuantFusionPass(FusionPass):
    pattern_name = "LayerNormQuant"
    pass_name = "LayerNormQuantFusionPass"
    fused_ops = (OP_TYPE,)
    anchor_types = ("LayerNormalization",)

    def match(self, graph: Graph, ln: Node):
        norm = ln.outputs[0]
        chains, others = [], []
        for reader in norm.consumers:
            chain = _quant_chain(reader, norm)
            if chain is None:
                others.append(reader)
            elif chain not in chains:
                chains.append(chain)
        if not chains:
            return None
        nodes = [ln] + [n for c in chains for n in c]
        for chain in chains:
            why = _unsupported(chain[-1])
            if why:
                return self.miss(reasons.UNSUPPORTED_VARIANT, ln, nodes, f"the LayerNorm's quantizer is {why}",
                                 [chain[-1].outputs[0]])
        rank = len(norm.desc.shape)
        if normalize_axis(int(ln.attrs.get("axis", -1)), rank) != rank - 1:
            return self.miss(reasons.UNSUPPORTED_ATTRIBUTE, ln, nodes, "the LayerNorm must normalize the last axis "
                             "only (the kernel quantizes whole normalized rows)", [norm])
        if any(v is not None and v.uses for v in ln.outputs[1:]):
            return self.miss(reasons.UNSUPPORTED_ATTRIBUTE, ln, nodes, "the LayerNorm's Mean/InvStdDev outputs are "
                             "read; the kernel writes only the normalized and quantized rows", ln.outputs[1:])
        emit = bool(others) or norm.is_graph_output
        kept, duplicates = [], []
        for chain in chains:
            first = next((k for k in kept if _same_chain(k, chain)), None)
            (kept.append(chain) if first is None else duplicates.append((chain, first)))
        outputs = [c[-1].outputs[0] for c in kept] + ([norm] if emit else [])
        nodes = [ln] + [n for c in kept for n in c]
        return LayerNormQuantMatch(nodes, OP_TYPE, outputs, ln=ln, chains=kept, emit_normalized=emit,
                                   duplicates=duplicates)

    def refusal(self, match: LayerNormQuantMatch):
        """The common checks, with the duplicate readers counted in: they go too, their
        outputs' readers move to the equal output."""
        whole = Match(match.nodes + [n for chain, _ in match.duplicates for n in chain], match.fused_op,
                      match.outputs + [chain[-1].outputs[0] for chain, _ in match.duplicates])
        whole.anchor_node = match.anchor_node
        return super().refusal(whole)

    def rewrite(self, graph: Graph, match: LayerNormQuantMatch) -> Node:
        origin = []
        for chain, first in match.duplicates:      # one int8 tensor for readers of equal ones
            graph.replace_all_uses_with(chain[-1].outputs[0], first[-1].outputs[0])
            for node in reversed(chain):
                origin += [n for n in node.origin if n not in origin]
                graph.remove_node(node)
        builder = SubGraphBuilder()
        ln = match.ln
        builder.copy(ln)
        norm_ref = builder.refs[id(ln.outputs[0])]
        for chain in match.chains:
            cur = norm_ref
            for node in chain:
                builder.copy(node, {0: cur})
                cur = builder.refs[id(node.outputs[0])]
        out = [builder.refs[id(v)] for v in match.outputs]
        attrs = {"subgraph": builder.encode(out),
                 "emit_normalized": int(match.emit_normalized)}
        fused = fuse(graph, match.nodes, OP_TYPE, builder.inputs, match.outputs, attrs, self.pass_name)
        fused.provenance["origin"] += [n for n in origin if n not in fused.provenance["origin"]]
        return fused
