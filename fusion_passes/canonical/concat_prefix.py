"""Nested concats: Concat(a0, ..., ak, ..., an) when a Concat of (a0, ..., ak) exists ->
Concat(that, ak+1, ..., an).

DenseNet concatenates every earlier feature map again in each layer (torchvision's dense
layer does torch.cat(features, 1) over the growing list): layer k's Concat re-reads all k
maps, so each conv's output has as many readers as there are later layers, and no conv can
write its output into a concat (codegen/fused/conv.py's concatenated store needs the conv to
be the Concat's only writer of that operand).  Concatenation is associative: written as the
previous layer's Concat plus the new map, every map has one Concat reader and the chain of
concats is the growing buffer the memory-efficient DenseNet keeps.

Anchored on the Concat.  The longest live Concat (same axis, at least two operands, fewer
than this one's) whose operands -- through the nested concats of the same axis it starts
with -- are a prefix of this one's is taken; it reads the last operand of that prefix, so
the search looks only among the readers of this Concat's operands, and a whole dense block
nests in one round.
"""
from __future__ import annotations

from typing import Optional

from fusion_passes.canonical.rewrite import Rewrite, add_node, replace_value
from ge.ir import Node


def _axis(node: Node) -> int:
    return int(node.attrs.get("axis", 0)) % len(node.outputs[0].desc.shape)


def _live(node: Node) -> bool:
    out = node.outputs[0]
    return bool(out.uses) or out.is_graph_output


def operand_list(node: Node) -> list:
    """The operands `node` concatenates, its leading nested Concats (same axis) unrolled."""
    operands = list(node.inputs)
    head = operands[0].producer if operands and operands[0] is not None else None
    if head is not None and head.op_type == "Concat" and _axis(head) == _axis(node):
        return operand_list(head) + operands[1:]
    return operands


class ConcatPrefix(Rewrite):
    name = "ConcatPrefix"
    anchor_types = ("Concat",)

    def apply(self, graph, concat):
        operands = list(concat.inputs)
        if len(operands) < 3 or any(v is None for v in operands):
            return False
        best = self._longest_prefix(concat, operands)
        if best is None:
            return False
        k = len(operand_list(best))
        nested = add_node(graph, "Concat", [best.outputs[0]] + operands[k:], {"axis": _axis(concat)},
                          f"{concat.name}/nested", [concat], before=concat)
        replace_value(graph, concat.outputs[0], nested.outputs[0])
        return True

    @staticmethod
    def _longest_prefix(concat: Node, operands: list) -> Optional[Node]:
        axis, dtype = _axis(concat), concat.outputs[0].desc.dtype
        best, best_k = None, 1
        for last in operands[1:-1]:
            for reader, _ in last.uses:
                if reader is concat or reader.op_type != "Concat" or not _live(reader) \
                        or _axis(reader) != axis or reader.outputs[0].desc.dtype != dtype:
                    continue
                unrolled = operand_list(reader)
                k = len(unrolled)
                if best_k < k < len(operands) and unrolled == operands[:k]:
                    best, best_k = reader, k
        return best
