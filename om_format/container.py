"""The .om file: a 256-byte ModelFileHeader, a partition table, then the partitions.

Layout (all little-endian; see README.md and the reference ascend-formats.md section 2):

    header (256 B) | u32 num, u32 0 | num x {u32 type, u32 0, u64 offset, u64 size} | data

Offsets are relative to the first byte after the table; every partition starts 8-byte
aligned (each is followed by zero padding to a multiple of 8).  The checksum is SHA-256 of everything after
the header, zero-padded to 64 bytes.  `read_om` checks every field and bound before it
uses it, and reports each problem as an OmFormatError (E10003 for users).
"""
from __future__ import annotations

import collections
import enum
import hashlib
import io
import os
import queue
import struct
import tempfile
import threading
import time
from dataclasses import dataclass, field, fields
from typing import BinaryIO, Callable, Iterator, Optional, Union

from google.protobuf.message import DecodeError

from om_format import cores
from om_format.errors import OmFormatError
from om_format.schema import ModelDef, ModelTaskDef
from om_format.weights import CHUNK_BYTES, CHUNKS_IN_FLIGHT, WeightsBuilder, byte_view  # noqa: F401  (WeightsBuilder re-exported)

MAGIC = 0x444F4D49          # b"IMOD" on disk
HEADER_SIZE = 256
HEADER_VERSION = 0x20000000  # the version from which the header carries model_num
MAX_PARTITIONS = 32          # Netron rejects types >= 32; GE defines far fewer
PARTITION_ALIGN = 8
_TABLE_HEAD = struct.Struct("<II")     # num, padding
_TABLE_ENTRY = struct.Struct("<IIQQ")  # type, padding, mem_offset, mem_size
_HEADER = struct.Struct("<III64sIBBBB32sI32sII20sB3sQBB62s")
if _HEADER.size != HEADER_SIZE:  # a self-check of the layout above, kept under `python -O`
    raise RuntimeError(f"om header layout is {_HEADER.size} bytes, GE's is {HEADER_SIZE}")


class PartitionType(enum.IntEnum):
    """GE's ModelPartitionType numbers."""

    MODEL_DEF = 0
    WEIGHTS_DATA = 1
    TASK_INFO = 2
    TBE_KERNELS = 3
    CUST_AICPU_KERNELS = 4
    SO_BINS = 5             # Netron parses this one as a device table: we never write it
    FLOW_MODEL = 6
    FLOW_SUBMODEL = 7
    MODEL_INOUT_INFO = 8
    STATIC_TASK_DESC = 9
    DYNAMIC_TASK_DESC = 10
    TASK_PARAM = 11
    TILING_DATA = 12
    PRE_MODEL_DESC = 20
    PRE_MODEL_SQE = 21
    PRE_KERNEL_ARGS = 22


@dataclass
class OmHeader:
    """GE's ModelFileHeader, field for field, in file order."""

    magic: int = MAGIC
    headsize: int = HEADER_SIZE
    version: int = HEADER_VERSION
    checksum: bytes = b"\0" * 64
    length: int = 0                  # file size - 256
    is_encrypt: int = 0
    is_checksum: int = 0             # 0 = CHECK (checksum valid), 1 = UNCHECK
    modeltype: int = 0               # 0 IR model
    genmode: int = 0                 # 0 offline
    name: str = ""                   # <= 31 UTF-8 bytes, NUL-terminated
    ops: int = 0
    userdefineinfo: bytes = b"\0" * 32
    om_ir_version: int = 0
    model_num: int = 1
    platform_version: str = ""       # <= 19 UTF-8 bytes, NUL-terminated
    platform_type: int = 0
    padd: bytes = b"\0" * 3
    model_length: int = 0            # u64 payload length (UNCONFIRMED in GE: we write file size - 256)
    need_check_os_cpu_info: int = 0
    is_unknow_model: int = 0         # 0 static, 1 dynamic
    reserved: bytes = b"\0" * 62

    def pack(self) -> bytes:
        values = []
        for f in fields(self):
            v = getattr(self, f.name)
            if f.name in ("name", "platform_version"):
                v = v.encode("utf-8")
            values.append(v)
        return _HEADER.pack(*values)

    @classmethod
    def unpack(cls, data: bytes) -> "OmHeader":
        values = list(_HEADER.unpack(bytes(data[:HEADER_SIZE])))
        for i, f in enumerate(fields(cls)):
            if f.name in ("name", "platform_version"):
                values[i] = values[i].split(b"\0", 1)[0].decode("utf-8", errors="replace")
        return cls(*values)


