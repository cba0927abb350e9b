"""Size limits, and the resource budget every stage checks before it allocates.

Two kinds of limit:
- from the formats: GE's TensorDescriptor.size (and every offset in an .om) is an int64, so
  no tensor can hold more bytes than `MAX_TENSOR_BYTES`.  Sizes are computed with Python
  ints: a numpy int64 product of huge dims wraps around and can pass a check it should fail.
- from the machine (`Budget`): no tensor may be larger than the chip's memory (the
  `memory_size` of simulator/chips/<soc>.json, handed down by the driver -- ge never reads
  chip files), and what this process allocates on the host must fit the memory it may still
  use (physical RAM, RLIMIT_AS/RLIMIT_DATA, the tightest memory limit of its cgroups).  A
  100-byte model can ask for terabytes; the budget refuses it (E13023, naming the node and
  the size) before numpy or onnx allocates anything.

The budget only ever decides *whether* a run goes on, never *what* it produces: outputs stay
the same bytes on every machine.  `use_budget` sets it for a run (a context variable, so
threads and nested runs keep their own); `current_budget` reads it, defaulting to the host.
"""
from __future__ import annotations

import contextlib
import contextvars
import math
import os
import resource
from dataclasses import dataclass, replace
from typing import Optional

import numpy as np

from ge.errors import AtcError
from om_format.cgroups import controller_dirs, read_int

MAX_TENSOR_BYTES = (1 << 63) - 1
# Peak host memory of a compile, in multiples of the bytes it parses into memory (the
# protobuf of the model and of the .om, the tensors that are not memory-mapped, the arrays
# made from them; measured before weights were mapped: 5.2x for BERT-base).  A file is
# refused when this multiple does not fit the host budget.
HOST_COPIES = 6
# Weights read through a memory map (ge.files.MappedFile) cost address space, not memory:
# the kernel pages them in from the page cache and drops them again.  Fusions that repack
# weights (a packed Q|K|V, a gate|up GEMM) may copy up to all of them once, so mapped bytes
# also count this many times against the host's memory (and once more against its
# address space, which the map itself takes).
MAPPED_COPIES = 1
# cgroup v1 has no "max": an unlimited memory cgroup reads as the largest page-aligned long
# (9223372036854771712 with 4 KiB pages).  No real limit comes near 2**62 bytes.
CGROUP_V1_UNLIMITED = 1 << 62
# What a simulator run allocates besides its live tensors: a kernel's temporaries and
# compute-dtype copies of its inputs, in multiples of the largest tensor.
KERNEL_TEMPORARIES = 3


def tensor_bytes(shape, dtype) -> int:
    """Exact byte size of a tensor (no int64 wrap-around)."""
    return math.prod(int(d) for d in shape) * np.dtype(dtype).itemsize


def max_tensor_bytes(shape, dtype) -> Optional[int]:
    """The largest byte size a tensor of `shape` can have: exact for a static shape, at the
    ranges' maxima for symbolic dims (ge.symbolic), None when a dim is unbounded."""
    from ge.symbolic import Dim, upper_bound
    if not any(isinstance(d, Dim) for d in shape):
        return tensor_bytes(shape, dtype)
    his = [upper_bound(d) if isinstance(d, Dim) else int(d) for d in shape]
    if any(h is None for h in his):
        return None
    return math.prod(max(h, 0) for h in his) * np.dtype(dtype).itemsize


def too_large(shape, dtype) -> bool:
    """More bytes than an int64 can count -- also for an empty tensor whose other dims do:
    numpy refuses to build (0, 2**40, 2**40) too."""
    itemsize = np.dtype(dtype).itemsize
    return math.prod(int(d) for d in shape if int(d)) * itemsize > MAX_TENSOR_BYTES


def _proc_status_kb(field: str) -> int:
    try:
        with open("/proc/self/status", encoding="ascii", errors="replace") as f:
            for line in f:
                if line.startswith(field + ":"):
                    return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        pass
    return 0


def _cgroup_room() -> Optional[int]:
    """Bytes left under the tightest memory limit of this process's cgroup and its ancestors
    (om_format.cgroups finds them: v1, v2, hybrid hosts, namespaces): v2 `memory.max` less
    `memory.current`, v1 `memory.limit_in_bytes` less `memory.usage_in_bytes`, the usage less
    the inactive page cache the kernel drops before it kills anything (`_inactive_file`).  None
    when no limit is set or none can be read ("max", v1's huge "unlimited", a missing or
    malformed file); a limit whose usage cannot be read still binds, at the limit itself."""
    rooms = []
    for directory, version in controller_dirs("memory"):
        limit_file, usage_file = (("memory.max", "memory.current") if version == 2
                                  else ("memory.limit_in_bytes", "memory.usage_in_bytes"))
        limit = read_int(os.path.join(directory, limit_file))
        if limit is None or not 0 <= limit < CGROUP_V1_UNLIMITED:
            continue
        usage = max(read_int(os.path.join(directory, usage_file)) or 0, 0)
        rooms.append(limit - max(usage - _inactive_file(directory, version), 0))
    return min(rooms) if rooms else None


