"""Remove nodes that pass their input through unchanged in inference: Identity, Dropout
(inference mode; its mask output must be unused), Cast to the dtype the input already has."""
from __future__ import annotations

import numpy as np

from ge.ir import Graph, Node
from ge.ops.elementwise import dropout_training
from ge.passes.contract import GraphPass, PassResult


def _passthrough(node: Node) -> bool:
    if node.op_type == "Identity":
        return True
    if node.op_type == "Dropout":      # inference only: training mode (ratio > 0) is refused
        return all(not v.uses and not v.is_graph_output for v in node.outputs[1:]) \
            and all(v is None or v.is_const for v in node.inputs[1:]) and not dropout_training(_config(node))
    if node.op_type == "Cast":
        src = node.inputs[0].desc.dtype
        return src is not None and "to" in node.attrs and node.outputs[0].desc.dtype is not None \
            and np.dtype(src) == np.dtype(node.outputs[0].desc.dtype)
    return False


def _config(node: Node) -> dict:
    """Dropout's ratio and training_mode, from its attributes or constant inputs."""
    config = dict(node.attrs)
    for index, name in ((1, "ratio"), (2, "training_mode")):
        if index < len(node.inputs) and node.inputs[index] is not None:
            config[name] = node.inputs[index].const
    return config


def eliminate_identities(graph: Graph) -> int:
    """Bypass and remove every pass-through node; returns how many were removed."""
    removed = 0
    for node in list(graph.nodes):
        if not node.inputs or node.inputs[0] is None or not _passthrough(node):
            continue
        source, result = node.inputs[0], node.outputs[0]
        if result.is_graph_output and (source.is_graph_output or source in graph.inputs):
            continue  # keep a real op between an input and an output, or output names would merge
        if result.is_graph_output:
            # Keep the graph output's name: rename the source value instead of the output.
            graph.replace_all_uses_with(result, source)
            source.name, result.name = result.name, source.name
        else:
            graph.replace_all_uses_with(result, source)
        graph.remove_node(node)
        removed += 1
    return removed


class EliminateIdentity(GraphPass):
    name = "EliminateIdentity"

    def run(self, graph: Graph) -> PassResult:
        return PassResult(self.name, eliminate_identities(graph))
