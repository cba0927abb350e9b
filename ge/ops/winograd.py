"""3x3 stride-1 convolution by Winograd's minimal filtering F(2x2, 3x3): each 2x2 output tile
from a 4x4 input tile with 16 multiplies per channel pair instead of 36.

Why: the numeric executor spends most of a CNN forward in BLAS GEMMs, and the 3x3 stride-1
convs are 37% of ResNet-50's multiplies.  F(2x2, 3x3) turns a conv into 16
independent GEMMs (one per point of the 4x4 transform domain) of 2.25x fewer multiplies in
all, and replaces the 9x im2col copy of the input with a 4x transform of it.  Its
transforms hold only 0, +-1 and +-1/2, so its rounding stays at the level of the direct
product (measured on ResNet-50's shapes: max error / max |y| 4-7e-7 against a float64
reference, im2col 4-6e-7); larger tiles (F(4x4, 3x3)) would need fewer multiplies but cost
more transform passes than they save in numpy and round 10-20x worse.

Layout: V[p] (C, N*tiles) for transform point p, U[p] (C_out, C) the transformed weights,
M[p] = U[p] @ V[p]; the output transform writes the four pixels of each tile straight into
the NCHW output.  U is computed in float64 once per weight array and kept as long as the
array lives (the executor hands each kernel the same constant every forward, and has the
conv kernels compute it when it loads the model: `OpDef.prepare`).
"""
from __future__ import annotations

import weakref

import numpy as np

# Lavin & Gray's F(2x2, 3x3): Y = A^T [(G g G^T) * (B^T d B)] A
_G = np.array([[1.0, 0.0, 0.0], [0.5, 0.5, 0.5], [0.5, -0.5, 0.5], [0.0, 0.0, 1.0]])

# Below this many 2x2 output tiles per image the 16 GEMMs are too thin for BLAS (ResNet-50's
# 7x7 convs: 16 tiles, 10% slower than im2col; its 14x14 convs: 49 tiles, 15% faster).
MIN_TILES = 36

_weights: dict = {}           # id(weight array) -> (weakref to it, U)


def applies(dtype, w_shape, group: int, strides, dilations, out) -> bool:
    """Whether conv_compute takes this path: computing in float32, 2-D, one group, 3x3
    kernel, stride and dilation 1, enough tiles."""
    return (np.dtype(dtype) == np.float32 and len(w_shape) == 4 and group == 1 and tuple(w_shape[2:]) == (3, 3)
            and tuple(strides) == (1, 1) and tuple(dilations) == (1, 1)
            and ((out[0] + 1) // 2) * ((out[1] + 1) // 2) >= MIN_TILES)


def transformed_weights(w: np.ndarray) -> np.ndarray:
    """U = G g G^T for every (C_out, C) pair, as (16, C_out, C) float32; cached per array."""
    key = id(w)
    hit = _weights.get(key)
    if hit is not None and hit[0]() is w:
        return hit[1]
    g = np.empty((3, 3) + w.shape[:2])                             # float64, taps first
    g[...] = np.moveaxis(w, (2, 3), (0, 1))
    u = _apply_g(_apply_g(g).swapaxes(0, 1)).swapaxes(0, 1)       # G g G^T: rows, then columns
    u = np.ascontiguousarray(u.reshape(16, w.shape[0], w.shape[1]), dtype=np.float32)
    try:
        ref = weakref.ref(w, lambda _, key=key: _weights.pop(key, None))
    except TypeError:          # not weak-referenceable: computed again next time
        return u
    _weights[key] = (ref, u)
    return u


def _apply_g(g: np.ndarray) -> np.ndarray:
    """G @ g along the first axis (3 -> 4), as the few adds G's rows stand for."""
    outer = g[0] + g[2]
    out = np.empty((4,) + g.shape[1:])
    out[0], out[3] = g[0], g[2]
    np.add(outer, g[1], out=out[1])
    np.subtract(outer, g[1], out=out[2])
    out[1:3] *= 0.5
    return out


def conv3x3(x: np.ndarray, w: np.ndarray, begin, out) -> np.ndarray:
    """y = conv(x, w) (N, C_out, *out), stride 1, x padded by `begin` before (and by zeros
    after, as far as `out` needs)."""
    n, c = x.shape[:2]
    u = transformed_weights(w)
    cout = u.shape[1]
    th, tw = (out[0] + 1) // 2, (out[1] + 1) // 2
    rows, cols = 2 * th + 2, 2 * tw + 2
    xp = np.zeros((n, c, rows, cols), np.float32)
    h, wd = min(x.shape[2], rows - begin[0]), min(x.shape[3], cols - begin[1])
    xp[:, :, begin[0]:begin[0] + h, begin[1]:begin[1] + wd] = x[:, :, :h, :wd]

    # input transform B^T d B, rows first (whole padded rows), then columns
    d = [xp[:, :, i:i + 2 * th:2, :] for i in range(4)]
    t = np.empty((4, n, c, th, cols), np.float32)
    np.subtract(d[0], d[2], out=t[0])
    np.add(d[1], d[2], out=t[1])
    np.subtract(d[2], d[1], out=t[2])
    np.subtract(d[1], d[3], out=t[3])
    v = np.empty((4, 4, c, n, th, tw), np.float32)
    for i in range(4):
        e = [t[i][..., j:j + 2 * tw:2] for j in range(4)]
        vi = v[i].transpose(0, 2, 1, 3, 4)                      # (4, N, C, th, tw) view of V
        np.subtract(e[0], e[2], out=vi[0])
        np.add(e[1], e[2], out=vi[1])
        np.subtract(e[2], e[1], out=vi[2])
        np.subtract(e[1], e[3], out=vi[3])

    m = np.matmul(u, v.reshape(16, c, n * th * tw)).reshape(4, 4, cout, n, th, tw)

    # output transform A^T m A, rows first, each tile's 2x2 pixels written in place
    r0 = np.add(m[0], m[1])
    r0 += m[2]
    r1 = np.subtract(m[1], m[2])
    r1 -= m[3]
    y = np.empty((n, cout, 2 * th, 2 * tw), np.float32)
    for a, r in enumerate((r0, r1)):
        ya = y[:, :, a::2, :].transpose(1, 0, 2, 3)             # (C_out, N, th, 2 tw)
        even, odd = ya[..., 0::2], ya[..., 1::2]
        np.add(r[0], r[1], out=even)
        even += r[2]
        np.subtract(r[1], r[2], out=odd)
        odd -= r[3]
    if (2 * th, 2 * tw) != tuple(out):
        y = y[:, :, :out[0], :out[1]]
    return y
