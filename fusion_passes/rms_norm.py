"""RMSNorm recognition: the decomposed root-mean-square norm of decoder LLMs becomes one
RMSNormalization (ONNX opset 23's op, om type RmsNorm).

transformers' LlamaRMSNorm (and Qwen2's, Mistral's, T5's LayerNorm, Gemma's with 1 + w
folded) computes `w * (x / sqrt(mean(x^2) + eps))`, which the exporters write as (anchor:
the ReduceMean), at any opset:

    ms  = ReduceMean(Pow(x, 2))            (or Mul(x, x))
    t   = Add(ms, eps)                     either operand order
    n   = Mul(x, Div(1, Sqrt(t)))          TorchScript's rsqrt
        | Mul(x, Reciprocal(Sqrt(t)))      dynamo's rsqrt
        | Div(x, Sqrt(t))                  x / sqrt(...)
        | Mul(x, Pow(t, -0.5))
    y   = Mul(Cast(n), w)                  the Cast and w optional; either operand order

Cast wrappers: a float16 model computes the statistics in float32 -- `Cast(x_in -> float32)`
before and `Cast(-> x_in's type)` after -- which is exactly the op's stash_type: the node
reads x_in and keeps the float32 statistics (stash_type 1).  Without the wrapper the
statistics stay in x's type (stash_type = that type), so the op computes what the graph
did.  In float32 models both Casts are no-ops the importer already dropped.  A bfloat16
model's wrapper is not taken (ml_dtypes' bfloat16 is no numpy floating type, and
ge/ops/normalization.py widens only float16 for stash_type 1): the norm runs on the
float32 x and the Casts stay outside.

Constraints, each a Miss: keepdims=1 and the reduced axes trailing (NF2003), the exponents 2
and -0.5 (NF2006), eps a scalar constant (NF2002), float data (NF2005), nothing broadcast
above x's shape (NF2004); the pass runner refuses an intermediate read outside (NF2001) and
a cycle (NF1002).  w is
absorbed only when constant, of the output dtype and varying over the normalized axes
alone (else the Mul stays outside and the core still fuses: the op's scale is then 1).
LayerNormFusionPass runs first, so a LayerNorm's own variance chain (an RMS norm of x -
mean) is never taken here while its pattern holds.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import numpy as np
from onnx import helper

from fusion_passes import reasons
from fusion_passes.base import FusionPass, Match, fuse, operands, scalar_const, single_consumer
from fusion_passes.layer_norm import AffineParam, affine_constant, affine_param, trailing_reduce_miss
from ge.ir import Graph, Node, Value

FUSED_OP = "RMSNormalization"


def _square_of(node: Optional[Node]) -> Optional[Value]:
    """x when `node` is Pow(x, c) (the exponent is checked later) or Mul(x, x)."""
    if node is None:
        return None
    if node.op_type == "Pow" and len(node.inputs) == 2:
        return node.inputs[0]
    if node.op_type == "Mul" and len(node.inputs) == 2 and node.inputs[0] is node.inputs[1]:
        return node.inputs[0]
    return None


def _times_x(value: Value, x: Value) -> Optional[Node]:
    """The Mul reading `value` and x (either order), value's only reader."""
    node = single_consumer(value)
    if node is None or node.op_type != "Mul":
        return None
    pair = operands(node, lambda v: v is x)
    return node if pair is not None and pair.other is value else None


def _normalized(t: Value, x: Value) -> Optional[tuple]:
    """(nodes, exponent node or None, n) when n = x * t^-0.5, written any of the four ways."""
    step = single_consumer(t)
    if step is None:
        return None
    if step.op_type == "Pow" and step.inputs[0] is t:               # Mul(x, Pow(t, -0.5))
        mul = _times_x(step.outputs[0], x)
        return ([step, mul], step, mul.outputs[0]) if mul is not None else None
    if step.op_type != "Sqrt":
        return None
    std = step.outputs[0]
    inv = single_consumer(std)
    if inv is None:
        return None
    if inv.op_type == "Div" and inv.inputs[1] is std:
        if inv.inputs[0] is x:                                          # Div(x, Sqrt(t))
            return [step, inv], None, inv.outputs[0]
        one = scalar_const(inv.inputs[0])
        if one != 1.0:
            return None
    elif inv.op_type != "Reciprocal":
        return None
    mul = _times_x(inv.outputs[0], x)                                  # Mul(x, 1/Sqrt(t))
    return ([step, inv, mul], None, mul.outputs[0]) if mul is not None else None


def _cast_to(value: Value) -> Optional[Node]:
    node = single_consumer(value)
    return node if node is not None and node.op_type == "Cast" else None


def _is_float(dtype) -> bool:
    return dtype is not None and np.issubdtype(np.dtype(dtype), np.floating)


