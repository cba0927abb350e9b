"""What one canonicalization rewrite is, and the few edits rewrites share.

A `Rewrite` turns one exporter idiom into the canonical form the named passes match, so a
pattern is written once for every way torch's two exporters and transformers spell it.  It
is anchored on op types like a fusion pass, but it never fuses: it replaces nodes by other
ONNX ops (or simply bypasses nodes it proved do nothing), keeping every value typed.  A
rewrite must preserve what the graph computes exactly, up to float rounding of constants
it folds (e.g. two scalar scales multiplied once); it returns True when it changed the
graph, so the stage (fusion_passes/canonical/__init__.py) can count it and iterate to a
fixed point.  Nodes a rewrite leaves unused are removed by the stage.
"""
from __future__ import annotations

from typing import Iterable, Optional, Sequence

import numpy as np

from ge.ir import Graph, Node, TensorDesc, Value
from ge.ops.common import static_dims
from ge.ops.registry import TensorType, get_op


class Rewrite:
    """Base of the canonicalization rewrites: a `name` (the stage reports changes by it),
    the `anchor_types` it starts from, and `apply(graph, node) -> bool`."""

    name = ""
    anchor_types: tuple = ()

    def apply(self, graph: Graph, node: Node) -> bool:
        raise NotImplementedError

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"


def origin_of(nodes: Iterable[Node]) -> list:
    """The ONNX nodes a set of nodes stands for, in order, each once."""
    origin: list = []
    for node in nodes:
        origin.extend(n for n in node.origin if n not in origin)
    return origin


def absorb_origin(node: Node, removed: Iterable[Node]) -> None:
    """`node` now also stands for the ONNX nodes of `removed` (bypassed or merged into it),
    so a fused kernel that later takes `node` is priced and traced for them too."""
    node.provenance["origin"] = origin_of([node] + list(removed))


def add_node(graph: Graph, op_type: str, inputs: Sequence[Optional[Value]], attrs: dict, name: str,
             origin: Iterable[Node], before: Optional[Node] = None, n_outputs: int = 1) -> Node:
    """A new ONNX node whose output types come from the op's own shape rule (ge/ops)."""
    types = get_op(op_type).infer([_type(v) for v in inputs], attrs)
    descs = [TensorDesc(np.dtype(t.dtype), static_dims(t.shape)) for t in types[:n_outputs]]
    node = graph.make_node(op_type, inputs, n_outputs, attrs, name=graph.unique_name(name), descs=descs,
                           provenance={"origin": origin_of(origin)}, before=before)
    return node


def can_bypass(old: Value, new: Value) -> bool:
    """Whether readers of `old` may read `new` instead: a graph output must keep its name,
    so `new` must be a computed value that is not itself a graph output."""
    return not old.is_graph_output or (new.producer is not None and not new.is_graph_output and not new.is_const)


def replace_value(graph: Graph, old: Value, new: Value) -> None:
    """Every reader of `old` (and the graph outputs) reads `new`; `new` keeps its own name
    unless `old` is a graph output, whose name must stay (check `can_bypass` first)."""
    if not can_bypass(old, new):
        raise ValueError(f"cannot replace graph output {old.name} by {new.name}")
    if old.is_graph_output:
        new.name, old.name = old.name, graph.unique_name(f"{old.name}/replaced")
    graph.replace_all_uses_with(old, new)


def _type(value: Optional[Value]) -> Optional[TensorType]:
    if value is None:
        return None
    return TensorType(np.dtype(value.desc.dtype), tuple(value.desc.shape))


def bypass(graph: Graph, node: Node, value: Value, also: Iterable[Node] = ()) -> bool:
    """Readers of `node`'s output read `value` instead (`node`, and `also`, proved to compute
    nothing); the ONNX nodes they stood for go to `value`'s producer.  False if a graph
    output would lose its name."""
    out = node.outputs[0]
    if not can_bypass(out, value):
        return False
    if value.producer is not None:
        absorb_origin(value.producer, [node, *also])
    replace_value(graph, out, value)
    return True
