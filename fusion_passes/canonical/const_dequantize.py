"""Constant dequantize: DequantizeLinear of a small constant that no cube op reads becomes the
float constant it computes.

Why: quantize_static quantizes every initializer, LayerNorm's gamma and beta and the
attention mask's constants included.  DequantizeLinear is kept out of constant folding so the
int8 weights of Conv/MatMul/Gemm stay visible to the int8 fusions (ge/ops/quant.py,
`foldable=False`); every other constant dequantize would run as a kernel of its own on each
inference -- 51 launches in BERT-base -- to recompute the same numbers.  Folded here (the op's
own compute, so the values are the ones onnxruntime computes), they are weights again.
Large tables are left alone (an embedding is four times its int8 size in float32, and its
Gather moves onto the int8 table, quant_views.py)."""
from __future__ import annotations

import numpy as np

from fusion_passes.canonical.rewrite import Rewrite
from ge.ir import Graph, Node
from ge.ops.registry import get_op

CUBE_OPS = ("Conv", "ConvTranspose", "MatMul", "Gemm")
FOLD_LIMIT_BYTES = 1 << 20          # float32 bytes a folded constant may take


class ConstantDequantize(Rewrite):
    name = "ConstantDequantize"
    anchor_types = ("DequantizeLinear",)

    def apply(self, graph: Graph, node: Node) -> bool:
        source, out = node.inputs[0], node.outputs[0]
        if source is None or not source.is_const or out.is_graph_output:
            return False
        if source.const.size * 4 > FOLD_LIMIT_BYTES or any(user.op_type in CUBE_OPS for user, _ in out.uses):
            return False
        folded = get_op("DequantizeLinear").compute([source.const], node.attrs)[0]
        graph.replace_all_uses_with(out, graph.constant(f"{node.name}/folded", np.asarray(folded)))
        return True
