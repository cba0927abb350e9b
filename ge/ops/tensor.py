"""Shape and data-movement ops: views, transposes, slicing, gathers, padding, resizing, ...

Config inputs (Reshape shape, Slice starts/ends/axes/steps, Pad pads, Resize scales/sizes,
TopK k, ...) arrive as attributes (canonical form, see registry.py); compute and infer read
only the attributes.  Float16 data is moved as is; Resize(linear) and Einsum compute in
float32 and cast back.
"""
from __future__ import annotations

import math
import string
from typing import NamedTuple, Optional

import numpy as np

from ge.ops import common
from ge.ops.common import broadcast_shape, dims_match, static_dims
from ge.symbolic import Dim, dim_max, dim_min, floordiv
from ge.ops.registry import OpDef, OpKind, TensorType, register
from ge.errors import AtcError, InvalidNode


def normalize_axis(axis: int, rank: int) -> int:
    """common.normalize_axis, with an out-of-range axis reported as the user's mistake (a
    scalar has no axis at all)."""
    if rank == 0:
        raise InvalidNode(f"axis {axis} given for a scalar input", "Check the node's axis attributes.")
    try:
        return common.normalize_axis(axis, rank)
    except ValueError as exc:
        raise InvalidNode(str(exc), "Check the node's axis attributes.") from None


def normalize_axes(axes, rank: int) -> list:
    return sorted(normalize_axis(int(a), rank) for a in (axes or []))


def _err(op: str, message: str, solution: str = "Check the node's inputs and attributes.") -> AtcError:
    return InvalidNode(f"{op}: {message}", solution)


def _required(attrs: dict, name: str, op: str):
    if attrs.get(name) is None:
        raise _err(op, f"required attribute [{name}] is missing", f"Set {name} on the {op} node.")
    return attrs[name]


def _int_list(value) -> list:
    """Config values as ints (symbolic dims -- ge.symbolic.Dim -- kept as they are)."""
    if value is None:
        return None
    return [v if isinstance(v, Dim) else int(v) for v in np.atleast_1d(np.asarray(value, dtype=object)
                                                                       if _has_dims(value) else
                                                                       np.asarray(value)).reshape(-1)]


def _has_dims(value) -> bool:
    return isinstance(value, Dim) or isinstance(value, (list, tuple)) and any(isinstance(v, Dim) for v in value)


def _scalar(value, default=None):
    if value is None:
        return default
    flat = np.asarray(value).reshape(-1)
    return flat[0].item() if flat.size else default


def _tt(dtype, shape) -> list:
    return [TensorType(np.dtype(dtype), static_dims(shape))]


def _like(compute_shape):
    """Infer rule for ops that keep the input dtype and compute a new shape from attrs."""

    def infer(inputs, attrs):
        return _tt(inputs[0].dtype, compute_shape(tuple(inputs[0].shape), attrs))

    return infer


def _reg(op_type, kind, compute, infer, **kw):
    register(OpDef(op_type, kind, compute, infer, **kw))


# -- views ------------------------------------------------------------------------------------


def reshape_shape(shape, attrs):
    target = _int_list(attrs.get("shape"))
    if target is None:
        raise _err("Reshape", "the target shape is unknown", "Make the shape input constant.")
    if not _has_dims(attrs["shape"]) and np.ndim(attrs["shape"]) != 1:     # as onnxruntime: a shape is a vector
        raise _err("Reshape", f"the shape input must be a 1-D tensor, got one of rank {np.ndim(attrs['shape'])}")
    allowzero = int(attrs.get("allowzero", 0))
    if not allowzero and any(d == 0 and i >= len(shape) for i, d in enumerate(target)):
        raise _err("Reshape", f"shape {target} copies a dim (0) the input {shape} does not have")
    out = [shape[i] if d == 0 and not allowzero else d for i, d in enumerate(target)]
    if out.count(-1) > 1:
        raise _err("Reshape", f"more than one -1 in shape {target}")
    size = math.prod(shape)
    if -1 in out:
        known = math.prod(d for d in out if d != -1)
        if known == 0 or size % known:
            raise _err("Reshape", f"cannot infer -1 in {target} for input {shape}")
        out[out.index(-1)] = size // known
    if math.prod(out) != size or any(d < 0 for d in out):
        raise _err("Reshape", f"cannot reshape {shape} to {target}")
    return tuple(out)


def flatten_shape(shape, attrs):
    axis = int(attrs.get("axis", 1))          # in [-r, r]: -1 means before the last axis
    if not -len(shape) <= axis <= len(shape):
        raise _err("Flatten", f"axis {axis} out of range for rank {len(shape)}")
    axis = axis + len(shape) if axis < 0 else axis
    return (math.prod(shape[:axis]), math.prod(shape[axis:]))


def squeeze_shape(shape, attrs):
    axes = attrs.get("axes")
    if axes is None or len(_int_list(axes)) == 0:
        return tuple(d for d in shape if d != 1)
    axes = normalize_axes(_int_list(axes), len(shape))
    if any(a >= len(shape) or shape[a] != 1 for a in axes):
        raise _err("Squeeze", f"axes {axes} of shape {shape} are not all 1")
    return tuple(d for i, d in enumerate(shape) if i not in axes)


def unsqueeze_shape(shape, attrs):
    axes = _int_list(attrs.get("axes"))
    if not axes:
        raise _err("Unsqueeze", "attribute axes is missing", "Make the axes input constant.")
    rank = len(shape) + len(axes)
    axes = normalize_axes(axes, rank)
    if len(set(axes)) != len(axes):
        raise _err("Unsqueeze", f"repeated axes {axes}")
    it = iter(shape)
    return tuple(1 if i in axes else next(it) for i in range(rank))


def _view(shape_fn):
    return lambda inputs, attrs: [inputs[0].reshape(shape_fn(inputs[0].shape, attrs))]


