"""Gemm is MatMul + Add: `Gemm(A, B, C; transB, alpha, beta)` with a constant B becomes
`MatMul(A, alpha * B')` [+ `Add(., beta * C)`], B' = B^T when transB, so every linear layer
reaches the named passes in one form (x @ W [+ b], fusion_passes/linear.py) whichever
exporter wrote it (GPT-2's Conv1D and torchvision's classifiers are Gemms).

Not rewritten: transA=1 (A is read column-major: not a linear layer on rows), and a
computed B (an int8 weight behind DequantizeLinear: the quantized passes read that Gemm
as it is).  The fused GEMM kernels put the bias back into the GEMM's epilogue.
"""
from __future__ import annotations

import numpy as np

from fusion_passes.canonical.rewrite import Rewrite, add_node, replace_value
from ge.ir import Graph, Node


def _scaled(array: np.ndarray, factor: float) -> np.ndarray:
    return array if factor == 1.0 else (array.astype(np.float64) * factor).astype(array.dtype)


class GemmAsMatMul(Rewrite):
    name = "GemmAsMatMul"
    anchor_types = ("Gemm",)

    def apply(self, graph: Graph, node: Node) -> bool:
        a, b = node.inputs[0], node.inputs[1]
        c = node.inputs[2] if len(node.inputs) > 2 else None
        if int(node.attrs.get("transA", 0)) or not b.is_const or (c is not None and not c.is_const):
            return False
        if np.dtype(b.desc.dtype).kind != "f":
            return False
        alpha, beta = float(node.attrs.get("alpha", 1.0)), float(node.attrs.get("beta", 1.0))
        weight = b.const.T if int(node.attrs.get("transB", 0)) else b.const
        w = b if weight is b.const and alpha == 1.0 else graph.constant(f"{b.name}/as_matmul",
                                                                       np.ascontiguousarray(_scaled(weight, alpha)))
        mm = add_node(graph, "MatMul", [a, w], {}, node.name, [node])
        out = mm.outputs[0]
        if c is not None and (beta != 0.0):
            bias = c if beta == 1.0 else graph.constant(f"{c.name}/beta", _scaled(c.const, beta))
            out = add_node(graph, "Add", [out, bias], {}, f"{node.name}/bias", [node]).outputs[0]
        replace_value(graph, node.outputs[0], out)
        return True
