"""3x3 stride-1 convolution by Winograd's minimal filtering: F(2x2, 3x3) (each 2x2 output
tile from a 4x4 input tile, 16 multiplies per channel pair instead of 36) and F(4x4, 3x3)
(each 4x4 tile from a 6x6 input tile, 36 multiplies instead of 144).

Why: the numeric executor spends most of a CNN forward in BLAS GEMMs, and the 3x3 stride-1
convs are 37% of ResNet-50's multiplies.  A Winograd conv is one GEMM per point of the
transform domain (16 or 36), 2.25x (F2) or 4x (F4) fewer multiplies in all, and replaces
im2col's 9x copy of the input with a 4x (F2) or 2.25x (F4) transform of it.  The
transforms are a few passes of whole-array adds in numpy, so the tiling that costs least
depends on the shape: F4 where its GEMMs stay wide enough (ResNet-50's 56x56 and 28x28
convs: 15-25% less CPU time than F2, measured interleaved on one BLAS thread), F2 on
smaller maps (its 14x14 convs: F4's 16-pixel-wide GEMMs and padded tiles make it 20-30%
slower), im2col (ge/ops/nn.py) below MIN_TILES.

Numerics: F2's transforms hold only 0, +-1 and +-1/2 (max error / max |y| 2-7e-7 against a
float64 reference on ResNet-50's shapes, im2col 4-6e-7).  F4's hold 4, 5, 8 and 1/6, 1/24,
so it rounds ~15x worse (measured on those shapes: 3-5e-6; tests/test_ops_nn.py bounds it
at 1e-5), still 20x under the fp32 compare tolerance (simulator/COMPARE.md: 1e-4 of scale).

Layout: the input tiles are gathered once as D (a, a, C, N*tiles) (a = 4 or 6 tile rows and
columns), transformed in place along their two tile axes (B^T d B; rows P + Q and P - Q of a
transform share P and Q: `_transform`), multiplied point by point by U (a*a, C_out, C), the
transformed weights, and the output tiles (A^T m A) are scattered into the NCHW output.  U is computed in float64 once per weight array and kept as
long as the array lives (the executor hands each kernel the same constant every forward, and
has the conv kernels compute it when it loads the model: `OpDef.prepare`).  A bias is added
to one transform point only (the one A^T maps to every output pixel of a tile), 1/a^2 of the
adds a pass over the output would take.
"""
from __future__ import annotations

from functools import lru_cache
from typing import NamedTuple

import numpy as np

from ge import workspace
from ge.ops.array_cache import ArrayCache


class Tiling(NamedTuple):
    """F(m x m, 3x3): m output pixels per tile side from a = m + 2 input pixels."""
    m: int
    bt: np.ndarray          # (a, a) input transform B^T
    g: np.ndarray           # (a, 3) weight transform G
    at: np.ndarray          # (m, a) output transform A^T
    bias_point: int         # the column of A^T that is all ones


F2 = Tiling(2, np.array([[1, 0, -1, 0], [0, 1, 1, 0], [0, -1, 1, 0], [0, 1, 0, -1]], np.float64),
            np.array([[1, 0, 0], [0.5, 0.5, 0.5], [0.5, -0.5, 0.5], [0, 0, 1]]),
            np.array([[1, 1, 1, 0], [0, 1, -1, -1]], np.float64), 1)
# Lavin & Gray's F(4x4, 3x3), interpolation points 0, +-1, +-2
F4 = Tiling(4, np.array([[4, 0, -5, 0, 1, 0], [0, -4, -4, 1, 1, 0], [0, 4, -4, -1, 1, 0],
                         [0, -2, -1, 2, 1, 0], [0, 2, -1, -2, 1, 0], [0, 4, 0, -5, 0, 1]], np.float64),
            np.array([[1 / 4, 0, 0], [-1 / 6, -1 / 6, -1 / 6], [-1 / 6, 1 / 6, -1 / 6],
                      [1 / 24, 1 / 12, 1 / 6], [1 / 24, -1 / 12, 1 / 6], [0, 0, 1]]),
            np.array([[1, 1, 1, 1, 1, 0], [0, 1, -1, 2, -2, 0], [0, 1, 1, 4, 4, 0], [0, 1, -1, 8, -8, 1]],
                     np.float64), 1)

