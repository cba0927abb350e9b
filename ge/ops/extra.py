"""ONNX ops that real exporters emit and the core op modules lacked.

- GatherND: the dynamo exporter lowers transformers' mask indexing
  (``padding_mask[batch_idx, kv_idx]``) to GatherND on the run-time attention_mask.
- CastLike: onnxscript's torchlib casts scalars to an input's type with it.
"""
from __future__ import annotations

import numpy as np

from ge.ops.elementwise import convert
from ge.ops.registry import OpDef, OpKind, TensorType, register
from ge.errors import AtcError, InvalidNode


def _err(message: str) -> AtcError:
    return InvalidNode(f"GatherND: {message}", "Check the node's inputs and attributes.")


def _gather_nd_shape(data_shape, indices_shape, batch_dims: int) -> tuple:
    if not indices_shape:
        raise _err("indices must have rank >= 1")
    k = int(indices_shape[-1])
    if batch_dims < 0 or batch_dims >= min(len(data_shape), len(indices_shape)):
        raise _err(f"batch_dims {batch_dims} must be below the ranks of data and indices")
    if tuple(data_shape[:batch_dims]) != tuple(indices_shape[:batch_dims]):
        raise _err(f"batch dims of data {tuple(data_shape)} and indices {tuple(indices_shape)} differ")
    if k < 1 or batch_dims + k > len(data_shape):
        raise _err(f"index depth {k} does not fit data of rank {len(data_shape)} with batch_dims {batch_dims}")
    return tuple(indices_shape[:-1]) + tuple(data_shape[batch_dims + k:])


def gather_nd_compute(inputs, attrs):
    data, indices = inputs[0], np.asarray(inputs[1]).astype(np.int64, copy=False)
    b = int(attrs.get("batch_dims", 0))
    out_shape = _gather_nd_shape(data.shape, indices.shape, b)
    k = indices.shape[-1]
    batch = int(np.prod(data.shape[:b], dtype=np.int64))
    dims = np.asarray(data.shape[b:b + k], dtype=np.int64)
    idx = indices.reshape(batch, -1, k)
    idx = np.where(idx < 0, idx + dims, idx)
    if idx.size and (np.any(idx < 0) or np.any(idx >= dims)):
        raise _err(f"indices out of range for data of shape {tuple(data.shape)}")
    flat = data.reshape((batch,) + tuple(data.shape[b:]))
    rows = np.arange(batch)[:, None]
    gathered = flat[(rows,) + tuple(idx[..., j] for j in range(k))]
    return [np.require(gathered.reshape(out_shape), requirements="C")]


def gather_nd_infer(inputs, attrs):
    data, indices = inputs[0], inputs[1]
    return [TensorType(np.dtype(data.dtype), _gather_nd_shape(data.shape, indices.shape,
                                                              int(attrs.get("batch_dims", 0))))]


def gather_nd_check_values(values, types, attrs):
    """Constant indices against the data's dims (the data may be a run-time tensor)."""
    if values[1] is None or types[0] is None:
        return
    b = int(attrs.get("batch_dims", 0))
    indices = np.asarray(values[1]).astype(np.int64, copy=False)
    _gather_nd_shape(types[0].shape, indices.shape, b)
    dims = np.asarray(types[0].shape[b:b + indices.shape[-1]], dtype=np.int64)
    if indices.size and (np.any(indices < -dims) or np.any(indices >= dims)):
        raise _err(f"indices out of range for data of shape {tuple(types[0].shape)}")


register(OpDef(op_type="GatherND", kind=OpKind.INJECTIVE, compute=gather_nd_compute,
               infer=gather_nd_infer, check_values=gather_nd_check_values))


def cast_like_compute(inputs, attrs):
    return [convert(inputs[0], inputs[1].dtype, bool(int(attrs.get("saturate", 1))))]


register(OpDef(op_type="CastLike", kind=OpKind.ELEMWISE, compute=cast_like_compute,
               infer=lambda i, a: [TensorType(np.dtype(i[1].dtype), tuple(i[0].shape))]))