def _inactive_file(directory: str, version: int) -> int:
    """Bytes of inactive page cache a memory cgroup's usage counts (memory.stat: v2
    `inactive_file`, v1 `total_inactive_file`, its whole hierarchy's); 0 when unreadable.
    A model file just read stays cached and counted -- 4 GB for a 1.1B decoder -- but the
    kernel drops it before it kills anything under the limit (docker and the kubelet leave
    it out of a cgroup's working set the same way)."""
    key = "inactive_file" if version == 2 else "total_inactive_file"
    try:
        with open(os.path.join(directory, "memory.stat"), encoding="ascii") as f:
            for line in f:
                name, _, value = line.partition(" ")
                if name == key:
                    return max(int(value), 0)
    except (OSError, UnicodeDecodeError, ValueError):
        pass
    return 0


def address_space_bytes() -> Optional[int]:
    """Bytes this process may still map (room under RLIMIT_AS); None when unlimited."""
    soft, _ = resource.getrlimit(resource.RLIMIT_AS)
    if soft == resource.RLIM_INFINITY:
        return None
    return max(soft - _proc_status_kb("VmSize") * 1024, 0)


def host_memory_bytes() -> int:
    """Bytes this process may still allocate: the least of physical RAM, the room left under
    RLIMIT_AS (address space) and RLIMIT_DATA, and the cgroup's limit."""
    rooms = []
    try:
        rooms.append(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))
    except (ValueError, OSError):
        pass
    for limit, field in ((resource.RLIMIT_AS, "VmSize"), (resource.RLIMIT_DATA, "VmData")):
        soft, _ = resource.getrlimit(limit)
        if soft != resource.RLIM_INFINITY:
            rooms.append(soft - _proc_status_kb(field) * 1024)
    cgroup = _cgroup_room()
    if cgroup is not None:
        rooms.append(cgroup)
    return max(min(rooms, default=MAX_TENSOR_BYTES), 0)


def _gib(nbytes: int) -> str:
    return f"{nbytes / (1 << 30):.3g} GiB"


@dataclass(frozen=True)
class Budget:
    """What one run may use.  `device_bytes`: the chip's memory (None: no chip involved);
    `host_bytes`: what this process may still allocate."""

    host_bytes: int
    device_bytes: Optional[int] = None
    device: str = ""
    address_bytes: Optional[int] = None     # what it may still map (ulimit -v); None: unlimited

    @classmethod
    def of_host(cls) -> "Budget":
        return cls(host_bytes=host_memory_bytes(), address_bytes=address_space_bytes())

    def with_device(self, nbytes: int, name: str) -> "Budget":
        return replace(self, device_bytes=int(nbytes), device=name)

    @property
    def file_bytes(self) -> int:
        """The largest file a tool may read whole into memory (models are mapped instead)."""
        return self.host_bytes // HOST_COPIES

    def check_tensor(self, nbytes: int, what: str, solution: str = "") -> None:
        """A tensor the chip must hold: at most the chip's memory (and int64 bytes)."""
        limit = min(MAX_TENSOR_BYTES, self.device_bytes if self.device_bytes is not None else MAX_TENSOR_BYTES)
        if nbytes > limit:
            where = (f"the {self.device}'s {_gib(limit)} of device memory" if limit == self.device_bytes
                     else "the int64 size field of a tensor")
            raise exceeds(what, nbytes, limit, where,
                          solution or "Give smaller input shapes (--input_shape) or check the node's attributes.")

    def check_mapped(self, nbytes: int, what: str, solution: str = "") -> None:
        """Bytes this process is about to memory-map (weights): the map and what fusions may
        copy of it must fit the address space, the copies the host's memory (MAPPED_COPIES)."""
        solution = solution or "Run on a host with more memory, or raise the address-space limit (ulimit -v)."
        if self.address_bytes is not None and nbytes * (1 + MAPPED_COPIES) > self.address_bytes:
            raise exceeds(what, nbytes * (1 + MAPPED_COPIES), self.address_bytes,
                          f"the address space this process may still use (ulimit -v), for the map and "
                          f"{MAPPED_COPIES}x its size in copies", solution)
        self.check_host(nbytes * MAPPED_COPIES, what, solution)

    def check_host(self, nbytes: int, what: str, solution: str = "") -> None:
        """Memory this process is about to allocate: at most what the host lets it use."""
        if nbytes > self.host_bytes:
            raise exceeds(what, nbytes, self.host_bytes, "the memory this process may still use on the host "
                          "(physical memory, ulimit -v, cgroup)",
                          solution or "Run on a host with more memory, or give smaller shapes.")


def exceeds(what: str, nbytes: int, limit: int, where: str, solution: str) -> AtcError:
    """E13023, GE's code for a size beyond a system limit."""
    return AtcError("E13023", f"{what} has a size of {nbytes} bytes ({_gib(nbytes)}), which exceeds the limit of "
                    f"{limit} bytes: {where}.", solution)


def host_memory_exhausted() -> AtcError:
    """E13023 for a MemoryError the budget did not foresee (the last line of defence)."""
    return AtcError("E13023", "The host ran out of memory: a tensor of the model has a size beyond what this "
                    "process may use (physical memory, ulimit -v, cgroup).",
                    "Run on a host with more memory, or give smaller shapes.")


_BUDGET: contextvars.ContextVar = contextvars.ContextVar("atc_py_budget", default=None)


def current_budget() -> Budget:
    budget = _BUDGET.get()
    return budget if budget is not None else Budget.of_host()


@contextlib.contextmanager
def use_budget(budget: Budget):
    token = _BUDGET.set(budget)
    try:
        yield budget
    finally:
        _BUDGET.reset(token)
