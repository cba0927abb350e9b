"""Remove nodes none of whose outputs reach a graph output."""
from __future__ import annotations

from ge.ir import Graph


def run(graph: Graph) -> int:
    removed = 0
    for node in reversed(list(graph.nodes)):
        if all(not v.uses and not v.is_graph_output for v in node.outputs):
            graph.remove_node(node)
            removed += 1
    return removed
