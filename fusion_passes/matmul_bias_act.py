"""MatMulBiasAct: MatMul or Gemm + bias + optional activation + optional residual Add -> one
MatMulBias*FusionOp (the op type names the activation; see codegen/fused/gemm.py).

Pattern (anchor: MatMul or Gemm with a constant 2-D weight):
    y = MatMul(x, W) + b       b constant, broadcast on the last axis, either operand order;
                               Gemm's own C counts as b (transB and alpha/beta are folded
                               into W and b at compile time)
    y = act(y)                 optional: Relu, Sigmoid, Tanh, Gelu op (none/tanh), GELU from
                               Erf  x*0.5*(1+erf(x/sqrt2))  and tanh-GELU
                               0.5*x*(1+tanh(sqrt(2/pi)*(x+0.044715*x^3))), with the 0.5
                               placed anywhere in the product and either operand orders
    y = y + r                  optional residual: r from elsewhere, same shape
Row views (GPT-2's Conv1D): `Reshape [..,K]->[R,K] -> Gemm -> Reshape [R,N]->[..,N]` with the
same leading dims on both sides is a MatMul of the N-D tensor: the kernel takes the N-D input,
writes the N-D output, and the bias/activation/residual after the second Reshape join it (the
first Reshape stays only if something else reads it).  Reshapes that reorder rows do not count.
A MatMul/Gemm with nothing to absorb is not a candidate.  Misses: the product has other
readers (NF2001), weight not constant (NF2002) or not 2-D / bias not a last-axis vector
(NF2004), Gemm transA=1 (NF2003).  An activation subgraph whose constants are not GELU's,
or whose intermediates have other readers, is simply not absorbed (the GEMM+bias still is).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Optional

import numpy as np

from codegen.fused.gemm import FUSED_OP_BY_ACTIVATION
from fusion_passes import reasons
from fusion_passes.base import (FusionPass, Match, creates_cycle, escaping_values, fuse, operands,
                                producer, scalar_const, single_consumer)
from ge.ir import Graph, Node, Value

SQRT2 = math.sqrt(2.0)
TANH_GELU_SCALE = math.sqrt(2.0 / math.pi)
TANH_GELU_CUBIC = 0.044715
SIMPLE_ACTIVATIONS = {"Relu": "Relu", "Sigmoid": "Sigmoid", "Tanh": "Tanh"}


def _close(value: Optional[Value], target: float) -> bool:
    """`value` is a one-element constant equal to `target` as written in its own dtype: within
    1e-5 relative, or one ulp of a coarser dtype (float16's 0.044715 is off by 5e-4).  A
    looser match would let almost-GELU graphs fuse into a kernel computing exact GELU."""
    c = scalar_const(value)
    if c is None:
        return False
    dtype = value.const.dtype
    eps = float(np.finfo(dtype).eps) if np.issubdtype(dtype, np.floating) else 0.0
    return abs(c - target) <= max(1e-5, eps) * abs(target)


def _sole(value: Value, op_type: str) -> Optional[Node]:
    node = single_consumer(value)
    return node if node is not None and node.op_type == op_type else None


def _other(node: Optional[Node], value: Value) -> Optional[Value]:
    """The other operand of a binary commutative `node` one of whose inputs is `value`."""
    pair = operands(node, lambda v: v is value) if node is not None else None
    return pair.other if pair else None


def _half_product(y: Value, p: Value):
    """0.5 * y * p written with two Muls in any grouping: (output, nodes) or None."""
    m1 = _sole(p, "Mul")
    o = _other(m1, p)
    if o is None:
        return None
    if o is y or _close(o, 0.5):
        m2 = _sole(m1.outputs[0], "Mul")
        last = _other(m2, m1.outputs[0])
        if last is not None and ((o is y and _close(last, 0.5)) or (o is not y and last is y)):
            return m2.outputs[0], [m1, m2]
        return None
    m0 = producer(o, "Mul")
    if m0 is not None and _close(_other(m0, y), 0.5):
        return m1.outputs[0], [m0, m1]
    return None


def _erf_gelu(y: Value):
    for scale in y.consumers:
        if scale.op_type == "Div" and scale.inputs[0] is y and _close(scale.inputs[1], SQRT2):
            pass
        elif not (scale.op_type == "Mul" and _close(_other(scale, y), 1 / SQRT2)):
            continue
        erf = _sole(scale.outputs[0], "Erf")
        add = erf and _sole(erf.outputs[0], "Add")
        if add is None or not _close(_other(add, erf.outputs[0]), 1.0):
            continue
        product = _half_product(y, add.outputs[0])
        if product:
            out, halving = product
            return out, [scale, erf, add] + halving
    return None


def _cube(y: Value):
    """y^3 as Pow(y, 3) or Mul(Mul(y, y), y): (value, nodes) for each way it is computed."""
    for node in y.consumers:
        if node.op_type == "Pow" and node.inputs[0] is y and _close(node.inputs[1], 3.0):
            yield node.outputs[0], [node]
        if node.op_type == "Mul" and node.inputs[0] is y and node.inputs[1] is y:
            m = _sole(node.outputs[0], "Mul")
            if m is not None and _other(m, node.outputs[0]) is y:
                yield m.outputs[0], [node, m]


def _tanh_gelu(y: Value):
    for cube, nodes in _cube(y):
        scaled = _sole(cube, "Mul")
        inner = scaled and _close(_other(scaled, cube), TANH_GELU_CUBIC) and _sole(scaled.outputs[0], "Add")
        if not inner or _other(inner, scaled.outputs[0]) is not y:
            continue
        mul = _sole(inner.outputs[0], "Mul")
        tanh = mul and _close(_other(mul, inner.outputs[0]), TANH_GELU_SCALE) and _sole(mul.outputs[0], "Tanh")
        add = tanh and _sole(tanh.outputs[0], "Add")
        if not add or not _close(_other(add, tanh.outputs[0]), 1.0):
            continue
        product = _half_product(y, add.outputs[0])
        if product:
            out, halving = product
            return out, nodes + [scaled, inner, mul, tanh, add] + halving
    return None


def match_activation(y: Value):
    """(activation name, nodes, output) of an activation applied to `y` whose nodes are the
    only readers of `y` and of each other, or None."""
    if y.is_graph_output or not y.uses:
        return None
    users = y.consumers
    if len(users) == 1 and users[0].inputs[0] is y:
        node = users[0]
        if node.op_type in SIMPLE_ACTIVATIONS:
            return SIMPLE_ACTIVATIONS[node.op_type], [node], node.outputs[0]
        if node.op_type == "Gelu":
            approx = node.attrs.get("approximate", "none")
            approx = approx.decode() if isinstance(approx, bytes) else approx
            return ("FastGelu" if approx == "tanh" else "Gelu"), [node], node.outputs[0]
    for name, finder in (("Gelu", _erf_gelu), ("FastGelu", _tanh_gelu)):
        found = finder(y)
        if found:
            out, nodes = found
            if not escaping_values(nodes, [out]) and {id(u) for u in users} <= {id(n) for n in nodes} \
                    and tuple(out.desc.shape) == tuple(y.desc.shape):    # a constant may broadcast y up
                return name, nodes, out
    return None


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
    unflatten = _sole(y, "Reshape")
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
    fused_ops = tuple(FUSED_OP_BY_ACTIVATION.values())
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
                        and _other(u, out) is not None and _other(u, out).is_const), None)
            if add is None:
                return None
            bias_value = _other(add, out)
            nodes.append(add)
            if len(out.consumers) > 1 or out.is_graph_output:
                return self.miss(reasons.OTHER_CONSUMERS, mm, nodes,
                                 f"the product {out.name} has readers other than the bias Add", [out])
            out = add.outputs[0]
        act = match_activation(out)
        activation = ""
        if act is not None:
            activation, act_nodes, out = act
            nodes += act_nodes
        residual = None
        radd = _sole(out, "Add")
        r = _other(radd, out)
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
        return GemmMatch(nodes, FUSED_OP_BY_ACTIVATION[activation], [out], mm=mm, x=x, w=w,
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
        return fuse(graph, match.nodes, match.fused_op, inputs, match.outputs,
                    {"activation": match.activation}, self.pass_name,
                    name=f"{mm.name.rsplit('/', 1)[0] or mm.name}/{match.fused_op}")


@dataclass
class GemmMatch(Match):
    """MatMul/Gemm (between row views) + bias [+ activation] [+ residual Add]."""

    mm: Node                  # the MatMul or Gemm
    x: Value                  # the kernel's input (before the row view, if any)
    w: Value
    bias_value: Value         # the model's bias constant (Gemm's C or the Add's operand)
    bias: np.ndarray          # the bias as an (N,) vector
    activation: str           # "" | Relu | Sigmoid | Tanh | Gelu | FastGelu
    residual: Optional[Value]
