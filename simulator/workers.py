"""Many inferences of one prepared model, spread over forked worker processes.

Why fork, after preparation: the workers used to be spawned -- a fresh interpreter each,
importing numpy, onnx and our modules, reading the .om and preparing its kernels again --
0.5-0.8 s per worker before its first forward, which on 24 ResNet-50 inputs ate the whole
gain of the second core.  A forked worker starts with the parent's loaded and prepared
model: its constants (the .om's weights, in their kernels' dtypes) are shared copy-on-write,
never copied or re-read, and its first forward costs what a steady one does.

Why no pickle: the children inherit the inputs, so nothing goes to them; their outputs come
back as raw bytes in a file per worker in a private temporary folder, each array after a
short JSON header (index, name, dtype, shape, byte count) that the parent checks before it
believes a size -- strings in GE's DT_STRING layout (om_format.attrs), ml_dtypes types by
name from an allow-list.  An error travels the same way, as fields the parent rebuilds it from:
an AtcError keeps its class (InvalidNode, InternalError ...: looked up among the classes
already loaded, never imported by name), code, message, solution and its other plain
attributes; a MemoryError stays a MemoryError (atc-sim reports it as E13023, whichever
process ran out); anything else is E19999 naming its type.  So the parent raises what a
single-process run would have raised, and atc-sim prints the same line and exit code.

Scheduling: a shared counter hands each worker the next input, so a worker slowed by a busy
neighbour simply takes fewer (fixed chunks would make the run wait for the slowest).  The
calling process works too (it would only wait otherwise), so N workers are N - 1 forks.

Threads: every worker runs one BLAS thread -- the parallelism is the processes; two
processes of two BLAS threads each on two cores fight over them.  Forking is safe only if
no other thread holds a lock the child needs: the child touches numpy, our executor and
file writes only, and OpenBLAS shuts its own thread pool down around fork (pthread_atfork).
"""
from __future__ import annotations

import json
import math
import multiprocessing
import os
import shutil
import signal
import sys
import tempfile
import time
import traceback
import warnings
from dataclasses import dataclass, field
from typing import Callable, Optional

import numpy as np

from ge.errors import AtcError, error_name, rebuild_error
from om_format.attrs import STRING, string_bytes, strings_from_bytes
from om_format.errors import OmFormatError
from ge import workspace
from simulator import blas

MAX_HEADER = 1 << 16          # a record's JSON header: index, name, dtype, shape -- never more

try:
    import ml_dtypes
except ImportError:  # pragma: no cover - onnx installs ml_dtypes
    ml_dtypes = None


def can_fork() -> bool:
    """Linux only: macOS's system libraries (Accelerate, Objective-C) are not fork-safe with
    threads alive, which is why Python spawns there; elsewhere there is no fork at all."""
    return hasattr(os, "fork") and sys.platform.startswith("linux")


@dataclass
class WorkerStats:
    """What one worker did: how many inputs (their indices), how long from the start of the
    run to its first forward (start-up), and its forward times, wall and CPU (the CPU time
    of its thread: what a busy neighbour's time slices do not inflate, while sharing the
    caches and memory with it still does)."""
    inputs: int = 0
    start_ms: float = 0.0
    forward_ms: list = field(default_factory=list)
    indices: list = field(default_factory=list)
    cpu_ms: list = field(default_factory=list)


def _dtype_of(name: str) -> np.dtype:
    """A dtype named in a result header: numpy's own numeric types, str, or an ml_dtypes type."""
    if name == "str":
        return STRING
    opaque = getattr(ml_dtypes, name, None) if ml_dtypes is not None else None
    if opaque is not None and isinstance(opaque, type):
        return np.dtype(opaque)
    dtype = np.dtype(name)
    if dtype.kind not in "biufc":
        raise ValueError(f"unexpected dtype {name!r}")
    return dtype


def _write_record(f, header: dict, payload: bytes) -> None:
    text = json.dumps(header).encode()
    f.write(len(text).to_bytes(4, "little") + text + payload)


def _write_outputs(f, index: int, outputs: dict) -> None:
    for name, array in outputs.items():
        array = np.asarray(array)
        if array.dtype == STRING:
            payload, dtype = string_bytes(array), "str"
        else:
            payload, dtype = np.ascontiguousarray(array).tobytes(), array.dtype.name
        _write_record(f, {"index": index, "name": name, "dtype": dtype, "shape": list(array.shape),
                          "bytes": len(payload)}, payload)
    _write_record(f, {"index": index, "done": True}, b"")


