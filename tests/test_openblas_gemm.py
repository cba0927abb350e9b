"""ge/ops/openblas.py: numpy's OpenBLAS GEMM with an accumulating output, and the conv paths
that fold bias, residual and a second conv into it (ge.ops.nn.conv_forward)."""
import numpy as np
import pytest

from ge.errors import InvalidNode
from ge.ops import nn, openblas

RNG = np.random.default_rng(3)


def rand(*shape, dtype=np.float32):
    return RNG.standard_normal(shape).astype(dtype)


def test_numpys_openblas_gemm_is_reachable():
    assert openblas.available()          # numpy's wheels bundle OpenBLAS; without it the tests below test numpy


@pytest.mark.parametrize("accumulate", [False, True])
@pytest.mark.parametrize("layout", ["rows", "a transposed", "b transposed", "views", "one row", "one column"])
def test_gemm_into_matches_numpy(layout, accumulate):
    m, k, n = 7, 5, 9
    a, b = rand(m, k), rand(k, n)
    if layout == "a transposed":
        a = np.asfortranarray(a)
    elif layout == "b transposed":
        b = np.asfortranarray(b)
    elif layout == "views":                                  # row strides longer than the rows
        a = rand(m + 3, k + 4)[1:m + 1, 2:k + 2]
        b = rand(k + 1, n + 6)[1:, 3:n + 3]
    elif layout == "one row":
        a = rand(4, k)[2:3]
    elif layout == "one column":
        b = rand(k, 3)[:, 1:2]
    base = rand(a.shape[0], b.shape[1] + 2)[:, 1:b.shape[1] + 1]     # the output a view too
    expected = (base if accumulate else 0) + a.astype(np.float64) @ b.astype(np.float64)
    out = openblas.gemm_into(a, b, base, accumulate)
    assert out is base
    np.testing.assert_allclose(base, expected, rtol=1e-5, atol=1e-5)


def test_gemm_into_falls_back_to_numpy_for_what_blas_cannot_take():
    a, b = rand(4, 3, dtype=np.float64), rand(3, 5, dtype=np.float64)
    out = np.ones((4, 5))
    openblas.gemm_into(a, b, out, True)                                  # float64: numpy
    np.testing.assert_allclose(out, 1 + a @ b)
    strided = rand(4, 6)[:, ::2]                                         # no unit-stride axis: numpy
    out32 = np.zeros((4, 5), np.float32)
    openblas.gemm_into(strided, rand(3, 5), out32, False)
    with pytest.raises(ValueError):                                      # shapes disagree: numpy's error,
        openblas.gemm_into(rand(4, 3), rand(4, 5), np.zeros((4, 5), np.float32), True)   # never a BLAS call


CONV_PATHS = [   # (x shape, w shape, attrs): each path of conv_forward
    ((1, 6, 9, 9), (8, 6, 1, 1), {}),                                               # 1x1: a view, no copy
    ((2, 6, 9, 9), (8, 6, 1, 1), {"strides": [2, 2]}),                              # strided 1x1, batch 2
    ((1, 5, 9, 10), (4, 5, 3, 3), {"strides": [2, 2], "pads": [1, 0, 1, 1]}),       # im2col
    ((1, 4, 14, 13), (6, 4, 3, 3), {"pads": [1, 1, 1, 1]}),                         # Winograd F2
    ((1, 4, 7, 7), (4, 1, 3, 3), {"group": 4, "pads": [1, 1, 1, 1]}),               # depthwise
    ((1, 4, 7, 7), (6, 2, 3, 3), {"group": 2, "dilations": [2, 1], "pads": [2, 1, 2, 1]}),   # grouped
]