@dataclass
class OmFile:
    header: OmHeader
    partitions: dict = field(default_factory=dict)  # PartitionType -> memoryview of the file's bytes


def _fit(text: str, capacity: int) -> str:
    """Cut `text` to at most capacity-1 UTF-8 bytes (room for the NUL) on a char boundary."""
    raw = text.encode("utf-8")[:capacity - 1]
    return raw.decode("utf-8", errors="ignore")


def _pad8(n: int) -> int:
    return -n % PARTITION_ALIGN


def _checked_parts(partitions: dict) -> dict:
    parts = {}
    for ptype, data in partitions.items():
        ptype = PartitionType(ptype)  # ValueError for an unknown type
        if ptype == PartitionType.SO_BINS:
            raise ValueError("SO_BINS (type 5) has a layout of its own; not supported")
        parts[ptype] = data if hasattr(data, "chunks") else byte_view(data)
    if PartitionType.MODEL_DEF not in parts:
        raise ValueError("an .om file needs a MODEL_DEF partition")
    # Netron first tries a 32-bit table layout; with MODEL_DEF first at offset 0 and at least
    # two entries that attempt hits a duplicate type and it falls back to our 64-bit layout.
    # With a single entry it would "succeed" and show an empty model, hence the empty weights.
    parts.setdefault(PartitionType.WEIGHTS_DATA, memoryview(b""))
    return parts


def _chunks(data) -> Iterator[memoryview]:
    if hasattr(data, "chunks"):
        yield from data.chunks()
    else:
        for start in range(0, len(data), CHUNK_BYTES):
            yield data[start:start + CHUNK_BYTES]


def _spare_core() -> bool:
    """True when a core besides the one running this thread is free now (om_format.cores),
    so a chunk can be hashed on a second thread while this one writes it."""
    return cores.free_cores() >= 2


