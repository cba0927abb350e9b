"""ge/ops/native.py: the compiled conv kernels (ge/ops/csrc/conv.c) equal the numpy path on
every shape, stride, padding and epilogue they take, fused kernels built on them still match
onnxruntime on the unfused graph, the numpy fallback still runs, and a machine that can
build the extension has it built (CI cannot silently fall back)."""
import os
import shutil
import subprocess
import sys
import sysconfig

import numpy as np
import pytest

from ge.ops import native, nn, winograd

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RNG = np.random.default_rng(14)
needs_native = pytest.mark.skipif(not native.enabled(), reason="compiled conv kernels not built")


def rand(*shape):
    return RNG.standard_normal(shape).astype(np.float32)


def _can_build() -> bool:
    include = sysconfig.get_paths().get("include") or ""
    return shutil.which(os.environ.get("CC", "gcc")) is not None and os.path.exists(os.path.join(include, "Python.h"))


def test_the_extension_is_built_wherever_it_can_be():
    """gcc and Python.h here: `pip install -e .` must have built ge.ops._native; a silent
    fallback would leave the C path untested and the simulator slow."""
    if not _can_build():
        pytest.skip("no C compiler or Python.h: the numpy path is the one that runs")
    assert native.built(), "ge.ops._native did not build: run `pip install -e .` and read its compiler output"
    assert native.enabled() or native.force_numpy


def test_atc_py_native_0_forces_the_numpy_path():
    code = "from ge.ops import native; print(native.enabled())"
    env = {**os.environ, "ATC_PY_NATIVE": "0"}
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, env=env, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def _both(fn):
    """fn() on the C path and on the numpy path."""
    got = fn()
    with native.numpy_only():
        assert not native.enabled()
        ref = fn()
    return got, ref


def _close(got, ref, tol):
    scale = max(1.0, float(np.abs(ref).max()))
    assert got.shape == ref.shape and got.dtype == ref.dtype
    assert np.isfinite(got).all()
    assert float(np.abs(got - ref).max()) <= tol * scale, float(np.abs(got - ref).max()) / scale


# (x shape, w shape, attrs): Winograd F2 and F4 with edge tiles (maps not a multiple of the
# tile), asymmetric and zero pads, batches; im2col with strides, dilations, odd kernels;
# 1x1 direct and strided
SHAPES = [
    ((1, 4, 14, 13), (6, 4, 3, 3), {"pads": [1, 1, 1, 1]}),                      # F2, odd width
    ((2, 5, 9, 7), (3, 5, 3, 3), {"pads": [1, 0, 2, 1]}),                        # F2, asymmetric pads
    ((1, 8, 30, 29), (7, 8, 3, 3), {"pads": [1, 1, 1, 1]}),                      # F4, edge tiles
    ((2, 3, 26, 27), (5, 3, 3, 3), {"pads": [0, 2, 1, 0]}),                      # F4, batch 2
    ((1, 3, 66, 19), (4, 3, 3, 3), {}),                                          # F4, no pads, 9 lanes + 8
    ((1, 6, 9, 9), (8, 6, 1, 1), {}),                                            # 1x1 direct
    ((2, 6, 9, 11), (8, 6, 1, 1), {"strides": [2, 2]}),                          # 1x1 strided
    ((1, 6, 8, 8), (4, 6, 1, 1), {"pads": [1, 0, 0, 1]}),                        # 1x1 padded
    ((1, 3, 23, 21), (5, 3, 7, 7), {"strides": [2, 2], "pads": [3, 3, 3, 3]}),   # a stem
    ((1, 5, 9, 10), (4, 5, 3, 3), {"strides": [2, 2], "pads": [1, 0, 1, 1]}),
    ((2, 4, 11, 12), (3, 4, 3, 2), {"strides": [3, 1], "dilations": [2, 3], "pads": [2, 1, 0, 3]}),
    ((1, 2, 5, 5), (3, 2, 3, 3), {"pads": [4, 4, 4, 4]}),                        # pads wider than the kernel
    ((1, 4, 7, 7), (6, 4, 3, 3), {"pads": [1, 1, 1, 1]}),                        # too few tiles: im2col
    # small weights over a large map run as blocks of output rows (conv.c, rows_per_block):
    # a stem in blocks of 20, 20 and 19 rows; a strided 1x1 in blocks of 25 and 19 rows
    ((2, 3, 118, 117), (16, 3, 7, 7), {"strides": [2, 2], "pads": [3, 2, 3, 3]}),
    ((1, 64, 88, 60), (64, 64, 1, 1), {"strides": [2, 1]}),
    # K across two of the packed GEMM's 256-deep blocks: bias and base added by the first, ReLU by the last
    ((1, 300, 9, 9), (13, 300, 1, 1), {}),
    ((1, 40, 10, 9), (7, 40, 3, 3), {"strides": [2, 1], "pads": [1, 1, 1, 1]}),
]


