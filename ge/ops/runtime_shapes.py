"""Shape rules for ops whose shape-giving inputs are computed at run time.

A Reshape whose target comes from a graph input, a Slice whose starts a kernel computes,
TopK's k, NonZero's count: the kernel reads those values when it runs (the simulator moves
them into the attributes just before calling the op's `compute`, the same move
canonicalization makes at compile time for constants).  What the compiler still knows is
the rank -- the config tensors have static shapes -- and every dim the values cannot
change; each other dim is a fresh symbol ("data" origin) that the simulator binds from the
kernel's real output.  `output_types` returns None when the op's shape does not depend on
the inputs left for run time (Clip's bounds, Pad's constant value, CumSum's axis): the
op's own rule applies.

`known` holds what the run-time inputs are known to contain symbolically (ge.shape_values),
so Range(P, P + S, 1) is `S` long and ConstantOfShape([B, S]) is [B, S], exactly.
"""
from __future__ import annotations

import math
from typing import Callable, Optional

import numpy as np

from ge.errors import InvalidNode
from ge.ops.common import axis_attr, check_one_value
from ge.ops.tensor import normalize_axis      # an out-of-range axis is the model's mistake (E16004)
from ge.ops.reduce import flag
from ge.ops.registry import TensorType
from ge.symbolic import Dim, SymbolicDimError, bounds, dim_max, floordiv, upper_bound

# input index -> the op's shape depends on its value (other config inputs do not matter)
SHAPE_INPUTS = {
    "Reshape": {1}, "Expand": {1}, "Slice": {1, 2, 3, 4}, "Squeeze": {1}, "Unsqueeze": {1},
    "Split": {1}, "Tile": {1}, "Pad": {1, 3}, "Resize": {2, 3}, "TopK": {1}, "OneHot": {1},
    **{op: {1} for op in ("ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceSumSquare",
                          "ReduceL1", "ReduceL2", "ReduceLogSum", "ReduceLogSumExp")},
}
# ops whose output shape is a function of input values (not config inputs of the op table)
VALUE_DEPENDENT = ("ConstantOfShape", "Range", "NonZero", "Unique")

Fresh = Callable[[int, Optional[int]], Dim]     # fresh(lo, hi) -> a new "data" symbol


def depends_on(op_type: str, runtime: set) -> bool:
    """Whether an op's output shape depends on the config inputs left for run time."""
    return op_type in VALUE_DEPENDENT or bool(SHAPE_INPUTS.get(op_type, set()) & set(runtime))


def _count(t: Optional[TensorType], what: str) -> int:
    """How many values a 1-D config tensor holds (its static length)."""
    if t is None:
        return 0
    shape = tuple(t.shape)
    if len(shape) > 1 or (shape and not isinstance(shape[0], int)):
        raise InvalidNode(f"the {what} input must be a 1-D tensor of static length, got shape {list(shape)}")
    return shape[0] if shape else 1


def _hi(d) -> Optional[int]:
    return upper_bound(d)


def _at_least_one(hi: Optional[int]) -> Optional[int]:
    return None if hi is None else max(hi, 1)


def _tt(dtype, shape) -> TensorType:
    return TensorType(np.dtype(dtype), tuple(shape))


def _numel_hi(shape) -> Optional[int]:
    his = [_hi(d) for d in shape]
    return None if any(h is None for h in his) else math.prod(his)


def output_types(op_type: str, types: list, attrs: dict, runtime: set, n_outputs: int,
                 known: list, fresh: Fresh) -> Optional[list]:
    """Output types of a node whose inputs `runtime` are computed at run time (their values
    may be partly `known`), or None when its own shape rule applies."""
    if not depends_on(op_type, runtime):
        return None
    rule = _RULES.get(op_type) or (_reduce if op_type.startswith("Reduce") else None)
    if rule is None:
        return None
    return rule(types, attrs, runtime, n_outputs, known, fresh)


