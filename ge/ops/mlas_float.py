"""onnxruntime's own float32 order of operations, for the float kernels whose last bit
decides a requantization.

Why: in a QOperator graph a float island (LayerNormalization between DequantizeLinear and
QuantizeLinear) is followed by a rounding to int8.  A float result one ulp away from
onnxruntime's flips that rounding wherever the value lies next to a .5 step boundary, and
through BERT-base's 12 layers those one-step flips grow to 0.1 of the output.  Matching
onnxruntime bit for bit needs its exact sequence of float32 and float64 operations, which
MLAS fixes per kernel (documented at each function with its source).

`fma_f32(a, b, c)`: float32 fused multiply-add, a*b + c rounded once.  numpy has no fma;
a*b of two float32 is exact in float64, the sum is rounded to float64 *to odd* (TwoSum's
exact error decides the odd neighbour) and then to float32, which rounds exactly as one
float32 rounding would (53 >= 24 + 2 bits: Boldo & Melquiond, "Emulation of FMA and
correctly rounded sums: proved algorithms using rounding to odd", 2008).
"""
from __future__ import annotations

import numpy as np

F32 = np.float32
F64 = np.float64

# MlasLayerNormF32 dispatches the AVX2 kernel from this row length on (core/mlas/lib/layernorm.cpp);
# shorter rows take layer_norm_impl.cc's scalar loop, which this module does not model.
LAYER_NORM_MIN_ROW = 8
_F32_TINY = F64(2.0 ** -126)


def fma_f32(a, b, c) -> np.ndarray:
    """float32 a*b + c with one rounding (the vfmadd of MLAS's AVX2/FMA3 kernels)."""
    p = np.asarray(a, F64) * np.asarray(b, F64)          # exact: 24 + 24 bits < 53
    c = np.asarray(c, F64)
    s = p + c
    # Rounding s to float32 can differ from rounding p + c only where s sits exactly on a
    # float32 midpoint (low 29 mantissa bits 1000...0) or is below float32's normal range;
    # those few elements are rounded to odd first.
    bits = s.view(np.int64)
    suspect = ((bits & 0x1FFFFFFF) == 0x10000000) | ((np.abs(s) < _F32_TINY) & (s != 0))
    if suspect.any():
        s = np.array(s, F64)
        p, c = np.broadcast_to(p, s.shape)[suspect], np.broadcast_to(c, s.shape)[suspect]
        near = s[suspect]
        back = near - c
        err = (p - back) + (c - (near - back))          # TwoSum: near + err == p + c exactly
        to_odd = (err != 0) & np.isfinite(err) & ((near.view(np.int64) & 1) == 0)
        s[suspect] = np.where(to_odd, np.nextafter(near, np.where(err > 0, np.inf, -np.inf)), near)
    return s.astype(F32)


def _sum_lanes_f32(lanes: np.ndarray) -> np.ndarray:
    """The horizontal add of an 8-lane __m256 (extractf128 + add, movehl + add, movehdup + add_ss):
    ((l0 + l4) + (l2 + l6)) + ((l1 + l5) + (l3 + l7))."""
    r = lanes[:, :4] + lanes[:, 4:]
    return (r[:, 0] + r[:, 2]) + (r[:, 1] + r[:, 3])


def layer_norm_rows(x: np.ndarray, scale: np.ndarray, bias, eps: float):
    """LayerNormalization of float32 rows (shape [rows, n], n >= LAYER_NORM_MIN_ROW) as
    onnxruntime's x86-64 CPU kernel computes it (MlasLayerNormKernelAvx2,
    core/mlas/lib/layernorm_kernel_avx2.cpp, onnxruntime >= 1.26 on AVX2 machines):

    1. mean: float64 sum in 4 lanes (element i into lane i % 4, each lane in order), lanes
       added (l0 + l2) + (l1 + l3), the n % 4 tail added in order; sum / n in float64,
       rounded to float32;
    2. variance: d = x - mean in float32, sum of d*d by fma in 8 float32 lanes, the lanes
       added horizontally, then the n % 8 tail -- its groups of 4 as d*d rounded and added
       (the compiler's vectorized products), the last n % 4 by fma;
    3. inv = 1 / sqrt(var / n + eps) in float32;
    4. y = fma((x - mean) * inv, scale, bias) in float32 (without bias: times scale).
    Returns y, mean [rows], inv [rows]."""
    x = np.asarray(x, F32)
    rows, n = x.shape
    n4, n8 = n // 4 * 4, n // 8 * 8
    lanes = np.cumsum(x[:, :n4].astype(F64).reshape(rows, -1, 4), axis=1)[:, -1, :]
    total = (lanes[:, 0] + lanes[:, 2]) + (lanes[:, 1] + lanes[:, 3])
    for i in range(n4, n):
        total = total + x[:, i].astype(F64)
    mean = (total / F64(n)).astype(F32)
    d = x - mean[:, None]
    acc = np.zeros((rows, 8), F32)
    for i in range(0, n8, 8):
        acc = fma_f32(d[:, i:i + 8], d[:, i:i + 8], acc)
    var = _sum_lanes_f32(acc)
    fused_from = n8 + (n - n8) // 4 * 4
    for i in range(n8, n):
        var = fma_f32(d[:, i], d[:, i], var) if i >= fused_from else var + d[:, i] * d[:, i]
    inv = F32(1) / np.sqrt(var / F32(n) + F32(eps))
    t = d * inv[:, None]
    scale = np.asarray(scale, F32)
    y = t * scale if bias is None else fma_f32(t, scale, np.asarray(bias, F32))
    return y, mean, inv