class _HashingWriter:
    """Writes chunks to a file and feeds them to SHA-256 in the same order: every byte is
    hashed once, from the caller's buffer (views, never copies), by hashlib's OpenSSL code.

    With a core to spare, a hashing thread takes the chunks from a queue while this thread
    writes them, 256 KiB at a time (one write() of a 16 MiB chunk costs this machine's kernel
    about 3x the time of 256 KiB writes of the same bytes: the decoder's 4.4 GB, 5.1-6.6 s of
    system time vs 2.2-2.9 s).  The two threads meet only when IN_FLIGHT chunks are written
    and not yet hashed: then `write` waits for the oldest.  So neither waits for the other
    chunk by chunk -- a chunk that is slow to make (a packed weight's rows, ge/deferred.py)
    is made up by the hash of the ones before it, and a slow hash by the writes after it:
    the writing stage takes about what the busier thread takes in all, not the sum over the
    chunks of the slower of the two (bench/RESULTS.md, memory section).  A chunk must stay
    valid until it is hashed: after `write` returns, at most IN_FLIGHT chunks are not, so a
    source that reuses buffers needs IN_FLIGHT + 1 of them (om_format.weights.BufferRing); views of mapped
    or held arrays stay valid anyway.  SHA-256 takes the bytes in file order: the queue keeps
    it, and before a chunk is hashed on this thread the queue is emptied first.

    On a busy machine the second thread only adds work (both threads then read every byte
    from memory); there each chunk is hashed and written a cache-sized piece at a time, so
    the write reads what the hash just brought into the cache: 10% less CPU for a 4.4 GB .om
    on this project's shared 2-core machine (bench/RESULTS.md, memory section).  Whether a core is spare is asked
    again every _RECHECK_S while a large .om is written (a neighbour may start or stop; see
    `_threaded`), unless the caller fixes it with `threaded`.  `on_chunk` and `on_bytes` are called on the writing
    thread, in file order, once a chunk is both written and hashed."""

    IN_FLIGHT = CHUNKS_IN_FLIGHT
    _OVERLAP = 1 << 20
    _PIECE = 256 << 10
    _RECHECK_S = 0.25

    def __init__(self, f: BinaryIO, total: int, on_bytes: Optional[Callable[[int, int], None]] = None,
                 on_chunk: Optional[Callable[[memoryview], None]] = None, threaded: Optional[bool] = None):
        self.f, self.total, self.on_bytes, self.on_chunk = f, total, on_bytes, on_chunk
        self.sha = hashlib.sha256()
        self.written = 0
        self._fixed = threaded
        self._spare, self._asked_at, self._busy_before = False, None, False
        self._hasher = None                  # the hashing thread, started on the first chunk it takes
        self._todo = queue.SimpleQueue()     # chunks for the hashing thread, in file order (None: stop)
        self._hashed_queue = queue.SimpleQueue()   # what it has hashed: a chunk, or the exception it raised
        self._out = collections.deque()      # chunks given to the hashing thread, not yet reported done
        self._failed = None

    def _threaded(self) -> bool:
        """Hash on the second thread?  Asked again every _RECHECK_S.  Once hashing there, it
        takes two "no core free" answers in a row to move the hashing back: a task runnable
        at one instant is as often a blip -- the kernel writing back this very file, a
        short-lived process -- as a neighbour that stays, and one wrong answer would cost
        a drained queue and a quarter second of hashing on this thread."""
        if self._fixed is not None:
            return self._fixed
        now = time.monotonic()
        if self._asked_at is None or now - self._asked_at >= self._RECHECK_S:
            spare, self._asked_at = _spare_core(), now
            if spare or not self._spare or self._busy_before:
                self._spare = spare
            self._busy_before = not spare
        return self._spare

    def _hash_chunks(self) -> None:
        """The hashing thread: hash each queued chunk in turn and hand it back."""
        while True:
            chunk = self._todo.get()
            if chunk is None:
                return
            try:
                self.sha.update(chunk)
            except BaseException as exc:     # handed to the writing thread, which raises it
                self._hashed_queue.put(exc)
                return
            self._hashed_queue.put(chunk)

    def _collect(self, keep: int) -> None:
        """Report the chunks the hashing thread has finished, in order, waiting until at most
        `keep` are still out (and raise what its hash raised)."""
        while self._out:
            block = len(self._out) > keep
            try:
                done = self._hashed_queue.get(block=block)
            except queue.Empty:
                return
            if isinstance(done, BaseException):
                self._out.clear()
                self._failed = done
                raise done
            self._done(self._out.popleft())

    def _done(self, chunk) -> None:
        """A chunk is written and hashed: tell the caller (who may drop the mapped pages it
        came from -- never while the hash still reads them)."""
        self.written += len(chunk)
        if self.on_chunk is not None:
            self.on_chunk(chunk)
        if self.on_bytes is not None:
            self.on_bytes(self.written, self.total)

    def _pieces(self, chunk) -> Iterator[memoryview]:
        view = memoryview(chunk)
        for start in range(0, len(view), self._PIECE):
            yield view[start:start + self._PIECE]

    def write(self, chunk) -> None:
        if self._failed is not None:
            raise self._failed
        if (len(chunk) >= self._OVERLAP or self._hasher is not None) and self._threaded():
            if self._hasher is None:
                self._hasher = threading.Thread(target=self._hash_chunks, name="om-sha256", daemon=True)
                self._hasher.start()
            self._out.append(chunk)
            self._todo.put(chunk)
            for piece in self._pieces(chunk):
                self.f.write(piece)
            self._collect(keep=self.IN_FLIGHT)
            return
        self._collect(keep=0)                # SHA-256 takes the bytes in file order
        if len(chunk) > self._PIECE:
            for piece in self._pieces(chunk):
                self.sha.update(piece)
                self.f.write(piece)
        else:
            self.sha.update(chunk)
            self.f.write(chunk)
        self._done(chunk)

    def close(self) -> None:
        """Wait for the last hash (the digest is complete after this) and end the thread."""
        try:
            if self._failed is None:
                self._collect(keep=0)
        finally:
            if self._hasher is not None:
                self._todo.put(None)
                self._hasher.join()
                self._hasher = None