class RmsNormFusionPass(FusionPass):
    pattern_name = "RmsNorm"
    pass_name = "RmsNormFusionPass"
    fused_ops = (FUSED_OP,)
    anchor_types = ("ReduceMean",)

    def match(self, graph: Graph, rm: Node):
        sq = rm.inputs[0].producer
        x = _square_of(sq)
        if x is None:
            return None
        add = single_consumer(rm.outputs[0])
        if add is None or add.op_type != "Add" or operands(add, lambda v: v is rm.outputs[0]) is None:
            return None
        found = _normalized(add.outputs[0], x)
        if found is None:
            return None
        tail, exponent, n = found
        core = [sq, rm, add] + tail
        return self._check(rm, core, x, sq, exponent, add, n)

    def _check(self, rm, core, x, sq, exponent, add, n):
        rank = len(x.desc.shape)
        missed, axes = trailing_reduce_miss(self, rm, rm, core, x)
        if missed is not None:
            return missed
        for node, want in ((sq, 2.0), (exponent, -0.5)):
            if node is None or node.op_type != "Pow":
                continue
            value = scalar_const(node.inputs[1])
            if value is None:
                return self.miss(reasons.NON_CONSTANT, rm, core, f"the exponent of {node.name} must be a constant",
                                 [node.inputs[1]])
            if value != want:
                return self.miss(reasons.UNSUPPORTED_VARIANT, rm, core,
                                 f"the exponent of {node.name} must be {want:g} (root mean square), got {value:g}",
                                 [node.inputs[1]])
        eps_value = operands(add, lambda v: v is rm.outputs[0]).other
        eps = scalar_const(eps_value)
        if eps is None:
            return self.miss(reasons.NON_CONSTANT, rm, core,
                             "epsilon (the Add before the square root) must be a scalar constant", [eps_value])
        if not _is_float(x.desc.dtype):
            return self.miss(reasons.DTYPE_MISMATCH, rm, core, "the input must be a float tensor", [x])
        if tuple(n.desc.shape) != tuple(x.desc.shape):
            return self.miss(reasons.SHAPE_MISMATCH, rm, core,
                             f"the normalized tensor {list(n.desc.shape)} is not the input's shape "
                             f"{list(x.desc.shape)}: a constant (epsilon, exponent) broadcasts it to a higher rank",
                             [x, n])

        nodes, out, source = list(core), n, x
        wrapper = self._cast_wrapper(x, n, core)
        if wrapper is not None:
            first, last = wrapper
            nodes = [first] + nodes + [last]
            source, out = first.inputs[0], last.outputs[0]
        k = len(axes)
        gamma = None
        step = single_consumer(out)
        if step is not None and step.op_type == "Mul":
            gamma = affine_param(step, out, source, k)
            if gamma is not None:
                nodes.append(step)
                out = step.outputs[0]

        stash = helper.np_dtype_to_tensor_dtype(np.dtype(x.desc.dtype))
        return RmsNormMatch(nodes, FUSED_OP, [out], x=source, gamma=gamma, axis=rank - k, epsilon=eps,
                            stash_type=int(stash))

    @staticmethod
    def _cast_wrapper(x: Value, n: Value, core: list) -> Optional[tuple]:
        """(Cast in, Cast out) when x = Cast(x_in) to a wider float, read only by the core,
        and the normalized tensor is cast straight back to x_in's type."""
        first = x.producer
        last = _cast_to(n)
        if first is None or first.op_type != "Cast" or last is None:
            return None
        x_in = first.inputs[0]
        members = {id(node) for node in core}
        if not _is_float(x_in.desc.dtype) or x.is_graph_output or any(id(u) not in members for u, _ in x.uses):
            return None
        if np.dtype(last.outputs[0].desc.dtype) != np.dtype(x_in.desc.dtype):
            return None
        if np.dtype(x_in.desc.dtype).itemsize >= np.dtype(x.desc.dtype).itemsize:
            return None
        return first, last

    def rewrite(self, graph: Graph, match: "RmsNormMatch") -> Node:
        x = match.x
        dtype = np.dtype(x.desc.dtype)
        shape = tuple(x.desc.shape[match.axis:])
        base = match.nodes[0].name.rsplit("/", 1)[0] or match.nodes[0].name
        scale = affine_constant(graph, match.gamma, f"{base}/RmsNorm.scale", np.ones(shape, dtype))
        return fuse(graph, match.nodes, FUSED_OP, [x, scale], match.outputs,
                    {"axis": match.axis, "epsilon": match.epsilon, "stash_type": match.stash_type},
                    self.pass_name, name=f"{base}/RMSNormalization")


@dataclass
class RmsNormMatch(Match):
    """The decomposed RMS norm [in its Cast wrapper] [+ scale Mul] over the trailing axes."""

    x: Value                      # the op's input (before the Cast wrapper, if any)
    gamma: Optional[AffineParam]
    axis: int
    epsilon: float
    stash_type: int               # ONNX dtype the statistics are computed in