# MlasErfConstants (core/mlas/lib/erf.cpp): the faithfully rounded erff of
# stackoverflow.com/questions/35148198 -- an odd polynomial below the split, 1 - exp(-p(|x|))
# above it, exp by MLAS's own range reduction and polynomial.  The clamp of |x|: erf.cpp as
# published reads 3.725, but onnxruntime 1.32's results above 3.78 are those of a clamp at
# 3.925 or more (measured: 3.725 misses 12% of inputs in [-6, 6], 3.925 none; beyond 3.925
# erff rounds to 1 either way).
_ERF_UPPER, _ERF_SPLIT = F32(3.925), F32(0.921875)
_ERF_SMALL = [F32(v) for v in (-5.99104969e-4, 4.99339588e-3, -2.67667342e-2, 1.12818025e-1, -3.76124859e-1,
                               1.28379151e-1)]
_ERF_BIG = [F32(v) for v in (1.72948930e-5, -3.83208680e-4, 3.88393435e-3, -2.42545605e-2, 1.06777847e-1,
                             6.34846687e-1, 1.28717512e-1)]
_EXP_LOWER, _EXP_LOG2E = F32(-88.3762626647949), F32(1.44269504088896341)
_EXP_LN2_HI, _EXP_LN2_LO = F32(-6.93145752e-1), F32(-1.42860677e-6)
_EXP_P = [F32(v) for v in (1.38319808e-3, 8.37550033e-3, 4.16689515e-2, 1.66664466e-1, 4.99999851e-1, 1.0, 1.0)]
_EXP_ROUND = F32(1.25829120e+7)          # 1.5 * 2^23: adding it rounds to an integer


def _horner_fma(coefficients, x):
    r = np.full(x.shape, coefficients[0], F32)
    for c in coefficients[1:]:
        r = fma_f32(r, x, c)
    return r


def erf_f32(x: np.ndarray) -> np.ndarray:
    """Erf of float32 data as onnxruntime's x86-64 CPU kernel computes it (MlasErfKernelFma3,
    core/mlas/lib/x86_64/ErfKernelFma3.S; the same steps for every element, the tail by masked
    loads): a = min(|x|, 3.925); below the split 0.921875 a*(1 + p(a*a)) by fma, else
    1 - exp(-(a + a*q(a))) with exp(t) = 2^r * e(f), r = round(t * log2 e), f = t - r*ln2
    (two fma), e a degree-6 polynomial; the sign of x copied onto the result."""
    x = np.asarray(x, F32)
    a = np.minimum(np.abs(x), _ERF_UPPER)
    big = _ERF_SPLIT <= a
    y = np.empty(x.shape, F32)
    small = a[~big]                                     # each branch only where it is taken
    y[~big] = fma_f32(_horner_fma(_ERF_SMALL, small * small), small, small)
    ab = a[big]
    t = np.maximum(-fma_f32(_horner_fma(_ERF_BIG, ab), ab, ab), _EXP_LOWER)
    r = fma_f32(_EXP_LOG2E, t, _EXP_ROUND) - _EXP_ROUND
    f = fma_f32(r, _EXP_LN2_LO, fma_f32(r, _EXP_LN2_HI, t))
    pow2 = ((r.astype(np.int32) + 127) << 23).view(F32)
    y[big] = F32(1) - _horner_fma(_EXP_P, f) * pow2
    return np.where(np.signbit(x), -y, y)