def _tolerance(xs, ws, attrs) -> float:
    out = nn.conv_output_shape(xs, ws, attrs)[2:]
    window = nn._window_geometry(xs[2:], list(ws[2:]), attrs)
    if winograd.applies(np.float32, ws, 1, window.strides, window.dilations, out):
        return 2e-5 if winograd.tiling_for(out).m == 4 else 2e-6    # F4 rounds ~15x worse (ge/ops/winograd.py)
    return 2e-6


needs_packing = pytest.mark.skipif(not native.packing(), reason="no AVX2/FMA GEMM kernel on this CPU")


def _read_only(a: np.ndarray) -> np.ndarray:
    """A read-only copy: how an .om's constant weights arrive (the only ones packed)."""
    a = a.copy()
    a.flags.writeable = False
    return a


@needs_native
@pytest.mark.parametrize("xs,ws,attrs", SHAPES)
@pytest.mark.parametrize("bias,base,relu", [(False, False, False), (True, False, True), (True, True, True),
                                            (False, True, False)])
@pytest.mark.parametrize("weights", ["packed", "openblas"])
def test_c_path_equals_numpy_path(xs, ws, attrs, bias, base, relu, weights):
    """Read-only (constant) weights go to our GEMM packed once; writeable ones to OpenBLAS."""
    x, w = rand(*xs), rand(*ws)
    if weights == "packed":
        w = _read_only(w)
    b = rand(ws[0]) if bias else None
    shape = nn.conv_output_shape(xs, ws, attrs)
    r = rand(*shape) if base else None
    got, ref = _both(lambda: nn.conv_forward(x, w, attrs, b, r, relu=relu))
    _close(got, ref, _tolerance(xs, ws, attrs))
    if relu:
        assert (got >= 0).all()
    window = nn._window_geometry(xs[2:], list(ws[2:]), attrs)
    wino = winograd.applies(np.float32, ws, 1, window.strides, window.dilations, shape[2:])
    tiling = winograd.tiling_for(shape[2:]) if wino else None
    packed = native.packed_weights(w, tiling)
    assert (packed is not None) == (weights == "packed" and native.packing())
    if packed is not None:      # cached: the forward above packed it, this call found it
        assert native.packed_weights(w, tiling) is packed and not packed.flags.writeable


