"""A Concat of one operand is that operand.

torchvision's DenseNet concatenates the list of earlier feature maps in every dense layer,
and the first layer's list holds one map: the TorchScript exporter writes Concat(x), a copy
kernel that computes nothing.  Anchored on the Concat.
"""
from __future__ import annotations

from fusion_passes.canonical.rewrite import Rewrite, replace_value


class ConcatSingle(Rewrite):
    name = "ConcatSingle"
    anchor_types = ("Concat",)

    def apply(self, graph, concat):
        if len(concat.inputs) != 1 or concat.inputs[0] is None:
            return False
        source, out = concat.inputs[0], concat.outputs[0]
        if out.is_graph_output and (source.producer is None or source.is_graph_output):
            return False            # the output must stay a tensor of its own name
        replace_value(graph, out, source)
        return True
