"""LayerNormMatMul: a LayerNormalization whose output feeds a GEMM -> LayerNormMatMulFusionOp.

Anchor: LayerNormalization (the ONNX op, or what LayerNormFusionPass recognised).  The GEMM
is a MatMul with a constant 2-D weight or a MatMulBias*FusionOp (so bias, activation and
residual come along), reading the normalized tensor as its input A.

Several consumers (decision, see README_layernorm.md): the fused kernel has two outputs,
the GEMM result and the normalized tensor, written once for the other readers (post-LN
BERT: the next residual Add; pre-LN: the sibling Q/K/V GEMMs or the attention kernel).  The
LayerNorm kernel disappears and the fused GEMM reads the normalized rows from the on-chip
buffer instead of global memory.  With several GEMM readers the first (in use order) is
fused; the others read the written normalized output.  Recomputing the normalization in
each GEMM was rejected: it repeats the LayerNorm's vector work and reads x once per GEMM.

Misses: LayerNorm over more than the last axis (NF2003: a GEMM row tile must hold whole
normalized rows), Mean/InvStdDev outputs in use (NF2003), the GEMM reading the normalized
tensor through another input or a path back into the group (NF1002), only MatMul readers
with a non-constant or non-2-D weight (NF2002).  A LayerNorm left alone stays one kernel.
"""
from __future__ import annotations

from dataclasses import dataclass

from codegen.fused.epilogue import ACT_PREFIX, EPILOGUE_ATTRS
from codegen.fused.gemm import MATMUL_BIAS_OPS
from codegen.fused.layer_norm import NORM_ATTRS, OP_TYPE
from fusion_passes import reasons
from fusion_passes.base import FusionPass, Match, fuse
from fusion_passes.linear import linear_at
from ge.ir import Graph, Node, Value
from ge.ops.common import normalize_axis


def _gemm_reader(node: Node, norm: Value) -> bool:
    """A fused GEMM, or a linear layer's MatMul (fusion_passes/linear.py), reading `norm` as x."""
    if not node.inputs or node.inputs[0] is not norm:
        return False
    return node.op_type in MATMUL_BIAS_OPS or linear_at(node) is not None


class LayerNormMatMulFusionPass(FusionPass):
    pattern_name = "LayerNormMatMul"
    pass_name = "LayerNormMatMulFusionPass"
    fused_ops = (OP_TYPE,)
    anchor_types = ("LayerNormalization",)

    def match(self, graph: Graph, ln: Node):
        norm = ln.outputs[0]
        readers = [u for u in norm.consumers if _gemm_reader(u, norm)]
        if not readers:
            matmuls = [u for u in norm.consumers if u.op_type == "MatMul" and u.inputs[0] is norm]
            if matmuls:
                return self.miss(reasons.NON_CONSTANT, ln, [ln, matmuls[0]],
                                 f"the MatMul reading the {ln.op_type} needs a constant 2-D weight",
                                 [matmuls[0].inputs[1]])
            return None
        gemm = readers[0]
        nodes = [ln, gemm]
        rank = len(norm.desc.shape)
        if normalize_axis(int(ln.attrs.get("axis", -1)), rank) != rank - 1:
            return self.miss(reasons.UNSUPPORTED_ATTRIBUTE, ln, nodes,
                             f"the {ln.op_type} must normalize the last axis only (the GEMM's K), "
                             f"it has axis={ln.attrs.get('axis')} on rank {rank}", [norm])
        if any(v.uses or v.is_graph_output for v in ln.outputs[1:]):
            return self.miss(reasons.UNSUPPORTED_ATTRIBUTE, ln, nodes,
                             "the LayerNorm's Mean/InvStdDev outputs are used", ln.outputs[1:])
        if any(v is norm for v in gemm.inputs[1:]):
            return self.miss(reasons.WILL_CREATE_CYCLE, ln, nodes,
                             "the GEMM reads the normalized tensor again (bias/residual input), "
                             "fusing would create a cycle", [norm])
        emit = norm.is_graph_output or len(norm.consumers) > 1
        return LayerNormGemmMatch(nodes, self.fused_ops[0], [gemm.outputs[0]] + ([norm] if emit else []),
                                  ln=ln, gemm=gemm, emit_normalized=emit)

    def rewrite(self, graph: Graph, match: "LayerNormGemmMatch") -> Node:
        ln, gemm = match.ln, match.gemm
        ln_in = list(ln.inputs[:3]) + [None] * (3 - len(ln.inputs[:3]))
        gemm_in = list(gemm.inputs[1:4]) + [None] * (3 - len(gemm.inputs[1:4]))
        inputs = ln_in + gemm_in
        while inputs and inputs[-1] is None:
            inputs.pop()
        attrs = {k: ln.attrs[k] for k in NORM_ATTRS if k in ln.attrs}
        attrs.update({"axis": -1, "epsilon": float(ln.attrs.get("epsilon", 1e-5)), "activation": "",
                      "emit_normalized": int(match.emit_normalized)})
        if gemm.op_type != "MatMul":            # a fused GEMM: its epilogue comes along
            attrs.update({k: v for k, v in gemm.attrs.items() if k in EPILOGUE_ATTRS or k.startswith(ACT_PREFIX)})
        base = gemm.name.rsplit("/", 1)[0] or gemm.name
        return fuse(graph, match.nodes, match.fused_op, inputs, match.outputs, attrs, self.pass_name,
                    name=f"{base}/{match.fused_op}")


@dataclass
class LayerNormGemmMatch(Match):
    """A LayerNormalization over the last axis and the GEMM that reads it; `outputs` are
    the GEMM's output and, when something else reads it too, the normalized tensor."""

    ln: Node
    gemm: Node                # MatMul with a constant 2-D weight, or a MatMulBias*FusionOp
    emit_normalized: bool