@needs_packing
@pytest.mark.parametrize("accumulate", [False, True])
def test_packed_gemm_equals_numpy_matmul(accumulate):
    """Our GEMM on M/N/K around its blocks: 1, not multiples of the 6 x 16 register tile (and
    <= 8 columns left: the narrow panel), K across several 256-deep blocks, N across 1024-wide
    blocks, M across 96-row blocks."""
    from ge.ops import _native

    rng = np.random.default_rng(142)
    sizes = [(1, 1, 1), (1, 5, 3), (5, 1, 17), (6, 16, 16), (7, 257, 9), (13, 600, 8), (97, 513, 1030),
             (64, 64, 196), (2048 // 8, 2048, 49), (3, 1, 2049)]
    sizes += [tuple(int(v) for v in rng.integers(1, 150, 3)) for _ in range(12)]
    for m, k, n in sizes:
        a = rng.standard_normal((m, k)).astype(np.float32)
        b = rng.standard_normal((k, n)).astype(np.float32)
        c = rng.standard_normal((m, n)).astype(np.float32)
        ap = np.empty(_native.packed_size(m, k), np.float32)
        _native.pack_weights(a, 1, m, k, ap)
        ref = a.astype(np.float64) @ b + (c if accumulate else 0)
        _native.gemm_packed(ap, m, k, b, n, c, accumulate)
        scale = max(1.0, float(np.abs(ref).max()))
        assert float(np.abs(c - ref).max()) <= 1e-5 * scale * max(1.0, k / 256), (m, k, n)


@needs_packing
def test_packed_weights_are_checked_and_replace_the_winograd_u():
    """A packed buffer of the wrong size is refused; U (36x the weights' 3x3 taps / 9) is kept
    packed only, not also as U."""
    from ge.ops import _native

    x, w = rand(1, 4, 30, 30), _read_only(rand(5, 4, 3, 3))
    tiling = winograd.F4
    packed = native.packed_weights(w, tiling)
    assert packed.size == 36 * _native.packed_size(5, 4)
    assert winograd._weights.get(w, 4) is None
    y, work = np.empty((1, 5, 30, 30), np.float32), np.empty(native.winograd_work(4, 4, 5, 64), np.float32)
    with pytest.raises(ValueError):
        _native.winograd3x3(x, 1, 4, 30, 30, None, 5, 4, 1, 1, 30, 30, None, None, False, y, work, packed[:-1])
    with pytest.raises(TypeError):       # no weights at all
        _native.winograd3x3(x, 1, 4, 30, 30, None, 5, 4, 1, 1, 30, 30, None, None, False, y, work)
    _native.winograd3x3(x, 1, 4, 30, 30, None, 5, 4, 1, 1, 30, 30, None, None, False, y, work, packed)
    with native.numpy_only():
        ref = nn.conv_forward(x, w, {"pads": [1, 1, 1, 1]})
    _close(y, ref, 2e-5)
    a = np.empty(_native.packed_size(5, 36), np.float32)
    with pytest.raises(ValueError):
        _native.pack_weights(rand(5, 36), 1, 5, 36, a[:-1])
    with pytest.raises(ValueError):
        _native.gemm_packed(a, 5, 36, rand(36, 7), 7, np.empty((5, 6), np.float32), False)


def test_atc_py_packed_gemm_0_keeps_openblas():
    code = "from ge.ops import native; print(native.packing())"
    env = {**os.environ, "ATC_PY_PACKED_GEMM": "0"}
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, env=env, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


@needs_native
@pytest.mark.parametrize("xs,ws,attrs", [SHAPES[0], SHAPES[2], SHAPES[6], SHAPES[8]])
def test_an_owned_base_may_become_the_output_one_not_owned_is_never_written(xs, ws, attrs):
    x, w, b = rand(*xs), rand(*ws), rand(ws[0])
    base = rand(*nn.conv_output_shape(xs, ws, attrs))
    kept = base.copy()
    got = nn.conv_forward(x, w, attrs, b, base)
    np.testing.assert_array_equal(base, kept)
    owned = nn.conv_forward(x, w, attrs, b, base.copy(), base_owned=True)
    np.testing.assert_array_equal(owned, got)
    with native.numpy_only():
        ref = nn.conv_forward(x, w, attrs, b, kept)
    _close(got, ref, _tolerance(xs, ws, attrs))


@needs_native
def test_random_convs_c_equals_numpy():
    """Random geometry: kernel 1-5, strides 1-3, dilations 1-2, pads 0-3 per side, batch 1-2."""
    rng = np.random.default_rng(140)
    for _ in range(40):
        kh, kw = rng.integers(1, 6, 2)
        sh, sw, dh, dw = (int(v) for v in rng.integers(1, 4, 2).tolist() + rng.integers(1, 3, 2).tolist())
        pads = [int(v) for v in rng.integers(0, 4, 4)]
        h, w = int(rng.integers((kh - 1) * dh + 1, 20)), int(rng.integers((kw - 1) * dw + 1, 20))
        n, c, cout = int(rng.integers(1, 3)), int(rng.integers(1, 6)), int(rng.integers(1, 7))
        attrs = {"strides": [sh, sw], "dilations": [dh, dw], "pads": pads}
        xs, ws = (n, c, h, w), (cout, c, int(kh), int(kw))
        x, wt, b = rand(*xs), rand(*ws), rand(cout)
        base = rand(*nn.conv_output_shape(xs, ws, attrs))
        got, ref = _both(lambda: nn.conv_forward(x, wt, attrs, b, base, relu=True))
        _close(got, ref, _tolerance(xs, ws, attrs))


@needs_native
def test_float16_data_still_rounds_once():
    """The C path computes in float32 and the result is rounded to float16 once, as the numpy path."""
    x, w, b = rand(1, 4, 14, 14).astype(np.float16), rand(5, 4, 3, 3).astype(np.float16), rand(5).astype(np.float16)
    got, ref = _both(lambda: nn.conv_forward(x, w, {"pads": [1, 1, 1, 1]}, b, relu=True))
    assert got.dtype == np.float16
    np.testing.assert_allclose(got.astype(np.float32), ref.astype(np.float32), rtol=1e-3, atol=1e-3)


@needs_native
def test_the_kernels_check_what_python_hands_them():
    """Sizes that disagree with the buffers, a wrong dtype, a read-only output: an error, never
    a read or write out of bounds."""
    from ge.ops import _native

    x, w, y = rand(1, 2, 5, 5), rand(3, 2, 3, 3), np.empty((1, 3, 3, 3), np.float32)
    work = np.empty(1000, np.float32)
    args = [x, 1, 2, 5, 5, w, 3, 3, 3, 1, 1, 1, 1, 0, 0, 3, 3, None, None, False, y, work]
    _native.conv_gemm(*args)
    np.testing.assert_allclose(y, nn.conv_compute([x, w], {})[0], rtol=1e-5, atol=1e-5)
    for index, bad, error in [(1, 2, ValueError),              # n says two images, x holds one
                              (4, 6, ValueError),              # wider than x
                              (0, x.astype(np.float64), TypeError),
                              (5, w[:2], ValueError),
                              (20, np.empty((1, 3, 3, 2), np.float32), ValueError),
                              (20, np.empty(27, np.float32)[::-1], ValueError),      # not contiguous
                              (21, np.empty(5, np.float32), ValueError),              # work too small
                              (15, -1, ValueError),            # a negative pad
                              (7, 0, ValueError),              # a zero kernel
                              (2, 2 ** 31, ValueError),        # beyond 2^31: refused before any product
                              (1, 2 ** 62, ValueError),
                              (1, 2 ** 64, OverflowError)]:    # not even a C long long
        bad_args = list(args)
        bad_args[index] = bad
        with pytest.raises(error):
            _native.conv_gemm(*bad_args)
    read_only = np.empty((1, 3, 3, 3), np.float32)
    read_only.flags.writeable = False
    with pytest.raises(ValueError):
        _native.conv_gemm(*(args[:20] + [read_only, work]))
    u = winograd.transformed_weights(w, winograd.F2)
    with pytest.raises(ValueError):
        _native.winograd3x3(x, 1, 2, 5, 5, u, 3, 3, 1, 1, 5, 5, None, None, False, np.empty((1, 3, 5, 5), np.float32),
                            work)           # m must be 2 or 4
    with pytest.raises(ValueError):
        _native.winograd3x3(x, 1, 2, 5, 5, u[:8], 3, 2, 1, 1, 5, 5, None, None, False,
                            np.empty((1, 3, 5, 5), np.float32), work)


# -- fused kernels on both paths against onnxruntime on the unfused graph -----------------

def _on_path(path: str, test, *args):
    """Run one of tests/test_fusion_conv.py's tests on the compiled path (weights to OpenBLAS:
    those graphs' weights are writeable), on the compiled path with every conv weight packed
    for our GEMM (as an .om's read-only constants are), or on the numpy path."""
    if path != "numpy" and not native.enabled():
        pytest.skip("compiled conv kernels not built")
    if path == "packed" and not native.packing():
        pytest.skip("no AVX2/FMA GEMM kernel on this CPU")
    import test_fusion_conv as fusion      # tests/ is on the path (conftest.py)

    if path == "numpy":
        with native.numpy_only():
            getattr(fusion, test)(*args)
    elif path == "packed":
        packed, calls = native.packed_weights, []

        def read_only(w, tiling=None):        # a read-only copy per call: packed every call, never cached
            calls.append(w.shape)
            return packed(_read_only(w) if isinstance(w, np.ndarray) else w, tiling)
        with pytest.MonkeyPatch.context() as mp:
            mp.setattr(native, "packed_weights", read_only)
            getattr(fusion, test)(*args)
        assert calls
    else:
        getattr(fusion, test)(*args)


@pytest.mark.parametrize("path", ["compiled", "packed", "numpy"])
@pytest.mark.parametrize("name", ["conv_bn_relu", "conv_bn_add_relu", "conv_bn_add_broadcast", "conv_leaky"])
def test_conv_blocks_match_onnxruntime_on_both_paths(name, path):
    _on_path(path, "test_conv_variant_fuses_and_matches_ort", name)


@pytest.mark.parametrize("path", ["compiled", "packed", "numpy"])
@pytest.mark.parametrize("name", ["torchscript_bn_kept", "no_activation"])
def test_residual_conv_blocks_match_onnxruntime_on_both_paths(name, path):
    _on_path(path, "test_residual_conv_fuses_both_convs_and_matches_ort", name)


@pytest.mark.parametrize("path", ["compiled", "packed", "numpy"])
def test_resnet50_small_matches_onnxruntime_on_both_paths(path):
    _on_path(path, "test_resnet50_small_every_conv_fused")


def _random_pool(rng, i: int, kernels, strides) -> tuple:
    """(MaxPool attributes without Indices -- kernel and strides drawn from the given ranges,
    dilations 1-2, pads below the kernel, ceil_mode on every other case -- and the window's
    dilated span per axis)."""
    kh, kw = (int(v) for v in rng.integers(*kernels, 2))
    attrs = {"kernel_shape": [kh, kw], "strides": [int(v) for v in rng.integers(*strides, 2)],
             "dilations": [int(v) for v in rng.integers(1, 3, 2)], "ceil_mode": int(i % 2),
             "pads": [int(rng.integers(0, kh)), int(rng.integers(0, kw)), int(rng.integers(0, kh)),
                      int(rng.integers(0, kw))], "_outputs": 1}
    return attrs, [(k - 1) * d + 1 for k, d in zip(attrs["kernel_shape"], attrs["dilations"])]


@needs_native
def test_max_pool_c_equals_numpy_with_nans_pads_and_ceil_mode():
    """Window geometry at random (kernel 1-4, strides 1-3, dilations 1-2, pads < kernel,
    ceil_mode) on data with NaNs and -inf: the same bits on both paths."""
    rng = np.random.default_rng(141)
    for i in range(60):
        attrs, span = _random_pool(rng, i, kernels=(1, 5), strides=(1, 4))
        x = rand(int(rng.integers(1, 3)), int(rng.integers(1, 4)), int(rng.integers(span[0], 16)),
                 int(rng.integers(span[1], 16)))
        x[rng.random(x.shape) < 0.1] = np.nan
        x[rng.random(x.shape) < 0.05] = -np.inf
        got, ref = _both(lambda: nn.max_pool_compute([x], attrs)[0])
        np.testing.assert_array_equal(got, ref, err_msg=str(attrs))


@needs_native
def test_max_pool_windows_wider_than_x_equal_numpy():
    """Windows larger than the map (pads below the kernel, as onnxruntime requires): most of
    each window is padding, the first tap often outside, NaNs inside -- the same bits."""
    rng = np.random.default_rng(142)
    for i in range(60):
        attrs, span = _random_pool(rng, i, kernels=(3, 12), strides=(1, 3))
        h = int(rng.integers(max(1, span[0] - attrs["pads"][0] - attrs["pads"][2]), span[0] + 2))
        w = int(rng.integers(max(1, span[1] - attrs["pads"][1] - attrs["pads"][3]), span[1] + 2))
        x = rand(1, 2, h, w)
        x[rng.random(x.shape) < 0.2] = np.nan
        got, ref = _both(lambda: nn.max_pool_compute([x], attrs)[0])
        np.testing.assert_array_equal(got, ref, err_msg=str(attrs))


@needs_native
def test_max_pool_cost_is_the_taps_inside_x_not_the_window():
    """A 2^20 x 2^20 window over a 2x3 map (pads 2^19 < kernel: legal for onnxruntime, which
    clips each window to the map): the C kernel walked every padding tap, 2^40 per output,
    a hang; clipped, it is instant and every output is the map's max."""
    code = ("import numpy as np\n"
            "from ge.ops import nn\n"
            "x = np.arange(6, dtype=np.float32).reshape(1, 1, 2, 3)\n"
            "k, p = 2 ** 20, 2 ** 19\n"
            "y = nn.max_pool_compute([x], {'kernel_shape': [k, k], 'pads': [p, p, p, p], '_outputs': 1})[0]\n"
            "print(y.shape, sorted(set(y.ravel().tolist())))\n")
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=60,
                         check=True)
    assert out.stdout.strip() == "(1, 1, 3, 4) [5.0]"


@pytest.mark.parametrize("xs,ws,attrs", [((0, 3, 8, 8), (4, 3, 3, 3), {"pads": [1, 1, 1, 1]}),   # batch 0
                                         ((0, 3, 40, 40), (4, 3, 3, 3), {"pads": [1, 1, 1, 1]}),
                                         ((0, 3, 8, 8), (4, 3, 1, 1), {}),
                                         ((2, 0, 8, 8), (4, 0, 3, 3), {"pads": [1, 1, 1, 1]})])  # no input channels
def test_empty_convs_give_what_the_numpy_path_gives(xs, ws, attrs):
    """A batch of 0 (a dynamic batch fed empty) or no input channels: the kernels take no
    zero dimension, so such a conv stays on the numpy path, which computes it (the bias)."""
    x, w, b = rand(*xs), rand(*ws), rand(ws[0])
    got, ref = _both(lambda: nn.conv_forward(x, w, attrs, b))
    np.testing.assert_array_equal(got, ref)
    takes, _, _ = nn.conv_workspace(xs, np.float32, ws, attrs)
    with native.numpy_only():
        assert nn.conv_workspace(xs, np.float32, ws, attrs)[0] == takes     # declared as it runs


def test_an_empty_max_pool_gives_what_the_numpy_path_gives():
    x = rand(0, 3, 8, 8)
    got, ref = _both(lambda: nn.max_pool_compute([x], {"kernel_shape": [2, 2], "_outputs": 1})[0])
    assert got.shape == ref.shape == (0, 3, 7, 7)


def _reference_conv(x, w, strides, dilations, pads, out):
    """conv in float64 straight from the definition: y[oy, ox] sums x[oy*s - p + k*d] * w[k],
    x zero outside -- for any output size, not only the one the pads give."""
    n, c, h, wd = x.shape
    kh, kw = w.shape[2:]
    span = [(o - 1) * s + (k - 1) * d + 1 for o, s, k, d in zip(out, strides, (kh, kw), dilations)]
    xp = np.zeros((n, c, span[0] + pads[0] + h, span[1] + pads[1] + wd))
    xp[:, :, pads[0]:pads[0] + h, pads[1]:pads[1] + wd] = x
    y = np.zeros((n, w.shape[0]) + tuple(out))
    for ki in range(kh):
        for kj in range(kw):
            r0, c0 = ki * dilations[0], kj * dilations[1]
            tap = xp[:, :, r0:r0 + (out[0] - 1) * strides[0] + 1:strides[0], c0:c0 + (out[1] - 1) * strides[1] + 1:strides[1]]
            y += np.einsum("nchw,oc->nohw", tap, w[:, :, ki, kj].astype(np.float64))
    return y


@needs_native
@pytest.mark.parametrize("weights", ["openblas", "packed"])
def test_the_kernels_equal_a_float64_reference_on_any_geometry(weights):
    """ge.ops._native called directly, as a fuzz: any output size (windows past x on either
    side, pads wider than x), strides and dilations up to 4 and 3, 1 to 17 tiles a row (lanes
    of 8 and a tail), bias/residual/ReLU, and the residual as the output itself (y is base).
    `packed`: read-only weights, so our GEMM on weights packed for it, its epilogue in the
    stores (with y as base: reading and writing the same tile)."""
    if weights == "packed" and not native.packing():
        pytest.skip("no AVX2/FMA GEMM kernel on this CPU")
    rng = np.random.default_rng(143)
    for case in range(150):
        n, c, cout = int(rng.integers(1, 3)), int(rng.integers(1, 7)), int(rng.integers(1, 9))
        x = rand(n, c, int(rng.integers(1, 30)), int(rng.integers(1, 30)))
        b = rand(cout) if case % 2 else None
        relu = bool(case % 3)
        if case % 4 == 0:
            m = 2 if case % 8 else 4
            pads, out = [int(v) for v in rng.integers(0, 6, 2)], [int(v) for v in rng.integers(1, 70, 2)]
            w = rand(cout, c, 3, 3)
            strides = dilations = [1, 1]
        else:
            w = rand(cout, c, int(rng.integers(1, 6)), int(rng.integers(1, 6)))
            strides, dilations = [int(v) for v in rng.integers(1, 5, 2)], [int(v) for v in rng.integers(1, 4, 2)]
            pads, out = [int(v) for v in rng.integers(0, 8, 2)], [int(v) for v in rng.integers(1, 40, 2)]
            if case % 5 == 0:                                   # 1x1 read in place
                w, strides, pads, out = w[:, :, :1, :1].copy(), [1, 1], [0, 0], list(x.shape[2:])
        base = rand(n, cout, *out) if case % 3 != 1 else None
        if weights == "packed":
            w = _read_only(w)
            assert native.packed_weights(w, winograd.F2 if case % 4 == 0 and m == 2 else
                                         winograd.F4 if case % 4 == 0 else None) is not None
        ref = _reference_conv(x, w, strides, dilations, pads, out)
        ref = ref + (b.reshape(1, -1, 1, 1) if b is not None else 0) + (base if base is not None else 0)
        ref = np.maximum(ref, 0) if relu else ref
        if case % 4 == 0:
            got = native.winograd3x3(x, w, winograd.F2 if m == 2 else winograd.F4, pads, out, b, base, relu)
            tol = 2e-6 if m == 2 else 2e-5
        elif base is not None and case % 2:
            into = base.copy()
            got = native.conv_gemm(x, w, pads, out, strides, dilations, b, into, relu, into)
            assert got is into
            tol = 2e-6
        else:
            got = native.conv_gemm(x, w, pads, out, strides, dilations, b, base, relu)
            tol = 2e-6
        scale = max(1.0, float(np.abs(ref).max()))
        assert float(np.abs(got - ref).max()) <= tol * scale, (case, x.shape, w.shape, strides, dilations, pads, out)
