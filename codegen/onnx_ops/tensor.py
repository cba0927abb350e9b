"""Kernels of the shape and data-movement ops (ge/ops/tensor.py): .om type and work rule.

Data movement is priced as one `move` per output element; Gather and Slice read only the
part of their source they copy; views (Reshape, Flatten, Squeeze, Unsqueeze) launch no
kernel and cost nothing.
"""
from __future__ import annotations

import math

from codegen.registry import register
from codegen.work import Work, no_work, per_element, reads_sparsely
from ge.ops.tensor import attr_str, einsum_parse, normalize_axis, resize_plan


def _nonzero_work(inputs, outputs, attrs):
    return Work().add_vector("alu", inputs[0].size)


def _unique_work(inputs, outputs, attrs):
    """A sort of the input, then one pass to mark and count the runs."""
    n = max(inputs[0].size, 1)
    return Work().add_vector("alu", n * (max(1, math.ceil(math.log2(max(n, 2)))) + 2))


def _topk_work(inputs, outputs, attrs):
    n = inputs[0].shape[normalize_axis(int(attrs.get("axis", -1)), len(inputs[0].shape))]
    return Work().add_vector("alu", inputs[0].size * max(1, math.ceil(math.log2(max(n, 2)))))


def _einsum_work(inputs, outputs, attrs):
    ts = [t for t in inputs if t is not None]
    plan = einsum_parse(attrs["equation"], [t.shape for t in ts])
    products = math.prod(plan.sizes.values()) * math.prod(plan.ell_shape)
    if len(ts) >= 2:     # a contraction: the cube does every product of the index space
        return Work(cube_macs=products * (len(ts) - 1))
    return Work().add_vector("alu", products)


def _resize_work(inputs, outputs, attrs):
    if attr_str(attrs, "mode", "nearest") == "nearest":
        return Work().add_vector("move", outputs[0].size)
    out, scales = resize_plan(inputs[0].shape, attrs)
    resized = [i for i, (a, b) in enumerate(zip(inputs[0].shape, out)) if a != b]
    cubic = attr_str(attrs, "mode", "nearest") == "cubic"
    taps = 1
    for i in resized:     # 2 taps (linear) or 4 (cubic) per axis, widened by 1/scale when antialiasing
        widen = 1 / min(scales[i], 1.0) if int(attrs.get("antialias", 0)) else 1
        taps *= math.ceil((4 if cubic else 2) * widen)
    return Work().add_vector("move", outputs[0].size * taps).add_vector(
        "alu", outputs[0].size * (3 if not cubic else 8) * max(len(resized), 1))


# op type: (work rule, .om type; "" = the op type)
KERNELS = {
    "Transpose":       (per_element(move=1), "Transpose"),
    "Concat":          (per_element(move=1), "ConcatD"),
    "Split":           (per_element(move=1), "SplitD"),
    "Slice":           (reads_sparsely(per_element(move=1), 0), "StridedSliceD"),
    "Gather":          (reads_sparsely(per_element(move=1), 0), "GatherV2D"),
    "GatherElements":  (reads_sparsely(per_element(move=1), 0), ""),
    "Expand":          (per_element(move=1), "BroadcastTo"),
    "Tile":            (per_element(move=1), "Tile"),
    "Pad":             (per_element(move=1), "Pad"),
    "Shape":           (no_work, "Shape"),
    "Size":            (no_work, "Size"),
    "ConstantOfShape": (per_element(move=1), "Fill"),
    "Range":           (per_element(alu=1), "Range"),
    "NonZero":         (_nonzero_work, ""),
    "Unique":          (_unique_work, ""),
    "DepthToSpace":    (per_element(move=1), "DepthToSpace"),
    "SpaceToDepth":    (per_element(move=1), "SpaceToDepth"),
    "Trilu":           (per_element(alu=1), ""),
    "CumSum":          (per_element(alu=1), "Cumsum"),
    "OneHot":          (per_element(alu=2), "OneHot"),
    "TopK":            (_topk_work, "TopK"),
    "Einsum":          (_einsum_work, ""),
    "Resize":          (_resize_work, ""),
}

for _op_type, (_work, _om_type) in KERNELS.items():
    register(_op_type, _work, _om_type)
for _op_type, _om_type in (("Reshape", "Reshape"), ("Flatten", "Flatten"), ("Squeeze", "Squeeze"), ("Unsqueeze", "")):
    register(_op_type, no_work, _om_type, no_task=True)
