"""atc-sim's file forms of the tensors numpy's .npy cannot carry as themselves.

Strings: the IR holds them as object arrays of str, which np.save only pickles -- and we
never load a pickle.  So an input string tensor comes as a unicode .npy (``np.array([...],
dtype=str)``, dtype ``<U``) or as a .bin in GE's DT_STRING layout (om_format.attrs), and an
output string tensor is written the same ways.

ml_dtypes types (bfloat16, float8 in its four forms, int4, uint4): np.save writes them as
opaque void (``V1``/``V2``) with the type lost.  We write their bit patterns as the unsigned
integer of their width (uint8, uint16: ``.view(ml_dtypes.uint4)`` etc. gives the values back;
a uint4/int4 byte holds one value) and read either that form or the void form of the same
width; an int4/uint4 byte outside the type's range is refused, never wrapped.
"""
from __future__ import annotations

from typing import Optional

import numpy as np

from om_format.attrs import STRING, string_bytes, strings_from_bytes
from om_format.errors import OmFormatError

try:
    import ml_dtypes
    NIBBLE_RANGES = {np.dtype(ml_dtypes.int4): (-8, 7), np.dtype(ml_dtypes.uint4): (0, 15)}
except ImportError:  # pragma: no cover - onnx installs ml_dtypes
    ml_dtypes = None
    NIBBLE_RANGES = {}


def is_opaque(dtype) -> bool:
    """An ml_dtypes type: numpy stores it as void."""
    return np.dtype(dtype).kind == "V" and np.dtype(dtype).fields is None


def bits_dtype(dtype) -> np.dtype:
    """The unsigned integer type of `dtype`'s width (the file form of an ml_dtypes type)."""
    return np.dtype(f"u{np.dtype(dtype).itemsize}")


def from_file(array: np.ndarray, dtype) -> tuple:
    """(array as the model's `dtype`, None), or (None, why not) for a file array whose type
    does not hold that input exactly."""
    dtype = np.dtype(dtype)
    if dtype == STRING:
        if array.dtype.kind != "U":
            return None, f"dtype {array.dtype}; a string input is read from a unicode .npy (dtype <U)"
        return array.astype(object), None
    if is_opaque(dtype) and array.dtype != dtype:
        if array.dtype not in (bits_dtype(dtype), np.dtype(f"V{dtype.itemsize}")):
            return None, (f"dtype {array.dtype}; input of type {dtype} is read from its bit patterns as "
                          f"{bits_dtype(dtype)} (or numpy's void V{dtype.itemsize})")
        bits = array.view(bits_dtype(dtype))
        if dtype in NIBBLE_RANGES:
            lo, hi = NIBBLE_RANGES[dtype]
            values = bits.view(np.int8) if lo < 0 else bits
            if bits.size and (int(values.min()) < lo or int(values.max()) > hi):
                return None, f"a {dtype} input holds one value {lo}..{hi} a byte; the file holds others"
        return np.ascontiguousarray(bits).view(dtype), None
    return array, None


def strings_from_bin(data: bytes, shape: tuple, path: str) -> np.ndarray:
    """A string input's .bin: GE's DT_STRING layout (OmFormatError -> ValueError with why)."""
    try:
        return strings_from_bytes(data, tuple(shape), path)
    except OmFormatError as exc:
        raise ValueError(exc.message) from None


def npy_form(array: np.ndarray) -> np.ndarray:
    """What np.save writes for an output: strings as unicode, ml_dtypes types as their bits."""
    if array.dtype == STRING:
        return array.astype(str) if array.size else np.zeros(array.shape, dtype="<U1")
    if is_opaque(array.dtype):
        return np.ascontiguousarray(array).view(bits_dtype(array.dtype))
    return array


def bin_bytes(array: np.ndarray) -> Optional[bytes]:
    """The raw .bin bytes of a string output (GE's layout); None: the array's own bytes."""
    return string_bytes(array) if array.dtype == STRING else None


def text_form(array: np.ndarray) -> tuple:
    """(array, printf format) for --outfmt TXT: strings as is, ml_dtypes floats as float32."""
    if array.dtype == STRING:
        return array, "%s"
    if is_opaque(array.dtype):
        if np.dtype(array.dtype) in NIBBLE_RANGES:
            return array.astype(np.int8), "%d"
        return array.astype(np.float32), "%.8g"
    return array, "%d" if array.dtype.kind in "iub" else "%.8g"