for _op, _fn, _cfg in [("Reshape", reshape_shape, ((1, "shape"),)),
                       ("Flatten", flatten_shape, ()),
                       ("Squeeze", squeeze_shape, ((1, "axes"),)),
                       ("Unsqueeze", unsqueeze_shape, ((1, "axes"),))]:
    _reg(_op, OpKind.INJECTIVE, _view(_fn), _like(_fn), config_inputs=_cfg)


# -- transpose, concat, split, slice ------------------------------------------------------------


def _perm(rank, attrs):
    perm = _int_list(attrs.get("perm"))
    if perm is None or len(perm) == 0:
        return list(range(rank))[::-1]
    if len(perm) != rank or normalize_axes(perm, rank) != list(range(rank)):
        raise _err("Transpose", f"perm {perm} is not a permutation of {rank} axes")
    return [normalize_axis(p, rank) for p in perm]


_reg("Transpose", OpKind.INJECTIVE,
     lambda inputs, attrs: [np.asarray(np.transpose(inputs[0], _perm(inputs[0].ndim, attrs)), order="C")],
     _like(lambda s, a: tuple(s[p] for p in _perm(len(s), a))))


def concat_compute(inputs, attrs):
    xs = [x for x in inputs if x is not None]
    return [np.concatenate(xs, axis=normalize_axis(int(_required(attrs, "axis", "Concat")), xs[0].ndim))]


def concat_infer(inputs, attrs):
    ts = [t for t in inputs if t is not None]
    axis = normalize_axis(int(_required(attrs, "axis", "Concat")), len(ts[0].shape))
    for t in ts:
        if len(t.shape) != len(ts[0].shape) or any(
                a != b for i, (a, b) in enumerate(zip(t.shape, ts[0].shape)) if i != axis):
            raise _err("Concat", f"input shapes {[tuple(t.shape) for t in ts]} differ off axis {axis}")
    shape = list(ts[0].shape)
    shape[axis] = sum(t.shape[axis] for t in ts)
    return _tt(ts[0].dtype, shape)


_reg("Concat", OpKind.INJECTIVE, concat_compute, concat_infer)