def _read_exact(f, n: int, path: str) -> bytes:
    data = f.read(n)
    if len(data) != n:
        raise ValueError(f"{path}: truncated record ({len(data)} of {n} bytes)")
    return data


def _read_results(path: str, count: int) -> tuple:
    """({index: {name: array}}, [error dicts], WorkerStats) from one worker's file; every size
    is checked against the data before it is used, and whatever else the file holds that is
    not a record we write (a missing field, a field of the wrong type, a string tensor's head
    outside its bytes) is a ValueError too, never an exception of its own."""
    try:
        return _parse_results(path, count)
    except (KeyError, TypeError, AttributeError, RecursionError, OmFormatError) as exc:
        raise ValueError(f"{path}: malformed record ({type(exc).__name__}: {exc})") from None


def _parse_results(path: str, count: int) -> tuple:
    results, errors, stats, current = {}, [], WorkerStats(), {}
    size = os.path.getsize(path)
    with open(path, "rb") as f:
        while f.tell() < size:
            length = int.from_bytes(_read_exact(f, 4, path), "little")
            if not 0 < length <= MAX_HEADER:
                raise ValueError(f"{path}: record header of {length} bytes")
            header = json.loads(_read_exact(f, length, path))
            if not isinstance(header, dict):
                raise ValueError(f"{path}: a record header that is not an object")
            if "error" in header:
                error = header["error"]
                if not all(isinstance(error[k], str) for k in ("code", "message", "solution", "class")) \
                        or not isinstance(error["index"], int) or not isinstance(error["state"], dict) \
                        or not all(isinstance(v, _PLAIN) for v in error["state"].values()):
                    raise ValueError(f"{path}: an error record without its class, code, message and solution")
                errors.append(error)
                continue
            if "stats" in header:
                stats = WorkerStats(**header["stats"])
                continue
            index = header["index"]
            if not isinstance(index, int) or not 0 <= index < count:
                raise ValueError(f"{path}: input index {index!r} out of range")
            if header.get("done"):
                results[index], current = current, {}
                continue
            shape, nbytes = tuple(header["shape"]), header["bytes"]
            if any(not isinstance(d, int) or d < 0 for d in shape) or not isinstance(nbytes, int) \
                    or not 0 <= nbytes <= size - f.tell():
                raise ValueError(f"{path}: output {header['name']!r} of shape {list(shape)}, {nbytes} bytes")
            data = _read_exact(f, nbytes, path)
            dtype = _dtype_of(header["dtype"])
            if dtype == STRING:
                array = strings_from_bytes(data, shape, header["name"])
            else:
                if nbytes != math.prod(shape) * dtype.itemsize:
                    raise ValueError(f"{path}: {nbytes} bytes for {header['dtype']} {list(shape)}")
                array = np.frombuffer(data, dtype=dtype).reshape(shape).copy()
            current[header["name"]] = array
    return results, errors, stats


_PLAIN = (str, int, float, bool, type(None))      # the attribute values an error record carries
_MEMORY_ERROR = error_name(MemoryError)


def _error_record(index: int, exc: BaseException) -> dict:
    """What the parent needs to raise the same error: see the module docstring."""
    if isinstance(exc, AtcError):
        state = {k: v for k, v in vars(exc).items() if k not in ("code", "message", "solution")
                 and isinstance(v, _PLAIN)}
        return {"index": index, "class": error_name(type(exc)), "code": exc.code, "message": exc.message,
                "solution": exc.solution, "state": state}
    if isinstance(exc, MemoryError):
        return {"index": index, "class": _MEMORY_ERROR, "code": "", "message": str(exc), "solution": "",
                "state": {}}
    return {"index": index, "class": error_name(AtcError), "code": "E19999", "state": {},
            "message": f"A worker process failed on input {index}: "
            + "".join(traceback.format_exception_only(type(exc), exc)).strip(), "solution": "Report the model."}


def _error_from_record(error: dict) -> BaseException:
    """The exception `_error_record` described, as the worker raised it."""
    if error["class"] == _MEMORY_ERROR:
        return MemoryError(error["message"])
    return rebuild_error(error["class"], error["code"], error["message"], error["solution"], error["state"])


