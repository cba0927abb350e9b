"""The compiled conv kernels (ge/ops/csrc/conv.c, built as the optional extension
ge.ops._native), as the numpy-facing functions ge/ops/nn.py calls.

Why: a whole conv -- Winograd transforms or im2col, its OpenBLAS GEMMs, bias, residual and
ReLU -- in one C call, without the numpy passes and temporaries that cost ~28 ms of a
ResNet-50 forward (bench/RESULTS.md).  The GEMMs are numpy's own OpenBLAS sgemm
(ge/ops/openblas.py), whose address the extension receives once.

Prepacked weights: where the CPU runs the extension's own GEMM (AVX2 + FMA,
`packing()`), a conv's constant weights -- plain, or Winograd-transformed -- are packed once
into the layout its micro-kernel reads (`packed_weights`, at load through the Conv op's
prepare) and kept instead of the Winograd U; OpenBLAS re-packed them on every call (12% of
a ResNet-50 forward).  Only read-only weight arrays (the .om's constants) are packed: an
array that can be written may change under the cache.  Other weights, other CPUs, or
ATC_PY_PACKED_GEMM=0: OpenBLAS's sgemm as before.

Fallback: `enabled()` is False when the extension did not build or import, when OpenBLAS's
sgemm cannot be reached, or when ATC_PY_NATIVE=0 is set (read at import; tests flip
`force_numpy` instead) -- then every caller takes its numpy path, which stays the reference
the C path is tested against (tests/test_native_conv.py).
"""
from __future__ import annotations

import contextlib
import ctypes
import importlib
import os
import threading

import numpy as np

from ge import workspace
from ge.ops import openblas, winograd
from ge.ops.array_cache import ArrayCache

try:       # the compiled module by its full name: it imports nothing (not the ge.ops package)
    _native = importlib.import_module("ge.ops._native")
except ImportError:          # not built (no compiler, no Python.h): the numpy path runs
    _native = None

force_numpy = os.environ.get("ATC_PY_NATIVE", "1").strip() == "0"
force_openblas = os.environ.get("ATC_PY_PACKED_GEMM", "1").strip() == "0"
_ready = None
_local = threading.local()
_packed = ArrayCache()      # (weight array, Winograd m or 0) -> its packed weights


def built() -> bool:
    """Whether the extension module imported (whatever the switch says)."""
    return _native is not None


def enabled() -> bool:
    """Whether conv kernels take the C path now."""
    global _ready
    if force_numpy or _native is None:
        return False
    if _ready is None:
        fn = openblas.sgemm_function()
        if fn is None:
            _ready = False
        else:
            ilp64 = fn.argtypes[3] is ctypes.c_int64
            _native.set_sgemm(ctypes.cast(fn, ctypes.c_void_p).value, ilp64)
            _ready = True
    return _ready


@contextlib.contextmanager
def numpy_only():
    """Run the block on the numpy path (tests compare both paths on one input)."""
    global force_numpy
    saved, force_numpy = force_numpy, True
    try:
        yield
    finally:
        force_numpy = saved


def packing() -> bool:
    """Whether conv weights go to the extension's own GEMM, packed once (else OpenBLAS)."""
    return enabled() and not force_openblas and _native.own_gemm_available()


def packed_weights(w: np.ndarray, tiling=None):
    """w (C_out, C, kh, kw) -- or its Winograd U for `tiling` -- packed for the extension's
    GEMM, cached per weight array as long as it lives; None where the GEMM is OpenBLAS's
    (`packing()` False, or w writeable: only constants are packed)."""
    if not packing() or not isinstance(w, np.ndarray) or w.flags.writeable:
        return None
    tag = tiling.m if tiling is not None else 0
    hit = _packed.get(w, tag)
    if hit is not None:
        return hit
    cout = w.shape[0]
    if tiling is not None:
        mats = winograd.transformed_weights(w, tiling, keep=False)       # U is kept only packed
    else:
        mats = _floats(w.reshape(cout, -1))
    count, k = (mats.shape[0], mats.shape[2]) if mats.ndim == 3 else (1, mats.shape[1])
    packed = np.empty(count * _native.packed_size(cout, k), np.float32)
    _native.pack_weights(mats, count, cout, k, packed)
    packed.flags.writeable = False
    return _packed.put(w, tag, packed)


def gemm_cpu_seconds(profile: bool) -> float:
    """CPU seconds the compiled kernels have spent inside OpenBLAS's sgemm while profiling was
    on, and switch profiling (bench/bench_simulator.py --split); 0 without the extension."""
    return _native.gemm_profile(profile) if _native is not None else 0.0


