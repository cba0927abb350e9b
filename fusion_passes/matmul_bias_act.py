"""MatMulBiasAct: a linear layer + bias + optional activation + optional residual Add -> one
MatMulBias*FusionOp (the op type names the activation; see codegen/fused/gemm.py).

Pattern (anchor: the MatMul of a linear layer, fusion_passes/linear.py -- Gemm and GPT-2's
Conv1D reach it as MatMul + Add after canonicalization):
    y = MatMul(x, W) + b       W constant 2-D, b constant broadcast on the last axis, either
                               operand order; b optional when an activation or a residual
                               follows (decoder LLMs' linears have no bias)
    y = act(y)                 optional: any canonical activation op (codegen/fused/epilogue.py;
                               the canonical stage has already turned decomposed GELU, SiLU,
                               QuickGelu, HardSwish... into their ops)
    y = y + r                  optional residual: r from elsewhere, same shape
A MatMul with nothing to absorb is not a candidate; one whose product only meets a residual
Add is (Llama's o_proj and down_proj + residual: an empty bias slot).  Misses: the product
has other readers (NF2001), weight not constant (NF2002) or not 2-D / bias not a last-axis
vector (NF2004), a bias of another dtype (NF2005), a Gemm the canonical form left
(transA=1: NF2003) followed by what would be its epilogue; escaping intermediates and cycles are refused by the pass
runner (fusion_passes/base.py).  An activation with other readers of its input is simply
not absorbed (the GEMM+bias still is).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import numpy as np

from codegen.fused.epilogue import activation_attrs, is_activation
from codegen.fused.gemm import MATMUL_BIAS_OPS, SLOTS, fused_op_type
from fusion_passes import reasons
from fusion_passes.base import FusionPass, Match, fuse, single_consumer
from fusion_passes.canonical.idioms import other, sole
from fusion_passes.linear import Linear, linear_at
from ge.ir import Graph, Node, Value


def match_activation(y: Value):
    """(kernel attrs, nodes, output) of the canonical activation reading `y` alone, or None."""
    node = single_consumer(y)
    if node is None or not is_activation(node) or node.inputs[0] is not y:
        return None
    return activation_attrs(node), [node], node.outputs[0]


class MatMulBiasActFusionPass(FusionPass):
    pattern_name = "MatMulBiasAct"
    pass_name = "MatMulBiasActFusionPass"
    fused_ops = MATMUL_BIAS_OPS
    anchor_types = ("MatMul", "Gemm")

    def match(self, graph: Graph, mm: Node):
        out = mm.outputs[0]
        if not np.issubdtype(np.dtype(out.desc.dtype), np.floating):
            return None
        if mm.op_type == "Gemm":
            return self._left_gemm(mm)
        linear = linear_at(mm)
        if linear is None:
            return self._without_bias(mm)
        nodes, out = list(linear.nodes), linear.output
        act = match_activation(out)
        activation = {}
        if act is not None:
            activation, act_nodes, out = act
            nodes += act_nodes
        residual = None
        radd = sole(out, "Add")
        r = other(radd, out)
        if r is not None and r is not out and not r.is_const and tuple(r.desc.shape) == tuple(out.desc.shape) \
                and tuple(radd.outputs[0].desc.shape) == tuple(out.desc.shape) \
                and np.dtype(r.desc.dtype) == np.dtype(out.desc.dtype):
            residual = r
            nodes.append(radd)
            out = radd.outputs[0]
        if linear.bias is None and not activation and residual is None:
            return self._without_bias(mm)
        return GemmMatch(nodes, fused_op_type(activation), [out], linear=linear, activation=activation,
                         residual=residual)

    def _left_gemm(self, gemm: Node):
        """A Gemm the canonical form left as it is (transA=1 or a computed weight) is one
        kernel; when an activation or Add follows it, say why they stay apart."""
        reader = single_consumer(gemm.outputs[0])
        if reader is None or not (is_activation(reader) or reader.op_type == "Add"):
            return None
        nodes = [gemm, reader]
        if int(gemm.attrs.get("transA", 0)):
            return self.miss(reasons.UNSUPPORTED_ATTRIBUTE, gemm, nodes,
                             "Gemm with transA=1 is not fused (A must be row-major rows)", [gemm.inputs[0]])
        return self.miss(reasons.NON_CONSTANT, gemm, nodes, "the weight (input B) must be a constant",
                         [gemm.inputs[1]])

    def _without_bias(self, mm: Node):
        """A MatMul the linear view does not take with a bias: not a candidate when nothing
        looks like a bias after it, else the reason the bias Add stays separate."""
        out = mm.outputs[0]
        add = next((u for u in out.consumers if u.op_type == "Add" and other(u, out) is not None
                    and other(u, out).is_const), None)
        if add is None:
            return None
        nodes, w, bias = [mm, add], mm.inputs[1], other(add, out)
        if not w.is_const:
            return self.miss(reasons.NON_CONSTANT, mm, nodes, "the weight (input B) must be a constant", [w])
        if w.const.ndim != 2:
            return self.miss(reasons.SHAPE_MISMATCH, mm, nodes,
                             f"the weight must be 2-D, it has shape {list(w.const.shape)}", [w])
        if len(out.consumers) > 1 or out.is_graph_output:
            return self.miss(reasons.OTHER_CONSUMERS, mm, nodes,
                             f"the product {out.name} has readers other than the bias Add", [out])
        if np.dtype(bias.desc.dtype) != np.dtype(out.desc.dtype):
            return self.miss(reasons.DTYPE_MISMATCH, mm, nodes, "the bias dtype must equal the product's",
                             [bias, out])
        n = int(out.desc.shape[-1])
        return self.miss(reasons.SHAPE_MISMATCH, mm, nodes,
                         f"the bias must broadcast along the last axis only (size {n} or 1), it has "
                         f"shape {list(bias.const.shape)}", [bias, out])

    def rewrite(self, graph: Graph, match: "GemmMatch") -> Node:
        linear = match.linear
        mm = linear.matmul
        bias = linear.bias
        if bias is not None and tuple(bias.const.shape) != (linear.width,):
            bias = graph.constant(f"{mm.name}/bias", linear.bias_vector())
        inputs = SLOTS.pack(x=linear.x, w=linear.weight, bias=bias, residual=match.residual)
        attrs = dict(match.activation) or {"activation": ""}
        return fuse(graph, match.nodes, match.fused_op, inputs, match.outputs, attrs, self.pass_name,
                    name=f"{mm.name.rsplit('/', 1)[0] or mm.name}/{match.fused_op}")


@dataclass
class GemmMatch(Match):
    """A linear layer [with its bias] [+ activation] [+ residual Add] (at least one of the three)."""

    linear: Linear
    activation: dict          # the epilogue's activation attrs ({} for none)
    residual: Optional[Value]