def _work(forward: Callable[[dict], dict], input_sets: list, counter, t0: float, sink) -> WorkerStats:
    """Take the next input from `counter` until none is left; each result goes to `sink`."""
    stats = WorkerStats()
    while True:
        with counter.get_lock():
            index = counter.value
            counter.value = index + 1
        if index >= len(input_sets):
            return stats
        if not stats.inputs:
            stats.start_ms = (time.perf_counter() - t0) * 1e3
        t1, c1 = time.perf_counter(), time.thread_time()
        try:
            outputs = forward(input_sets[index])
        except Exception as exc:
            with counter.get_lock():         # the others stop taking inputs
                counter.value = len(input_sets)
            sink(index, None, exc)
            return stats
        stats.forward_ms.append((time.perf_counter() - t1) * 1e3)
        stats.cpu_ms.append((time.thread_time() - c1) * 1e3)
        stats.indices.append(index)
        stats.inputs += 1
        sink(index, outputs, None)


def _child(forward, input_sets, counter, t0: float, path: str) -> int:
    blas.set_threads(1)
    workspace.touch_after_fork()        # the model's memory is wiped on fork: this worker's own, faulted in now
    with open(path, "wb") as f:
        def sink(index, outputs, exc):
            if exc is not None:
                _write_record(f, {"error": _error_record(index, exc)}, b"")
            else:
                _write_outputs(f, index, outputs)
        stats = _work(forward, input_sets, counter, t0, sink)
        _write_record(f, {"stats": stats.__dict__}, b"")
    return 0


def _fork() -> int:
    with warnings.catch_warnings():     # Python 3.12+ warns of any thread (OpenBLAS's): see the module docstring
        warnings.simplefilter("ignore", DeprecationWarning)
        return os.fork()


def run_forked(forward: Callable[[dict], dict], input_sets: list, workers: int) -> tuple:
    """Run `forward` (one inference of an already prepared model) on every input set, over
    `workers` processes: this one and `workers - 1` forks.  Returns (outputs in input order,
    [WorkerStats of each worker, this process first]); the first failing input's error is
    raised (an AtcError of the class, code and message it was raised with in the worker).  A fork the system refuses (EAGAIN,
    ENOMEM) leaves the inputs to the workers already running; where forking is not safe
    (`can_fork`) everything runs in this process."""
    t0 = time.perf_counter()
    if not can_fork():                       # the Linux-only rule holds for every caller (the bench too)
        workers = 1
    counter = multiprocessing.get_context("fork" if workers > 1 else None).Value("q", 0)
    folder = tempfile.mkdtemp(prefix="atc_sim_workers_")
    children = {}
    outputs, errors = {}, []

    def keep(index, result, exc):
        if exc is not None:
            errors.append((index, exc))
        else:
            outputs[index] = result

    try:
        for k in range(1, workers):
            path = os.path.join(folder, f"worker{k}.bin")
            try:
                pid = _fork()
            except OSError:                  # EAGAIN/ENOMEM: the workers already running share the inputs
                break
            if pid == 0:                     # the child: never returns into the caller's stack
                code = 1
                try:
                    code = _child(forward, input_sets, counter, t0, path)
                finally:
                    os._exit(code)
            children[pid] = path
        before = blas.threads()
        blas.set_threads(1)
        try:
            own = _work(forward, input_sets, counter, t0, keep)
        finally:
            if before:
                blas.set_threads(before)
        stats = [own]
        for pid, path in list(children.items()):
            _, status = os.waitpid(pid, 0)
            del children[pid]
            if status != 0:                  # its file may end inside a record: not read
                how = (f"signal {os.WTERMSIG(status)}" if os.WIFSIGNALED(status)
                       else f"exit status {os.WEXITSTATUS(status)}")
                raise AtcError("E19999", f"A worker process ended with {how} before it finished its inputs.",
                               "Report the model; run with one worker to see the failure.")
            try:
                results, failed, child_stats = _read_results(path, len(input_sets))
            except (OSError, ValueError) as exc:
                raise AtcError("E19999", f"A worker's results could not be read back: {exc}",
                               "Check the free space of the temporary folder (TMPDIR).") from exc
            outputs.update(results)
            errors.extend((e["index"], _error_from_record(e)) for e in failed)
            stats.append(child_stats or WorkerStats())
    finally:
        for pid in children:                 # the caller was interrupted: stop what we started
            try:
                os.kill(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
            except OSError:
                pass
        shutil.rmtree(folder, ignore_errors=True)
    if errors:
        raise min(errors, key=lambda e: e[0])[1]
    missing = [k for k in range(len(input_sets)) if k not in outputs]
    if missing:
        raise AtcError("E19999", f"No result came back for input(s) {missing[:5]}.", "Report the model.")
    return [outputs[k] for k in range(len(input_sets))], stats