def stream_om(f: BinaryIO, partitions: dict, *, name: str, ops: int, platform_version: str,
              platform_type: int = 0, is_dynamic: bool = False, om_ir_version: int = 0,
              modeltype: int = 0, userdefineinfo: bytes = b"",
              on_bytes: Optional[Callable[[int, int], None]] = None,
              on_chunk: Optional[Callable[[memoryview], None]] = None) -> int:
    """Write an .om to the seekable binary file `f` (from its current position) without
    holding it in memory; returns the bytes written.

    `partitions` maps PartitionType (or its int) to bytes-like data, or to an object with
    `nbytes` and `chunks()` (a WeightsBuilder: its arrays are written straight from where
    they live).  The header's checksum covers everything after it, so it is computed while
    the payload is written and the header is written last.  `on_bytes(done, total)` is
    told the payload bytes written so far after each chunk, `on_chunk(chunk)` each chunk
    once it is written and hashed (so a caller can drop the mapped pages it came from).  Deterministic: same input, same bytes."""
    parts = _checked_parts(partitions)
    order = sorted(parts)
    if len(userdefineinfo) > 32:
        raise ValueError("userdefineinfo is at most 32 bytes")

    table = bytearray(_TABLE_HEAD.pack(len(order), 0))
    offset = 0
    for ptype in order:  # each partition padded to 8 bytes, so the next starts aligned
        size = parts[ptype].nbytes
        table.extend(_TABLE_ENTRY.pack(int(ptype), 0, offset, size))
        offset += size + _pad8(size)
    payload_length = len(table) + offset

    start = f.tell()
    f.write(bytes(HEADER_SIZE))
    out = _HashingWriter(f, payload_length, on_bytes, on_chunk)
    try:
        out.write(table)
        for ptype in order:
            size = 0
            for chunk in _chunks(parts[ptype]):
                out.write(chunk)
                size += len(chunk)
            if size != parts[ptype].nbytes:
                raise ValueError(f"partition {ptype.name} gave {size} bytes, announced {parts[ptype].nbytes}")
            out.write(bytes(_pad8(size)))
    finally:
        out.close()

    header = OmHeader(
        checksum=out.sha.digest().ljust(64, b"\0"),
        length=payload_length & 0xFFFFFFFF,
        name=_fit(name, 32),
        ops=int(ops),
        userdefineinfo=bytes(userdefineinfo).ljust(32, b"\0"),
        om_ir_version=int(om_ir_version),
        modeltype=int(modeltype),
        platform_version=_fit(platform_version, 20),
        platform_type=int(platform_type),
        model_length=payload_length,
        is_unknow_model=1 if is_dynamic else 0,
    )
    end = f.tell()
    f.seek(start)
    f.write(header.pack())
    f.seek(end)
    return HEADER_SIZE + payload_length


def build_om(partitions: dict, *, name: str, ops: int, platform_version: str,
             platform_type: int = 0, is_dynamic: bool = False, om_ir_version: int = 0,
             modeltype: int = 0, userdefineinfo: bytes = b"") -> bytes:
    """The bytes of an .om file (see stream_om).  Deterministic: same input, same bytes."""
    buffer = io.BytesIO()
    stream_om(buffer, partitions, name=name, ops=ops, platform_version=platform_version,
              platform_type=platform_type, is_dynamic=is_dynamic, om_ir_version=om_ir_version,
              modeltype=modeltype, userdefineinfo=userdefineinfo)
    return buffer.getvalue()


