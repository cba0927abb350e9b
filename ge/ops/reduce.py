"""Reduce* and ArgMax/ArgMin: numpy semantics and shape rules.

Canonical form: the axes input of opset 13/18 is the attribute "axes" (list, or absent/None
for "all axes" -- or no reduction at all when noop_with_empty_axes=1).  keepdims defaults
to 1.  Float16 data is accumulated in float32 and the result cast back to float16, as the
vector unit's reduce kernels do.
"""
from __future__ import annotations

from typing import Optional

import numpy as np

from ge.ops.common import axis_attr, normalize_axes
from ge.ops.registry import OpDef, OpKind, TensorType, register
from ge.errors import invalid_attr


def flag(attrs: dict, name: str, default: int) -> bool:
    """keepdims / noop_with_empty_axes as onnxruntime and ONNX's shape inference read them: on
    only when 1 (keepdims=7 drops the axis there, so it does here too)."""
    return int(attrs.get(name, default)) == 1


def reduced_axes(op_type: str, attrs: dict, rank: int) -> Optional[tuple]:
    """The reduced axes, sorted and non-negative; None means "no reduction" (noop)."""
    axes = attrs.get("axes")
    if isinstance(axes, (int, np.integer)):
        axes = [int(axes)]
    if axes is None or len(axes) == 0:
        if flag(attrs, "noop_with_empty_axes", 0):
            return None
        return tuple(range(rank))
    try:
        if rank == 0:     # normalize_axis lets axis 0 through for rank 0; a reduction of a scalar has no axis
            raise ValueError(f"a scalar (rank 0) has no axis {list(axes)}")
        normalized = normalize_axes(axes, rank)
    except (ValueError, TypeError) as err:      # out of range, or not a list of ints (a 2-D axes tensor)
        raise invalid_attr(op_type, "axes", list(axes), str(err), f"Use axes in [-{rank}, {rank - 1}].") from err
    return tuple(sorted(set(normalized)))    # an axis named twice is reduced once, as in onnxruntime


def _reduced_shape(shape: tuple, axes: Optional[tuple], keepdims: bool) -> tuple:
    if axes is None:
        return tuple(shape)
    if keepdims:
        return tuple(1 if i in axes else d for i, d in enumerate(shape))
    return tuple(d for i, d in enumerate(shape) if i not in axes)


def _acc(x: np.ndarray) -> np.ndarray:
    return x.astype(np.float32) if x.dtype == np.float16 else x


def _identity_fill(x: np.ndarray, high: bool):
    """ReduceMax/Min of an empty set: -inf/+inf (or the dtype's extreme) per opset 18."""
    if x.dtype == np.bool_:
        return not high
    if np.issubdtype(x.dtype, np.floating):
        return -np.inf if high else np.inf
    info = np.iinfo(x.dtype)
    return info.min if high else info.max


def _sum(x, axes, kd):
    return np.sum(_acc(x), axis=axes, keepdims=kd)


def _mean(x, axes, kd):
    if x.size == 0:     # the mean of no element: 0, as onnxruntime (numpy says nan)
        return np.sum(_acc(x), axis=axes, keepdims=kd)
    return np.mean(_acc(x), axis=axes, keepdims=kd)


def _max(x, axes, kd):
    return np.max(x, axis=axes, keepdims=kd, initial=_identity_fill(x, True) if x.size == 0 else None)


def _min(x, axes, kd):
    return np.min(x, axis=axes, keepdims=kd, initial=_identity_fill(x, False) if x.size == 0 else None)


def _prod(x, axes, kd):
    return np.prod(_acc(x), axis=axes, keepdims=kd)


def _sum_square(x, axes, kd):
    a = _acc(x)
    return np.sum(a * a, axis=axes, keepdims=kd)


def _l1(x, axes, kd):
    return np.sum(np.abs(_acc(x)), axis=axes, keepdims=kd)


def _l2(x, axes, kd):
    return np.sqrt(_sum_square(x, axes, kd))


