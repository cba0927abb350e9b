"""ConvPoolFC: the classification head -> one ConvPoolFCFusionOp kernel.

Why: the last conv block's output, the pooled vector and the logits are small, but as
separate kernels each is written to and re-read from global memory, and each launch costs
time; in one kernel the conv tile is pooled on chip and fed straight to the FC.

Pattern (anchor: the pooling op):
  Conv | a conv block        (ConvBNReluFusionOp or a depthwise/grouped/dilated one, with its
                               residual conv, if any -- or a plain Conv of any group/dilation:
                               the head kernel runs the conv block's own code)
  -> GlobalAveragePool | ReduceMean(axes = all spatial axes, keepdims 0 or 1)
  -> [Flatten | Reshape to (N, C)]   (may be absent when ReduceMean has keepdims=0)
  -> a linear layer (fusion_passes/linear.py: MatMul [+ Add(constant bias)], which is what
     the canonical form makes of the exporters' Gemm)
A pooling op not fed by a conv block or not followed by an FC is not this pattern (None):
e.g. EfficientNet's squeeze-excite pools.  Misses: pooling not over all spatial axes,
non-constant FC or conv weights (NF2002), the flattened shape not (N, C) or a bias that
does not broadcast (NF2004), a Gemm left with transA = 1 (NF2003), a conv block that stores
its output pooled or permuted, concatenates along another axis than the channels, or
scales its input (NF2006).  A block writing one operand of a channel concatenation
(GoogLeNet's and Inception's last module) takes the whole concatenation.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple, Optional

import numpy as np

from codegen.fused.conv import BLOCK_SLOTS, CONV_ATTR_NAMES, CONV_BLOCK_OPS, HEAD_SLOTS, RES_PREFIX
from codegen.fused.epilogue import ACT_PREFIX, EPILOGUE_ATTRS
from fusion_passes import reasons
from fusion_passes.base import FusionPass, Match, fuse, single_consumer
from fusion_passes.conv_block import conv_attrs
from fusion_passes.linear import linear_at
from ge.ir import Graph, Node, Value

FUSED_OP = "ConvPoolFCFusionOp"
_CONV_TYPES = ("Conv",) + CONV_BLOCK_OPS
_BLOCK_ATTRS = CONV_ATTR_NAMES + EPILOGUE_ATTRS + ("has_bn", "has_residual", "residual_conv", "res_has_bn",
                                                   "concat_axis", "concat_index", "concat_parts") \
    + tuple(RES_PREFIX + k for k in CONV_ATTR_NAMES)


class FullyConnected(NamedTuple):
    nodes: list              # Gemm, or MatMul [+ Add]
    weight: Value
    bias: Optional[Value]
    attrs: dict              # fc_transB, fc_alpha, fc_beta (and fc_transA, checked then dropped)
    output: Value


def _fc_at(value: Value) -> Optional[FullyConnected]:
    """The linear layer (fusion_passes/linear.py) reading `value` as x, or a Gemm the
    canonical form left (transA=1 or a computed weight: refused below), else None."""
    node = single_consumer(value)
    if node is None or node.inputs[0] is not value:
        return None
    if node.op_type == "Gemm":
        bias = node.inputs[2] if len(node.inputs) > 2 else None
        attrs = {"fc_transB": int(node.attrs.get("transB", 0)), "fc_alpha": float(node.attrs.get("alpha", 1.0)),
                 "fc_beta": float(node.attrs.get("beta", 1.0)), "fc_transA": int(node.attrs.get("transA", 0))}
        return FullyConnected([node], node.inputs[1], bias, attrs, node.outputs[0])
    if node.op_type != "MatMul":
        return None
    linear = linear_at(node)
    if linear is None:          # a computed weight: a head all the same, refused with NF2002 below
        return FullyConnected([node], node.inputs[1], None, {"fc_transB": 0, "fc_alpha": 1.0, "fc_beta": 1.0},
                              node.outputs[0])
    return FullyConnected(linear.nodes, linear.weight, linear.bias, {"fc_transB": 0, "fc_alpha": 1.0, "fc_beta": 1.0},
                          linear.output)


class ConvPoolFCFusionPass(FusionPass):
    pattern_name = "ConvPoolFC"
    pass_name = "ConvPoolFCFusionPass"
    fused_ops = (FUSED_OP,)
    anchor_types = ("GlobalAveragePool", "ReduceMean")

    def match(self, graph: Graph, pool: Node):
        x = pool.inputs[0]
        conv = x.producer if x is not None and x.producer is not None and x.producer.op_type in _CONV_TYPES else None
        if conv is None:
            return None
        pooled = pool.outputs[0]
        flatten = single_consumer(pooled)
        if flatten is not None and flatten.op_type in ("Flatten", "Reshape") and flatten.inputs[0] is pooled:
            flat = flatten.outputs[0]
        else:
            flatten, flat = None, pooled
        fc = _fc_at(flat)
        if fc is None:
            return None                                  # not a classification head
        fc_nodes, weight, bias, fc_attrs, out = fc
        nodes = [conv, pool] + ([flatten] if flatten else []) + fc_nodes
        block = conv.outputs[0]
        rank = len(block.desc.shape)
        n, c = int(block.desc.shape[0]), int(block.desc.shape[1])
        # -- constraints ---------------------------------------------------------------------
        concat_axis = conv.attrs.get("concat_axis")
        if any(k in conv.attrs for k in ("output_perm", "concat_perm", "pool_op")) or conv.attrs.get("input_scale") \
                or (concat_axis is not None and int(concat_axis) != 1):
            return self.miss(reasons.UNSUPPORTED_VARIANT, pool, nodes,
                             f"the conv block {conv.name} stores its output permuted or concatenated or scales its input "
                             f"({ {k: conv.attrs[k] for k in ('output_perm', 'concat_axis', 'concat_perm', 'pool_op', 'input_scale') if k in conv.attrs} }): "
                             "the head pools an (N, C, *spatial) block", [block])
        if pool.op_type == "ReduceMean":
            axes = sorted(int(a) % rank for a in (pool.attrs.get("axes") or []))
            spatial = list(range(2, rank))
            if axes != spatial:
                return self.miss(reasons.UNSUPPORTED_ATTRIBUTE, pool, nodes,
                                 f"pooling is not global: ReduceMean over axes {axes}, the head needs "
                                 f"all spatial axes {spatial}", [block, pooled])
        if tuple(flat.desc.shape) != (n, c):
            return self.miss(reasons.SHAPE_MISMATCH, pool, nodes,
                             f"the pooled tensor reaches the FC as {list(flat.desc.shape)}, not (N, C) = "
                             f"{[n, c]}", [pooled, flat])
        if fc_attrs.pop("fc_transA", 0):
            return self.miss(reasons.UNSUPPORTED_ATTRIBUTE, pool, nodes,
                             "Gemm with transA = 1 does not read the pooled (N, C) tensor as rows", [flat])
        loose = [v for v in [conv.inputs[1], weight, bias] + conv.inputs[2:3] if v is not None and not v.is_const]
        if loose:
            return self.miss(reasons.NON_CONSTANT, pool, nodes,
                             f"the FC and conv weights and biases must be constants; {[v.name for v in loose]} "
                             "are not", loose)
        if len(weight.desc.shape) != 2:
            return self.miss(reasons.SHAPE_MISMATCH, pool, nodes,
                             f"the FC weight must be 2-D, it is {list(weight.desc.shape)}", [weight])
        if bias is not None:
            k = int(out.desc.shape[-1])
            try:
                ok = tuple(np.broadcast_shapes(tuple(bias.desc.shape), (n, k))) == (n, k)
            except ValueError:
                ok = False
            if not ok:
                return self.miss(reasons.SHAPE_MISMATCH, pool, nodes,
                                 f"the FC bias {list(bias.desc.shape)} does not broadcast to the output "
                                 f"{[n, k]}", [bias, out])
        return HeadMatch(nodes, FUSED_OP, [out], conv=conv, weight=weight, bias=bias, fc_attrs=fc_attrs)

    def rewrite(self, graph: Graph, match: "HeadMatch") -> Node:
        conv = match.conv
        if conv.op_type == "Conv":
            attrs = conv_attrs(conv)
            attrs.update(has_bn=False, has_residual=False)
        else:
            attrs = {k: v for k, v in conv.attrs.items() if k in _BLOCK_ATTRS or k.startswith(ACT_PREFIX)}
        attrs.update(match.fc_attrs)
        attrs["pool"] = match.nodes[1].op_type
        block = BLOCK_SLOTS.read(conv.inputs) if conv.op_type != "Conv" else {"x": conv.inputs[0], "w": conv.inputs[1],
                                                                              "bias": conv.inputs[2] if len(conv.inputs) > 2 else None}
        slots = {k: v for k, v in block.items() if k in HEAD_SLOTS.names or k == "parts"}
        slots.update(fc_w=match.weight, fc_b=match.bias)
        return fuse(graph, match.nodes, FUSED_OP, HEAD_SLOTS.pack(**slots), match.outputs, attrs, self.pass_name)


@dataclass
class HeadMatch(Match):
    """conv block -> global average pool [-> Flatten/Reshape] -> FC."""

    conv: Node               # a Conv or a ConvBNReluFusionOp
    weight: Value
    bias: Optional[Value]
    fc_attrs: dict