def write_om(path: Union[str, os.PathLike], partitions: dict, *, name: str, ops: int,
             platform_version: str, platform_type: int = 0, is_dynamic: bool = False,
             om_ir_version: int = 0, modeltype: int = 0, userdefineinfo: bytes = b"") -> None:
    """Write an .om atomically (temp file in the same directory, then os.replace), streamed.

    `partitions` maps PartitionType (or its int) to bytes (or a WeightsBuilder).  They are
    stored in type order; an empty WEIGHTS_DATA is added when absent (Netron needs >= 2
    entries, see _checked_parts).  `name` and `platform_version` are cut to fit their fixed
    header fields."""
    path = os.fspath(path)
    directory = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(prefix=".om-", suffix=".tmp", dir=directory)
    try:
        with os.fdopen(fd, "wb") as f:
            stream_om(f, partitions, name=name, ops=ops, platform_version=platform_version,
                      platform_type=platform_type, is_dynamic=is_dynamic, om_ir_version=om_ir_version,
                      modeltype=modeltype, userdefineinfo=userdefineinfo)
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise


def _bad(message: str) -> OmFormatError:
    return OmFormatError(message)


def read_om(source, *, where: str = "The .om data",
            on_checked: Optional[Callable[[int, int], None]] = None) -> OmFile:
    """Parse and verify an .om file (a path, or its bytes: any buffer, such as a memory map;
    `where` names them in messages).  Any problem raises OmFormatError.  The tools map files
    through ge.files (regular files only, size-checked) and hand the map here: the
    WEIGHTS_DATA partition is then a view of the map, never copied.  The checksum reads the
    file in chunks; `on_checked(offset, length)` is told each range of the file it has read
    (so a memory-mapped reader can drop those pages again)."""
    if not isinstance(source, (str, os.PathLike)):
        data = memoryview(source)
    else:
        try:
            with open(source, "rb") as f:
                data = f.read()
        except OSError as e:
            raise OmFormatError(f"Cannot read .om file [{os.fspath(source)}]: {e.strerror}.",
                                "Check that the path exists and is readable.") from None
        where = f"File [{os.fspath(source)}]"

    if len(data) < HEADER_SIZE:
        raise _bad(f"{where} is {len(data)} bytes, smaller than the {HEADER_SIZE}-byte model header.")
    header = OmHeader.unpack(data)
    if header.magic != MAGIC:
        raise _bad(f"{where} has magic 0x{header.magic:08X}, expected 0x{MAGIC:08X} ('IMOD').")
    if header.headsize != HEADER_SIZE:
        raise _bad(f"{where} declares a {header.headsize}-byte header, expected {HEADER_SIZE}.")
    if header.version < HEADER_VERSION:
        raise _bad(f"{where} has header version 0x{header.version:08X}; "
                   f"versions below 0x{HEADER_VERSION:08X} are not supported.")
    if header.is_encrypt != 0:
        raise _bad(f"{where} is encrypted (is_encrypt={header.is_encrypt}); encrypted models are not supported.")
    payload = memoryview(data)[HEADER_SIZE:]   # a view: no second copy of a large file
    if header.length != (len(payload) & 0xFFFFFFFF) or (len(payload) > 0xFFFFFFFF and header.model_length == 0):
        raise _bad(f"{where} header length is {header.length} but {len(payload)} bytes follow "
                   "the header (file truncated or extended).")
    if header.model_length not in (0, len(payload)):
        raise _bad(f"{where} header model_length is {header.model_length} but {len(payload)} "
                   "bytes follow the header.")
    if header.is_checksum == 0:
        sha = hashlib.sha256()
        for start in range(0, len(payload), CHUNK_BYTES):
            sha.update(payload[start:start + CHUNK_BYTES])
            if on_checked is not None:
                on_checked(HEADER_SIZE + start, min(CHUNK_BYTES, len(payload) - start))
        expected = sha.digest().ljust(64, b"\0")
        if header.checksum != expected:
            raise _bad(f"{where} fails its checksum: header has {header.checksum[:32].hex()}, "
                       f"content hashes to {expected[:32].hex()} (SHA-256).")
    elif header.is_checksum != 1:
        raise _bad(f"{where} has is_checksum={header.is_checksum}, expected 0 (check) or 1 (uncheck).")

    partitions = _read_table(payload, where)
    if PartitionType.MODEL_DEF not in partitions:
        raise _bad(f"{where} has no MODEL_DEF partition (type 0).")
    return OmFile(header=header, partitions=partitions)