def _log_sum(x, axes, kd):
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.log(_sum(x, axes, kd))


def _log_sum_exp(x, axes, kd):
    a = _acc(x) if x.dtype.kind == "f" else x.astype(np.float64)    # an integer max has no -inf start
    m = np.max(a, axis=axes, keepdims=True, initial=-np.inf)   # an empty set's sum is 0: log gives -inf
    m = np.where(np.isfinite(m), m, 0)           # all -inf rows give -inf, not NaN
    with np.errstate(divide="ignore", over="ignore"):
        s = np.log(np.sum(np.exp(a - m), axis=axes, keepdims=True)) + m
    return s if kd else np.squeeze(s, axis=axes)


REDUCERS = {
    "ReduceSum": _sum,
    "ReduceMean": _mean,
    "ReduceMax": _max,
    "ReduceMin": _min,
    "ReduceProd": _prod,
    "ReduceSumSquare": _sum_square,
    "ReduceL1": _l1,
    "ReduceL2": _l2,
    "ReduceLogSum": _log_sum,
    "ReduceLogSumExp": _log_sum_exp,     # stable form: max-reduce, sub, exp, sum-reduce
}


def _make_reduce(op_type: str, kernel) -> OpDef:
    def compute(inputs, attrs):
        x = inputs[0]
        axes = reduced_axes(op_type, attrs, x.ndim)
        if axes is None:
            return [x.copy()]
        y = kernel(x, axes, flag(attrs, "keepdims", 1))
        return [np.asarray(y).astype(x.dtype, copy=False)]

    def infer(inputs, attrs):
        t = inputs[0]
        axes = reduced_axes(op_type, attrs, len(t.shape))
        shape = _reduced_shape(tuple(t.shape), axes, flag(attrs, "keepdims", 1))
        return [TensorType(np.dtype(t.dtype), shape)]

    return OpDef(op_type=op_type, kind=OpKind.REDUCE, compute=compute, infer=infer,
                 config_inputs=((1, "axes"),))


for _name, _kernel in REDUCERS.items():
    register(_make_reduce(_name, _kernel))


# ---------------------------------------------------------------------------------------
# ArgMax / ArgMin: int64 indices along one axis.

def _make_arg(op_type: str, np_arg) -> OpDef:
    def axis_of(attrs, rank):
        if rank == 0:  # ONNX's axis range [-r, r-1] is empty for a scalar (found by the fuzzer)
            raise invalid_attr(op_type, "axis", int(attrs.get("axis", 0)), "the input is a scalar",
                               f"{op_type} needs an input of rank 1 or more.")
        return axis_attr(op_type, attrs, rank, 0)

    def compute(inputs, attrs):
        x = inputs[0]
        axis = axis_of(attrs, x.ndim)
        if int(attrs.get("select_last_index", 0)):
            idx = x.shape[axis] - 1 - np_arg(np.flip(x, axis=axis), axis=axis)
        else:
            idx = np_arg(x, axis=axis)
        if flag(attrs, "keepdims", 1):
            idx = np.expand_dims(idx, axis)
        return [np.asarray(idx, dtype=np.int64)]

    def infer(inputs, attrs):
        shape = tuple(inputs[0].shape)
        axis = axis_of(attrs, len(shape))
        if isinstance(shape[axis], int) and shape[axis] == 0:     # onnxruntime refuses it too
            raise invalid_attr(op_type, "axis", int(attrs.get("axis", 0)), f"axis {axis} of the input "
                               f"{list(shape)} is empty: there is no element to pick", "Check the input's shape.")
        return [TensorType(np.dtype(np.int64),
                           _reduced_shape(shape, (axis,), flag(attrs, "keepdims", 1)))]

    return OpDef(op_type=op_type, kind=OpKind.REDUCE, compute=compute, infer=infer)


register(_make_arg("ArgMax", np.argmax))
register(_make_arg("ArgMin", np.argmin))
