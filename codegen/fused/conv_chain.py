"""ConvChainFusionOp: a conv (block) whose output feeds a pointwise conv (block), in one kernel.

Why: a conv with nothing elementwise after it -- ShuffleNet's and MobileNet's linear
depthwise convs, MobileNetV2's linear projection feeding the next block's expansion, a
segmentation head's classifier -- has no epilogue to fuse, so its output makes a round trip
through global memory only to be read by the next conv.  When the next conv is 1x1 its
input tile is exactly the first conv's output tile (all channels of a block of pixels, no
halo), so the cube can take it straight from the buffer: the intermediate is written only
if something else reads it (`emit_first`).

Inputs: the first part's inputs, then the second's with its input 0 (the first's output,
handed over on chip) left empty: [first inputs... (`split` of them), None, second inputs 1...].
Attributes: ``first_op`` / ``second_op`` (Conv or a conv-block op type of
codegen/fused/conv.py; the second may also be a SqueezeExcitationFusionOp, whose pooling
sums the first's output tiles as they come), their attributes prefixed ``a_`` / ``b_``, ``split``,
``emit_first`` (1: the first part's output is also written, as output 1).
Numerics: each part is its own kernel's compute; the intermediate is rounded to the data
dtype in between, as the cube reads it (float16 in force_fp16).
"""
from __future__ import annotations

from codegen.registry import kernel_of, register
from ge.ops.common import IMPL_MODE_ATTR
from ge.ops.registry import OpDef, OpKind, TensorType

OP_TYPE = "ConvChainFusionOp"


def part_attrs(attrs: dict, prefix: str) -> dict:
    own = {k[len(prefix):]: v for k, v in attrs.items() if k.startswith(prefix)}
    if IMPL_MODE_ATTR in attrs:
        own[IMPL_MODE_ATTR] = attrs[IMPL_MODE_ATTR]
    return own


def _split(inputs, attrs):
    k = int(attrs["split"])
    return list(inputs[:k]), list(inputs[k:])


def _part(attrs: dict, key: str):
    return kernel_of(str(attrs[key])).op


def _compute(inputs, attrs):
    first, second = _split(inputs, attrs)
    y1 = _part(attrs, "first_op").compute(first, part_attrs(attrs, "a_"))[0]
    second[0] = y1.astype(inputs[0].dtype, copy=False)
    y2 = _part(attrs, "second_op").compute(second, part_attrs(attrs, "b_"))[0]
    return [y2, y1] if int(attrs.get("emit_first", 0)) else [y2]


def _types(inputs, attrs):
    first, second = _split(inputs, attrs)
    y1 = _part(attrs, "first_op").infer(first, part_attrs(attrs, "a_"))[0]
    second[0] = y1
    y2 = _part(attrs, "second_op").infer(second, part_attrs(attrs, "b_"))[0]
    return y1, y2, first, second


def _infer(inputs, attrs):
    y1, y2, _, _ = _types(inputs, attrs)
    return [y2, y1] if int(attrs.get("emit_first", 0)) else [y2]


def _work(inputs, outputs, attrs):
    """Both parts' work; on chip: the intermediate tile handed from one cube pass to the next."""
    y1, y2, first, second = _types(inputs, attrs)
    y1 = TensorType(outputs[0].dtype, y1.shape)
    second[0] = y1
    a = kernel_of(str(attrs["first_op"])).work(first, [y1], part_attrs(attrs, "a_"))
    b = kernel_of(str(attrs["second_op"])).work(second, [outputs[0]], part_attrs(attrs, "b_"))
    work = a + b
    work.onchip_bytes += y1.nbytes
    return work


def _prepare(inputs, attrs):
    """At load, what each part derives from its constants (a conv's Winograd weights); the
    second part sees the intermediate's type."""
    _, _, first, second = _types(inputs, attrs)
    for key, prefix, part in (("first_op", "a_", first), ("second_op", "b_", second)):
        op = _part(attrs, key)
        if op.prepare is not None:
            op.prepare(part, part_attrs(attrs, prefix))


register(OpDef(OP_TYPE, OpKind.OUT_EWISE_FUSABLE, _compute, _infer, prepare=_prepare), _work)
