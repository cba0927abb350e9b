"""Token views cross linear layers, so a linear layer reads and writes [..tokens.., features].

A view that leaves the last axis alone -- a Reshape that only merges or splits the leading
(token) axes, or a Transpose that only permutes them -- commutes with a row-wise linear
layer: `MatMul(V(x), W) = V'(MatMul(x, W))` and `V(y) + b = V(y + b)` for a bias b that
varies along the last axis only (V' is V with the last axis resized).  Exporters put such
views on both sides of linear layers: GPT-2's Conv1D flattens rows around a Gemm,
nn.MultiheadAttention transposes batch and sequence before its in-projection and after its
out-projection, dynamo merges heads to [B*S, H*D] before the output projection.

Two rewrites, each moving a token view next to the other views it belongs with, where the
view algebra (fusion_passes/layout.py) and the collapsing rewrites take it:
- `ViewAboveLinear`: a token view of a linear's (+bias) output rises above the linear when
  the linear reads a view;
- `ViewBelowLinear`: any other token view of a value that is not itself a view sinks
  below the linear (and its bias Add) that reads it.
The conditions exclude each other (a view never moves back), so the stage terminates.
"""
from __future__ import annotations

from typing import Optional

from fusion_passes.canonical.rewrite import Rewrite, add_node, replace_value
from fusion_passes.canonical.view_forms import reshape_to
from fusion_passes.layout import is_view
from fusion_passes.linear import bias_of, linear_producing
from ge.ir import Graph, Node, Value


def token_view(node: Optional[Node]) -> bool:
    """A Reshape or Transpose that keeps its input's last axis as its own last axis."""
    if node is None or node.op_type not in ("Reshape", "Transpose"):
        return False
    src, out = node.inputs[0].desc.shape, node.outputs[0].desc.shape
    if not src or not out or src[-1] != out[-1]:
        return False
    if node.op_type == "Transpose":
        perm = [int(p) for p in node.attrs.get("perm") or range(len(src))[::-1]]
        return perm[-1] == len(src) - 1
    return True


def linear_weight(node: Optional[Node], value: Value) -> bool:
    """`node` is MatMul(value, W) with a constant 2-D weight."""
    return (node is not None and node.op_type == "MatMul" and node.inputs[0] is value
            and node.inputs[1] is not None and node.inputs[1].is_const and node.inputs[1].const.ndim == 2)


def _redo_view(graph: Graph, view: Node, source: Value, name: str) -> Node:
    """`view` applied to `source` (same last axis handling, `source`'s last dim)."""
    if view.op_type == "Transpose":
        return add_node(graph, "Transpose", [source], {"perm": list(view.attrs.get("perm"))}, name, [view])
    return reshape_to(graph, source, list(view.outputs[0].desc.shape[:-1]) + [source.desc.shape[-1]], name, [view])


def viewed_linear_output(value: Value) -> bool:
    """`value` is computed by a linear layer (+ bias) that reads a view: a token view of it
    rises (ViewAboveLinear), so it must not sink."""
    linear = linear_producing(value)
    return linear is not None and is_view(linear.x.producer)


def _sole_reader(value: Value) -> Optional[Node]:
    if value.is_graph_output or len(value.uses) != 1:
        return None
    return value.uses[0][0]


class ViewBelowLinear(Rewrite):
    name = "ViewBelowLinear"
    anchor_types = ("Reshape", "Transpose")

    def apply(self, graph: Graph, view: Node) -> bool:
        if not token_view(view) or is_view(view.inputs[0].producer) or viewed_linear_output(view.inputs[0]):
            return False
        out = view.outputs[0]
        reader = _sole_reader(out)
        x = view.inputs[0]
        if linear_weight(reader, out):
            moved = add_node(graph, "MatMul", [x, reader.inputs[1]], {}, reader.name, [reader])
        else:
            bias = bias_of(reader, out)
            if bias is None:
                return False
            moved = add_node(graph, "Add", [x, bias], {}, reader.name, [reader])
        after = _redo_view(graph, view, moved.outputs[0], view.name)
        replace_value(graph, reader.outputs[0], after.outputs[0])
        return True


class ViewAboveLinear(Rewrite):
    name = "ViewAboveLinear"
    anchor_types = ("Reshape", "Transpose")

    def apply(self, graph: Graph, view: Node) -> bool:
        if not token_view(view):
            return False
        y = view.inputs[0]
        op = y.producer
        if op is None or len(y.uses) != 1 or y.is_graph_output:
            return False
        if op.op_type == "Add":
            source = op.inputs[0] if bias_of(op, op.inputs[0]) is not None else op.inputs[1]
            bias = bias_of(op, source)
            if bias is None or bias.const.ndim > len(view.outputs[0].desc.shape) or not self._reads_view(source):
                return False                # a bias of more axes than the view's would broadcast it up
            lifted = _redo_view(graph, view, source, view.name)
            new = add_node(graph, "Add", [lifted.outputs[0], bias], {}, op.name, [op])
        elif op.op_type == "MatMul" and linear_weight(op, op.inputs[0]) and is_view(op.inputs[0].producer):
            lifted = _redo_view(graph, view, op.inputs[0], view.name)
            new = add_node(graph, "MatMul", [lifted.outputs[0], op.inputs[1]], {}, op.name, [op])
        else:
            return False
        replace_value(graph, view.outputs[0], new.outputs[0])
        return True

    @staticmethod
    def _reads_view(value: Value) -> bool:
        """`value` is a linear layer's output whose input is a view (MatMul(view, W))."""
        mm = value.producer
        return (mm is not None and linear_weight(mm, mm.inputs[0]) and is_view(mm.inputs[0].producer)
                and len(value.uses) == 1)
