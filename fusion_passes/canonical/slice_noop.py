"""A Slice that keeps every element in order is its input.

timm's GhostModule returns ``torch.cat([x1, x2], 1)[:, :self.oup]``, and the two halves add
up to `oup` exactly in every GhostNet: the TorchScript exporter still writes the Slice, a copy
kernel that computes nothing and stands between the module's concat and the residual Add
(dynamo's optimizer drops it).  A Slice whose output has its input's shape with every step
positive starts at 0 on every axis: it is the identity.  Anchored on the Slice.
"""
from __future__ import annotations

from fusion_passes.canonical.rewrite import Rewrite, replace_value


class SliceNoop(Rewrite):
    name = "SliceNoop"
    anchor_types = ("Slice",)

    def apply(self, graph, node):
        data, out = node.inputs[0], node.outputs[0]
        steps = node.attrs.get("steps") or []
        if len([v for v in node.inputs if v is not None]) != 1 or any(int(s) <= 0 for s in steps):
            return False                             # bounds still inputs, or a reversing slice
        if tuple(data.desc.shape) != tuple(out.desc.shape) or data.desc.dtype != out.desc.dtype:
            return False
        if out.is_graph_output and (data.producer is None or data.is_graph_output):
            return False                             # the output must stay a tensor of its own name
        replace_value(graph, out, data)
        return True
