"""SqueezeExcitation: GlobalAveragePool -> 1x1 Conv [-> act] -> 1x1 Conv [-> gate act] [-> Mul(x, .)]
-> one SqueezeExcitationFusionOp (codegen/fused/squeeze_excitation.py).

Why: squeeze-excite (EfficientNet, MobileNetV3, RegNetY, GhostNet...) is four or five kernels
on [N, C, 1, 1] tensors per block -- most of their cost is launches and round trips.  The
SE kernel runs the whole gate on chip.  The final Mul(x, gate) goes to the conv that reads
it when there is exactly one (the projection conv takes it as its input scale: the conv
block passes run next and see `Mul(x, gate) -> Conv`); otherwise the SE kernel scales x
itself (`scale_input`).  Runs before the conv-block passes, which would otherwise take the
two 1x1 convs one by one.

Pattern (anchor: the pooling op, over all spatial axes with the dims kept):
    p = GlobalAveragePool(x) | ReduceMean(x, axes = spatial, keepdims = 1)
    h = act1(Conv1x1(p, W1, b1))       act1 optional, any canonical activation
    g = act2(Conv1x1(h, W2, b2))       act2 optional (Sigmoid, HardSigmoid, ...)
    y = Mul(x, g)                      either operand order
Misses: a conv that is not 1x1 / group 1 / unpadded (NF2003), weights or biases not constant
(NF2002), the SE not taking C channels back to C (NF2004); the pass runner refuses the pooled
tensor, the hidden tensor or the gate read elsewhere (NF2001) and a cycle (NF1002).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from codegen.fused.epilogue import activation_attrs, is_activation
from codegen.fused.squeeze_excitation import OP_TYPE, SLOTS
from fusion_passes import reasons
from fusion_passes.base import FusionPass, Match, fuse, operands, single_consumer
from ge.ir import Graph, Node, Value
from ge.ops.common import normalize_axes


def _pools_spatial(pool: Node) -> bool:
    x = pool.inputs[0]
    rank = len(x.desc.shape)
    if rank < 3:
        return False
    if pool.op_type == "GlobalAveragePool":
        return True
    axes = pool.attrs.get("axes")
    return int(pool.attrs.get("keepdims", 1)) == 1 and axes is not None and \
        normalize_axes([int(a) for a in axes], rank) == list(range(2, rank))


def _reader(value: Value, test) -> Optional[Node]:
    """The one reader of `value` that passes `test`, else None.  Other readers do not stop
    the pattern: the pass runner refuses a match whose intermediates they read (NF2001)."""
    found = list({id(u): u for u, _ in value.uses if test(u)}.values())
    return found[0] if len(found) == 1 else None


def _conv_act(value: Value):
    """(conv, activation node | None, output) when a Conv reads `value` as its input."""
    conv = _reader(value, lambda u: u.op_type == "Conv" and u.inputs[0] is value)
    if conv is None:
        return None
    y = conv.outputs[0]
    act = _reader(y, lambda u: is_activation(u) and u.inputs[0] is y)
    return (conv, act, act.outputs[0]) if act is not None else (conv, None, y)


def _fc_problem(conv: Node) -> Optional[tuple]:
    """(code, constraint, values) when `conv` is not a constant unpadded 1x1 group-1 conv."""
    w = conv.inputs[1]
    bias = conv.inputs[2] if len(conv.inputs) > 2 else None
    if any(d != 1 for d in w.desc.shape[2:]) or int(conv.attrs.get("group", 1)) != 1 \
            or any(int(p) != 0 for p in conv.attrs.get("pads") or []) \
            or conv.attrs.get("auto_pad", "NOTSET") not in ("NOTSET", b"NOTSET", "VALID", b"VALID"):
        return (reasons.UNSUPPORTED_ATTRIBUTE, f"the SE conv {conv.name} must be an unpadded 1x1 conv with group 1 "
                f"(weight {list(w.desc.shape)}, group {conv.attrs.get('group', 1)}, pads {conv.attrs.get('pads')})", [w])
    loose = [v for v in (w, bias) if v is not None and not v.is_const]
    if loose:
        return (reasons.NON_CONSTANT, f"the SE conv {conv.name}'s weight and bias must be constants", loose)
    return None


class SqueezeExcitationFusionPass(FusionPass):
    pattern_name = "SqueezeExcitation"
    pass_name = "SqueezeExcitationFusionPass"
    fused_ops = (OP_TYPE,)
    anchor_types = ("GlobalAveragePool", "ReduceMean")

    def match(self, graph: Graph, pool: Node):
        if not _pools_spatial(pool):
            return None
        x, pooled = pool.inputs[0], pool.outputs[0]
        first = _conv_act(pooled)
        second = _conv_act(first[2]) if first else None
        if second is None:
            return None
        conv1, act1, hidden = first
        conv2, act2, gate = second
        mul = _reader(gate, lambda u: u.op_type == "Mul")
        pair = operands(mul, lambda v: v is gate) if mul is not None else None
        if pair is None or pair.other is not x:
            return None                          # not a gate on the pooled tensor: not this pattern
        nodes = [pool, conv1] + ([act1] if act1 else []) + [conv2] + ([act2] if act2 else [])
        for conv in (conv1, conv2):
            problem = _fc_problem(conv)
            if problem:
                return self.miss(problem[0], pool, nodes + [mul], problem[1], problem[2])
        c = int(x.desc.shape[1])
        if tuple(gate.desc.shape) != tuple(pooled.desc.shape) or int(conv1.inputs[1].desc.shape[1]) != c:
            return self.miss(reasons.SHAPE_MISMATCH, pool, nodes + [mul], f"the SE must take the {c} channels of "
                             f"{x.name} back to {c}: the gate is {list(gate.desc.shape)}, the pooled tensor "
                             f"{list(pooled.desc.shape)}", [pooled, gate])
        scaler = single_consumer(mul.outputs[0])
        scale_input = not (scaler is not None and scaler.op_type == "Conv" and scaler.inputs[0] is mul.outputs[0])
        if scale_input:
            nodes.append(mul)
        out = mul.outputs[0] if scale_input else gate
        return SEMatch(nodes, OP_TYPE, [out], x=x, conv1=conv1, act1=act1, conv2=conv2, act2=act2,
                       scale_input=scale_input)

    def rewrite(self, graph: Graph, match: "SEMatch") -> Node:
        attrs = {"pool": match.nodes[0].op_type, "scale_input": int(match.scale_input)}
        for prefix, act in (("fc1_", match.act1), ("fc2_", match.act2)):
            if act is not None:
                attrs.update({prefix + k: v for k, v in activation_attrs(act).items()})
        b1, b2 = (c.inputs[2] if len(c.inputs) > 2 else None for c in (match.conv1, match.conv2))
        inputs = SLOTS.pack(x=match.x, w1=match.conv1.inputs[1], b1=b1, w2=match.conv2.inputs[1], b2=b2)
        return fuse(graph, match.nodes, OP_TYPE, inputs, match.outputs, attrs, self.pass_name)


@dataclass
class SEMatch(Match):
    """pool -> 1x1 conv [-> act] -> 1x1 conv [-> act] [-> Mul(x, .)]."""

    x: Value
    conv1: Node
    act1: Optional[Node]
    conv2: Node
    act2: Optional[Node]
    scale_input: bool           # the kernel applies Mul(x, gate) itself
