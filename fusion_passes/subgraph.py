"""SubGraphBuilder: the sub-graph a fused kernel carries, in autofuse's JSON form
(`codegen.fused.autofused.encode_subgraph`), built from the nodes a pass matched.

Passes whose kernel runs its members as written (QuantMultiHeadAttention, its projection
variant, LayerNormQuant) share it: `ref` makes a graph value a kernel input (once), `emit`
adds an op and infers its output type, `copy` adds a matched node, `views` a chain of view
ops, and `encode` gives the `subgraph` attribute.  A ref is ("i", input index) or
("o", op index, output index), as the JSON form numbers them.
"""
from __future__ import annotations

from typing import Optional, Sequence

import numpy as np

from codegen.fused import autofused
from codegen.registry import kernel_of
from ge.ir import Node, Value
from ge.ops.registry import TensorType


class SubGraphBuilder:
    """The kernel's sub-graph in autofuse's JSON form, built from the matched nodes."""

    def __init__(self):
        self.inputs, self.types_in, self.ops = [], [], []
        self.refs, self.types = {}, {}

    def ref(self, value: Value):
        """`value`'s ref: a member's output, else a kernel input (added on first use)."""
        if id(value) not in self.refs:
            self.inputs.append(value)
            t = TensorType(np.dtype(value.desc.dtype), tuple(value.desc.shape))
            self.types_in.append(t)
            r = ("i", len(self.inputs) - 1)
            self.refs[id(value)], self.types[r] = r, t
        return self.refs[id(value)]

    def emit(self, op_type: str, attrs: dict, refs: list):
        """Add `op_type` reading `refs` (None: an omitted optional input); its output's ref."""
        ins = [None if r is None else self.types[r] for r in refs]
        out = kernel_of(op_type).op.infer(ins, attrs)[0]
        self.ops.append((op_type, attrs, refs, [out]))
        r = ("o", len(self.ops) - 1, 0)
        self.types[r] = out
        return r

    def copy(self, node: Node, given: Optional[dict] = None) -> None:
        """`node` as a member; `given`: refs for some of its inputs (by slot)."""
        given = given or {}
        refs = [given[i] if i in given else None if v is None else self.ref(v) for i, v in enumerate(node.inputs)]
        self.refs[id(node.outputs[0])] = self.emit(node.op_type, dict(node.attrs), refs)

    def views(self, cur, views: Sequence[Node]):
        """The view ops `views` (Reshape, Transpose ...) applied in turn from ref `cur`."""
        for view in views:
            cur = self.emit(view.op_type, dict(view.attrs), [cur] + [self.ref(v) for v in view.inputs[1:] if v])
        return cur

    def encode(self, outputs: Sequence) -> str:
        """The `subgraph` attribute: the ops so far, read out at `outputs` (refs)."""
        return autofused.encode_subgraph(self.types_in, self.ops, list(outputs))
