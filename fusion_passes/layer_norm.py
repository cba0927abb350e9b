"""LayerNorm recognition: the decomposed form exporters write becomes one LayerNormalization.

Pattern (anchor: the first ReduceMean), at any opset -- after import the ReduceMean axes are
an attribute whether the model had them as attribute (<= 17) or input (18):

    mean = ReduceMean(x)            d = Sub(x, mean)
    var  = ReduceMean(Pow(d, 2))    (or Mul(d, d))
    std  = Sqrt(Add(var, eps))      n = Div(d, std)  (or Mul(d, Reciprocal(std)))
    y    = Add(Mul(n, gamma), beta) (gamma, beta optional; either operand order)

Constraints, each reported as a Miss: keepdims=1 and the same trailing axes on both
ReduceMeans (NF2003), the exponent is the constant 2 (NF2006), eps is a scalar constant
(NF2002), no constant broadcasting the result above the input's rank (NF2004); the pass
runner refuses an intermediate read outside the pattern (NF2001) and a cycle (NF1002).
gamma/beta are absorbed only when constant, of the input dtype, and varying over the
normalized axes alone; otherwise the Mul/Add stays outside and the core still fuses.  The rewrite uses the registry's ONNX
LayerNormalization op (om type LayerNorm), stamped with the nodes it replaced.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple, Optional

import numpy as np

from fusion_passes import reasons
from fusion_passes.base import FusionPass, Match, fuse, operands, scalar_const, single_consumer
from ge.ir import Graph, Node, Value
from ge.ops.common import normalize_axis
from ge.ops.reduce import flag

FUSED_OP = "LayerNormalization"


def user_of(value: Value, op_type: str, test=lambda node: True) -> Optional[Node]:
    """The first consumer of `value` of type `op_type` passing `test`."""
    return next((u for u in value.consumers if u.op_type == op_type and test(u)), None)


def reduce_axes(node: Node, rank: int) -> Optional[list]:
    """Normalized, sorted axes of a ReduceMean; None for an empty no-op reduction."""
    axes = node.attrs.get("axes")
    if axes is None or len(axes) == 0:
        return None if flag(node.attrs, "noop_with_empty_axes", 0) else list(range(rank))
    return sorted(normalize_axis(int(a), rank) for a in axes)


def trailing_reduce_miss(fusion_pass: FusionPass, rm: Node, anchor: Node, core: list, x: Value):
    """(miss, axes): the Miss of a norm's ReduceMean that drops the reduced axes or does not
    reduce the trailing axes of `x` (both norm passes' NF2003), else (None, its axes)."""
    rank = len(x.desc.shape)
    if int(rm.attrs.get("keepdims", 1)) != 1:
        return fusion_pass.miss(reasons.UNSUPPORTED_ATTRIBUTE, anchor, core,
                                f"ReduceMean {rm.name} must keep the reduced axes (keepdims=1), "
                                f"it has keepdims={rm.attrs.get('keepdims')}", [x, rm.outputs[0]]), None
    axes = reduce_axes(rm, rank)
    if axes is None or axes != list(range(rank - len(axes), rank)):
        return fusion_pass.miss(reasons.UNSUPPORTED_ATTRIBUTE, anchor, core,
                                f"ReduceMean axes must be the trailing axes of the input, got "
                                f"{rm.attrs.get('axes')} on rank {rank}", [x]), None
    return None, axes


class AffineParam(NamedTuple):
    value: Value             # the model's constant
    array: np.ndarray        # its values in the normalized shape


def affine_param(node: Optional[Node], value: Value, x: Value, k: int) -> Optional[AffineParam]:
    """The constant other operand of `node` (Mul or Add applied to `value`), or None if it is
    not a per-normalized-element parameter."""
    if node is None:
        return None
    pair = operands(node, lambda v: v is value)
    if pair is None or pair.other is value or not pair.other.is_const:
        return None
    param = pair.other.const
    shape, rank = tuple(x.desc.shape), len(x.desc.shape)
    if param.dtype != np.dtype(x.desc.dtype) or param.ndim > rank:
        return None
    if any(d != 1 for d in param.shape[:max(0, param.ndim - k)]):
        return None
    trailing = param.reshape(param.shape[max(0, param.ndim - k):])
    try:
        if np.broadcast_shapes(trailing.shape, shape[rank - k:]) != shape[rank - k:]:
            return None
    except ValueError:
        return None
    return AffineParam(pair.other, np.ascontiguousarray(np.broadcast_to(trailing, shape[rank - k:])))


def affine_constant(graph: Graph, found: Optional[AffineParam], name: str, default) -> Value:
    """The norm's gamma/beta input: the model's own constant when it already has the
    normalized shape, else a new one (`default` when the pattern had none)."""
    if found is None:
        return graph.constant(name, default)
    if tuple(found.value.const.shape) == found.array.shape:
        return found.value
    return graph.constant(name, found.array)


class LayerNormFusionPass(FusionPass):
    pattern_name = "LayerNorm"
    pass_name = "LayerNormFusionPass"
    fused_ops = (FUSED_OP,)
    anchor_types = ("ReduceMean",)

    def match(self, graph: Graph, rm1: Node):
        x, mean = rm1.inputs[0], rm1.outputs[0]
        sub = user_of(mean, "Sub", lambda n: n.inputs[0] is x and n.inputs[1] is mean)
        if sub is None:
            return None
        d = sub.outputs[0]
        sq = user_of(d, "Pow", lambda n: n.inputs[0] is d) or \
            user_of(d, "Mul", lambda n: n.inputs[0] is d and n.inputs[1] is d)
        rm2 = sq and user_of(sq.outputs[0], "ReduceMean")
        add = rm2 and user_of(rm2.outputs[0], "Add")
        sqrt = add and user_of(add.outputs[0], "Sqrt")
        if sqrt is None:
            return None
        std = sqrt.outputs[0]
        div = user_of(std, "Div", lambda n: n.inputs[0] is d and n.inputs[1] is std)
        recip = None
        if div is None:
            recip = user_of(std, "Reciprocal")
            r = recip and recip.outputs[0]
            div = recip and user_of(r, "Mul", lambda n: operands(n, lambda v: v is d) is not None
                                  and operands(n, lambda v: v is d).other is r)
            if div is None:
                return None
        core = [rm1, sub, sq, rm2, add, sqrt] + ([recip] if recip else []) + [div]
        return self._check(rm1, core, x, sq, rm2, add, div)

    def _check(self, rm1, core, x, sq, rm2, add, div):
        rank = len(x.desc.shape)
        missed, axes = trailing_reduce_miss(self, rm1, rm1, core, x)
        if missed is None:
            missed, _ = trailing_reduce_miss(self, rm2, rm1, core, x)
        if missed is not None:
            return missed
        if reduce_axes(rm2, rank) != axes:
            return self.miss(reasons.UNSUPPORTED_ATTRIBUTE, rm1, core,
                             f"both ReduceMeans must reduce the same axes, got {rm1.attrs.get('axes')} "
                             f"and {rm2.attrs.get('axes')}", [x])
        if sq.op_type == "Pow":
            exponent = scalar_const(sq.inputs[1])
            if exponent is None:
                return self.miss(reasons.NON_CONSTANT, rm1, core,
                                 "the Pow exponent must be a constant", [sq.inputs[1]])
            if exponent != 2.0:
                return self.miss(reasons.UNSUPPORTED_VARIANT, rm1, core,
                                 f"the Pow exponent must be 2 (variance), got {exponent:g}", [sq.inputs[1]])
        eps_value = operands(add, lambda v: v is rm2.outputs[0]).other
        eps = scalar_const(eps_value)
        if eps is None:
            return self.miss(reasons.NON_CONSTANT, rm1, core,
                             "epsilon (the Add before Sqrt) must be a scalar constant", [eps_value])
        if not np.issubdtype(np.dtype(x.desc.dtype), np.floating):
            return self.miss(reasons.DTYPE_MISMATCH, rm1, core, "the input must be a float tensor", [x])
        if tuple(div.outputs[0].desc.shape) != tuple(x.desc.shape):
            return self.miss(reasons.SHAPE_MISMATCH, rm1, core,
                             f"the normalized tensor {list(div.outputs[0].desc.shape)} is not the input's shape "
                             f"{list(x.desc.shape)}: a constant (epsilon, exponent) broadcasts it to a higher rank",
                             [x, div.outputs[0]])

        k = len(axes)
        nodes, out = list(core), div.outputs[0]
        params = []
        for op_type in ("Mul", "Add"):          # optional gamma, then optional beta
            step = single_consumer(out)
            step = step if step is not None and step.op_type == op_type else None
            param = affine_param(step, out, x, k)
            params.append(param)
            if param is not None:
                nodes.append(step)
                out = step.outputs[0]
        gamma, beta = params
        return LayerNormMatch(nodes, FUSED_OP, [out], x=x, gamma=gamma, beta=beta, axis=rank - k, epsilon=eps)

    def rewrite(self, graph: Graph, match: "LayerNormMatch") -> Node:
        x = match.x
        dtype = np.dtype(x.desc.dtype)
        shape = tuple(x.desc.shape[match.axis:])
        base = match.nodes[0].name.rsplit("/", 1)[0] or match.nodes[0].name
        inputs = [x, affine_constant(graph, match.gamma, f"{base}/LayerNorm.gamma", np.ones(shape, dtype))]
        if match.beta is not None:
            inputs.append(affine_constant(graph, match.beta, f"{base}/LayerNorm.beta", None))
        return fuse(graph, match.nodes, FUSED_OP, inputs, match.outputs,
                    {"axis": match.axis, "epsilon": match.epsilon}, self.pass_name,
                    name=f"{base}/LayerNormalization")


@dataclass
class LayerNormMatch(Match):
    """The decomposed LayerNorm core [+ gamma Mul] [+ beta Add] over the trailing axes."""

    x: Value
    gamma: Optional[AffineParam]
    beta: Optional[AffineParam]
    axis: int
    epsilon: float