def _reshape(types, attrs, runtime, n, known, fresh):
    x = types[0]
    if len(types[1].shape) != 1:        # onnxruntime: a shape tensor is a vector
        raise InvalidNode(f"Reshape: the shape input must be a 1-D tensor, got shape {list(types[1].shape)}")
    rank = _count(types[1], "shape")
    numel = math.prod(x.shape)
    if rank == 1:
        return [_tt(x.dtype, (numel,))]
    # with no element (a 0 dim: allowzero) the other dims are free
    hi = _numel_hi(x.shape) if all(bounds(d)[0] >= 1 for d in x.shape) else None
    return [_tt(x.dtype, [fresh(0, hi) for _ in range(rank)])]


def _expand(types, attrs, runtime, n, known, fresh):
    x = types[0]
    rank = max(len(x.shape), _count(types[1], "shape"))
    dims = [1] * (rank - len(x.shape)) + list(x.shape)
    # a dim of x other than 1 stays (the shape may only say 1 or that size there)
    return [_tt(x.dtype, [d if not _maybe_one(d) else fresh(0, None) for d in dims])]


def _maybe_one(d) -> bool:
    lo, hi = bounds(d)
    return lo <= 1 <= hi


def _slice(types, attrs, runtime, n, known, fresh):
    x = types[0]
    if 3 in runtime:                          # the axes themselves come at run time
        axes = set(range(len(x.shape)))
    elif attrs.get("axes") is not None and len(attrs["axes"]):
        axes = {normalize_axis(int(a), len(x.shape)) for a in attrs["axes"]}
    else:                                     # default axes: the first len(starts)
        count = _count(types[1], "starts") if 1 in runtime else len(attrs.get("starts") or [])
        axes = set(range(count))
    return [_tt(x.dtype, [fresh(0, _hi(d)) if i in axes else d for i, d in enumerate(x.shape)])]


def _squeeze(types, attrs, runtime, n, known, fresh):
    x = types[0]
    k = _count(types[1], "axes")
    maybe = [i for i, d in enumerate(x.shape) if _maybe_one(d)]
    if k == 0:                      # no axes: every dim of size 1 goes
        if all(d == 1 for i, d in enumerate(x.shape) if i in maybe):
            return [_tt(x.dtype, [d for d in x.shape if d != 1])]
        raise InvalidNode("Squeeze without axes on dims that may or may not be 1 at run time")
    if len(maybe) == k:             # exactly k dims can be 1: those are the axes
        return [_tt(x.dtype, [d for i, d in enumerate(x.shape) if i not in maybe])]
    his = [_hi(d) for d in x.shape]
    hi = None if None in his else max(his, default=0)
    return [_tt(x.dtype, [fresh(0, hi) for _ in range(len(x.shape) - k)])]


def _unsqueeze(types, attrs, runtime, n, known, fresh):
    x = types[0]
    k = _count(types[1], "axes")
    if all(d == 1 for d in x.shape):
        return [_tt(x.dtype, [1] * (len(x.shape) + k))]
    return [_tt(x.dtype, [fresh(0, None) for _ in range(len(x.shape) + k)])]


def _reduce(types, attrs, runtime, n, known, fresh):
    x = types[0]
    k = _count(types[1], "axes")
    keep = flag(attrs, "keepdims", 1)
    if k == 0:
        if flag(attrs, "noop_with_empty_axes", 0):
            return [_tt(x.dtype, x.shape)]
        return [_tt(x.dtype, [1] * len(x.shape) if keep else [])]
    if keep:                        # a reduced dim is 1, even where the input's is 0
        return [_tt(x.dtype, [1 if d == 1 else fresh(0, _at_least_one(_hi(d))) for d in x.shape])]
    return [_tt(x.dtype, [fresh(0, None) for _ in range(len(x.shape) - k)])]


def _split(types, attrs, runtime, n, known, fresh):
    x = types[0]
    axis = normalize_axis(int(attrs.get("axis", 0)), len(x.shape))
    out = []
    for _ in range(n):
        shape = list(x.shape)
        shape[axis] = fresh(0, _hi(x.shape[axis]))
        out.append(_tt(x.dtype, shape))
    return out


