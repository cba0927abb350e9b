"""numpy's own OpenBLAS, reached through ctypes: the loaded library (for simulator/blas.py's
thread count) and its float32 GEMM with an accumulating output, C += A @ B.

Why: np.matmul always overwrites its output -- OpenBLAS runs it with beta = 0, a pass that
zeroes C before the product is added in -- so a conv's bias, a residual or a second conv
(ResNet's downsample branch) each cost one more pass over the output afterwards.  With
beta = 1 the GEMM adds its product onto what C already holds: C filled with the bias (or
residual + bias) first, the second conv accumulated straight into the first's output, as
the cube unit accumulates into L0C.  Measured on full-size ResNet-50, one BLAS thread:
bench/RESULTS.md ("Simulator speed").

No compiled code of ours: the library is the one numpy already loaded (found in
/proc/self/maps), its CBLAS entry point called with ctypes.  Where it cannot be reached
(no /proc, another BLAS), or an operand is not float32 with one unit-stride axis,
`gemm_into` does the same arithmetic with numpy.
"""
from __future__ import annotations

import ctypes
import os
from functools import lru_cache

import numpy as np

# numpy's wheels bundle scipy-openblas with 64-bit integers (symbol suffix 64_); an ILP64 build
# may also keep the plain names (Fedora's libopenblas64.so), which its configuration string tells
_SGEMM = ("scipy_cblas_sgemm64_", "cblas_sgemm64_", "scipy_cblas_sgemm", "cblas_sgemm")
CONFIGS = ("scipy_openblas_get_config64_", "scipy_openblas_get_config", "openblas_get_config64_",
            "openblas_get_config")
_ROW_MAJOR, _NO_TRANS, _TRANS = 101, 111, 112
_F32 = np.dtype(np.float32)


def openblas_paths(maps_lines, numpy_dir: str) -> list:
    """The OpenBLAS files among /proc/self/maps lines, each once, numpy's own first (in its
    package folder, or the wheel's numpy.libs next to it), then in the order of the maps --
    another package's OpenBLAS (scipy bundles its own) must not be the one whose threads we
    set or whose GEMM we call.  A path is the rest of its line (it may hold spaces)."""
    paths = []
    for line in maps_lines:
        parts = line.split(maxsplit=5)
        path = parts[5].rstrip("\n") if len(parts) == 6 else ""
        if "openblas" in os.path.basename(path).lower() and path not in paths:
            paths.append(path)
    numpy_dir = os.path.normpath(numpy_dir)
    own = (numpy_dir + os.sep, os.path.join(os.path.dirname(numpy_dir), "numpy.libs") + os.sep)
    return sorted(paths, key=lambda p: not p.startswith(own))      # stable: the rest keep their order


@lru_cache(maxsize=1)
def loaded() -> tuple:
    """The OpenBLAS libraries this process has loaded (numpy's first), as ctypes CDLLs."""
    import numpy  # (loads the BLAS)

    try:
        with open("/proc/self/maps") as f:
            paths = openblas_paths(f, os.path.dirname(numpy.__file__))
    except OSError:
        return ()
    libs = []
    for path in paths:
        try:
            libs.append(ctypes.CDLL(path))
        except OSError:
            continue
    return tuple(libs)


def _ilp64(lib) -> bool:
    """Whether the library was built with 64-bit BLAS integers (USE64BITINT in its config)."""
    config = next((getattr(lib, n) for n in CONFIGS if getattr(lib, n, None) is not None), None)
    if config is None:
        return False
    config.restype = ctypes.c_char_p
    return b"USE64BITINT" in (config() or b"")


def _sgemm_of(lib):
    """The library's CBLAS sgemm with its argument types, or None.  The integers' width is the
    build's: a 32-bit int where the library reads 64 bits would leave lda/ldb/ldc's upper
    halves to whatever the stack held (they go on the stack), and BLAS would read out of bounds."""
    for name in _SGEMM:
        fn = getattr(lib, name, None)
        if fn is not None:
            integer = ctypes.c_int64 if name.endswith("64_") or _ilp64(lib) else ctypes.c_int
            fn.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_int, integer, integer, integer, ctypes.c_float,
                           ctypes.c_void_p, integer, ctypes.c_void_p, integer, ctypes.c_float, ctypes.c_void_p,
                           integer]
            fn.restype = None
            return fn
    return None


@lru_cache(maxsize=1)
def _sgemm():
    return next((fn for fn in map(_sgemm_of, loaded()) if fn is not None), None)


def available() -> bool:
    return _sgemm() is not None


def sgemm_function():
    """The ctypes CBLAS sgemm (its argtypes say the integer width), or None: the compiled
    kernels (ge/ops/native.py) call it through its address."""
    return _sgemm()


def _layout(m: np.ndarray):
    """(transpose flag, leading dimension) of a 2-D float32 operand BLAS can read in place:
    rows or columns of unit stride, the other axis a whole number of elements apart and no
    closer than one row (column) is long; None otherwise."""
    if not m.flags.aligned:
        return None
    rows, cols = m.shape
    s0, s1 = m.strides
    if (s1 == 4 or cols == 1) and (rows == 1 or (s0 % 4 == 0 and s0 >= 4 * cols)):
        return _NO_TRANS, (s0 // 4 if rows > 1 else cols)
    if (s0 == 4 or rows == 1) and (cols == 1 or (s1 % 4 == 0 and s1 >= 4 * rows)):
        return _TRANS, (s1 // 4 if cols > 1 else rows)
    return None


def gemm_into(a: np.ndarray, b: np.ndarray, out: np.ndarray, accumulate: bool) -> np.ndarray:
    """out = a @ b (accumulate False) or out += a @ b (True), for 2-D a (M, K), b (K, N),
    out (M, N); float32 operands go to OpenBLAS directly, anything else through numpy."""
    fn = _sgemm()
    if fn is not None and a.dtype == b.dtype == out.dtype == _F32 and a.ndim == b.ndim == out.ndim == 2 \
            and a.shape[1] == b.shape[0] and out.shape == (a.shape[0], b.shape[1]) and min(a.shape + b.shape) > 0 \
            and out.flags.writeable and not np.may_share_memory(out, a) and not np.may_share_memory(out, b):
        la, lb, lo = _layout(a), _layout(b), _layout(out)
        if la is not None and lb is not None and lo is not None and lo[0] == _NO_TRANS:
            m, k = a.shape
            fn(_ROW_MAJOR, la[0], lb[0], m, b.shape[1], k, 1.0, a.ctypes.data, la[1], b.ctypes.data, lb[1],
               1.0 if accumulate else 0.0, out.ctypes.data, lo[1])
            return out
    if accumulate:
        out += a @ b
    else:
        np.matmul(a, b, out=out)
    return out
