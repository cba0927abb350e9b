"""View chains collapsed: Reshape of a Reshape is one Reshape, a Reshape to the same shape
is nothing, Transpose of a Transpose is one Transpose (or nothing when the perms cancel).

Why: exporters split and merge heads with two or three views in a row (dynamo's SDPA
decomposition reshapes K to [B*H,S,D], transposes and reshapes back); collapsed, patterns
and the view algebra see the shortest chain.  A collapsed view reads the first view's
input; the intermediate stays if something else reads it."""
from __future__ import annotations

from fusion_passes.canonical.rewrite import Rewrite, add_node, bypass, replace_value
from fusion_passes.canonical.view_forms import reshape_to
from ge.ir import Graph, Node


class ReshapeChain(Rewrite):
    name = "ReshapeChain"
    anchor_types = ("Reshape",)

    def apply(self, graph: Graph, node: Node) -> bool:
        source, out = node.inputs[0], node.outputs[0]
        if tuple(source.desc.shape) == tuple(out.desc.shape):
            return bypass(graph, node, source)
        inner = source.producer
        if inner is None or inner.op_type != "Reshape":
            return False
        new = reshape_to(graph, inner.inputs[0], out.desc.shape, node.name, [inner, node])
        replace_value(graph, out, new.outputs[0])
        return True


class TransposeChain(Rewrite):
    name = "TransposeChain"
    anchor_types = ("Transpose",)

    def apply(self, graph: Graph, node: Node) -> bool:
        source, out = node.inputs[0], node.outputs[0]
        rank = len(out.desc.shape)
        perm = [int(p) for p in node.attrs.get("perm") or range(rank)[::-1]]
        if perm == list(range(rank)):
            return bypass(graph, node, source)
        inner = source.producer
        if inner is None or inner.op_type != "Transpose":
            return False
        first = [int(p) for p in inner.attrs.get("perm") or range(rank)[::-1]]
        net = [first[p] for p in perm]
        if net == list(range(rank)):
            return bypass(graph, node, inner.inputs[0], [inner])
        new = add_node(graph, "Transpose", [inner.inputs[0]], {"perm": net}, node.name, [inner, node])
        replace_value(graph, out, new.outputs[0])
        return True
