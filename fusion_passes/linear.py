"""The one view of a linear layer every pass reads: y = x @ W (+ b).

Exporters write linear layers as MatMul(+Add), Gemm (transB, alpha, beta) or GPT-2's Conv1D
(a Gemm between two row views); the canonicalization stage rewrites all of them into
`MatMul(x, W)` with a constant 2-D W followed by an optional `Add(., b)` of a constant that
varies along the last axis only (fusion_passes/canonical/gemm_as_matmul.py, linear_views.py),
so this module reads that one form, in either Add operand order.  MultiHeadAttention (its
Q/K/V projections), MatMulBiasAct, LayerNormMatMul and ConvPoolFC (its FC) all use it.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import numpy as np

from ge.ir import Node, Value


@dataclass
class Linear:
    x: Value                  # the input, [..., K]
    weight: Value             # constant [K, N]
    bias: Optional[Value]     # constant broadcasting along the last axis only, or None
    nodes: list               # [MatMul] or [MatMul, Add]
    output: Value             # x @ W (+ b), [..., N]

    @property
    def matmul(self) -> Node:
        return self.nodes[0]

    @property
    def width(self) -> int:
        return int(self.weight.desc.shape[-1])

    def bias_vector(self) -> Optional[np.ndarray]:
        """The bias as an [N] vector (a scalar bias repeated), or None."""
        if self.bias is None:
            return None
        c = self.bias.const
        return np.full((self.width,), c.reshape(()), c.dtype) if c.size == 1 else c.reshape(self.width)


def _weight(node: Optional[Node]) -> bool:
    return (node is not None and node.op_type == "MatMul" and len(node.inputs) == 2
            and node.inputs[1] is not None and node.inputs[1].is_const and node.inputs[1].const.ndim == 2
            and node.inputs[0] is not None and node.inputs[0].desc.shape is not None
            and len(node.inputs[0].desc.shape) >= 1)


def bias_of(add: Optional[Node], y: Value) -> Optional[Value]:
    """The constant b of `add` = y + b (either order) when b varies along the last axis only
    and the sum keeps y's shape and dtype."""
    if add is None or add.op_type != "Add" or len(add.inputs) != 2:
        return None
    b = add.inputs[1] if add.inputs[0] is y else add.inputs[0] if add.inputs[1] is y else None
    if b is None or b is y or not b.is_const:
        return None
    n = y.desc.shape[-1]
    c = b.const
    if c.ndim > len(y.desc.shape) or any(d != 1 for d in c.shape[:-1]) or (c.size != 1 and c.shape[-1] != n):
        return None
    out = add.outputs[0]
    if tuple(out.desc.shape) != tuple(y.desc.shape) or np.dtype(c.dtype) != np.dtype(y.desc.dtype):
        return None
    return b


def linear_producing(value: Value) -> Optional[Linear]:
    """The linear layer whose output is `value`: MatMul(x, W) + b or MatMul(x, W)."""
    node = value.producer
    if node is None:
        return None
    if node.op_type == "Add":
        for y in node.inputs:
            if y is not None and _weight(y.producer) and bias_of(node, y) is not None:
                mm = y.producer
                return Linear(mm.inputs[0], mm.inputs[1], bias_of(node, y), [mm, node], value)
        return None
    if _weight(node):
        return Linear(node.inputs[0], node.inputs[1], None, [node], value)
    return None


def linear_at(mm: Node) -> Optional[Linear]:
    """The linear layer anchored on MatMul `mm` (with its bias Add when that is the product's
    only reader)."""
    if not _weight(mm):
        return None
    y = mm.outputs[0]
    if len(y.uses) == 1 and not y.is_graph_output:
        add = y.uses[0][0]
        b = bias_of(add, y)
        if b is not None:
            return Linear(mm.inputs[0], mm.inputs[1], b, [mm, add], add.outputs[0])
    return Linear(mm.inputs[0], mm.inputs[1], None, [mm], y)
