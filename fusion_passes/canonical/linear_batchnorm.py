"""A BatchNormalization after a linear layer is the linear layer: folded into its weight.

timm's LeViT writes every projection as `LinearNorm`: a bias-free Linear, then BatchNorm1d
over the flattened tokens -- `bn(linear(x).flatten(0, 1)).reshape_as(x)` -- and TorchScript
exports keep the BatchNormalization.  Inference BN over the features is y*s + t per feature
(s = gamma / sqrt(var + eps), t = beta - mean * s), so x @ W (+ b) followed by it is
x @ (W * s) + (b * s + t): one linear layer the named passes (attention's Q/K/V, MatMulBiasAct)
read as any other.  Only when the BN normalises the linear layer's last axis (a 2-D [rows,
features] BN input, reached from the linear output through Reshapes that keep that axis)
and every value on the way has no other reader.
"""
from __future__ import annotations

import numpy as np

from fusion_passes.canonical.rewrite import Rewrite, add_node, replace_value
from fusion_passes.canonical.view_forms import reshape_to
from fusion_passes.linear import linear_producing
from ge.ir import Graph, Node


def _sole_use(value) -> bool:
    return len(value.uses) == 1 and not value.is_graph_output


class BatchNormIntoLinear(Rewrite):
    name = "BatchNormIntoLinear"
    anchor_types = ("BatchNormalization",)

    def apply(self, graph: Graph, bn: Node) -> bool:
        x = bn.inputs[0]
        params = bn.inputs[1:5]
        if len(x.desc.shape) != 2 or len(params) != 4 or not all(p is not None and p.is_const for p in params):
            return False
        if int(bn.attrs.get("training_mode", 0)) or any(v.uses or v.is_graph_output for v in bn.outputs[1:]):
            return False
        value, views = x, []
        while value.producer is not None and value.producer.op_type == "Reshape" and _sole_use(value) \
                and value.producer.inputs[0].desc.shape[-1] == value.desc.shape[-1]:
            views.append(value.producer)
            value = value.producer.inputs[0]
        linear = linear_producing(value)
        if linear is None or not _sole_use(value) or any(not _sole_use(n.outputs[0]) for n in linear.nodes[:-1]):
            return False
        gamma, beta, mean, var = (p.const.astype(np.float64).reshape(-1) for p in params)
        if gamma.size != linear.width:
            return False
        scale = gamma / np.sqrt(var + float(bn.attrs.get("epsilon", 1e-5)))
        w = linear.weight.const
        bias = linear.bias_vector()
        b = (bias.astype(np.float64) if bias is not None else 0.0) * scale + beta - mean * scale
        weight = graph.constant(f"{linear.weight.name}/bn", (w.astype(np.float64) * scale).astype(w.dtype))
        origin = linear.nodes + views + [bn]
        mm = add_node(graph, "MatMul", [linear.x, weight], {}, linear.matmul.name, origin)
        out = add_node(graph, "Add", [mm.outputs[0], graph.constant(f"{bn.name}/bias", b.astype(w.dtype))], {},
                       f"{bn.name}/bias", origin).outputs[0]
        if tuple(out.desc.shape) != tuple(bn.outputs[0].desc.shape):
            out = reshape_to(graph, out, bn.outputs[0].desc.shape, f"{bn.name}/rows", views).outputs[0]
        replace_value(graph, bn.outputs[0], out)
        return True
