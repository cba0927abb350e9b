"""ConvBNReLU: Conv [+ BatchNormalization] [+ residual Add] [+ activation] -> ConvBNReluFusionOp.

Why: on the NPU a conv's epilogue (bias, BN affine, residual add, activation) costs one
more trip through global memory per op when run as separate kernels; fused, it is applied
to the accumulator on chip.  BN is folded into the conv weights and bias at compile time
(float64, cast back to the weight dtype), so the kernel is conv + bias + add + act.

Walk from the Conv anchor downstream, greedily: BN, then Add (either operand order; the
other operand comes from elsewhere and broadcasts to the conv output), then one activation
(Relu, Clip with constant bounds, LeakyRelu, Sigmoid, HardSwish, Tanh, SiLU written as
y * Sigmoid(y) in either order).  A later intermediate with other consumers ends the
pattern there (what came before still fuses, its output stays visible).  A bare Conv is
not a candidate.  Misses (GE's constraints): group != 1 or dilation != 1 (NF2003), the conv
output itself used elsewhere (NF2001: BN cannot be folded, nothing can fuse), non-constant
weights or BN parameters (NF2002), BN length != output channels (NF2004), a cycle (NF1002).
"""
from __future__ import annotations

from typing import Optional

import numpy as np

from fusion_passes import reasons
from fusion_passes.base import (FusionPass, Match, creates_cycle, escaping_values, fuse, operands,
                                single_consumer)
from ge.ir import Graph, Node, Value

FUSED_OP = "ConvBNReluFusionOp"
_SIMPLE_ACTS = ("Relu", "LeakyRelu", "Sigmoid", "HardSwish", "Tanh")
_CONV_ATTRS = ("kernel_shape", "pads", "strides", "dilations", "group", "auto_pad")


def silu_at(value: Value) -> Optional[tuple]:
    """(sigmoid, mul) if `value` is used exactly by Sigmoid(value) and Mul(value, that), in
    either operand order, and nothing else; else None."""
    if value.is_graph_output or len(value.uses) != 2:
        return None
    sig = next((n for n, _ in value.uses if n.op_type == "Sigmoid"), None)
    mul = next((n for n, _ in value.uses if n.op_type == "Mul"), None)
    if sig is None or mul is None or single_consumer(sig.outputs[0]) is not mul:
        return None
    if operands(mul, lambda v: v is value) != (value, sig.outputs[0]):
        return None
    return sig, mul


def activation_at(value: Value) -> Optional[tuple]:
    """(nodes, attrs, output) of an activation that consumes `value` alone, or None.
    Clip qualifies only with constant bounds (canonical form has them as attributes)."""
    silu = silu_at(value)
    if silu:
        return list(silu), {"activation": "SiLU"}, silu[1].outputs[0]
    node = single_consumer(value)
    if node is None:
        return None
    if node.op_type in _SIMPLE_ACTS:
        attrs = {"activation": node.op_type}
        if node.op_type == "LeakyRelu":
            attrs["act_alpha"] = float(node.attrs.get("alpha", 0.01))
        return [node], attrs, node.outputs[0]
    if node.op_type == "Clip" and len([v for v in node.inputs if v is not None]) == 1:
        attrs = {"activation": "Clip"}
        for key in ("min", "max"):
            if node.attrs.get(key) is not None:
                attrs[f"clip_{key}"] = float(np.asarray(node.attrs[key]).reshape(()))
        return [node], attrs, node.outputs[0]
    return None


def residual_at(value: Value) -> Optional[tuple]:
    """(add, other operand) if `value`'s only consumer is an Add whose other operand is a
    different value broadcasting to `value`'s shape and dtype; else None."""
    add = single_consumer(value)
    if add is None or add.op_type != "Add":
        return None
    pair = operands(add, lambda v: v is value)
    if pair is None or pair[1] is value:
        return None
    other = pair[1]
    if np.dtype(other.desc.dtype) != np.dtype(value.desc.dtype):
        return None
    try:
        shape = tuple(np.broadcast_shapes(tuple(value.desc.shape), tuple(other.desc.shape)))
    except ValueError:
        return None
    return (add, other) if shape == tuple(value.desc.shape) else None


def _first_followers(value: Value) -> list:
    """Consumers of the conv output that would start a pattern (for the NF2001 miss)."""
    return [n for n in value.consumers
            if n.op_type in ("BatchNormalization", "Add", "Clip", "Mul") + _SIMPLE_ACTS]


def _ints(value, n: int, default: int) -> list:
    if value is None or (hasattr(value, "__len__") and len(value) == 0):
        return [default] * n
    return [int(v) for v in np.atleast_1d(value)]


