"""ScatterND and ScatterElements (opset 18: reduction none/add/mul/max/min).

Why: torchvision's and timm's Swin and BEiT build their attention masks and relative-position
tables with in-place index assignment, which both torch exporters write as a scatter; BART's
shift_tokens_right writes one too.  In Swin and BEiT the scatter reads only constants once
shapes are static, so constant folding computes it at compile time with `compute` below; a
scatter on run-time data is a kernel of its own (opaque to autofuse, like TVM's scatter).

Semantics (ONNX): the output is a copy of `data` with `updates` written at `indices`;
with a reduction, each written element is combined with what is already there
(add/mul/max/min), duplicates included.  Without a reduction ONNX leaves duplicate indices
undefined; here the last update wins (numpy's fancy assignment, as onnxruntime does).
Negative indices count from the end; an index out of range is an error (E16004).
"""
from __future__ import annotations

import numpy as np

from ge.errors import AtcError, invalid_attr
from ge.ops.registry import OpDef, OpKind, TensorType, register

REDUCTIONS = {"none": None, "add": np.add, "mul": np.multiply, "max": np.maximum, "min": np.minimum}


def _err(op: str, message: str) -> AtcError:
    return AtcError("E16004", f"{op}: {message}", "Check the node's inputs and attributes.")


def _reduction(op: str, attrs: dict):
    name = attrs.get("reduction", "none")
    name = name.decode() if isinstance(name, bytes) else str(name)
    if name not in REDUCTIONS:
        raise invalid_attr(op, "reduction", name, f"it must be one of {sorted(REDUCTIONS)}.")
    return REDUCTIONS[name]


def _write(op: str, out: np.ndarray, where: tuple, updates: np.ndarray, attrs: dict) -> np.ndarray:
    ufunc = _reduction(op, attrs)
    updates = updates.astype(out.dtype, copy=False)
    if ufunc is None:
        out[where] = updates
    else:
        ufunc.at(out, where, updates)
    return out


def _nd_shapes(data, indices, updates) -> int:
    """Check ScatterND's shapes; returns k, the index depth."""
    if len(indices) < 1:
        raise _err("ScatterND", "indices must have rank >= 1")
    k = int(indices[-1])
    if not 1 <= k <= len(data):
        raise _err("ScatterND", f"index depth {k} does not fit data of rank {len(data)}")
    expected = tuple(indices[:-1]) + tuple(data[k:])
    if tuple(updates) != expected:
        raise _err("ScatterND", f"updates have shape {tuple(updates)}, expected {expected} "
                   f"(indices {tuple(indices)}, data {tuple(data)})")
    return k


def _nd_rows(data_shape, indices: np.ndarray, k: int) -> np.ndarray:
    """ScatterND's indices as rows of k, negative ones counted from the end; out of range is E16004."""
    dims = np.asarray(data_shape[:k], dtype=np.int64)
    idx = indices.reshape(-1, k)
    idx = np.where(idx < 0, idx + dims, idx)
    if idx.size and (np.any(idx < 0) or np.any(idx >= dims)):
        raise _err("ScatterND", f"indices out of range for data of shape {tuple(data_shape)}")
    return idx


def scatter_nd_compute(inputs, attrs):
    data, indices, updates = inputs[0], np.asarray(inputs[1]).astype(np.int64, copy=False), inputs[2]
    k = _nd_shapes(data.shape, indices.shape, updates.shape)
    idx = _nd_rows(data.shape, indices, k)
    rows = updates.reshape((idx.shape[0],) + tuple(data.shape[k:]))
    out = np.array(data, copy=True)
    return [_write("ScatterND", out, tuple(idx[:, j] for j in range(k)), rows, attrs)]


def scatter_nd_infer(inputs, attrs):
    data, indices, updates = inputs[0], inputs[1], inputs[2]
    _nd_shapes(tuple(data.shape), tuple(indices.shape), tuple(updates.shape))
    _reduction("ScatterND", attrs)
    return [TensorType(np.dtype(data.dtype), tuple(data.shape))]


def _elements_axis(data_rank: int, indices, updates, attrs) -> int:
    if len(indices) != data_rank or tuple(updates) != tuple(indices):
        raise _err("ScatterElements", f"indices {tuple(indices)} and updates {tuple(updates)} must have "
                   f"the same shape and the rank of data ({data_rank})")
    axis = int(attrs.get("axis", 0))
    if not -data_rank <= axis < data_rank:
        raise invalid_attr("ScatterElements", "axis", axis, f"it must be in [{-data_rank}, {data_rank - 1}].")
    return axis % data_rank


def _elements_index(indices: np.ndarray, dim: int, axis: int) -> np.ndarray:
    idx = np.where(indices < 0, indices + dim, indices)
    if idx.size and (idx.min() < 0 or idx.max() >= dim):
        raise _err("ScatterElements", f"indices out of range for axis {axis} of size {dim}")
    return idx


def scatter_elements_compute(inputs, attrs):
    data, indices, updates = inputs[0], np.asarray(inputs[1]).astype(np.int64, copy=False), inputs[2]
    axis = _elements_axis(data.ndim, indices.shape, updates.shape, attrs)
    if any(i > d for i, d in zip(indices.shape, data.shape)):
        raise _err("ScatterElements", f"indices {tuple(indices.shape)} are larger than data {tuple(data.shape)}")
    idx = _elements_index(indices, data.shape[axis], axis)
    where = list(np.indices(indices.shape, sparse=True))
    where[axis] = idx
    out = np.array(data, copy=True)
    return [_write("ScatterElements", out, tuple(where), updates, attrs)]


def scatter_elements_infer(inputs, attrs):
    data, indices, updates = inputs[0], inputs[1], inputs[2]
    _elements_axis(len(data.shape), tuple(indices.shape), tuple(updates.shape), attrs)
    if any(i > d for i, d in zip(indices.shape, data.shape)):
        raise _err("ScatterElements", f"indices {tuple(indices.shape)} are larger than data {tuple(data.shape)}")
    _reduction("ScatterElements", attrs)
    return [TensorType(np.dtype(data.dtype), tuple(data.shape))]


def scatter_nd_check_values(values, types, attrs):
    """Constant indices against the data's dims (the data may be a run-time tensor)."""
    if values[1] is not None and types[0] is not None:
        indices = np.asarray(values[1]).astype(np.int64, copy=False)
        _nd_rows(tuple(types[0].shape), indices, int(indices.shape[-1]))


def scatter_elements_check_values(values, types, attrs):
    if values[1] is not None and types[0] is not None:
        rank = len(types[0].shape)
        axis = _elements_axis(rank, np.shape(values[1]), np.shape(values[1]), attrs)
        _elements_index(np.asarray(values[1]).astype(np.int64, copy=False), types[0].shape[axis], axis)


register(OpDef("ScatterND", OpKind.OPAQUE, scatter_nd_compute, scatter_nd_infer,
               check_values=scatter_nd_check_values))
register(OpDef("ScatterElements", OpKind.OPAQUE, scatter_elements_compute, scatter_elements_infer,
               check_values=scatter_elements_check_values))
