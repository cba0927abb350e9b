"""What the activation rewrites share: questions about operands and constants, and the one
edit they all make (a decomposed activation -> its ONNX op).

Why a module of its own: the decomposed activations (GELU's two forms, SiLU, HardSwish, ...)
are written by exporters with operands in either order and constants in the graph's
dtype; each rewrite asks the same questions ("is this the 0.5 of GELU, to the precision its
dtype can hold?", "which operand is not x?"), answered once here.
"""
from __future__ import annotations

from typing import Iterable, Optional

import numpy as np

from fusion_passes.base import operands, scalar_const, single_consumer
from fusion_passes.canonical.rewrite import add_node, replace_value
from ge.ir import Graph, Node, Value


def close(value: Optional[Value], target: float) -> bool:
    """`value` is a one-element constant equal to `target` as written in its own dtype: within
    1e-5 relative, or one ulp of a coarser dtype (float16's 0.044715 is off by 5e-4).  A
    looser match would let almost-GELU graphs become an exact GELU."""
    c = scalar_const(value)
    if c is None:
        return False
    dtype = value.const.dtype
    eps = float(np.finfo(dtype).eps) if np.issubdtype(dtype, np.floating) else 0.0
    return abs(c - target) <= max(1e-5, eps) * abs(target)


def sole(value: Value, *op_types: str) -> Optional[Node]:
    """The only consumer of `value` if its type is one of `op_types`."""
    node = single_consumer(value)
    return node if node is not None and node.op_type in op_types else None


def other(node: Optional[Node], value: Value) -> Optional[Value]:
    """The other operand of a binary commutative `node` one of whose inputs is `value`."""
    pair = operands(node, lambda v: v is value) if node is not None else None
    return pair.other if pair else None


def is_reciprocal_of(node: Node, value: Value, divisor: float) -> bool:
    """`node` computes value / divisor: Div(value, divisor) or Mul(value, 1/divisor)."""
    if node.op_type == "Div":
        return node.inputs[0] is value and close(node.inputs[1], divisor)
    return node.op_type == "Mul" and close(other(node, value), 1.0 / divisor)


def half_product(y: Value, p: Value) -> Optional[tuple]:
    """0.5 * y * p written with two ops in any grouping -- (y*p)*0.5, (y*p)/2, (0.5*p)*y,
    (0.5*y)*p -- each intermediate read once: (output, nodes) or None.  GELU's outer
    product, whatever way the exporter wrote it."""
    m1 = sole(p, "Mul")
    o = other(m1, p)
    if o is None:
        return None
    if o is y:                                     # (y * p) * 0.5 or (y * p) / 2
        m2 = sole(m1.outputs[0], "Mul", "Div")
        if m2 is not None and is_reciprocal_of(m2, m1.outputs[0], 2.0):
            return m2.outputs[0], [m1, m2]
        return None
    if close(o, 0.5):                              # (0.5 * p) * y
        m2 = sole(m1.outputs[0], "Mul")
        return (m2.outputs[0], [m1, m2]) if m2 is not None and other(m2, m1.outputs[0]) is y else None
    m0 = o.producer if o.producer is not None and o.producer.op_type == "Mul" else None
    if m0 is not None and close(other(m0, y), 0.5) and single_consumer(o) is m1:   # (0.5 * y) * p
        return m1.outputs[0], [m0, m1]
    return None


def one_plus_half_product(x: Value, t: Node) -> Optional[tuple]:
    """GELU's outer form around its inner function `t` (Erf or Tanh): 0.5 * x * (1 + t(...)),
    the 0.5 anywhere in the product: (output, [Add, the product's nodes]) or None."""
    add = sole(t.outputs[0], "Add")
    if add is None or not close(other(add, t.outputs[0]), 1.0):
        return None
    product = half_product(x, add.outputs[0])
    return (product[0], [add] + product[1]) if product else None


def private(nodes: Iterable[Node], output: Value) -> bool:
    """Every value the nodes produce, but `output`, is read only by the nodes: replacing
    them by one op computes nothing twice and hides nothing."""
    members = {id(n) for n in nodes}
    for node in nodes:
        for value in node.outputs:
            if value is output:
                continue
            if value.is_graph_output or any(id(user) not in members for user, _ in value.uses):
                return False
    return True


def same_type(a: Value, b: Value) -> bool:
    return tuple(a.desc.shape) == tuple(b.desc.shape) and np.dtype(a.desc.dtype) == np.dtype(b.desc.dtype)


def is_float(value: Value) -> bool:
    return value.desc.dtype is not None and np.issubdtype(np.dtype(value.desc.dtype), np.floating)


def become(graph: Graph, op_type: str, x: Value, attrs: dict, output: Value, nodes: list) -> bool:
    """Replace `nodes` (a decomposed activation of `x` ending in `output`) by one `op_type`
    node, when that computes the same tensor: float data, `output` of `x`'s shape and dtype
    (a constant operand may not broadcast it up), no intermediate read elsewhere."""
    if not is_float(x) or not same_type(x, output) or not private(nodes, output):
        return False
    node = add_node(graph, op_type, [x], attrs, f"{nodes[-1].name}/{op_type}", nodes, before=nodes[-1])
    replace_value(graph, output, node.outputs[0])
    return True
