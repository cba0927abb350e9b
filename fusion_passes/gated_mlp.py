"""GatedMLP: a decoder's gated linear unit -> one GEMM with the gate in its epilogue.

Pattern (anchor: the Mul), as Llama, Qwen2, Mistral (SwiGLU), Gemma (GeGLU, tanh form) and
T5 v1.1 (GeGLU) write their MLP, either Mul operand order:

    h = act(x @ Wg [+ bg]) * (x @ Wu [+ bu])      act: a canonical activation (Swish for
                                                  SiLU, Gelu, Relu, Sigmoid: epilogue.GLU_NAMES)

The gate and up projections are linear layers (fusion_passes/linear.py: a constant 2-D
weight, an optional last-axis bias) reading the same x, with weights of one shape.  The
rewrite packs them into one weight [K, 2I] (gate columns first; a deferred constant,
ge/deferred.py: packed row block by row block as the .om is written, never held whole) and
one bias (a missing half is zeros, none when both are missing) and emits MatMulBias{SwiGlu,GeGlu,...}FusionOp
whose epilogue computes act(g) * u on the accumulator (codegen/fused/epilogue.py `gate`):
one GEMM reads x once and writes h once.  What follows is left to the passes after it:
MatMulBiasAct takes the down projection with the residual Add, and Layer/RmsNormMatMul the
norm in front of the packed GEMM, so a pre-norm MLP is two kernels.

Decision (issue 10: one kernel, or GEMMs with the gate in the epilogue), by the cost model:
`python bench/bench_gated_mlp.py` prices both from the kernels' own work rules (float16,
RMSNorm in front, residual after).  A whole-MLP kernel must pick how its cores share the
work: owning whole rows (all of I) leaves cores idle below 16 x cores tokens, splitting I
makes every core add a partial [rows, hidden] sum into the output (charged as fp32 writes;
the cost model has no cross-core reduction).  First decided on the cost model before d941fe8
(one kernel 4-22x slower at one token with rows owned, 2.8x at 2048 tokens with I split; the
better split saved about one launch, 0.4-1.3% on Llama-7B's MLP): two GEMMs.  On the cost
model of d941fe8 (work split over cores, pipelined MTE/compute) the same bench prices the
better one-kernel split lower at every size on Ascend910 (sweep MLP 512x1408: 7.7 vs 11.4 us
at 1 token, 41.9 vs 58.9 at 2048; Llama-7B's: 262.7 vs 274.3, 2134.9 vs 2211.4, i.e. 3-4%),
but both one-kernel prices are optimistic: the row-owning form is priced with the planner
free to split columns among its cores (a row-owning core streams all of Wg|Wu and Wd), and
the split-I form's reduction is priced as writes only.  So: still two GEMMs, the gate in the
first one's epilogue (they reuse the norm prologue and the residual epilogue every other
linear layer uses); a whole-MLP kernel with a per-shape split, priced with its weight
streaming and reduction, is the open follow-up.

Misses (each counted; the anchor Mul's structure matched): an up projection of the same x
whose weight is computed or not 2-D (NF2002), weights of different shapes (NF2004) or not
of the output's dtype (NF2005); the pass runner refuses an intermediate read
elsewhere (NF2001, e.g. the gate's activation kept for another use) and a cycle (NF1002).
A projection with a computed weight is no linear layer (not a candidate).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import numpy as np

from codegen.fused.epilogue import GLU_NAMES, activation_attrs, is_activation
from codegen.fused.gemm import SLOTS, fused_op_type
from fusion_passes import reasons
from fusion_passes.base import FusionPass, Match, fuse
from fusion_passes.linear import Linear, linear_producing
from ge.deferred import ColumnConcat
from ge.ir import Graph, Node, Value

FUSED_OPS = tuple(f"MatMulBias{name}FusionOp" for name in GLU_NAMES.values())


def _bias_vector(linear: Linear, dtype) -> np.ndarray:
    """The bias as a [width] vector, zeros when the linear layer has none."""
    bias = linear.bias_vector()
    return np.zeros((linear.width,), dtype) if bias is None else bias.astype(dtype, copy=False)


class GatedMlpFusionPass(FusionPass):
    pattern_name = "GatedMLP"
    pass_name = "GatedMlpFusionPass"
    fused_ops = FUSED_OPS
    anchor_types = ("Mul",)

    def match(self, graph: Graph, mul: Node):
        if len(mul.inputs) != 2 or mul.inputs[0] is mul.inputs[1]:
            return None
        for gate_side in (0, 1):
            act = mul.inputs[gate_side].producer
            if act is None or not is_activation(act):
                continue
            gate, up_value = linear_producing(act.inputs[0]), mul.inputs[1 - gate_side]
            if gate is None:
                continue
            up = linear_producing(up_value)
            if up is not None and up.x is gate.x and up.matmul is not gate.matmul:
                return self._check(mul, act, gate, up)
            computed = up_value.producer
            if up is None and computed is not None and computed.op_type == "MatMul" and computed.inputs[0] is gate.x:
                return self.miss(reasons.NON_CONSTANT, mul, gate.nodes + [act, computed, mul],
                                 f"the up projection's weight {computed.inputs[1].name} must be a constant 2-D "
                                 "weight to be packed with the gate's", [computed.inputs[1]])
        return None

    def _check(self, mul: Node, act: Node, gate: Linear, up: Linear):
        nodes = gate.nodes + [act] + up.nodes + [mul]
        out = mul.outputs[0]
        if gate.weight.const.shape != up.weight.const.shape:
            return self.miss(reasons.SHAPE_MISMATCH, mul, nodes,
                             f"the gate and up weights must have one shape, they are "
                             f"{list(gate.weight.const.shape)} and {list(up.weight.const.shape)}",
                             [gate.weight, up.weight])
        dtype = np.dtype(out.desc.dtype)
        if gate.weight.const.dtype != dtype or up.weight.const.dtype != dtype:
            return self.miss(reasons.DTYPE_MISMATCH, mul, nodes, "the weights must have the output's dtype",
                             [gate.weight, up.weight, out])
        if tuple(out.desc.shape) != tuple(up.output.desc.shape):
            return self.miss(reasons.SHAPE_MISMATCH, mul, nodes,
                             "the gated product broadcasts the projections to another shape", [out])
        attrs = dict(activation_attrs(act), gate=1)
        has_bias = gate.bias is not None or up.bias is not None
        bias = np.concatenate([_bias_vector(gate, dtype), _bias_vector(up, dtype)]) if has_bias else None
        return GatedMlpMatch(nodes, fused_op_type(attrs), [out], x=gate.x,
                             weight=ColumnConcat([gate.weight.const, up.weight.const]), bias=bias,
                             attrs=attrs)

    def rewrite(self, graph: Graph, match: "GatedMlpMatch") -> Node:
        base = match.nodes[0].name.rsplit("/", 1)[0] or match.nodes[0].name
        w = graph.constant(f"{base}/gate_up.weight", match.weight)
        b = graph.constant(f"{base}/gate_up.bias", match.bias) if match.bias is not None else None
        return fuse(graph, match.nodes, match.fused_op, SLOTS.pack(x=match.x, w=w, bias=b), match.outputs,
                    match.attrs,
                    self.pass_name, name=f"{base}/{match.fused_op}")


@dataclass
class GatedMlpMatch(Match):
    """act(x @ Wg + bg) * (x @ Wu + bu) with the weights packed [Wg | Wu]."""

    x: Value
    weight: ColumnConcat      # [K, 2I], packed when its values are read or written (ge/deferred.py)
    bias: Optional[np.ndarray]   # [2I] or None
    attrs: dict               # the epilogue's: activation, act_*, gate=1
