"""How many BLAS threads the numeric executor uses: the cores this process may use that no
other process is busy on, re-read before every forward.

Why: numpy's OpenBLAS starts one thread per CPU and splits every GEMM across them.  When
another process keeps a core busy, half of each GEMM waits for a core that is not free and
its threads spin meanwhile: on the 2-core build machine a ResNet-50 forward went from 115 ms
to 400-770 ms.  One thread per *free* core never waits on a core it cannot have.

Why our own few lines rather than threadpoolctl: numpy's wheels bundle one BLAS (OpenBLAS,
as scipy-openblas), whose thread count is one exported C function; finding the loaded
library in /proc/self/maps (ge/ops/openblas.py, which also calls its GEMM) and calling it is
~20 lines with no dependency, while threadpoolctl's value -- MKL, BLIS and OpenMP runtimes of
other builds -- is not something this project ships.  Without an OpenBLAS we can reach,
`describe()` says so and the thread count stays whatever the BLAS chose (set
OPENBLAS_NUM_THREADS / OMP_NUM_THREADS yourself).
"""
from __future__ import annotations

import ctypes
from functools import lru_cache
from typing import Optional

from ge.ops import openblas
# "Is a core free?" has one answer in the project (om_format/cores.py); re-exported here for
# the executor's callers.
from om_format.cores import busy_elsewhere, free_cores, usable_cores  # noqa: F401

_SETTERS = ("scipy_openblas_set_num_threads64_", "scipy_openblas_set_num_threads",
            "openblas_set_num_threads64_", "openblas_set_num_threads")
_GETTERS = ("scipy_openblas_get_num_threads64_", "scipy_openblas_get_num_threads",
            "openblas_get_num_threads64_", "openblas_get_num_threads")


@lru_cache(maxsize=1)
def _library():
    """numpy's OpenBLAS (ge/ops/openblas.py finds it among the loaded libraries): its thread
    setter, getter and configuration string."""
    for lib in openblas.loaded():
        setter = next((getattr(lib, n) for n in _SETTERS if hasattr(lib, n)), None)
        if setter is not None:
            getter = next((getattr(lib, n) for n in _GETTERS if hasattr(lib, n)), None)
            config = next((getattr(lib, n) for n in openblas.CONFIGS if hasattr(lib, n)), None)
            if config is not None:
                config.restype = ctypes.c_char_p
            return setter, getter, config
    return None


def threads() -> Optional[int]:
    lib = _library()
    return int(lib[1]()) if lib and lib[1] else None


def set_threads(n: int) -> Optional[int]:
    """Set the BLAS thread count (if we can reach the BLAS); returns the count now in force."""
    lib = _library()
    if lib is None:
        return None
    if threads() != n:
        lib[0](ctypes.c_int(max(1, int(n))))
    return threads()


def fit_to_free_cores() -> Optional[int]:
    """One BLAS thread per core that is ours and free; call before each forward."""
    return set_threads(free_cores())


def describe() -> str:
    lib = _library()
    if lib is None:
        return "BLAS: no OpenBLAS found in this process; thread count left to the library"
    config = lib[2]().decode() if lib[2] else "OpenBLAS"
    return (f"BLAS: {config}; {threads()} thread(s) now; {usable_cores()} usable core(s), "
            f"{busy_elsewhere()} busy elsewhere")