def _tile(types, attrs, runtime, n, known, fresh):
    x = types[0]
    return [_tt(x.dtype, [fresh(0, None) for _ in x.shape])]


def _same_rank_fresh(types, attrs, runtime, n, known, fresh):
    x = types[0]
    return [_tt(x.dtype, [fresh(0, None) for _ in x.shape])]


def _resize(types, attrs, runtime, n, known, fresh):
    x = types[0]
    axes = attrs.get("axes")
    axes = set(range(len(x.shape))) if axes is None or len(axes) == 0 else \
        {normalize_axis(int(a), len(x.shape)) for a in axes}
    return [_tt(x.dtype, [fresh(0, None) if i in axes else d for i, d in enumerate(x.shape)])]


def _topk(types, attrs, runtime, n, known, fresh):
    x = types[0]
    axis = normalize_axis(int(attrs.get("axis", -1)), len(x.shape))
    shape = list(x.shape)
    shape[axis] = fresh(0, _hi(x.shape[axis]))
    return [_tt(x.dtype, shape), _tt(np.int64, shape)]


def _onehot(types, attrs, runtime, n, known, fresh):
    indices = types[0]
    values = [t for t in types[1:] if t is not None][-1]
    axis = normalize_axis(int(attrs.get("axis", -1)), len(indices.shape) + 1)
    shape = list(indices.shape)
    shape.insert(axis, fresh(0, None))
    return [_tt(values.dtype, shape)]


def _constant_of_shape(types, attrs, runtime, n, known, fresh):
    value = attrs.get("value")
    dtype = np.float32 if value is None else np.asarray(value).dtype
    if known[0] is not None:
        return [_tt(dtype, [d if isinstance(d, Dim) else int(d) for d in known[0].reshape(-1)])]
    return [_tt(dtype, [fresh(0, None) for _ in range(_count(types[0], "shape"))])]


def _range(types, attrs, runtime, n, known, fresh):
    dtype = types[0].dtype
    for name, t in zip(("start", "limit", "delta"), types[:3]):
        check_one_value("Range", name, t.shape)
    if all(k is not None for k in known[:3]):
        start, limit, delta = (k.reshape(()).item() for k in known[:3])
        if isinstance(delta, int) and delta > 0:
            try:
                return [_tt(dtype, (dim_max(floordiv(limit - start + delta - 1, delta), 0),))]
            except SymbolicDimError:
                pass
    return [_tt(dtype, (fresh(0, None),))]


def _nonzero(types, attrs, runtime, n, known, fresh):
    x = types[0]
    return [_tt(np.int64, (max(len(x.shape), 1), fresh(0, _numel_hi(x.shape))))]


def _unique(types, attrs, runtime, n, known, fresh):
    """How many unique values (or slices) there are is known only at run time."""
    x = types[0]
    numel_hi = _numel_hi(x.shape)
    if attrs.get("axis") is None:
        count = fresh(1 if all(bounds(d)[0] >= 1 for d in x.shape) else 0, numel_hi)
        y, inverse = (count,), (math.prod(x.shape),)
    else:
        axis = axis_attr("Unique", attrs, len(x.shape), 0)
        count = fresh(0, _hi(x.shape[axis]))
        y, inverse = tuple(count if i == axis else d for i, d in enumerate(x.shape)), (x.shape[axis],)
    return [_tt(x.dtype, y), _tt(np.int64, (count,)), _tt(np.int64, inverse), _tt(np.int64, (count,))][:max(n, 1)]


_RULES = {
    "Reshape": _reshape, "Expand": _expand, "Slice": _slice, "Squeeze": _squeeze, "Unsqueeze": _unsqueeze,
    "Split": _split, "Tile": _tile, "Pad": _same_rank_fresh, "Resize": _resize, "TopK": _topk, "OneHot": _onehot,
    "ConstantOfShape": _constant_of_shape, "Range": _range, "NonZero": _nonzero,
    "Unique": _unique,
}
