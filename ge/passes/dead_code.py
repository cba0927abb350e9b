"""Remove nodes none of whose outputs reach a graph output."""
from __future__ import annotations

from ge.ir import Graph
from ge.passes.contract import GraphPass, PassResult


def remove_dead_nodes(graph: Graph) -> int:
    removed = 0
    for node in reversed(list(graph.nodes)):
        if all(not v.uses and not v.is_graph_output for v in node.outputs):
            graph.remove_node(node)
            removed += 1
    return removed


class DeadCodeElimination(GraphPass):
    name = "DeadCodeElimination"

    def run(self, graph: Graph) -> PassResult:
        return PassResult(self.name, remove_dead_nodes(graph))