def winograd_work(m: int, c: int, cout: int, tiles: int) -> int:
    """Floats of work area `winograd3x3` takes."""
    return (m + 2) ** 2 * (c + cout) * tiles


def gemm_work(x_shape, w_shape, begin, out, strides) -> int:
    """Floats of work area `conv_gemm` takes (0: a 1x1 stride-1 unpadded conv reads x in place)."""
    kh, kw = w_shape[2:]
    direct = kh == kw == 1 and tuple(strides) == (1, 1) and not any(begin) and tuple(out) == tuple(x_shape[2:])
    return 0 if direct else x_shape[1] * kh * kw * int(out[0]) * int(out[1])


def _work(count: int) -> np.ndarray:
    """A float32 work area of at least `count` elements: from the forward's workspace (mapped
    at load, ge/workspace.py) when it runs in one, else kept per thread and grown as needed,
    so a forward's kernels reuse memory that is already mapped (no page faults after the first)."""
    if count and workspace.current() is not None:
        return workspace.empty((count,), np.float32)
    buf = getattr(_local, "work", None)
    if buf is None or buf.size < count:
        buf = np.empty(max(count, 1), np.float32)
        _local.work = buf
    return buf


def _floats(a) -> np.ndarray:
    return np.ascontiguousarray(a, dtype=np.float32)


def _optional(a):
    return None if a is None else _floats(a)


def winograd3x3(x: np.ndarray, weights: np.ndarray, tiling, begin, out, bias=None, base=None,
                relu: bool = False) -> np.ndarray:
    """conv(x, weights) (+ bias) (+ base), ReLU'd if `relu`, by Winograd F(m x m, 3x3) of
    `tiling` (ge/ops/winograd.py), stride 1, x padded by `begin` before (zeros after as `out`
    needs); the transformed weights packed for our GEMM (`packed_weights`) or, where
    OpenBLAS runs the GEMMs, as U (a*a, C_out, C).  float32 in and out."""
    x = _floats(x)
    n, c, h, w = x.shape
    cout, m = weights.shape[0], tiling.m
    packed = packed_weights(weights, tiling)
    u = None if packed is not None else _floats(winograd.transformed_weights(weights, tiling))
    th, tw = -(-out[0] // m), -(-out[1] // m)
    tiles = n * th * tw
    y = workspace.empty((n, cout, out[0], out[1]), np.float32)
    work = _work(winograd_work(m, c, cout, tiles))
    _native.winograd3x3(x, n, c, h, w, u, cout, m, int(begin[0]), int(begin[1]), int(out[0]), int(out[1]),
                        _optional(bias), _optional(base), relu, y, work, packed)
    return y


def conv_gemm(x: np.ndarray, w: np.ndarray, begin, out, strides, dilations, bias=None, base=None,
              relu: bool = False, y: np.ndarray = None) -> np.ndarray:
    """A one-group 2-D conv (+ bias) (+ base), ReLU'd if `relu`: im2col into a per-thread
    work area (none for a 1x1 stride-1 unpadded conv), OpenBLAS's GEMM accumulating onto the
    bias and base.  `y`: where to write (may be `base` itself), else a new array."""
    x = _floats(x)
    n, c, h, wd = x.shape
    cout, _, kh, kw = w.shape
    shape = (n, cout, int(out[0]), int(out[1]))
    if y is None:
        y = workspace.empty(shape, np.float32)
    work = _work(gemm_work(x.shape, w.shape, begin, shape[2:], strides))
    packed = packed_weights(w)
    _native.conv_gemm(x, n, c, h, wd, None if packed is not None else _floats(w), cout, kh, kw, int(strides[0]), int(strides[1]), int(dilations[0]),
                      int(dilations[1]), int(begin[0]), int(begin[1]), shape[2], shape[3], _optional(bias),
                      _optional(base), relu, y, work, packed)
    return y


def max_pool2d(x: np.ndarray, kernel, begin, out, strides, dilations) -> np.ndarray:
    """MaxPool of float32 NCHW data without Indices, every window's taps in order (NaN and
    padding as ge/ops/nn.py's tap loop has them); windows reaching past x (pads after,
    ceil_mode) read -inf there."""
    x = _floats(x)
    n, c, h, w = x.shape
    y = np.empty((n, c, int(out[0]), int(out[1])), np.float32)
    _native.max_pool2d(x, n * c, h, w, int(kernel[0]), int(kernel[1]), int(strides[0]), int(strides[1]),
                       int(dilations[0]), int(dilations[1]), int(begin[0]), int(begin[1]), y.shape[2], y.shape[3], y)
    return y
