"""DT_INT4 tensors in an .om: two values a byte, as GE sizes them (4 bits an element, the
byte count rounded up).  numpy (ml_dtypes.int4) holds one value a byte; the .om's weights
partition, inline tensor data and descriptor sizes hold the packed form.

Nibble order: /work/shared/reference/ascend-formats.md does not say, so ONNX's INT4 packing
is followed -- the first element in the low nibble, the second in the high one -- which is
also how Netron reads an .om's 'int4' tensor (base.js getIntBits, little-endian).  An odd
count leaves the last byte's high nibble 0 (written 0, so builds stay deterministic; ignored
when read).  A byte count that is not exactly ceil(count / 2) is refused (OmFormatError).
uint4 is not packed: GE has no DT_UINT4, so it is held as DT_UINT8, one value a byte
(om_format.attrs)."""
from __future__ import annotations

import math
from typing import Optional

import numpy as np

from om_format.errors import OmFormatError

try:
    import ml_dtypes
    INT4: Optional[np.dtype] = np.dtype(ml_dtypes.int4)
except ImportError:  # pragma: no cover - onnx installs ml_dtypes
    INT4 = None


def is_int4(dtype) -> bool:
    return INT4 is not None and np.dtype(dtype) == INT4


def packed_size(count: int) -> int:
    """Bytes of `count` int4 values, two a byte."""
    return (count + 1) // 2


def pack(array) -> np.ndarray:
    """The packed bytes (uint8, C order) of an int4 array."""
    nibbles = np.ascontiguousarray(array, dtype=INT4).reshape(-1).view(np.uint8) & np.uint8(0x0F)
    if nibbles.size % 2:
        nibbles = np.append(nibbles, np.uint8(0))
    return nibbles[0::2] | (nibbles[1::2] << np.uint8(4))


def unpack(data, shape: tuple, name: str) -> np.ndarray:
    """The int4 array of `shape` that packed `data` holds; its size is checked first."""
    count = math.prod(shape)
    if any(d < 0 for d in shape) or len(data) != packed_size(count):
        raise OmFormatError(f"Tensor '{name}' has {len(data)} data bytes, shape {list(shape)} of int4 needs "
                            f"{packed_size(max(count, 0))} (two values a byte).")
    packed = np.frombuffer(data, dtype=np.uint8)
    nibbles = np.empty(2 * packed.size, dtype=np.uint8)
    nibbles[0::2] = packed & np.uint8(0x0F)
    nibbles[1::2] = packed >> np.uint8(4)
    array = nibbles[:count].view(INT4).reshape(shape)
    array.flags.writeable = False         # as the other tensors read from a file: views, read-only
    return array
