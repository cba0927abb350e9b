"""Layout of the WEIGHTS_DATA partition: constant arrays packed 64-byte aligned.

A Const op points at its bytes with ``desc.data_offset`` (relative to the first byte of
the weights partition, which is how Netron and GE resolve it) and ``desc.weight_size``.

The builder lays the partition out without copying it: it keeps a read-only view of each
array (a memory-mapped weight stays mapped) and `chunks()` hands the bytes to the .om
writer, which streams them to the file.  Identical byte strings share one slot; they are
found by a fingerprint of the size and three small probes, then confirmed byte for byte,
so no weight is hashed or copied to decide it.
"""
from __future__ import annotations

import hashlib
from typing import Iterator, Optional

import numpy as np

ALIGN = 64
CHUNK_BYTES = 16 << 20       # what the writer gets per chunk: large enough to hash and write fast
_PROBE = 4096                # bytes read at the start, middle and end of an array to fingerprint it
_COMPARE = 4 << 20           # bytes compared at a time when two arrays share a fingerprint
_GROUP_BY_DIGEST = 4         # distinct arrays per fingerprint before they are told apart by SHA-256


def byte_view(data) -> memoryview:
    """A flat read-only memoryview of the bytes of `data` (bytes-like or C-contiguous array),
    without copying."""
    if isinstance(data, np.ndarray):
        if not data.flags.c_contiguous:
            raise ValueError("byte_view needs a C-contiguous array")
        return memoryview(data.reshape(-1).view(np.uint8)).toreadonly()
    view = memoryview(data)
    if view.format != "B" or view.ndim != 1:
        view = view.cast("B")
    return view.toreadonly()


def _fingerprint(view: memoryview) -> bytes:
    n = len(view)
    if n <= 3 * _PROBE:          # the probes would cover it all: the fingerprint is the content
        sample = view.tobytes()
    else:
        mid = n // 2
        sample = b"".join((view[:_PROBE], view[mid:mid + _PROBE], view[n - _PROBE:]))
    return n.to_bytes(8, "little") + hashlib.sha256(sample).digest()


def _same(a: memoryview, b: memoryview) -> bool:
    if len(a) != len(b):
        return False
    return all(a[i:i + _COMPARE].tobytes() == b[i:i + _COMPARE].tobytes() for i in range(0, len(a), _COMPARE))


class WeightsBuilder:
    """Appends arrays at `align`-byte aligned offsets; identical byte strings share one slot.
    Holds views, not copies: an array added must not change until the partition is written."""

    def __init__(self, align: int = ALIGN, dedup: bool = True):
        if align <= 0 or align & (align - 1):
            raise ValueError("align must be a power of two")
        self.align = align
        self.dedup = dedup
        self._items: list = []       # (offset, memoryview), in offset order
        self._size = 0
        self._groups: dict = {}      # fingerprint -> [item index], or {digest: item index} when crowded

    def add_bytes(self, data) -> tuple:
        """Store raw bytes (bytes-like or a C-contiguous array); returns (offset, size)."""
        view = byte_view(data)
        if self.dedup:
            key = _fingerprint(view)
            found = self._find(key, view)
            if found is not None:
                return found
        offset = -self._size % self.align + self._size
        self._items.append((offset, view))
        self._size = offset + len(view)
        if self.dedup:
            self._remember(key, len(self._items) - 1)
        return offset, len(view)

    def add(self, array: np.ndarray) -> tuple:
        """Store an array as C-order little-endian bytes; returns (offset, size)."""
        arr = np.ascontiguousarray(array)
        if arr.dtype.byteorder == ">":
            arr = arr.astype(arr.dtype.newbyteorder("<"))
        return self.add_bytes(arr)

    def _find(self, key: bytes, view: memoryview):
        group = self._groups.get(key)
        if group is None:
            return None
        if isinstance(group, dict):
            index = group.get(hashlib.sha256(view).digest())
            candidates = [] if index is None else [index]
        else:
            candidates = group
        for index in candidates:
            offset, other = self._items[index]
            if _same(other, view):
                return offset, len(other)
        return None

    def _remember(self, key: bytes, index: int) -> None:
        group = self._groups.setdefault(key, [])
        if isinstance(group, list) and len(group) >= _GROUP_BY_DIGEST:
            group = self._groups[key] = {hashlib.sha256(self._items[i][1]).digest(): i for i in group}
        if isinstance(group, dict):
            group.setdefault(hashlib.sha256(self._items[index][1]).digest(), index)
        else:
            group.append(index)

    def __len__(self) -> int:
        return self._size

    @property
    def nbytes(self) -> int:
        return self._size

    def chunks(self, size: Optional[int] = None) -> Iterator[memoryview]:
        """The partition's bytes in order, as views of at most `size` bytes (CHUNK_BYTES by
        default; zero padding between arrays, none after the last)."""
        size = size or CHUNK_BYTES
        position = 0
        for offset, view in self._items:
            if offset > position:
                yield memoryview(bytes(offset - position))
            for start in range(0, len(view), size):
                yield view[start:start + size]
            position = offset + len(view)

    def bytes(self) -> bytes:
        """The partition contents (no padding after the last array), as one bytes object."""
        return b"".join(self.chunks())