def _read_table(payload: memoryview, where: str) -> dict:
    if len(payload) < _TABLE_HEAD.size:
        raise _bad(f"{where} ends before the partition table ({len(payload)} bytes after the header).")
    num, pad = _TABLE_HEAD.unpack_from(payload, 0)
    if num == 0 or num > MAX_PARTITIONS:
        raise _bad(f"{where} declares {num} partitions; expected 1 to {MAX_PARTITIONS}.")
    if pad != 0:
        raise _bad(f"{where} partition table padding is 0x{pad:08X}, expected 0 "
                   "(the old 32-bit table layout is not supported).")
    table_size = _TABLE_HEAD.size + num * _TABLE_ENTRY.size
    if table_size > len(payload):
        raise _bad(f"{where} partition table of {num} entries needs {table_size} bytes, "
                   f"only {len(payload)} follow the header.")
    data_size = len(payload) - table_size
    spans, partitions = [], {}
    for i in range(num):
        ptype, pad, offset, size = _TABLE_ENTRY.unpack_from(payload, _TABLE_HEAD.size + i * _TABLE_ENTRY.size)
        try:
            ptype = PartitionType(ptype)
        except ValueError:
            raise _bad(f"{where} partition {i} has unknown type {ptype}.") from None
        if pad != 0:
            raise _bad(f"{where} partition {i} ({ptype.name}) has non-zero padding 0x{pad:08X}.")
        if ptype in partitions:
            raise _bad(f"{where} has two {ptype.name} partitions (type {int(ptype)}).")
        if offset > data_size or size > data_size - offset:
            raise _bad(f"{where} partition {ptype.name} [{offset}, {offset + size}) runs past the "
                       f"end of the {data_size}-byte partition data.")
        start = table_size + offset
        partitions[ptype] = payload[start:start + size].toreadonly()   # a view: never copied
        if size:
            spans.append((offset, offset + size, ptype))
    spans.sort()
    for (s0, e0, t0), (s1, e1, t1) in zip(spans, spans[1:]):
        if s1 < e0:
            raise _bad(f"{where} partitions {t0.name} [{s0}, {e0}) and {t1.name} [{s1}, {e1}) overlap.")
    return partitions


def load_model_def(om: OmFile) -> ModelDef:
    """Decode partition 0 as ge.proto.ModelDef; a malformed message raises E10003."""
    model = ModelDef()
    try:
        model.ParseFromString(om.partitions[PartitionType.MODEL_DEF])
    except DecodeError as e:
        raise _bad(f"The MODEL_DEF partition is not a ge.proto.ModelDef ({e}).") from None
    return model


def load_task_def(om: OmFile) -> Optional[ModelTaskDef]:
    """Decode partition 2 as domi.ModelTaskDef (ours); None when the file has no task list."""
    raw = om.partitions.get(PartitionType.TASK_INFO)
    if raw is None:
        return None
    tasks = ModelTaskDef()
    try:
        tasks.ParseFromString(raw)
    except DecodeError as e:
        raise _bad(f"The TASK_INFO partition is not a domi.ModelTaskDef ({e}).") from None
    return tasks
