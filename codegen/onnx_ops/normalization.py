"""Kernels of the softmax family and the normalization layers (ge/ops/normalization.py).

Statistic norms (Layer/Instance/Group): sum, sub, square, sum, scale by rstd per element,
plus the affine map; mean, var and rsqrt per normalized group.  RMS norms (RMSNormalization,
onnxruntime's SimplifiedLayerNormalization): square, sum, scale by rstd per element, plus
the scale; mean-square + eps and rsqrt per row (no mean to subtract).
"""
from __future__ import annotations

import numpy as np

from codegen.registry import register
from codegen.work import Work, by_impl, per_element
from ge.ops.common import axis_attr


def _batch_norm_work(inputs, outputs, attrs):
    channels = inputs[1].size
    return (Work().add_vector("alu", 2 * outputs[0].size)     # x * a + b
            .add_vector("alu", 3 * channels)                   # var+eps, mean*a, B-...
            .add_vector("div", 2 * channels))                  # sqrt, scale / sqrt


def _norm_work(outputs, groups: int, affine_ops: int) -> Work:
    return (Work().add_vector("alu", (5 + affine_ops) * outputs[0].size)
            .add_vector("alu", 3 * groups).add_vector("div", 2 * groups))


def _layer_norm_work(inputs, outputs, attrs):
    shape = inputs[0].shape
    axis = axis_attr("LayerNormalization", attrs, len(shape), -1)
    rows = int(np.prod(shape[:axis], dtype=np.int64))
    has_bias = len(inputs) > 2 and inputs[2] is not None
    return _norm_work(outputs, rows, 1 + has_bias)


def _rms_norm_work(inputs, outputs, attrs):
    shape = inputs[0].shape
    axis = axis_attr("RMSNormalization", attrs, len(shape), -1)
    rows = int(np.prod(shape[:axis], dtype=np.int64))
    return (Work().add_vector("alu", 4 * outputs[0].size)
            .add_vector("alu", 2 * rows).add_vector("div", 2 * rows))


def _instance_norm_work(inputs, outputs, attrs):
    return _norm_work(outputs, inputs[0].shape[0] * inputs[0].shape[1], 2)


def _group_norm_work(inputs, outputs, attrs):
    return _norm_work(outputs, inputs[0].shape[0] * int(attrs.get("num_groups", 1)), 2)


# max-reduce, sub, exp, sum-reduce, div per element
# high_performance: a multiply by the row's reciprocal estimate instead of a division per element
register("Softmax", by_impl(per_element(alu=3, transcendental=1, div=1), per_element(alu=4, transcendental=1)),
         "SoftmaxV2")
# max-reduce, sub, exp, sum-reduce, sub per element (log per row is negligible but counted)
register("LogSoftmax", per_element(alu=4, transcendental=1))
register("BatchNormalization", _batch_norm_work, "BatchNorm")
register("LayerNormalization", _layer_norm_work, "LayerNorm")
register("RMSNormalization", _rms_norm_work, "RmsNorm")
register("SimplifiedLayerNormalization", _rms_norm_work)
register("InstanceNormalization", _instance_norm_work, "InstanceNorm")
register("GroupNormalization", _group_norm_work)
# square, window sum (cumsum + diff), mul, add, pow (log+exp), div
register("LRN", per_element(alu=5, transcendental=2, div=1))
