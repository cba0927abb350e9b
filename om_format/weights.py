"""Layout of the WEIGHTS_DATA partition: constant arrays packed 64-byte aligned.

A Const op points at its bytes with ``desc.data_offset`` (relative to the first byte of
the weights partition, which is how Netron and GE resolve it) and ``desc.weight_size``.

The builder lays the partition out without copying it: it keeps a read-only view of each
array (a memory-mapped weight stays mapped) and `chunks()` hands the bytes to the .om
writer, which streams them to the file.  Identical byte strings share one slot; they are
found by a fingerprint of the size and three small probes, then confirmed byte for byte,
so no weight is hashed or copied to decide it.  An array computed from others (a deferred
constant, ge.deferred: anything with `nbytes`, `chunks(size)` and `byte_range(start, stop)`)
is kept as it is and computed chunk by chunk while it is written.
"""
from __future__ import annotations

import hashlib
from typing import Iterator, Optional

import numpy as np

from om_format import int4
from om_format.attrs import string_bytes

ALIGN = 64
CHUNK_BYTES = 16 << 20       # what the writer gets per chunk: large enough to hash and write fast
CHUNKS_IN_FLIGHT = 8         # chunks the .om writer may have written but not yet hashed (om_format.container)
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


class BufferRing:
    """Scratch buffers handed out in turn: the one `take` returns is handed out again only
    `count` takes later.  A deferred array's chunks are made in them (ge/deferred.py), so a
    chunk stays valid while the .om writer still holds up to count - 1 later chunks unhashed;
    one ring serves every deferred array of a partition, so its buffers are allocated (and
    their pages faulted in) once, not once per array."""

    def __init__(self, count: int):
        if count < 1:
            raise ValueError("a BufferRing needs at least one buffer")
        self._buffers: list = [None] * count
        self._turn = 0

    def take(self, nbytes: int) -> np.ndarray:
        """A writable uint8 array of `nbytes` bytes (contents undefined)."""
        slot = self._turn % len(self._buffers)
        self._turn += 1
        buffer = self._buffers[slot]
        if buffer is None or buffer.nbytes < nbytes:
            buffer = self._buffers[slot] = np.empty(nbytes, np.uint8)
        return buffer[:nbytes]


def _is_deferred(source) -> bool:
    return hasattr(source, "byte_range")


def _length(source) -> int:
    return source.nbytes if _is_deferred(source) else len(source)


def _read(source, start: int, stop: int) -> bytes:
    return source.byte_range(start, stop) if _is_deferred(source) else source[start:stop].tobytes()


def _source_chunks(source, size: int, ring: BufferRing) -> Iterator[memoryview]:
    if _is_deferred(source):
        yield from source.chunks(size, ring)
    else:
        for start in range(0, len(source), size):
            yield source[start:start + size]


def _digest(source) -> bytes:
    if not _is_deferred(source):
        return hashlib.sha256(source).digest()
    sha = hashlib.sha256()
    for chunk in source.chunks(_COMPARE):
        sha.update(chunk)
    return sha.digest()


def _fingerprint(source) -> bytes:
    n = _length(source)
    if n <= 3 * _PROBE:          # the probes would cover it all: the fingerprint is the content
        sample = _read(source, 0, n)
    else:
        mid = n // 2
        sample = b"".join((_read(source, 0, _PROBE), _read(source, mid, mid + _PROBE), _read(source, n - _PROBE, n)))
    return n.to_bytes(8, "little") + hashlib.sha256(sample).digest()


def _same(a, b) -> bool:
    if _length(a) != _length(b):
        return False
    return all(_read(a, i, i + _COMPARE) == _read(b, i, i + _COMPARE) for i in range(0, _length(a), _COMPARE))


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
        """Store raw bytes (bytes-like, a C-contiguous array, or a deferred array of
        little-endian bytes: see the module's docstring); returns (offset, size)."""
        view = data if _is_deferred(data) else byte_view(data)
        if self.dedup:
            key = _fingerprint(view)
            found = self._find(key, view)
            if found is not None:
                return found
        offset = -self._size % self.align + self._size
        self._items.append((offset, view))
        self._size = offset + _length(view)
        if self.dedup:
            self._remember(key, len(self._items) - 1)
        return offset, _length(view)

    def add(self, array) -> tuple:
        """Store an array as C-order little-endian bytes (strings: GE's DT_STRING layout,
        om_format.attrs); returns (offset, size).  A deferred array is kept as it is, to be
        computed while the partition is written.  int4 is packed two values a byte
        (om_format/int4.py), as the tensor's descriptor sizes it."""
        if int4.is_int4(array.dtype):
            return self.add_bytes(int4.pack(np.asarray(array)))
        if _is_deferred(array):
            if array.dtype.byteorder != ">":
                return self.add_bytes(array)
            array = np.asarray(array)
        if array.dtype.hasobject:
            return self.add_bytes(string_bytes(array))
        arr = np.ascontiguousarray(array)
        if arr.dtype.byteorder == ">":
            arr = arr.astype(arr.dtype.newbyteorder("<"))
        return self.add_bytes(arr)

    def _find(self, key: bytes, view: memoryview):
        group = self._groups.get(key)
        if group is None:
            return None
        if isinstance(group, dict):
            index = group.get(_digest(view))
            candidates = [] if index is None else [index]
        else:
            candidates = group
        for index in candidates:
            offset, other = self._items[index]
            if _same(other, view):
                return offset, _length(other)
        return None

    def _remember(self, key: bytes, index: int) -> None:
        group = self._groups.setdefault(key, [])
        if isinstance(group, list) and len(group) >= _GROUP_BY_DIGEST:
            group = self._groups[key] = {_digest(self._items[i][1]): i for i in group}
        if isinstance(group, dict):
            group.setdefault(_digest(self._items[index][1]), index)
        else:
            group.append(index)

    def __len__(self) -> int:
        return self._size

    @property
    def nbytes(self) -> int:
        return self._size

    def chunks(self, size: Optional[int] = None) -> Iterator[memoryview]:
        """The partition's bytes in order, as views of at most `size` bytes (CHUNK_BYTES by
        default; zero padding between arrays, none after the last).  Deferred arrays' chunks
        take turns in one ring of CHUNKS_IN_FLIGHT + 1 buffers: each stays valid until
        CHUNKS_IN_FLIGHT more chunks have been asked for (what the .om writer needs)."""
        size = size or CHUNK_BYTES
        ring = BufferRing(CHUNKS_IN_FLIGHT + 1)
        position = 0
        for offset, source in self._items:
            if offset > position:
                yield memoryview(bytes(offset - position))
            yield from _source_chunks(source, size, ring)
            position = offset + _length(source)

    def bytes(self) -> bytes:
        """The partition contents (no padding after the last array), as one bytes object."""
        return b"".join([bytes(chunk) for chunk in self.chunks()])   # copied: deferred chunks share a buffer
