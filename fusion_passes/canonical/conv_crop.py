"""A conv output cropped by a Slice is the conv with less padding.

Wav2Vec2's positional conv (and other "same"-padded even kernels, Wav2Vec2SamePadLayer)
pads both ends by k/2 and then drops the last output step with a Slice: that Slice is the
conv with one step less of end padding.  Dropping t outputs at the start (end) of a spatial
axis of a stride-s conv is lowering the start (end) padding by t*s, as long as the padding
is there to lower; the conv's shape rule then gives exactly the Slice's output.  The conv
becomes a conv block again (its activation follows it directly).  Anchored on the Slice.
"""
from __future__ import annotations

from fusion_passes.base import single_consumer
from fusion_passes.canonical.rewrite import Rewrite, add_node, replace_value
from ge.ops.registry import TensorType, get_op


def _ints(value, n, default):
    return [int(v) for v in value] if value is not None and len(value) else [default] * n


class ConvCrop(Rewrite):
    name = "ConvCrop"
    anchor_types = ("Slice",)

    def apply(self, graph, node):
        y, out = node.inputs[0], node.outputs[0]
        conv = y.producer
        if conv is None or conv.op_type != "Conv" or single_consumer(y) is not node \
                or len([v for v in node.inputs if v is not None]) != 1:
            return False
        auto_pad = conv.attrs.get("auto_pad", "NOTSET")
        if (auto_pad.decode() if isinstance(auto_pad, bytes) else auto_pad) != "NOTSET":
            return False
        rank, nd = len(y.desc.shape), len(y.desc.shape) - 2
        pads = _ints(conv.attrs.get("pads"), 2 * nd, 0)
        strides = _ints(conv.attrs.get("strides"), nd, 1)
        axes = [int(a) % rank for a in _ints(node.attrs.get("axes"), rank, 0)] if node.attrs.get("axes") \
            else list(range(rank))
        steps = _ints(node.attrs.get("steps"), len(axes), 1)
        if any(s != 1 for s in steps):
            return False
        for axis, start, end in zip(axes, node.attrs.get("starts") or [], node.attrs.get("ends") or []):
            dim = int(y.desc.shape[axis])
            begin = max(0, min(dim, int(start) + dim if int(start) < 0 else int(start)))
            stop = max(0, min(dim, int(end) + dim if int(end) < 0 else int(end)))
            if axis < 2:
                if (begin, stop) != (0, dim):
                    return False                       # batch or channels: not a crop
                continue
            i = axis - 2
            pads[i] -= begin * strides[i]
            pads[nd + i] -= (dim - stop) * strides[i]
        if any(p < 0 for p in pads):
            return False
        attrs = dict(conv.attrs, pads=pads)
        shape = get_op("Conv").infer([TensorType(v.desc.dtype, tuple(v.desc.shape)) for v in conv.inputs if v is not None],
                                     attrs)[0].shape
        if tuple(shape) != tuple(out.desc.shape):
            return False
        cropped = add_node(graph, "Conv", list(conv.inputs), attrs, f"{conv.name}/cropped", [conv, node], before=node)
        replace_value(graph, out, cropped.outputs[0])
        return True
