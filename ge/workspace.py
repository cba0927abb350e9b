"""A model's host memory for its forwards, allocated and touched when the model is loaded and
reused by every forward -- what ACL's aclmdlLoad does with the feature-map and workspace
memory an .om declares, kernels then writing into it.

Why: a forward's big arrays (a conv's Winograd tiles, its output, the fp16/fp32 copies of
its input) are each tens of MB.  Fresh from the OS, every page of them is faulted in and
zeroed by the kernel, and numpy asks for huge pages on them (madvise), which on a machine
whose transparent-huge-page mode compacts on first touch made the first forward of the
README's example model 3-4x the later ones, ~0.9 s of it system time; blocks over glibc's
mmap threshold (32 MB) were even mapped and unmapped again in every forward.

How: `plan_sizes` walks a prepared graph with each kernel's declared allocations
(`OpDef.workspace`: bytes in the order the kernel takes them, which of them hold its
output) and the executor's own (an input converted to the kernel's dtype), keeps each
output for as long as a later kernel reads it, and picks buffers with the same best-fit
rule the forward uses -- so the buffers made at load are the ones the forward asks for.
`Workspace.reserve` maps them (huge pages asked for, as numpy does) and touches every page.
During a forward (`Workspace.active`) `empty` & co. hand out views of a free buffer; a
buffer is free when nothing but the pool refers to it (its reference count), so reuse can
never overwrite a live tensor whatever a kernel keeps: a kernel whose allocations drift
from its declaration only makes the pool map one more buffer.  Buffers taken during a
kernel stay held until the kernel returns, as its declaration assumes.

Forks (simulator/workers.py): the buffers are marked wipe-on-fork, so a worker gets zero
pages of its own instead of sharing the parent's copy-on-write (each write would copy);
`touch_after_fork` faults them in before the worker's first forward.
"""
from __future__ import annotations

import contextvars
import mmap
import sys
import weakref
from dataclasses import dataclass
from typing import Iterable, Optional

import numpy as np

ALIGN = 64                           # bytes: a buffer of n bytes serves any n-byte request
PAGE = mmap.PAGESIZE
MADV_WIPEONFORK = getattr(mmap, "MADV_WIPEONFORK", 18 if sys.platform.startswith("linux") else None)
_ACTIVE: contextvars.ContextVar = contextvars.ContextVar("workspace", default=None)
_ALL: "weakref.WeakSet[Workspace]" = weakref.WeakSet()