@pytest.mark.parametrize("xs,ws,attrs", CONV_PATHS)
@pytest.mark.parametrize("owned", [False, True])
def test_conv_forward_adds_bias_and_base_into_the_accumulator(xs, ws, attrs, owned):
    """conv_forward(x, w, b, base) == conv(x, w) + b + base on every path; an owned base may
    become the result, one that is not owned is never written."""
    x, w, b = rand(*xs), rand(*ws), rand(ws[0])
    plain = nn.conv_compute([x, w], attrs)[0]
    base = rand(*plain.shape)
    kept = base.copy()
    got = nn.conv_forward(x, w, attrs, b, base, base_owned=owned)
    np.testing.assert_allclose(got, plain + b.reshape(-1, 1, 1) + kept, rtol=1e-5, atol=1e-5)
    if not owned:
        np.testing.assert_array_equal(base, kept)
    with pytest.raises(InvalidNode):
        nn.conv_forward(x, w, attrs, b, base[:, :1])


class _FakeLibrary:
    """A loaded OpenBLAS as ctypes shows it: functions by symbol name, a configuration string."""

    class Function:
        def __init__(self, result=None):
            self.result, self.argtypes, self.restype = result, None, None

        def __call__(self, *args):
            return self.result

    def __init__(self, symbols: dict):
        for name, result in symbols.items():
            setattr(self, name, self.Function(result))


@pytest.mark.parametrize("symbols, integer", [
    ({"scipy_cblas_sgemm64_": None}, "c_int64"),
    ({"cblas_sgemm64_": None}, "c_int64"),
    ({"cblas_sgemm": None, "openblas_get_config": b"OpenBLAS 0.3.26 DYNAMIC_ARCH NO_AFFINITY Haswell"}, "c_int"),
    # an ILP64 build without a symbol suffix (Fedora's libopenblas64.so): its sgemm takes 64-bit
    # integers under the plain name, so lda/ldb/ldc must not go on the stack as 32-bit ints
    ({"cblas_sgemm": None, "openblas_get_config": b"OpenBLAS 0.3.26 USE64BITINT DYNAMIC_ARCH Haswell"}, "c_int64"),
    ({"scipy_cblas_sgemm": None, "scipy_openblas_get_config": b"OpenBLAS 0.3.27 USE64BITINT"}, "c_int64"),
])
def test_sgemm_integer_width_follows_the_librarys_build(symbols, integer):
    import ctypes
    fn = openblas._sgemm_of(_FakeLibrary(symbols))
    assert fn is not None and fn.argtypes[3] is getattr(ctypes, integer) and fn.argtypes[-1] is getattr(ctypes, integer)


def test_a_library_without_sgemm_is_passed_over():
    assert openblas._sgemm_of(_FakeLibrary({"openblas_get_config": b"OpenBLAS"})) is None


def test_numpys_own_openblas_comes_first_among_the_loaded_ones():
    """scipy bundles an OpenBLAS of its own; the threads we set and the GEMM we call must be
    numpy's whichever the maps list first.  A path with a space is kept whole."""
    site = "/opt/my env/lib/python3.11/site-packages"
    maps = [f"7f00-7f10 r-xp 00000000 08:01 11 {site}/scipy.libs/libscipy_openblas-a1.so\n",
            "7f10-7f20 r-xp 00000000 08:01 12 /usr/lib/libc.so.6\n",
            f"7f20-7f30 r-xp 00000000 08:01 13 {site}/numpy.libs/libscipy_openblas64_-b2.so\n",
            f"7f30-7f40 r--p 00010000 08:01 13 {site}/numpy.libs/libscipy_openblas64_-b2.so\n",
            "7f40-7f50 rw-p 00000000 00:00 0\n"]
    assert openblas.openblas_paths(maps, f"{site}/numpy") == [f"{site}/numpy.libs/libscipy_openblas64_-b2.so",
                                                              f"{site}/scipy.libs/libscipy_openblas-a1.so"]
    assert openblas.openblas_paths(maps[:2], f"{site}/numpy") == [f"{site}/scipy.libs/libscipy_openblas-a1.so"]