class ConvBNReluFusionPass(FusionPass):
    pattern_name = "ConvBNReLU"
    pass_name = "ConvBNReluFusionPass"
    fused_ops = (FUSED_OP,)
    anchor_types = ("Conv",)

    def match(self, graph: Graph, conv: Node):
        y = conv.outputs[0]
        bn = add = residual = None
        act_nodes: list = []
        act_attrs: dict = {}
        cur = y
        # -- structure: greedy walk downstream -------------------------------------------
        first = single_consumer(y)
        if first is not None and first.op_type == "BatchNormalization" and first.inputs[0] is y:
            bn, cur = first, first.outputs[0]
        found = residual_at(cur)
        if found:
            (add, residual), cur = found, found[0].outputs[0]
        found = activation_at(cur)
        if found:
            act_nodes, act_attrs, cur = found
        nodes = [conv] + [n for n in (bn, add) if n is not None] + act_nodes
        if len(nodes) == 1:
            followers = _first_followers(y)
            if followers and (len(y.uses) > 1 or y.is_graph_output):
                return self.miss(reasons.OTHER_CONSUMERS, conv, [conv] + followers,
                                 f"the Conv output {y.name} has {len(y.consumers)} consumers"
                                 f"{' and is a graph output' if y.is_graph_output else ''}; fusing would "
                                 "hide it (it must have exactly one consumer)", [y])
            return None                             # a bare Conv: nothing to fuse
        # -- GE's constraints ----------------------------------------------------------------
        group = int(conv.attrs.get("group", 1))
        w = conv.inputs[1]
        nd = len(w.desc.shape) - 2
        if group != 1:
            return self.miss(reasons.UNSUPPORTED_ATTRIBUTE, conv, nodes,
                             f"group != 1 is not fused, as GE's ConvBatchnormFusionPass documents "
                             f"(group = {group})", [conv.inputs[0], w, y])
        dilations = _ints(conv.attrs.get("dilations"), nd, 1)
        if any(d != 1 for d in dilations):
            return self.miss(reasons.UNSUPPORTED_ATTRIBUTE, conv, nodes,
                             f"dilation != 1 is not fused, as GE's ConvBatchnormFusionPass documents "
                             f"(dilations = {dilations})", [conv.inputs[0], w, y])
        bias = conv.inputs[2] if len(conv.inputs) > 2 else None
        for name, value in (("weight", w), ("bias", bias)):
            if value is not None and not value.is_const:
                return self.miss(reasons.NON_CONSTANT, conv, nodes,
                                 f"the Conv {name} {value.name} must be a constant", [value])
        if bn is not None:
            params = bn.inputs[1:5]
            loose = [v for v in params if v is None or not v.is_const]
            if loose:
                return self.miss(reasons.NON_CONSTANT, conv, nodes,
                                 "BatchNormalization parameters (scale, B, mean, var) must be constants "
                                 f"to fold into the conv weights; {[v.name for v in loose if v]} are not",
                                 loose)
            cout = int(w.desc.shape[0])
            if any(v.const.size != cout for v in params):
                return self.miss(reasons.SHAPE_MISMATCH, conv, nodes,
                                 f"BatchNormalization parameters must have one value per output "
                                 f"channel ({cout})", params)
            if int(bn.attrs.get("training_mode", 0)):
                return self.miss(reasons.UNSUPPORTED_ATTRIBUTE, conv, nodes,
                                 "BatchNormalization in training mode cannot be folded", [])
        escaping = escaping_values(nodes, [cur])
        if escaping:
            return self.miss(reasons.OTHER_CONSUMERS, conv, nodes,
                             f"intermediate(s) {[v.name for v in escaping]} are used outside the pattern",
                             escaping)
        if creates_cycle(nodes):
            return self.miss(reasons.WILL_CREATE_CYCLE, conv, nodes,
                             f"the residual input {residual.name if residual else '?'} depends on the "
                             "pattern: fusing would create a cycle", [residual])
        return Match(nodes, FUSED_OP, {"conv": conv, "bn": bn, "residual": residual,
                                       "act": act_attrs, "output": cur})

    def rewrite(self, graph: Graph, match: Match) -> Node:
        conv, bn = match.data["conv"], match.data["bn"]
        w = conv.inputs[1]
        bias = conv.inputs[2] if len(conv.inputs) > 2 else None
        if bn is not None:
            w, bias = fold_batch_norm(graph, conv, bn)
        attrs = conv_attrs(conv)
        attrs.update(match.data["act"])
        attrs["has_bn"] = bn is not None
        attrs["has_residual"] = match.data["residual"] is not None
        inputs = [conv.inputs[0], w, bias]
        if match.data["residual"] is not None:
            inputs.append(match.data["residual"])
        elif bias is None:
            inputs.pop()
        return fuse(graph, match.nodes, FUSED_OP, inputs, [match.data["output"]], attrs, self.pass_name)


def conv_attrs(conv: Node) -> dict:
    """The Conv attributes the fused kernel needs, kernel_shape made explicit."""
    attrs = {k: conv.attrs[k] for k in _CONV_ATTRS if k in conv.attrs}
    attrs.setdefault("kernel_shape", [int(d) for d in conv.inputs[1].desc.shape[2:]])
    attrs.setdefault("group", 1)
    return attrs


def fold_batch_norm(graph: Graph, conv: Node, bn: Node) -> tuple:
    """W' = W * s, b' = (b - mean) * s + B with s = scale / sqrt(var + eps), in float64,
    cast back to the weight dtype; returns the new constant Values (W', b')."""
    w = conv.inputs[1].const
    bias = conv.inputs[2] if len(conv.inputs) > 2 else None
    scale, beta, mean, var = (v.const.astype(np.float64).reshape(-1) for v in bn.inputs[1:5])
    eps = float(bn.attrs.get("epsilon", 1e-5))
    s = scale / np.sqrt(var + eps)
    b = bias.const.astype(np.float64).reshape(-1) if bias is not None else np.zeros_like(s)
    w_new = (w.astype(np.float64) * s.reshape((-1,) + (1,) * (w.ndim - 1))).astype(w.dtype)
    b_new = ((b - mean) * s + beta).astype(w.dtype)
    return (graph.constant(f"{conv.name}/folded_weight", w_new),
            graph.constant(f"{conv.name}/folded_bias", b_new))
