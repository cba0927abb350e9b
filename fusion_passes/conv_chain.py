"""ConvChain: a conv left without an epilogue and the pointwise conv (or squeeze-excite) it feeds,
or the conv that feeds it -> one ConvChainFusionOp (codegen/fused/conv_chain.py).

Why: after the conv-block passes, the convs still plain are the ones with nothing
elementwise after them -- ShuffleNet's linear depthwise convs, MobileNetV2's and MNASNet's
linear projections that open a stage, a classifier conv before a Resize.  Each feeds or is
fed by another conv; when the second of the two is 1x1 (its input tile is the first's
output tile, no halo), the pair runs as one kernel and the intermediate stays on chip
unless something else reads it (then it is written once more, as a second output).

A squeeze-excite kernel reading the conv's output is a second part too (GhostNet's linear
stride-2 depthwise conv before its SE): its global pooling sums each output tile of the conv
as the tile is made, no neighbour needed, so the conv's output is written once (for the
gated conv after it) and never read back for the pooling.

Pattern (anchor: a plain Conv, after the conv-block passes):
    first = the Conv, second = the 1x1 conv (block) or the SqueezeExcitationFusionOp reading
    its output as input 0, or
    first = the conv (block) producing its input, second = the Conv when it is 1x1.
Each such pair is tried in that order; the first that fits is taken.  Conv blocks taking
part: plain Conv and the conv-block ops (ConvBNRelu and its variants), not an already
chained pair.  Misses (of the first pair, when none fits): neither neighbour is a conv (no
reason to chain: the conv-block passes already said why the conv stays plain), the second
conv not 1x1 (NF2003), the first part's output read by the second at another input too
(NF2006), a cycle (NF1002: the SE's gate scales the 1x1 conv that would join the chain).
"""
from __future__ import annotations

from dataclasses import dataclass

from codegen.fused.conv import CONV_BLOCK_OPS
from codegen.fused.conv_chain import OP_TYPE
from codegen.fused.squeeze_excitation import OP_TYPE as SQUEEZE_EXCITATION
from fusion_passes import reasons
from fusion_passes.base import FusionPass, Match, creates_cycle, fuse
from ge.ir import Graph, Node

_PARTS = ("Conv",) + CONV_BLOCK_OPS
_SECONDS = _PARTS + (SQUEEZE_EXCITATION,)


def _no_halo(node: Node) -> bool:
    """Whether `node` can read its input one tile at a time as the first part makes it: a
    1x1 conv (its input tile is the first's output tile) or a squeeze-excite (its pooling
    sums tiles in any order)."""
    if node.op_type == SQUEEZE_EXCITATION:
        return True
    w = node.inputs[1]
    return all(int(d) == 1 for d in w.desc.shape[2:])


class ConvChainFusionPass(FusionPass):
    pattern_name = "ConvChain"
    pass_name = "ConvChainFusionPass"
    fused_ops = (OP_TYPE,)
    anchor_types = ("Conv",)

    def match(self, graph: Graph, conv: Node):
        y = conv.outputs[0]
        readers = [u for u, i in y.uses if u.op_type in _SECONDS and i == 0]
        x = conv.inputs[0]
        producer = x.producer if x.producer is not None and x.producer.op_type in _PARTS else None
        pairs = [(conv, r) for r in readers] + ([(producer, conv)] if producer is not None else [])
        if not pairs:
            return None
        fitting = [(a, b) for a, b in pairs if _no_halo(b)]
        if not fitting:
            a, b = pairs[0]
            return self.miss(reasons.UNSUPPORTED_ATTRIBUTE, conv, [a, b],
                             f"the second conv {b.name} has kernel {list(b.inputs[1].desc.shape[2:])}: only a 1x1 "
                             "conv reads the first conv's output tile as it is (no halo)", [b.inputs[1]])
        problems = [self._problem(conv, first, second) for first, second in fitting]
        for (first, second), problem in zip(fitting, problems):
            if problem is None:
                mid = first.outputs[0]
                emit = mid.is_graph_output or len(mid.uses) > 1
                return ChainMatch([first, second], OP_TYPE, list(second.outputs) + ([mid] if emit else []),
                                  first=first, second=second, emit_first=emit)
        return problems[0]

    def _problem(self, conv: Node, first: Node, second: Node):
        """The miss that keeps `first` and `second` apart, or None when they chain."""
        mid = first.outputs[0]
        if any(v is mid for v in second.inputs[1:]):
            return self.miss(reasons.UNSUPPORTED_VARIANT, conv, [first, second],
                             f"{second.name} reads {mid.name} at another input too", [mid])
        if creates_cycle([first, second]):
            return self.miss(reasons.WILL_CREATE_CYCLE, conv, [first, second],
                             "a path leaves the first conv and re-enters the second", [mid])
        return None

    def rewrite(self, graph: Graph, match: "ChainMatch") -> Node:
        first, second = match.first, match.second
        attrs = {"first_op": first.op_type, "second_op": second.op_type, "split": len(first.inputs),
                 "emit_first": int(match.emit_first)}
        attrs.update({"a_" + k: v for k, v in first.attrs.items()})
        attrs.update({"b_" + k: v for k, v in second.attrs.items()})
        inputs = list(first.inputs) + [None] + list(second.inputs[1:])
        return fuse(graph, match.nodes, OP_TYPE, inputs, match.outputs, attrs, self.pass_name,
                    name=f"{second.name}/{OP_TYPE}")


@dataclass
class ChainMatch(Match):
    """conv (block) -> 1x1 conv (block); `outputs` end with the first's output when emitted."""

    first: Node
    second: Node
    emit_first: bool