def _round(nbytes: int) -> int:
    return max(ALIGN, -(-int(nbytes) // ALIGN) * ALIGN)


def _mapped(nbytes: int) -> np.ndarray:
    """`nbytes` of anonymous memory as a uint8 array: private (mmap's default, MAP_SHARED,
    would let forked workers write into each other's tensors), huge pages asked for (numpy's
    own rule for large arrays, which keeps the kernels' TLB misses where they were), wiped
    on fork."""
    area = mmap.mmap(-1, -(-nbytes // PAGE) * PAGE, flags=mmap.MAP_PRIVATE | getattr(mmap, "MAP_ANONYMOUS", 0))
    for advice in (getattr(mmap, "MADV_HUGEPAGE", None), MADV_WIPEONFORK):
        if advice is not None and hasattr(area, "madvise"):
            try:
                area.madvise(advice)
            except (OSError, ValueError):     # an older kernel: only an optimisation is lost
                pass
    return np.frombuffer(area, np.uint8, nbytes)


def _touch(buffer: np.ndarray) -> None:
    buffer[::PAGE] = 0               # one write per page faults it in (a huge page at once)


class Workspace:
    """A pool of host buffers, reused by size (best fit) once nothing refers to them."""

    def __init__(self):
        self._buffers: list = []     # uint8 arrays, ascending by size
        self._held: list = []        # taken during the running kernel
        self.grown = 0               # buffers mapped after `reserve`: declarations missed them
        probe = [np.empty(0, np.uint8)]
        self._free_refs = sys.getrefcount(probe[0])     # what the list and the call add
        _ALL.add(self)

    @property
    def nbytes(self) -> int:
        return sum(b.nbytes for b in self._buffers)

    def __len__(self) -> int:
        return len(self._buffers)

    def sizes(self) -> list:
        return [b.nbytes for b in self._buffers]

    def reserve(self, sizes: Iterable[int]) -> None:
        """Map a buffer of each size and touch its pages: the cost of a forward's memory, paid here."""
        for size in sizes:
            buffer = _mapped(_round(size))
            _touch(buffer)
            self._insert(buffer)

    def _insert(self, buffer: np.ndarray) -> None:
        at = next((i for i, b in enumerate(self._buffers) if b.nbytes > buffer.nbytes), len(self._buffers))
        self._buffers.insert(at, buffer)

    def _take(self, nbytes: int) -> np.ndarray:
        need = _round(nbytes)
        for i in range(len(self._buffers)):              # ascending: the first free fit is the best
            if self._buffers[i].nbytes >= need and sys.getrefcount(self._buffers[i]) == self._free_refs:
                buffer = self._buffers[i]
                break
        else:
            buffer = _mapped(need)
            self._insert(buffer)
            self.grown += 1
        self._held.append(buffer)
        return buffer

    def empty(self, shape, dtype) -> np.ndarray:
        dtype = np.dtype(dtype)
        shape = tuple(int(d) for d in shape)
        nbytes = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
        if nbytes == 0 or dtype.hasobject:
            return np.empty(shape, dtype)
        return self._take(nbytes)[:nbytes].view(dtype).reshape(shape)

    def owns(self, array: np.ndarray) -> bool:
        base = array
        while isinstance(base, np.ndarray) and base.base is not None:
            base = base.base
            if any(base is b for b in self._buffers):
                return True
        return False

    def release_held(self) -> None:
        """The running kernel has returned: what it took and no longer refers to is free."""
        self._held.clear()

    def touch(self) -> None:
        for buffer in self._buffers:
            _touch(buffer)

    def active(self):
        return _Active(self)


class _Active:
    """`with workspace.active():` -- `empty` & co. take from it (contexts nest)."""

    def __init__(self, workspace: Workspace):
        self.workspace, self.token = workspace, None

    def __enter__(self):
        self.token = _ACTIVE.set(self.workspace)
        return self.workspace

    def __exit__(self, *exc):
        self.workspace.release_held()
        _ACTIVE.reset(self.token)


def current() -> Optional[Workspace]:
    return _ACTIVE.get()


def touch_after_fork() -> None:
    """In a forked worker: fault in every workspace's (wiped) pages before its first forward."""
    for ws in list(_ALL):
        ws.touch()


# -- what kernels call ----------------------------------------------------------------------

def empty(shape, dtype) -> np.ndarray:
    """np.empty, from the active workspace when a forward runs in one."""
    ws = _ACTIVE.get()
    return np.empty(shape, dtype) if ws is None else ws.empty(shape, dtype)


def zeros(shape, dtype) -> np.ndarray:
    ws = _ACTIVE.get()
    if ws is None:
        return np.zeros(shape, dtype)
    out = ws.empty(shape, dtype)
    out.fill(0)
    return out


def astype(array: np.ndarray, dtype) -> np.ndarray:
    """array.astype(dtype, copy=False): the same values (numpy's own cast), the copy in the workspace."""
    dtype = np.dtype(dtype)
    if array.dtype == dtype or _ACTIVE.get() is None:
        return array.astype(dtype, copy=False)
    out = empty(array.shape, dtype)
    np.copyto(out, array, casting="unsafe")
    return out


def contiguous(array: np.ndarray) -> np.ndarray:
    """np.ascontiguousarray, a copy made in the workspace."""
    if array.flags.c_contiguous or _ACTIVE.get() is None:
        return np.ascontiguousarray(array)
    out = empty(array.shape, array.dtype)
    np.copyto(out, array)
    return out


def nbytes(shape, dtype) -> int:
    return int(np.prod([int(d) for d in shape], dtype=np.int64)) * np.dtype(dtype).itemsize


# -- the plan ---------------------------------------------------------------------------------

@dataclass
class Take:
    """One allocation a kernel declares: its size, and whether it holds the kernel's output."""
    nbytes: int
    output: bool = False


def plan_sizes(steps: list, have: Iterable[int] = ()) -> list:
    """The buffer sizes a forward takes, found by running the pool's best-fit rule over
    `steps`, one (takes, inputs, outputs, last_use, declared) per kernel: its Takes in order,
    ids of the values it reads, ids of its outputs, the step index of each output's last
    reader (None: a graph output, kept to the end), and whether the kernel declares its
    allocations.  Outputs of a kernel that declares nothing may be views of its inputs (a
    Reshape's) or of what was taken for it: those buffers then live as long as its outputs.
    `have`: sizes of buffers the pool holds already (all free between forwards); the result
    is what it must add."""
    free: list = sorted(_round(size) for size in have)     # sizes of free buffers, ascending
    made: list = []
    owner: dict = {}                 # value id -> sizes of the buffers it keeps alive
    until: dict = {}                 # value id -> step index after which it dies
    end = len(steps)
    for index, (takes, inputs, outputs, last_use, declared) in enumerate(steps):
        held, kept = [], []
        for take in takes:
            size = _round(take.nbytes)
            fit = next((i for i, s in enumerate(free) if s >= size), None)
            if fit is None:
                made.append(size)
            else:
                size = free.pop(fit)
            (kept if take.output else held).append(size)
        for v, last in zip(outputs, last_use):
            until[v] = end if last is None else last
        longest = max(outputs, key=until.get) if outputs else None
        if not declared and longest is not None:
            kept, held = kept + held, []
            for v in inputs:
                if v in owner and until[v] < until[longest]:
                    kept += owner.pop(v)
        if kept and longest is not None:
            owner.setdefault(longest, []).extend(kept)
        else:
            held += kept
        for size in held:
            _free(free, size)
        for v in [v for v in owner if until[v] <= index]:
            for size in owner.pop(v):
                _free(free, size)
    return made


def _free(free: list, size: int) -> None:
    at = next((i for i, s in enumerate(free) if s > size), len(free))
    free.insert(at, size)
