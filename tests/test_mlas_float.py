"""The float kernels whose last bit decides a requantization in an int8 graph equal
onnxruntime's bit for bit (ge/ops/mlas_float.py): LayerNormalization and Erf, the float
islands of a QOperator BERT, and the fma they are built from."""
from fractions import Fraction

import numpy as np
import pytest

from ge.ops.mlas_float import LAYER_NORM_MIN_ROW, erf_f32, fma_f32
from ge.ops.registry import get_op

from helpers import run_ort_op

RNG = np.random.default_rng(31)


def _correctly_rounded(value: Fraction) -> np.float32:
    """The float32 nearest to an exact rational (ties to even), by checking the neighbours."""
    f = np.float32(float(value))
    candidates = [np.nextafter(f, np.float32(-np.inf)), f, np.nextafter(f, np.float32(np.inf))]
    return min(candidates, key=lambda c: (abs(Fraction(float(c)) - value), int(np.array(c).view(np.int32)) & 1))


def test_fma_rounds_once():
    """a*b + c with one rounding, also where the float64 sum lies on a float32 midpoint (the
    double rounding a plain float64 evaluation gets wrong) and under cancellation."""
    a = RNG.standard_normal(3000).astype(np.float32)
    b = RNG.standard_normal(3000).astype(np.float32)
    c = (-(a.astype(np.float64) * b)).astype(np.float32)               # cancellation
    c[:1000] = RNG.standard_normal(1000).astype(np.float32)
    got = fma_f32(a, b, c)
    for i in range(0, 3000, 3):
        exact = Fraction(float(a[i])) * Fraction(float(b[i])) + Fraction(float(c[i]))
        assert got[i] == _correctly_rounded(exact), i
    # (1 + 2^-23) + 2^-24 (1 + 2^-18)(1 - 2^-18): just below the float32 midpoint 1 + 1.5 * 2^-23,
    # onto which the float64 sum rounds; float64-then-float32 gives 1 + 2^-22 (ties to even)
    a1, b1, c1 = np.float32(2.0 ** -24 * (1 + 2.0 ** -18)), np.float32(1 - 2.0 ** -18), np.float32(1 + 2.0 ** -23)
    assert np.float32(np.float64(a1) * np.float64(b1) + np.float64(c1)) == np.float32(1 + 2.0 ** -22)
    assert fma_f32(a1, b1, c1) == c1


@pytest.mark.parametrize("n", [LAYER_NORM_MIN_ROW, 32, 37, 100, 768])
@pytest.mark.parametrize("bias", [True, False])
def test_layer_norm_equals_onnxruntime_bit_for_bit(n, bias):
    """Y, Mean and InvStdDev of LayerNormalization over float32 rows: exactly onnxruntime's
    (before: numpy's pairwise sums left 45% of BERT-base's LayerNorm outputs one ulp off)."""
    x = (RNG.standard_normal((3, 40, n)) * 2 + 0.3).astype(np.float32)
    inputs = [x, RNG.uniform(0.8, 1.2, n).astype(np.float32)] + ([RNG.normal(0, 0.1, n).astype(np.float32)] if bias else [])
    attrs = {"axis": -1, "epsilon": 1e-12}
    expected = run_ort_op("LayerNormalization", inputs, attrs, opset=17, n_outputs=3)
    got = get_op("LayerNormalization").compute(inputs, attrs)
    for e, g in zip(expected, got):
        assert g.dtype == e.dtype and g.shape == e.shape
        assert np.array_equal(g.view(np.int32), e.view(np.int32))


def test_layer_norm_over_two_axes_equals_onnxruntime():
    x = RNG.standard_normal((2, 6, 4, 8)).astype(np.float32)
    inputs = [x, RNG.uniform(0.5, 1.5, (4, 8)).astype(np.float32), RNG.normal(0, 0.1, (4, 8)).astype(np.float32)]
    attrs = {"axis": 2, "epsilon": 1e-5}
    expected = run_ort_op("LayerNormalization", inputs, attrs, opset=17, n_outputs=3)
    for e, g in zip(expected, get_op("LayerNormalization").compute(inputs, attrs)):
        assert np.array_equal(g, e)


def test_erf_equals_onnxruntime_bit_for_bit():
    """Both branches of MLAS's erf, the split point, the clamp and the sign (before: a rational
    approximation 1 ulp off onnxruntime on 14% of N(0, 2) inputs)."""
    x = np.concatenate([RNG.standard_normal(60000) * 2, RNG.uniform(-6, 6, 20000),
                        [0.0, -0.0, 0.921875, -0.921875, np.nextafter(np.float32(0.921875), np.float32(0)),
                         3.725, 3.925, 4.5, -10.0, 1e-30, -1e-30]]).astype(np.float32)
    expected = run_ort_op("Erf", [x], opset=13)[0]
    got = erf_f32(x)
    assert np.array_equal(got.view(np.int32), expected.view(np.int32))
    assert np.array_equal(get_op("Erf").compute([x], {})[0].view(np.int32), expected.view(np.int32))