# Below this many 2x2 output tiles per image the F2 GEMMs are too thin for BLAS (ResNet-50's
# 7x7 convs: 16 tiles, 10% slower than im2col; its 14x14 convs: 49 tiles, 15% faster).
MIN_TILES = 36
# F4 from this many 4x4 output tiles per image on (ResNet-50's 28x28 maps: 49 tiles; its
# 14x14 maps, 16 tiles of which 23% are padding, are faster in F2).
MIN_F4_TILES = 36

_weights = ArrayCache()       # (weight array, m) -> its U


def _tiles(out, m: int) -> int:
    return -(-out[0] // m) * -(-out[1] // m)


def applies(dtype, w_shape, group: int, strides, dilations, out) -> bool:
    """Whether conv_compute takes this path: computing in float32, 2-D, one group, 3x3
    kernel, stride and dilation 1, enough tiles."""
    return (np.dtype(dtype) == np.float32 and len(w_shape) == 4 and group == 1 and tuple(w_shape[2:]) == (3, 3)
            and tuple(strides) == (1, 1) and tuple(dilations) == (1, 1) and _tiles(out, 2) >= MIN_TILES)


def tiling_for(out) -> Tiling:
    """The tiling a conv with output spatial size `out` (one that `applies`) takes."""
    return F4 if _tiles(out, 4) >= MIN_F4_TILES else F2


def transformed_weights(w: np.ndarray, tiling: Tiling = F2, keep: bool = True) -> np.ndarray:
    """U = G g G^T for every (C_out, C) pair, as (a*a, C_out, C) float32; cached per array
    unless `keep` is False (ge/ops/native.py keeps U packed for its GEMM instead)."""
    hit = _weights.get(w, tiling.m)
    if hit is not None:
        return hit
    g = np.moveaxis(np.asarray(w, np.float64), (2, 3), (0, 1))              # (3, 3, C_out, C)
    u = np.einsum("ik,jl,klab->ijab", tiling.g, tiling.g, g)                 # G g G^T
    a = tiling.m + 2
    u = np.ascontiguousarray(u.reshape(a * a, w.shape[0], w.shape[1]), dtype=np.float32)
    return _weights.put(w, tiling.m, u) if keep else u


def _transform(matrix: np.ndarray, src, dst, tmp, scratch) -> None:
    """dst[i] = sum_j matrix[i, j] * src[j] for arrays of one shape, as whole-array adds and
    scales.  Two rows that agree on some terms and are opposite on the others (P + Q, P - Q:
    the +-k interpolation points of Winograd's matrices) share P and Q when that takes fewer
    passes.  `tmp` and `scratch` are work arrays of the same shape."""
    for i, partner, first, second in _plan(matrix.tobytes(), matrix.shape):
        if partner is None:
            _linear(first, src, dst[i], tmp)
            continue
        _linear(first, src, dst[i], scratch)                     # P
        _linear(second, src, tmp, scratch)                       # Q
        np.subtract(dst[i], tmp, out=dst[partner])
        dst[i] += tmp


@lru_cache(maxsize=32)
def _plan(data: bytes, shape: tuple) -> tuple:
    """(row, partner row or None, terms of the row or of P, terms of Q) for each output row or
    pair of rows, worked out once per matrix."""
    matrix = np.frombuffer(data, np.float64).reshape(shape)
    pending, steps = list(range(shape[0])), []
    while pending:
        i = pending.pop(0)
        partner = next((j for j in pending if _shares(matrix[i], matrix[j])), None)
        if partner is None:
            steps.append((i, None, _groups(matrix[i]), None))
            continue
        pending.remove(partner)
        agree = np.where(matrix[i] == matrix[partner], matrix[i], 0)
        steps.append((i, partner, _groups(agree), _groups(matrix[i] - agree)))
    return tuple(steps)


def _shares(r1: np.ndarray, r2: np.ndarray) -> bool:
    """Whether rows r1 = P + Q, r2 = P - Q take fewer passes as P and Q."""
    nonzero = (r1 != 0) | (r2 != 0)
    agree, opposite = (r1 == r2) & nonzero, (r1 == -r2) & nonzero
    if not (agree | opposite | ~nonzero).all() or not agree.any() or not opposite.any():
        return False
    return _passes(np.where(agree, r1, 0)) + _passes(np.where(opposite, r1, 0)) + 2 < _passes(r1) + _passes(r2)


def _groups(row) -> tuple:
    """The row's terms as ([(mag, [(sign, j)])] for each coefficient magnitude other than 1,
    [(sign, j)] of the unit coefficients)."""
    groups: dict = {}
    for j, c in enumerate(row):
        if c:
            groups.setdefault(abs(float(c)), []).append((bool(c > 0), j))
    return sorted((m, t) for m, t in groups.items() if m != 1.0), groups.get(1.0, [])


def _passes(row) -> int:
    """Whole-array operations `_linear` takes for a row."""
    scaled, unit = _groups(row)
    count = sum(len(terms) + (index > 0) for index, (_, terms) in enumerate(scaled))
    if scaled:
        return count + len(unit)
    return max(1, len(unit) - 1) + (not any(sign for sign, _ in unit))


def _linear(terms, src, out, tmp) -> None:
    """out = sum_j row[j] * src[j] for a row's `_groups`: the terms of each coefficient
    magnitude other than 1 summed (with their signs) and scaled once, then the unit terms
    added: d4 - 4 d2 is two passes, (d3 + d4) - 4 (d1 + d2) four."""
    scaled, unit = terms
    if not scaled and not unit:
        out.fill(0)
        return
    for index, (mag, terms) in enumerate(scaled):
        target = tmp if index else out
        if len(terms) == 1:
            positive, j = terms[0]
            np.multiply(src[j], mag if positive else -mag, out=target)
        else:
            positive = _signed_sum([(sign, src[j]) for sign, j in terms], target)
            np.multiply(target, mag if positive else -mag, out=target)
        if index:
            out += tmp
    if scaled:
        for positive, j in unit:
            (np.add if positive else np.subtract)(out, src[j], out=out)
    elif not _signed_sum([(sign, src[j]) for sign, j in unit], out):
        np.negative(out, out=out)


def _signed_sum(terms, out) -> bool:
    """out = +-sum of the signed terms (len(terms) - 1 passes, one for a single term); returns
    the sign of what was written (False: out holds the negated sum)."""
    positive = [t for s, t in terms if s]
    negative = [t for s, t in terms if not s]
    if not positive:
        positive, negative, sign = negative, [], False
    else:
        sign = True
    if len(positive) > 1:
        np.add(positive[0], positive[1], out=out)
        rest = positive[2:]
    elif negative:
        np.subtract(positive[0], negative[0], out=out)
        rest, negative = [], negative[1:]
    else:
        np.copyto(out, positive[0])
        rest = []
    for t in rest:
        out += t
    for t in negative:
        out -= t
    return sign


def _buffers(n: int, c: int, cout: int, out, tiling: Tiling) -> list:
    """(shape, dtype) of each array conv3x3 takes, in order; the last is its output."""
    m, a = tiling.m, tiling.m + 2
    th, tw = -(-out[0] // m), -(-out[1] // m)
    length, f32 = n * th * tw, np.float32
    return [((n, c, m * th + 2, m * tw + 2), f32), ((a, a, c * length), f32), ((a, a, c * length), f32),
            ((2, a, c * length), f32), ((a * a, cout, length), f32), ((m, a, cout * length), f32),
            ((2, a, cout * length), f32), ((m, m, cout * length), f32), ((n, cout, th, m, tw, m), f32)]


def crops(out, tiling: Tiling = None) -> bool:
    """Whether conv3x3's result is a cropped (non-contiguous) view of whole tiles."""
    m = (tiling or tiling_for(out)).m
    return (m * -(-out[0] // m), m * -(-out[1] // m)) != tuple(out)


def workspace_takes(x_shape, w_shape, out, tiling: Tiling = None) -> list:
    """The bytes conv3x3 takes from the workspace (ge/workspace.py), in order; the last holds its output."""
    tiling = tiling or tiling_for(out)
    return [workspace.nbytes(shape, dtype)
            for shape, dtype in _buffers(x_shape[0], x_shape[1], w_shape[0], out, tiling)]


def conv3x3(x: np.ndarray, w: np.ndarray, begin, out, bias=None, tiling: Tiling = None) -> np.ndarray:
    """y = conv(x, w) (+ bias) (N, C_out, *out), stride 1, x padded by `begin` before (and by
    zeros after, as far as `out` needs); float32 in and out.  Its arrays come from the
    forward's workspace (`_buffers`, declared by `workspace_takes`)."""
    tiling = tiling or tiling_for(out)
    m, a = tiling.m, tiling.m + 2
    n, c = x.shape[:2]
    u = transformed_weights(w, tiling)
    cout = u.shape[1]
    th, tw = -(-out[0] // m), -(-out[1] // m)
    shapes = iter(_buffers(n, c, cout, out, tiling))
    xp = workspace.zeros(*next(shapes))
    h, wd = min(x.shape[2], xp.shape[2] - begin[0]), min(x.shape[3], xp.shape[3] - begin[1])
    xp[:, :, begin[0]:begin[0] + h, begin[1]:begin[1] + wd] = x[:, :, :h, :wd]

    # gather the overlapping a x a input tiles as (a, a, C, N, th, tw), then B^T d B in place
    s = xp.strides
    tiles = np.lib.stride_tricks.as_strided(xp, (a, a, c, n, th, tw), (s[2], s[3], s[1], s[0], m * s[2], m * s[3]),
                                            writeable=False)
    d = workspace.empty(*next(shapes))
    np.copyto(d.reshape(tiles.shape), tiles)
    t = workspace.empty(*next(shapes))
    work = workspace.empty(*next(shapes))
    _transform(tiling.bt, d, t, *work)                                       # rows: d[i] is (a, L)
    _transform(tiling.bt, t.swapaxes(0, 1), d.swapaxes(0, 1), *work)        # columns
    prod = np.matmul(u, d.reshape(a * a, c, n * th * tw), out=workspace.empty(*next(shapes)))
    prod = prod.reshape(a, a, cout * n * th * tw)
    if bias is not None:
        point = prod[tiling.bias_point, tiling.bias_point].reshape(cout, -1)
        point += np.asarray(bias, np.float32).reshape(cout, 1)

    # A^T m A, rows then columns, in compact (m, m, C_out, N, th, tw) tiles, then scattered
    r = workspace.empty(*next(shapes))
    work = workspace.empty(*next(shapes))
    _transform(tiling.at, prod, r, *work)
    yt = workspace.empty(*next(shapes))
    _transform(tiling.at, r.swapaxes(0, 1), yt.swapaxes(0, 1), *work[:, :m])
    y = workspace.empty(*next(shapes))
    np.copyto(y.transpose(3, 5, 1, 0, 2, 4), yt.reshape(m, m, cout, n, th, tw))
    y = y.reshape(n, cout, m * th, m * tw)
    if (m * th, m * tw) != tuple(out):
        y = y[:, :, :out[0], :out[1]]
    return y