def _split_sizes(shape, attrs):
    if not shape:
        raise _err("Split", "the input is a scalar")
    axis = normalize_axis(int(attrs.get("axis", 0)), len(shape))
    dim = shape[axis]
    split = _int_list(attrs.get("split"))
    if split:
        if sum(split) != dim or any(s < 0 for s in split):
            raise _err("Split", f"sizes {split} do not add up to {dim}")
        return axis, split
    n = int(attrs.get("num_outputs", 0))
    if n <= 0:
        raise _err("Split", "neither split nor num_outputs is given")
    chunk = -(-dim // n)              # opset 18: equal chunks, the last one may be smaller
    sizes = [min(chunk, max(dim - i * chunk, 0)) for i in range(n)]
    return axis, sizes


def split_compute(inputs, attrs):
    x = inputs[0]
    axis, sizes = _split_sizes(x.shape, attrs)
    return [np.ascontiguousarray(p) for p in np.split(x, np.cumsum(sizes)[:-1], axis=axis)]


def split_infer(inputs, attrs):
    shape = list(inputs[0].shape)
    axis, sizes = _split_sizes(shape, attrs)
    return [TensorType(np.dtype(inputs[0].dtype), tuple(shape[:axis] + [s] + shape[axis + 1:]))
            for s in sizes]


_reg("Split", OpKind.INJECTIVE, split_compute, split_infer, config_inputs=((1, "split"),))


def _slices(shape, attrs):
    """Python slices for ONNX Slice, with ONNX clamping (negative steps included)."""
    starts, ends = _int_list(attrs.get("starts")), _int_list(attrs.get("ends"))
    if starts is None or ends is None or len(starts) != len(ends):
        raise _err("Slice", f"starts {starts} and ends {ends} must be given with equal length")
    axes = _int_list(attrs.get("axes")) or list(range(len(starts)))
    steps = _int_list(attrs.get("steps")) or [1] * len(starts)
    if not shape:
        raise _err("Slice", "a scalar cannot be sliced (onnxruntime refuses it too)")
    index = [slice(None)] * len(shape)
    for start, end, axis, step in zip(starts, ends, axes, steps):
        axis = normalize_axis(axis, len(shape))
        if axis >= len(shape):
            raise _err("Slice", f"axis {axis} does not exist in the input of rank {len(shape)}")
        dim = shape[axis]
        if step == 0:
            raise _err("Slice", "a step is 0")
        start = start + dim if start < 0 else start
        end = end + dim if end < 0 else end
        if step > 0:
            start, end = dim_min(dim_max(start, 0), dim), dim_min(dim_max(end, 0), dim)
        else:
            start, end = dim_min(dim_max(start, 0), dim - 1), dim_min(dim_max(end, -1), dim - 1)
        index[axis] = slice(start, None if end < 0 else end, step)
    return tuple(index)


def _slice_len(s: slice, dim) -> int:
    if s == slice(None):                    # an axis no Slice entry names: whole
        return dim
    if not any(isinstance(v, Dim) for v in (s.start, s.stop, dim)):
        return len(range(*s.indices(dim)))
    start, stop, step = s.start, s.stop if s.stop is not None else -1, s.step   # already clamped to [-1, dim]
    if step > 0:
        return dim_max(floordiv(stop - start + step - 1, step), 0)
    return dim_max(floordiv(start - stop - step - 1, -step), 0)


_reg("Slice", OpKind.INJECTIVE,
     lambda inputs, attrs: [np.asarray(inputs[0][_slices(inputs[0].shape, attrs)], order="C")],
     _like(lambda s, a: tuple(_slice_len(sl, d) for sl, d in zip(_slices(s, a), s))),
     config_inputs=((1, "starts"), (2, "ends"), (3, "axes"), (4, "steps")))


# -- gathers ------------------------------------------------------------------------------------


def _fix_indices(indices, dim):
    indices = np.asarray(indices).astype(np.int64, copy=False)
    return np.where(indices < 0, indices + dim, indices)


def _check_indices(op, indices, dim, axis):
    """Indices in [-dim, dim): what onnxruntime checks before it gathers."""
    idx = np.asarray(indices)
    if idx.size and (int(idx.min()) < -dim or int(idx.max()) >= dim):
        raise _err(op, f"indices [{int(idx.min())}, {int(idx.max())}] out of range for axis {axis} of size {dim}",
                   f"Indices along axis {axis} must lie in [{-dim}, {dim - 1}].")


def _indices_checker(op):
    """check_values of Gather/GatherElements: constant indices against the data's axis (the
    data itself may be a run-time tensor; its shape is known)."""
    def check(values, types, attrs):
        if values[1] is not None and types[0] is not None:
            axis = normalize_axis(int(attrs.get("axis", 0)), len(types[0].shape))
            _check_indices(op, values[1], types[0].shape[axis], axis)
    return check


def _gather(op, take):
    """The compute of Gather (np.take) or GatherElements (np.take_along_axis): indices checked
    against the axis, negative ones counted from its end."""
    def compute(inputs, attrs):
        data, indices = inputs[0], inputs[1]
        axis = normalize_axis(int(attrs.get("axis", 0)), data.ndim)
        _check_indices(op, indices, data.shape[axis], axis)
        return [take(data, _fix_indices(indices, data.shape[axis]), axis=axis)]
    return compute


gather_compute = _gather("Gather", np.take)


def gather_infer(inputs, attrs):
    data, indices = inputs[0], inputs[1]
    axis = normalize_axis(int(attrs.get("axis", 0)), len(data.shape))
    return _tt(data.dtype, data.shape[:axis] + tuple(indices.shape) + data.shape[axis + 1:])


_reg("Gather", OpKind.INJECTIVE, gather_compute, gather_infer, check_values=_indices_checker("Gather"))


gather_elements_compute = _gather("GatherElements", np.take_along_axis)


def gather_elements_infer(inputs, attrs):
    data, indices = inputs[0], inputs[1]
    if len(data.shape) != len(indices.shape) or not data.shape:
        raise _err("GatherElements", f"indices of shape {indices.shape} must have the rank of data {data.shape} "
                   "(at least 1)")
    normalize_axis(int(attrs.get("axis", 0)), len(data.shape))
    return _tt(data.dtype, indices.shape)


_reg("GatherElements", OpKind.INJECTIVE, gather_elements_compute, gather_elements_infer,
     check_values=_indices_checker("GatherElements"))


# -- expand, tile, pad ----------------------------------------------------------------------------


def _expand_shape(shape, attrs):
    target = _int_list(attrs.get("shape"))
    if target is None:
        raise _err("Expand", "the target shape is unknown", "Make the shape input constant.")
    try:
        return broadcast_shape(shape, target)
    except InvalidNode:
        raise _err("Expand", f"shape {shape} does not broadcast to {target}") from None


_reg("Expand", OpKind.BROADCAST,
     lambda inputs, attrs: [np.broadcast_to(inputs[0], _expand_shape(inputs[0].shape, attrs)).copy()],
     _like(_expand_shape), config_inputs=((1, "shape"),))


def _repeats(shape, attrs):
    repeats = _int_list(attrs.get("repeats"))
    if repeats is None or len(repeats) != len(shape) or any(r < 0 for r in repeats):
        raise _err("Tile", f"repeats {repeats} must have one non-negative value per axis of {shape}")
    return repeats


_reg("Tile", OpKind.INJECTIVE,
     lambda inputs, attrs: [np.tile(inputs[0], _repeats(inputs[0].shape, attrs))],
     _like(lambda s, a: tuple(d * r for d, r in zip(s, _repeats(s, a)))), config_inputs=((1, "repeats"),))


def _pads(shape, attrs):
    pads = _int_list(attrs.get("pads"))
    rank = len(shape)
    axes = _int_list(attrs.get("axes"))
    axes = list(range(rank)) if not axes else [normalize_axis(a, rank) for a in axes]
    if pads is None or len(pads) != 2 * len(axes):
        raise _err("Pad", f"pads {pads} must have 2 values per padded axis ({len(axes)} axes)")
    begin, end = [0] * rank, [0] * rank
    for i, axis in enumerate(axes):
        begin[axis], end[axis] = pads[i], pads[i + len(axes)]
    return begin, end


def pad_compute(inputs, attrs):
    x = inputs[0]
    begin, end = _pads(x.shape, attrs)
    mode = attrs.get("mode", "constant")
    mode = mode.decode() if isinstance(mode, bytes) else mode
    # Negative pads crop: crop first, then pad the positive parts.
    crop = tuple(slice(-b if b < 0 else 0, d + e if e < 0 else d)
                 for b, e, d in zip(begin, end, x.shape))
    x = x[crop]
    widths = [(max(b, 0), max(e, 0)) for b, e in zip(begin, end)]
    if mode == "constant":
        value = np.asarray(_scalar(attrs.get("constant_value"), 0)).astype(x.dtype)
        return [np.pad(x, widths, mode="constant", constant_values=value)]
    if mode in ("reflect", "edge", "wrap"):
        return [np.pad(x, widths, mode=mode)]
    raise _err("Pad", f"mode [{mode}] is not supported", "Use constant, reflect, edge or wrap.")


PAD_MODES = ("constant", "reflect", "edge", "wrap")


def _pad_shape(shape, attrs):
    mode = attr_str(attrs, "mode", "constant")
    if mode not in PAD_MODES:
        raise _err("Pad", f"mode [{mode}] is not supported", "Use constant, reflect, edge or wrap.")
    begin, end = _pads(shape, attrs)
    if mode != "constant" and any(d == 0 and (b > 0 or e > 0) for d, b, e in zip(shape, begin, end)):
        raise _err("Pad", f"mode [{mode}] cannot pad an empty axis of {shape}", "Use mode=constant.")
    value = attrs.get("constant_value")
    if value is not None and (np.size(value) != 1 or np.ndim(value) > 1):
        raise _err("Pad", f"constant_value of shape {np.shape(value)} must be one value", "Give Pad a scalar value.")
    if mode == "reflect":     # a reflection repeats no edge: at most (cropped size - 1) per side
        for axis, (d, b, e) in enumerate(zip(shape, begin, end)):
            kept = d + min(b, 0) + min(e, 0)
            if max(b, e) > kept - 1:
                raise _err("Pad", f"reflect pads ({b}, {e}) on axis {axis} of size {kept} exceed {kept - 1}",
                           "Use reflect pads smaller than the axis, or mode=edge.")
    return tuple(d + b + e for d, b, e in zip(shape, begin, end))


_reg("Pad", OpKind.INJECTIVE, pad_compute, _like(_pad_shape),
     config_inputs=((1, "pads"), (2, "constant_value"), (3, "axes")))


# -- shape-only and generated tensors ----------------------------------------------------------


def _shape_range(rank, attrs):
    start = int(attrs.get("start", 0))
    end = attrs.get("end")
    end = rank if end is None else int(end)
    start = min(max(start + rank if start < 0 else start, 0), rank)
    end = min(max(end + rank if end < 0 else end, 0), rank)
    return start, end


def shape_compute(inputs, attrs):
    start, end = _shape_range(inputs[0].ndim, attrs)
    return [np.array(inputs[0].shape[start:end], dtype=np.int64)]


def shape_infer(inputs, attrs):
    start, end = _shape_range(len(inputs[0].shape), attrs)
    return _tt(np.int64, (max(end - start, 0),))


# Shape, Size, ConstantOfShape, Range, NonZero are OPAQUE: they are folded or run alone.
_reg("Shape", OpKind.OPAQUE, shape_compute, shape_infer)
_reg("Size", OpKind.OPAQUE, lambda inputs, attrs: [np.array(inputs[0].size, dtype=np.int64)],
     lambda inputs, attrs: _tt(np.int64, ()))


def _value_dependent(op):
    def infer(inputs, attrs):
        raise InvalidNode(f"{op}: the output shape depends on input values that are not "
                          "constant", "Give the model static shapes (--input_shape) so the inputs fold.")

    return infer


def _fill_value(attrs) -> np.ndarray:
    value = attrs.get("value")
    return np.zeros(1, np.float32) if value is None else np.asarray(value).reshape(-1)


def constant_of_shape_infer_values(inputs, attrs):
    shape = _int_list(inputs[0])
    if any(d < 0 for d in shape):
        raise _err("ConstantOfShape", f"negative dimension in {shape}")
    value = _fill_value(attrs)
    if value.size != 1:
        raise _err("ConstantOfShape", f"attribute value must hold one element, not {value.size}")
    return _tt(value.dtype, shape)


def constant_of_shape_compute(inputs, attrs):
    (out,) = constant_of_shape_infer_values(inputs, attrs)
    return [np.full(out.shape, _fill_value(attrs)[0], dtype=out.dtype)]


_reg("ConstantOfShape", OpKind.OPAQUE, constant_of_shape_compute, _value_dependent("ConstantOfShape"),
     infer_values=constant_of_shape_infer_values)


def _range_count(start, limit, delta) -> int:
    """ONNX's max(ceil((limit - start) / delta), 0), exact for integers (a float division
    of int64 bounds would round)."""
    if delta == 0:
        raise _err("Range", "delta is 0")
    if all(np.issubdtype(np.asarray(x).dtype, np.integer) for x in (start, limit, delta)):
        start, limit, delta = int(start), int(limit), int(delta)
        return max(-((start - limit) // delta), 0)
    count = (float(limit) - float(start)) / float(delta)
    if not np.isfinite(count):
        raise _err("Range", f"start {start}, limit {limit}, delta {delta} give no finite element count")
    return max(math.ceil(count), 0)


def range_bounds(inputs) -> tuple:
    """start, limit and delta as 0-d arrays, each checked to hold one value."""
    for name, x in zip(("start", "limit", "delta"), inputs[:3]):
        common.check_one_value("Range", name, np.shape(x))
    return tuple(np.asarray(x).reshape(()) for x in inputs[:3])


def range_infer_values(inputs, attrs):
    start, limit, delta = range_bounds(inputs)
    return _tt(start.dtype, (_range_count(start, limit, delta),))


def range_compute(inputs, attrs):
    start, limit, delta = range_bounds(inputs)
    n = _range_count(start, limit, delta)
    return [(start + np.arange(n, dtype=start.dtype) * delta).astype(start.dtype)]


_reg("Range", OpKind.OPAQUE, range_compute, _value_dependent("Range"), infer_values=range_infer_values)


def nonzero_infer_values(inputs, attrs):
    x = np.asarray(inputs[0])
    return _tt(np.int64, (max(x.ndim, 1), int(np.count_nonzero(x))))


def nonzero_compute(inputs, attrs):
    x = np.asarray(inputs[0])
    return [np.array(np.nonzero(np.atleast_1d(x)), dtype=np.int64).reshape(max(x.ndim, 1), -1)]


_reg("NonZero", OpKind.OPAQUE, nonzero_compute, _value_dependent("NonZero"), infer_values=nonzero_infer_values)


def _unique_axis(x: np.ndarray, attrs) -> Optional[int]:
    axis = attrs.get("axis")
    return None if axis is None else common.axis_attr("Unique", attrs, x.ndim, 0)


def unique_compute(inputs, attrs):
    """ONNX Unique: the unique values (or slices along `axis`), sorted or in order of first
    occurrence, with the first index of each, the inverse indices and the counts."""
    x = np.asarray(inputs[0])
    axis = _unique_axis(x, attrs)
    flat = x.reshape(-1) if axis is None else x
    _, first, inverse, counts = np.unique(flat, return_index=True, return_inverse=True, return_counts=True,
                                          axis=axis)
    inverse = inverse.reshape(-1)
    order = np.arange(len(first))
    if not int(attrs.get("sorted", 1)):                  # by first occurrence
        order = np.argsort(first, kind="stable")
    rank = np.empty_like(order)
    rank[order] = np.arange(len(order))
    first = first[order]
    y = np.take(flat, first, axis=0 if axis is None else axis)
    return [y, first.astype(np.int64), rank[inverse].astype(np.int64), counts[order].astype(np.int64)]


def unique_infer_values(inputs, attrs):
    return [TensorType(a.dtype, a.shape) for a in unique_compute(inputs, attrs)]


_reg("Unique", OpKind.OPAQUE, unique_compute, _value_dependent("Unique"), infer_values=unique_infer_values)


# -- DepthToSpace, SpaceToDepth, Trilu, CumSum -------------------------------------------------


def depth_to_space_compute(inputs, attrs):
    x = inputs[0]
    b = int(_required(attrs, "blocksize", "DepthToSpace/SpaceToDepth"))
    n, c, h, w = x.shape
    mode = attrs.get("mode", "DCR")
    mode = mode.decode() if isinstance(mode, bytes) else mode
    if mode == "DCR":
        y = x.reshape(n, b, b, c // (b * b), h, w).transpose(0, 3, 4, 1, 5, 2)
    else:
        y = x.reshape(n, c // (b * b), b, b, h, w).transpose(0, 1, 4, 2, 5, 3)
    return [y.reshape(n, c // (b * b), h * b, w * b)]


def _blocksize(attrs) -> int:
    b = int(_required(attrs, "blocksize", "DepthToSpace/SpaceToDepth"))
    if b < 1:
        raise _err("DepthToSpace/SpaceToDepth", f"blocksize {b} must be at least 1")
    return b


def _d2s_shape(s, a):
    b = _blocksize(a)
    if attr_str(a, "mode", "DCR") not in ("DCR", "CRD"):
        raise _err("DepthToSpace", f"mode [{attr_str(a, 'mode', 'DCR')}] is not supported", "Use DCR or CRD.")
    if len(s) != 4 or s[1] % (b * b):
        raise _err("DepthToSpace", f"input {s} is not NCHW with C divisible by {b * b}")
    return (s[0], s[1] // (b * b), s[2] * b, s[3] * b)


def space_to_depth_compute(inputs, attrs):
    x = inputs[0]
    b = int(_required(attrs, "blocksize", "DepthToSpace/SpaceToDepth"))
    n, c, h, w = x.shape
    y = x.reshape(n, c, h // b, b, w // b, b).transpose(0, 3, 5, 1, 2, 4)
    return [y.reshape(n, c * b * b, h // b, w // b)]


def _s2d_shape(s, a):
    b = _blocksize(a)
    if len(s) != 4 or s[2] % b or s[3] % b:
        raise _err("SpaceToDepth", f"input {s} is not NCHW with H, W divisible by {b}")
    return (s[0], s[1] * b * b, s[2] // b, s[3] // b)


_reg("DepthToSpace", OpKind.INJECTIVE, depth_to_space_compute, _like(_d2s_shape))
_reg("SpaceToDepth", OpKind.INJECTIVE, space_to_depth_compute, _like(_s2d_shape))


def trilu_compute(inputs, attrs):
    k = int(_scalar(attrs.get("k"), 0))
    fn = np.triu if int(attrs.get("upper", 1)) else np.tril
    return [fn(inputs[0], k)]


def _trilu_shape(shape, attrs):
    if np.size(attrs.get("k", 0)) != 1 or np.ndim(attrs.get("k", 0)) > 1:
        raise _err("Trilu", f"k {attrs.get('k')} must be one value (shape () or [1])")
    if len(shape) < 2:
        raise _err("Trilu", f"the input {shape} must have rank 2 or more")
    return shape


_reg("Trilu", OpKind.INJECTIVE, trilu_compute, _like(_trilu_shape), config_inputs=((1, "k"),))


def cumsum_compute(inputs, attrs):
    x = inputs[0]
    axis = normalize_axis(int(_scalar(attrs.get("axis"), 0)), x.ndim)
    reverse, exclusive = int(attrs.get("reverse", 0)), int(attrs.get("exclusive", 0))
    y = np.flip(x, axis) if reverse else x
    y = np.cumsum(y, axis=axis, dtype=x.dtype)
    if exclusive:
        y = np.concatenate([np.zeros_like(np.take(y, [0], axis=axis)),
                            np.take(y, np.arange(y.shape[axis] - 1), axis=axis)], axis=axis)
    return [np.ascontiguousarray(np.flip(y, axis) if reverse else y)]


def _cumsum_shape(shape, attrs):
    for name in ("exclusive", "reverse"):
        if int(attrs.get(name, 0)) not in (0, 1):
            raise _err("CumSum", f"{name}={attrs.get(name)} must be 0 or 1")
    axis = attrs.get("axis")
    if axis is not None:
        common.check_one_value("CumSum", "axis", np.shape(axis))
        axis = int(_scalar(axis, 0))
        if not -len(shape) <= axis < len(shape):
            raise _err("CumSum", f"axis {axis} out of range for rank {len(shape)}")
    return shape


def _cumsum_infer(inputs, attrs):
    if len(inputs) > 1 and inputs[1] is not None:        # an axis left for run time
        common.check_one_value("CumSum", "axis", inputs[1].shape)
    return _tt(inputs[0].dtype, _cumsum_shape(tuple(inputs[0].shape), attrs))


_reg("CumSum", OpKind.OPAQUE, cumsum_compute, _cumsum_infer, config_inputs=((1, "axis"),))


# -- OneHot, TopK -----------------------------------------------------------------------------


def onehot_compute(inputs, attrs):
    indices = inputs[0]
    values = [x for x in inputs[1:] if x is not None][-1]
    depth = int(_scalar(attrs.get("depth")))
    axis = normalize_axis(int(attrs.get("axis", -1)), indices.ndim + 1)
    idx = np.asarray(indices).astype(np.int64)
    idx = np.where(idx < 0, idx + depth, idx)
    hot = np.expand_dims(idx, axis) == np.arange(depth).reshape(
        (-1,) + (1,) * (indices.ndim - axis))
    return [np.where(hot, values.reshape(-1)[1], values.reshape(-1)[0])]


def onehot_infer(inputs, attrs):
    shape = list(inputs[0].shape)
    axis = normalize_axis(int(attrs.get("axis", -1)), len(shape) + 1)
    values = [t for t in inputs[1:] if t is not None][-1]
    depth = int(_scalar(_required(attrs, "depth", "OneHot")))
    if depth < 0:
        raise _err("OneHot", f"depth {depth} is negative")
    return _tt(values.dtype, shape[:axis] + [depth] + shape[axis:])


_reg("OneHot", OpKind.INJECTIVE, onehot_compute, onehot_infer, config_inputs=((1, "depth"),))


def _topk_args(shape, attrs):
    axis = normalize_axis(int(attrs.get("axis", -1)), len(shape))
    k = _scalar(attrs.get("k"))
    if k is None or not 0 <= int(k) <= shape[axis]:
        raise _err("TopK", f"k={k} is not in [0, {shape[axis]}]")
    return axis, int(k)


def topk_compute(inputs, attrs):
    x = inputs[0]
    axis, k = _topk_args(x.shape, attrs)
    n = x.shape[axis]
    if int(attrs.get("largest", 1)):
        # Descending values, ties by ascending index: stable sort of the flipped axis, reversed.
        order = n - 1 - np.flip(np.argsort(np.flip(x, axis), axis=axis, kind="stable"), axis)
    else:
        order = np.argsort(x, axis=axis, kind="stable")
    idx = np.take(order, np.arange(k), axis=axis)
    return [np.take_along_axis(x, idx, axis=axis), idx.astype(np.int64)]


def topk_infer(inputs, attrs):
    shape = list(inputs[0].shape)
    axis, k = _topk_args(shape, attrs)
    shape[axis] = k
    return _tt(inputs[0].dtype, shape) + _tt(np.int64, shape)


_reg("TopK", OpKind.OPAQUE, topk_compute, topk_infer, config_inputs=((1, "k"),))


# -- Einsum -------------------------------------------------------------------------------------


class EinsumPlan(NamedTuple):
    sizes: dict          # index letter -> size
    ell_shape: tuple     # the broadcast shape '...' stands for
    shape: tuple         # the output shape


def einsum_parse(equation: str, shapes) -> EinsumPlan:
    """Index sizes and the output shape of an einsum equation (with '...')."""
    eq = equation.replace(" ", "")
    lhs, _, rhs = eq.partition("->")
    terms = lhs.split(",")
    if len(terms) != len(shapes):
        raise _err("Einsum", f"equation {equation} has {len(terms)} operands, got {len(shapes)}")
    sizes, ell = {}, []
    for term, shape in zip(terms, shapes):
        letters = term.replace("...", "")
        n_ell = len(shape) - len(letters)
        if n_ell < 0 or (n_ell and "..." not in term):
            raise _err("Einsum", f"term {term} does not match shape {tuple(shape)}")
        head = term.split("...")[0] if "..." in term else term
        dims = list(shape[:len(head)]) + list(shape[len(head) + n_ell:])
        if "..." in term:
            ell.append(tuple(shape[len(head):len(head) + n_ell]))
        for letter, d in zip(letters, dims):
            if sizes.get(letter, d) != d and 1 not in (d, sizes[letter]):
                raise _err("Einsum", f"index {letter} has sizes {sizes[letter]} and {d}")
            sizes[letter] = max(d, sizes.get(letter, d))
    ell_shape = broadcast_shape(*ell) if ell else ()
    if not eq.count("->"):
        counts = {c: lhs.count(c) for c in set(lhs) if c in string.ascii_letters}
        rhs = ("..." if ell else "") + "".join(sorted(c for c, n in counts.items() if n == 1))
    head, _, tail = rhs.partition("...")
    out = [sizes[c] for c in head] + (list(ell_shape) if "..." in rhs else []) + \
        [sizes[c] for c in tail]
    return EinsumPlan(sizes, ell_shape, tuple(out))


def einsum_compute(inputs, attrs):
    xs = [x for x in inputs if x is not None]
    ct = np.float32 if xs[0].dtype == np.float16 else xs[0].dtype
    y = np.einsum(_required(attrs, "equation", "Einsum"), *[x.astype(ct, copy=False) for x in xs], optimize=True)
    return [np.asarray(y).astype(xs[0].dtype, copy=False)]


def einsum_infer(inputs, attrs):
    ts = [t for t in inputs if t is not None]
    return _tt(ts[0].dtype, einsum_parse(_required(attrs, "equation", "Einsum"), [t.shape for t in ts]).shape)


_reg("Einsum", OpKind.OUT_EWISE_FUSABLE, einsum_compute, einsum_infer)


# -- Resize -------------------------------------------------------------------------------------


RESIZE_MODES = {"mode": ("nearest", "linear", "cubic"),
                "coordinate_transformation_mode": ("half_pixel", "pytorch_half_pixel", "asymmetric",
                                                   "align_corners", "half_pixel_symmetric", "tf_crop_and_resize"),
                "nearest_mode": ("round_prefer_floor", "round_prefer_ceil", "floor", "ceil"),
                "keep_aspect_ratio_policy": ("stretch", "not_larger", "not_smaller")}


def _check_resize_modes(attrs) -> None:
    """The string attributes name modes this Resize implements (a typo is refused at compile
    time, not found by the simulator)."""
    for name, allowed in RESIZE_MODES.items():
        if name in attrs and attr_str(attrs, name, "") not in allowed:
            raise _err("Resize", f"{name} [{attr_str(attrs, name, '')}] is not supported",
                       f"Use {', '.join(allowed)}.")
    if int(attrs.get("antialias", 0)) and attr_str(attrs, "mode", "nearest") == "nearest":
        raise _err("Resize", "antialias=1 applies to linear and cubic modes only", "Export without antialiasing.")
    if attr_str(attrs, "coordinate_transformation_mode", "") == "tf_crop_and_resize" \
            and attr_str(attrs, "mode", "nearest") == "nearest":
        raise _err("Resize", "tf_crop_and_resize is supported in linear and cubic modes", "Use mode linear.")
    if int(attrs.get("exclude_outside", 0)) and not (attr_str(attrs, "mode", "nearest") == "cubic" or (
            attr_str(attrs, "mode", "nearest") == "linear" and int(attrs.get("antialias", 0)))):
        raise _err("Resize", "exclude_outside=1 needs mode cubic or an antialiased linear mode (as in onnxruntime)",
                   "Drop exclude_outside.")


class ResizePlan(NamedTuple):
    shape: tuple         # the output shape
    scales: list         # per-axis scale


def resize_plan(shape, attrs) -> ResizePlan:
    """Output shape and per-axis scales of Resize (opset 18+: optional `axes`)."""
    rank = len(shape)
    axes = _int_list(attrs.get("axes"))
    axes = list(range(rank)) if not axes else [normalize_axis(a, rank) for a in axes]
    scales = attrs.get("scales")
    sizes = attrs.get("sizes")
    scales = [float(s) for s in np.asarray(scales, dtype=np.float64).reshape(-1)] \
        if scales is not None else []
    sizes = _int_list(sizes) if sizes is not None else []
    out, scale = list(shape), [1.0] * rank
    _check_resize_modes(attrs)
    if sizes:
        if len(sizes) != len(axes):
            raise _err("Resize", f"sizes {sizes} must give one value per axis {axes}")
        if any(v < 1 for v in sizes):
            raise _err("Resize", f"sizes {sizes} must be at least 1", "Fix the sizes input.")
        policy = attrs.get("keep_aspect_ratio_policy", "stretch")
        policy = policy.decode() if isinstance(policy, bytes) else policy
        if any(shape[a] == 0 for a in axes):
            raise _err("Resize", f"sizes {sizes} cannot be reached from an empty input {shape}")
        ratios = [sizes[i] / shape[a] for i, a in enumerate(axes)]
        if policy in ("not_larger", "not_smaller"):
            r = min(ratios) if policy == "not_larger" else max(ratios)
            for a in axes:
                out[a], scale[a] = int(round(r * shape[a])), float(np.float32(r))
        else:
            for i, a in enumerate(axes):
                out[a], scale[a] = sizes[i], float(np.float32(sizes[i]) / np.float32(shape[a]))
    elif scales:
        if len(scales) != len(axes):
            raise _err("Resize", f"scales {scales} must give one value per axis {axes}")
        if not all(math.isfinite(v) and v > 0 for v in scales):
            raise _err("Resize", f"scales {scales} must be finite and greater than 0", "Fix the scales input.")
        for i, a in enumerate(axes):
            out[a], scale[a] = int(math.floor(shape[a] * scales[i])), scales[i]
    else:
        raise _err("Resize", "neither scales nor sizes is given", "Make scales or sizes constant.")
    return ResizePlan(tuple(out), scale)


def _source_coords(out_len, in_len, scale, mode):
    """Source coordinate of every output index, in float32 as onnxruntime computes it (so
    ties of nearest rounding land on the same side)."""
    f32 = np.float32
    x, scale, in_len, out_len_f = np.arange(out_len, dtype=f32), f32(scale), f32(in_len), f32(out_len)
    half = f32(0.5)
    if mode == "half_pixel":
        return (x + half) / scale - half
    if mode == "pytorch_half_pixel":
        return (x + half) / scale - half if out_len > 1 else np.zeros_like(x)
    if mode == "asymmetric":
        return x / scale
    if mode == "align_corners":
        return x * (in_len - 1) / (out_len_f - 1) if out_len > 1 else np.zeros_like(x)
    if mode == "half_pixel_symmetric":
        adjustment = out_len_f / (scale * in_len)
        offset = in_len / 2 * (1 - adjustment)
        return offset + (x + half) / scale - half
    raise _err("Resize", f"coordinate_transformation_mode [{mode}] is not supported",
               "Use half_pixel, pytorch_half_pixel, asymmetric, align_corners or "
               "half_pixel_symmetric.")


def _nearest(coords, rule):
    if rule == "floor":
        return np.floor(coords)
    if rule == "ceil":
        return np.ceil(coords)
    frac = coords - np.floor(coords)
    if rule == "round_prefer_ceil":
        return np.where(frac == 0.5, np.ceil(coords), np.round(coords))
    if rule == "round_prefer_floor":
        return np.where(frac == 0.5, np.floor(coords), np.round(coords))
    raise _err("Resize", f"nearest_mode [{rule}] is not supported")


def attr_str(attrs, name, default):
    value = attrs.get(name, default)
    return value.decode() if isinstance(value, bytes) else value


def _tf_crop_coords(out_len, in_len, scale, start, end, by_sizes):
    """tf_crop_and_resize: output x samples roi [start, end] of the input (in units of the
    input's length - 1); returns the coordinates and where they fall outside the input."""
    out_len_f = float(out_len) if by_sizes else float(scale) * in_len   # ONNX's reference: unrounded
    x = np.arange(out_len, dtype=np.float64)
    if out_len_f == 1:
        coords = np.full(out_len, (end - start) * (in_len - 1) / 2)
    else:
        coords = x * (end - start) * (in_len - 1) / (out_len_f - 1)
    coords = coords + start * (in_len - 1)
    return coords, (coords < 0) | (coords > in_len - 1)


def _filter_weights(coords, n_in, scale, mode, attrs):
    """Taps and weights of cubic or antialiased interpolation along one axis, as ONNX's
    reference computes them: for a source coordinate x, base = floor(x) (x - 1 when x is
    whole), ratio = x - base, and tap base + i weighs kernel(scale' * (i - ratio)), where the
    kernel is widened by 1/scale' = 1/min(scale, 1) when antialiasing a downsample.  Taps
    beyond the input read its edge, or (exclude_outside) weigh 0 and the rest renormalize."""
    a = float(attrs.get("cubic_coeff_a", -0.75))
    antialias = bool(int(attrs.get("antialias", 0)))
    s = min(float(scale), 1.0) if antialias else 1.0
    coords = np.asarray(coords, np.float64)
    base = np.floor(coords)
    base = np.where(base == coords, coords - 1, base)
    ratio = coords - base
    if mode == "cubic":
        start = int(np.floor(-2 / s) + 1)
        offsets = np.arange(start, 2 - start)
        d = np.abs(s * (offsets[None, :] - ratio[:, None]))
        w = np.where(d <= 1, ((a + 2) * d - (a + 3)) * d * d + 1,
                     np.where(d < 2, ((a * d - 5 * a) * d + 8 * a) * d - 4 * a, 0.0))
    else:                                               # linear (a triangle of half-width 1/s)
        start = int(np.floor(-1 / s) + 1)
        offsets = np.arange(start, 2 - start)
        w = np.clip(1 - np.abs(s * (offsets[None, :] - ratio[:, None])), 0, 1)
    if antialias or mode != "cubic":
        w = w / w.sum(axis=1, keepdims=True)
    taps = base[:, None].astype(np.int64) + offsets[None, :]
    if int(attrs.get("exclude_outside", 0)):
        w = np.where((taps < 0) | (taps >= n_in), 0.0, w)
        w = w / w.sum(axis=1, keepdims=True)
    return np.clip(taps, 0, n_in - 1), w


def _roi(attrs, rank):
    """Per-axis (start, end) of tf_crop_and_resize's roi (given for every axis or for `axes`)."""
    roi = [float(v) for v in np.asarray(attrs.get("roi") if attrs.get("roi") is not None else [],
                                        np.float64).reshape(-1)]
    axes = _int_list(attrs.get("axes"))
    axes = list(range(rank)) if not axes else [normalize_axis(a, rank) for a in axes]
    if len(roi) != 2 * len(axes):
        raise _err("Resize", f"roi has {len(roi)} values, tf_crop_and_resize needs {2 * len(axes)} "
                   f"(a start and an end for each of axes {axes})", "Give the roi input.")
    out = {a: (0.0, 1.0) for a in range(rank)}
    out.update({a: (roi[i], roi[i + len(axes)]) for i, a in enumerate(axes)})
    return out


def resize_compute(inputs, attrs):
    x = inputs[0]
    mode = attr_str(attrs, "mode", "nearest")
    ctm = attr_str(attrs, "coordinate_transformation_mode", "half_pixel")
    out, scale = resize_plan(x.shape, attrs)
    rule = attr_str(attrs, "nearest_mode", "round_prefer_floor")
    filtered = mode == "cubic" or int(attrs.get("antialias", 0)) or ctm == "tf_crop_and_resize"
    y = x if mode == "nearest" else x.astype(np.float32 if x.dtype == np.float16 else x.dtype)
    roi = _roi(attrs, x.ndim) if ctm == "tf_crop_and_resize" else None
    outside = []                                          # (axis, mask) of tf_crop_and_resize
    for axis, (n_in, n_out) in enumerate(zip(x.shape, out)):
        if n_in == n_out and scale[axis] == 1.0 and (roi is None or roi[axis] == (0.0, 1.0)):
            continue
        if roi is not None:
            coords, off = _tf_crop_coords(n_out, n_in, scale[axis], *roi[axis], attrs.get("sizes") is not None)
            outside.append((axis, off))
        else:
            coords = _source_coords(n_out, n_in, scale[axis], ctm)
        if mode == "nearest":
            idx = np.clip(_nearest(coords, rule), 0, n_in - 1).astype(np.int64)
            y = np.take(y, idx, axis=axis)
            continue
        if filtered:                                      # cubic, antialiased or cropped: tap weights
            taps, weights = _filter_weights(coords, n_in, scale[axis], mode, attrs)
            shape = (-1,) + (1,) * (x.ndim - axis - 1)
            y = sum(np.take(y, taps[:, k], axis=axis) * weights[:, k].astype(y.dtype).reshape(shape)
                    for k in range(taps.shape[1]))
            continue
        coords = np.clip(coords, 0, n_in - 1)           # separable multilinear, edge-clamped
        i0 = np.floor(coords).astype(np.int64)
        i1 = np.minimum(i0 + 1, n_in - 1)
        w = (coords - i0).astype(y.dtype).reshape((-1,) + (1,) * (x.ndim - axis - 1))
        a, b = np.take(y, i0, axis=axis), np.take(y, i1, axis=axis)
        y = a + (b - a) * w
    for axis, off in outside:                             # TF's CropAndResize: outside the input
        shape = [1] * x.ndim
        shape[axis] = -1
        y = np.where(off.reshape(shape), np.asarray(attrs.get("extrapolation_value", 0.0)).astype(y.dtype), y)
    return [np.ascontiguousarray(y).astype(x.dtype, copy=False)]


# Resize is OPAQUE: linear mode reads a data-dependent neighbourhood, not one element.
_reg("Resize", OpKind.OPAQUE, resize_compute, _like(lambda s, a: resize_plan(s, a).shape),
     config_inputs=((1, "roi"), (2, "scales"), (3, "sizes")))
