"""Size limits that follow from the file formats, not from any chip.

GE's TensorDescriptor.size (and every offset in an .om) is an int64, so no tensor can hold
more bytes than that.  Sizes are computed with Python ints: a numpy int64 product of huge
dims wraps around and can pass a check it should fail.
"""
from __future__ import annotations

import math

import numpy as np

MAX_TENSOR_BYTES = (1 << 63) - 1


def tensor_bytes(shape, dtype) -> int:
    """Exact byte size of a tensor (no int64 wrap-around)."""
    return math.prod(int(d) for d in shape) * np.dtype(dtype).itemsize


def too_large(shape, dtype) -> bool:
    return tensor_bytes(shape, dtype) > MAX_TENSOR_BYTES
