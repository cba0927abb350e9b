"""Layout of the WEIGHTS_DATA partition: constant arrays packed 64-byte aligned.

A Const op points at its bytes with ``desc.data_offset`` (relative to the first byte of
the weights partition, which is how Netron and GE resolve it) and ``desc.weight_size``.
"""
from __future__ import annotations

import hashlib

import numpy as np

ALIGN = 64


class WeightsBuilder:
    """Appends arrays at 64-byte aligned offsets; identical byte strings share one slot."""

    def __init__(self, align: int = ALIGN, dedup: bool = True):
        if align <= 0 or align & (align - 1):
            raise ValueError("align must be a power of two")
        self.align = align
        self.dedup = dedup
        self._buf = bytearray()
        self._seen: dict = {}

    def add_bytes(self, data: bytes) -> tuple:
        """Store raw bytes; returns (offset, size) within the partition."""
        data = bytes(data)
        key = hashlib.sha256(data).digest() if self.dedup else None
        if key is not None and key in self._seen:
            return self._seen[key]
        offset = -len(self._buf) % self.align + len(self._buf)
        self._buf.extend(b"\0" * (offset - len(self._buf)))
        self._buf.extend(data)
        slot = (offset, len(data))
        if key is not None:
            self._seen[key] = slot
        return slot

    def add(self, array: np.ndarray) -> tuple:
        """Store an array as C-order little-endian bytes; returns (offset, size)."""
        arr = np.ascontiguousarray(array)
        if arr.dtype.byteorder == ">":
            arr = arr.astype(arr.dtype.newbyteorder("<"))
        return self.add_bytes(arr.tobytes())

    def __len__(self) -> int:
        return len(self._buf)

    def bytes(self) -> bytes:
        """The partition contents (no padding after the last array)."""
        return bytes(self._buf)
