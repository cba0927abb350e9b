"""Helpers shared by the op modules: broadcasting, axis normalization, dtype rules."""
from __future__ import annotations

from typing import Optional, Sequence

import numpy as np

from ge.errors import InvalidNode
from ge.ops.registry import TensorType

# The float dtypes a precision mode may move a tensor between (the compute dtype of a kernel
# applies to these; index and mask tensors keep their own dtype).
FLOAT_TYPES = (np.dtype(np.float32), np.dtype(np.float16), np.dtype(np.float64))


def broadcast_shape(*shapes: Sequence[int]) -> tuple:
    """Numpy/ONNX multidirectional broadcasting of static shapes."""
    try:
        return tuple(int(d) for d in np.broadcast_shapes(*[tuple(s) for s in shapes]))
    except ValueError:
        raise InvalidNode(f"input shapes {[list(s) for s in shapes]} do not broadcast to one shape",
                          "Check the shapes of the node's inputs.") from None


def normalize_axis(axis: int, rank: int) -> int:
    if not -rank <= axis < max(rank, 1):
        raise ValueError(f"axis {axis} out of range for rank {rank}")
    return axis + rank if axis < 0 else axis


def normalize_axes(axes: Optional[Sequence[int]], rank: int) -> list:
    return sorted(normalize_axis(int(a), rank) for a in (axes or []))


def present(inputs: Sequence) -> list:
    """The inputs that are not omitted (ONNX optional inputs are None here)."""
    return [x for x in inputs if x is not None]


def same_as_input(inputs: Sequence[Optional[TensorType]], attrs: dict, index: int = 0) -> list:
    """Shape rule of unary elementwise ops."""
    return [TensorType(np.dtype(inputs[index].dtype), tuple(inputs[index].shape))]


def broadcast_result(inputs: Sequence[Optional[TensorType]], attrs: dict, dtype=None) -> list:
    """Shape rule of broadcasting ops: dtype of the first input unless given."""
    shapes = [t.shape for t in present(inputs)]
    out_dtype = np.dtype(dtype) if dtype is not None else np.dtype(present(inputs)[0].dtype)
    return [TensorType(out_dtype, broadcast_shape(*shapes))]
