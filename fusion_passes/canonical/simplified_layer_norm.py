"""SimplifiedLayerNormalization -> RMSNormalization, where they compute the same tensor.

onnxruntime's transformer optimizer (and ORT-optimized models users export) write an RMS
norm as its contrib op SimplifiedLayerNormalization, in the ONNX domain.  ONNX's own op
(opset 23) is RMSNormalization; the RMSNorm passes (RmsNormMatMul) read that one op.  The
two differ only in where a float16 result is rounded (onnxruntime applies the scale in
float32 and rounds once; RMSNormalization rounds the normalized tensor, then scales), so
the rewrite is taken for float32 data only (where they are equal op for op), with float32
statistics (stash_type 1) and the optional inv_std_var output unread; anything else stays a
SimplifiedLayerNormalization kernel.
"""
from __future__ import annotations

import numpy as np

from fusion_passes.canonical.rewrite import Rewrite, add_node, replace_value


class SimplifiedLayerNorm(Rewrite):
    name = "SimplifiedLayerNorm"
    anchor_types = ("SimplifiedLayerNormalization",)

    def apply(self, graph, node):
        x, scale = node.inputs[0], node.inputs[1]
        if np.dtype(x.desc.dtype) != np.float32 or int(node.attrs.get("stash_type", 1)) != 1:
            return False
        if any(v.uses or v.is_graph_output for v in node.outputs[1:]):
            return False
        attrs = {"axis": int(node.attrs.get("axis", -1)), "epsilon": float(node.attrs.get("epsilon", 1e-5)),
                 "stash_type": 1}
        new = add_node(graph, "RMSNormalization", [x, scale], attrs, f"{node.name}/RMSNormalization", [node],
                       before=node)
        replace_value(graph, node.outputs[0], new.outputs[0])
        return True
