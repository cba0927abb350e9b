"""Constants made of other arrays, computed when their values are read: a packed weight
whose parts stay in their memory-mapped files.

Why: GatedMLP packs a decoder layer's gate and up weights into one [K, 2I] weight.  Packed
eagerly, that is a copy of a third of a decoder's weights (2 GB for a 1.1B model, 2.8 s of
page faults and copying) made only to be written to the .om once.  A `ColumnConcat` keeps
views of its parts instead: the .om writer streams its rows through a few reused buffers
(`chunks`, made in the weights builder's ring), the weights builder fingerprints it from a few rows (`byte_range`), and whoever
needs the values as an array (`ge.ir.Value.const`) gets them computed then, once.
"""
from __future__ import annotations

from typing import Iterator, Optional, Sequence

import numpy as np

from om_format.weights import BufferRing


class _Block(np.ndarray):
    """A chunk of packed rows that remembers the arrays it was copied from (`sources`), so
    the .om writer can drop their mapped pages once it has written the chunk."""

    sources: tuple = ()

    def __array_finalize__(self, obj) -> None:
        self.sources = getattr(obj, "sources", ())


class ColumnConcat:
    """np.concatenate(parts, axis=1) of 2-D arrays with the same rows and dtype, not yet
    computed.  Immutable: its parts must not change while it lives (views of read-only
    mapped weights, as the constants of a graph are)."""

    def __init__(self, parts: Sequence[np.ndarray]):
        parts = tuple(np.asarray(p) for p in parts)
        if not parts or any(p.ndim != 2 for p in parts):
            raise ValueError("ColumnConcat takes one or more 2-D arrays")
        if len({p.shape[0] for p in parts}) != 1 or len({p.dtype for p in parts}) != 1:
            raise ValueError("ColumnConcat parts must have the same rows and dtype, got "
                             f"{[(p.shape, str(p.dtype)) for p in parts]}")
        self.parts = parts
        self.dtype = parts[0].dtype
        self.shape = (parts[0].shape[0], sum(p.shape[1] for p in parts))
        self.ndim = 2
        self.size = self.shape[0] * self.shape[1]
        self.nbytes = self.size * self.dtype.itemsize

    def materialize(self) -> np.ndarray:
        return np.concatenate(self.parts, axis=1)

    def __array__(self, dtype=None, copy=None) -> np.ndarray:
        array = self.materialize()
        return array if dtype is None else array.astype(dtype, copy=False)

    def __repr__(self) -> str:
        return f"ColumnConcat({self.shape}, {self.dtype}, {len(self.parts)} parts)"

    def _rows_into(self, out: np.ndarray, start: int) -> None:
        column = 0
        for part in self.parts:
            width = part.shape[1]
            out[:, column:column + width] = part[start:start + out.shape[0]]
            column += width

    def chunks(self, size: int, ring: Optional[BufferRing] = None) -> Iterator[memoryview]:
        """The C-order bytes, whole rows at a time, about `size` bytes per chunk (at least
        one row), each made in the next buffer of `ring` (om_format.weights.BufferRing; by
        default a ring of two of its own): a chunk stays valid until the ring hands its
        buffer out again, so the .om writer can still be hashing it on its second thread
        while this computes the next ones."""
        rows, row_bytes = self.shape[0], self.shape[1] * self.dtype.itemsize
        if not rows or not row_bytes:
            return
        ring = ring or BufferRing(2)
        step = max(1, min(rows, size // row_bytes))
        for start in range(0, rows, step):
            count = min(step, rows - start)
            block = ring.take(count * row_bytes).view(self.dtype).reshape(count, self.shape[1]).view(_Block)
            block.sources = self.parts
            self._rows_into(block, start)
            yield memoryview(block.reshape(-1).view(np.uint8)).toreadonly()

    def byte_range(self, start: int, stop: int) -> bytes:
        """Bytes [start, stop) of the C-order bytes, computed from the rows they cover."""
        row_bytes = self.shape[1] * self.dtype.itemsize
        start, stop = max(0, start), min(self.nbytes, stop)
        if stop <= start:
            return b""
        first, last = start // row_bytes, -(-stop // row_bytes)
        block = np.empty((last - first, self.shape[1]), self.dtype)
        self._rows_into(block, first)
        offset = first * row_bytes
        return block.tobytes()[start - offset:stop - offset]


def is_deferred(array) -> bool:
    return isinstance(array, ColumnConcat)
