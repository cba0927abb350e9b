"""Squeeze, Unsqueeze and Flatten are Reshapes: rewritten as one Reshape to the same shape,
so view chains are read and collapsed in one vocabulary (fusion_passes/layout.py)."""
from __future__ import annotations

from fusion_passes.canonical.rewrite import Rewrite, add_node, replace_value
from ge.ir import Graph, Node
from ge.symbolic import Dim


def reshape_to(graph: Graph, source, shape, name: str, origin) -> Node:
    """A Reshape of `source` to `shape` (no -1 left to interpret, and a 0 is an empty axis,
    not a copied one: allowzero; a symbolic dim stays an expression the kernel evaluates
    when it runs)."""
    dims = [d if isinstance(d, Dim) else int(d) for d in shape]
    allowzero = int(any(not isinstance(d, Dim) and d == 0 for d in dims))
    return add_node(graph, "Reshape", [source], {"shape": dims, "allowzero": allowzero}, name, origin)


class ViewAsReshape(Rewrite):
    name = "ViewAsReshape"
    anchor_types = ("Squeeze", "Unsqueeze", "Flatten")

    def apply(self, graph: Graph, node: Node) -> bool:
        if node.inputs[0] is None or len(node.inputs) > 1 and any(v is not None for v in node.inputs[1:]):
            return False              # axes computed at run time: not a static view
        out = node.outputs[0]
        new = reshape_to(graph, node.inputs[0], out.desc.shape, node.name, [node])
        replace_value(graph, out, new.outputs[0])
        return True
