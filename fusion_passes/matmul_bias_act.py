"""MatMulBiasAct: MatMul or Gemm + bias + optional activation + optional residual Add -> one
MatMulBias*FusionOp (the op type names the activation; see codegen/fused/gemm.py).

Pattern (anchor: MatMul or Gemm with a constant 2-D weight):
    y = MatMul(x, W) + b       b constant, broadcast on the last axis, either operand order;
                               Gemm's own C counts as b (transB and alpha/beta are folded
                               into W and b at compile time)
    y = act(y)                 optional: any canonical activation op (codegen/fused/epilogue.py;
                               the canonical stage has already turned decomposed GELU, SiLU,
                               QuickGelu, HardSwish... into their ops)
    y = y + r                  optional residual: r from elsewhere, same shape
Row views (GPT-2's Conv1D): `Reshape [..,K]->[R,K] -> Gemm -> Reshape [R,N]->[..,N]` with the
same leading dims on both sides is a MatMul of the N-D tensor: the kernel takes the N-D input,
writes the N-D output, and the bias/activation/residual after the second Reshape join it (the
first Reshape stays only if something else reads it).  Reshapes that reorder rows do not count.
A MatMul/Gemm with nothing to absorb is not a candidate.  Misses: the product has other
readers (NF2001), weight not constant (NF2002) or not 2-D / bias not a last-axis vector
(NF2004), Gemm transA=1 (NF2003).  An activation with other readers of its input is simply
not absorbed (the GEMM+bias still is).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import numpy as np

from codegen.fused.epilogue import activation_attrs, is_activation
from codegen.fused.gemm import MATMUL_BIAS_OPS, fused_op_type
from fusion_passes import reasons
from fusion_passes.base import FusionPass, Match, creates_cycle, escaping_values, fuse, producer, single_consumer
from fusion_passes.canonical.idioms import other, sole
from ge.ir import Graph, Node, Value

def match_activation(y: Value):
    """(kernel attrs, nodes, output) of the canonical activation reading `y` alone, or None."""
    node = single_consumer(y)
    if node is None or not is_activation(node) or node.inputs[0] is not y:
        return None
    return activation_attrs(node), [node], node.outputs[0]


def _bias_vector(value: Value, n: int, rank: int) -> Optional[np.ndarray]:
    """A constant that broadcasts along the last axis only, as an (n,) vector."""
    c = value.const
    if c.ndim > rank:
        return None
    if c.size == 1:
        return np.full((n,), c.reshape(()), dtype=c.dtype)
    if c.ndim >= 1 and c.shape[-1] == n and c.size == n:
        return c.reshape(n)
    return None


def _rows(value: Value) -> Optional[int]:
    """prod(shape[:-1]) of a static shape of rank >= 2, else None."""
    shape = value.desc.shape
    return int(np.prod(shape[:-1], dtype=np.int64)) if shape is not None and len(shape) >= 2 else None


def rows_bracket(mm: Node):
    """(flatten, unflatten) when a 2-D GEMM sits between two row views, GPT-2's Conv1D
    `Reshape [...,K]->[R,K] -> Gemm -> Reshape [R,N]->[...,N]` with the same leading dims on
    both sides: that is one MatMul of the N-D tensor, so both Reshapes go into the kernel
    (they are views).  None otherwise."""
    a, y = mm.inputs[0], mm.outputs[0]
    flatten = producer(a, "Reshape")
    unflatten = sole(y, "Reshape")
    if flatten is None or unflatten is None or len(a.desc.shape or ()) != 2 or len(y.desc.shape or ()) != 2:
        return None
    x, z = flatten.inputs[0], unflatten.outputs[0]
    if len(x.desc.shape) < 2 or x.desc.shape[-1] != a.desc.shape[-1] or z.desc.shape[-1] != y.desc.shape[-1]:
        return None
    if tuple(x.desc.shape[:-1]) != tuple(z.desc.shape[:-1]) or _rows(x) != a.desc.shape[0]:
        return None
    return flatten, unflatten


class MatMulBiasActFusionPass(FusionPass):
    pattern_name = "MatMulBiasAct"
    pass_name = "MatMulBiasActFusionPass"
    fused_ops = MATMUL_BIAS_OPS
    anchor_types = ("MatMul", "Gemm")

    def match(self, graph: Graph, mm: Node):
        x, w, out = mm.inputs[0], mm.inputs[1], mm.outputs[0]
        if not np.issubdtype(np.dtype(out.desc.dtype), np.floating):
            return None
        nodes = [mm]
        bracket = rows_bracket(mm)
        if bracket is not None:
            flatten, unflatten = bracket
            x, out = flatten.inputs[0], unflatten.outputs[0]
            shared = len(flatten.outputs[0].uses) > 1 or flatten.outputs[0].is_graph_output
            nodes = ([] if shared else [flatten]) + [mm, unflatten]     # a shared view stays
        gemm_c = mm.inputs[2] if mm.op_type == "Gemm" and len(mm.inputs) > 2 else None
        bias_value = gemm_c
        if gemm_c is None:
            add = next((u for u in out.consumers if u.op_type == "Add"
                        and other(u, out) is not None and other(u, out).is_const), None)
            if add is None:
                return None
            bias_value = other(add, out)
            nodes.append(add)
            if len(out.consumers) > 1 or out.is_graph_output:
                return self.miss(reasons.OTHER_CONSUMERS, mm, nodes,
                                 f"the product {out.name} has readers other than the bias Add", [out])
            out = add.outputs[0]
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
        if len(nodes) == 1:
            return None     # a Gemm with its C and nothing after it is one kernel already
        return self._check(mm, nodes, x, w, gemm_c, bias_value, activation, residual, out)

    def _check(self, mm, nodes, x, w, gemm_c, bias_value, activation, residual, out):
        if not w.is_const:
            return self.miss(reasons.NON_CONSTANT, mm, nodes, "the weight (input B) must be a constant", [w])
        if w.const.ndim != 2:
            return self.miss(reasons.SHAPE_MISMATCH, mm, nodes,
                             f"the weight must be 2-D, it has shape {list(w.const.shape)}", [w])
        if mm.op_type == "Gemm" and int(mm.attrs.get("transA", 0)):
            return self.miss(reasons.UNSUPPORTED_ATTRIBUTE, mm, nodes,
                             "Gemm with transA=1 is not fused (A must be row-major rows)", [x])
        if gemm_c is not None and not gemm_c.is_const:
            return self.miss(reasons.NON_CONSTANT, mm, nodes, "Gemm's C (the bias) must be a constant", [gemm_c])
        n = int(mm.outputs[0].desc.shape[-1])
        bias = _bias_vector(bias_value, n, len(mm.outputs[0].desc.shape))
        if bias is None:
            return self.miss(reasons.SHAPE_MISMATCH, mm, nodes,
                             f"the bias must broadcast along the last axis only (size {n} or 1), it has "
                             f"shape {list(bias_value.const.shape)}", [bias_value, mm.outputs[0]])
        if bias.dtype != np.dtype(out.desc.dtype):
            return self.miss(reasons.DTYPE_MISMATCH, mm, nodes, "the bias dtype must equal the product's",
                             [bias_value, mm.outputs[0]])
        escaping = escaping_values(nodes, [out])
        if escaping:
            return self.miss(reasons.OTHER_CONSUMERS, mm, nodes, "intermediate(s) " + ", ".join(
                v.name for v in escaping) + " are used outside the pattern", escaping)
        if creates_cycle(nodes):
            return self.miss(reasons.WILL_CREATE_CYCLE, mm, nodes,
                             "fusing would create a cycle through the residual input", [residual])
        return GemmMatch(nodes, fused_op_type(activation), [out], mm=mm, x=x, w=w,
                         bias_value=bias_value, bias=bias, activation=activation, residual=residual)

    def rewrite(self, graph: Graph, match: "GemmMatch") -> Node:
        mm = match.mm
        w, bias_value, bias = match.w, match.bias_value, match.bias
        if mm.op_type == "Gemm":
            alpha, beta = float(mm.attrs.get("alpha", 1.0)), float(mm.attrs.get("beta", 1.0))
            weight = w.const.T if int(mm.attrs.get("transB", 0)) else w.const
            if alpha != 1.0 or weight is not w.const:
                w = graph.constant(f"{w.name}/folded", (weight.astype(np.float64) * alpha).astype(w.const.dtype))
            if beta != 1.0 and mm.inputs[2:3] and mm.inputs[2] is bias_value:    # beta scales C only
                bias = (bias.astype(np.float64) * beta).astype(bias.dtype)
                bias_value = None
        if bias_value is None or tuple(bias_value.const.shape) != bias.shape:
            bias_value = graph.constant(f"{mm.name}/bias", bias)
        inputs = [match.x, w, bias_value] + ([match.residual] if match.residual is not None else [])
        attrs = dict(match.activation) or {"activation": ""}
        return fuse(graph, match.nodes, match.fused_op, inputs, match.outputs, attrs, self.pass_name,
                    name=f"{mm.name.rsplit('/', 1)[0] or mm.name}/{match.fused_op}")


@dataclass
class GemmMatch(Match):
    """MatMul/Gemm (between row views) + bias [+ activation] [+ residual Add]."""

    mm: Node                  # the MatMul or Gemm
    x: Value                  # the kernel's input (before the row view, if any)
    w: Value
    bias_value: Value         # the model's bias constant (Gemm's C or the Add's operand)
    bias: np.ndarray          # the bias as an (N,) vector
    activation: dict          # the epilogue's activation attrs ({} for none)
    residual: Optional[Value]
