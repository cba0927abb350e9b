"""Cube ops and pooling: Conv, ConvTranspose, MaxPool, AveragePool, Global*Pool, MatMul, Gemm.

Convolution goes through im2col + one BLAS matmul per call (grouped convs batch their groups
in the same matmul); float32 3x3 stride-1 convs with enough output pixels take Winograd's
F(4x4, 3x3) or F(2x2, 3x3) instead (ge/ops/winograd.py: 4x or 2.25x fewer multiplies); depthwise convs take a
tap loop of vectorised multiply-adds instead, because a 1-row GEMM per channel wastes BLAS.
Pooling loops over kernel taps (at most prod(kernel_shape) vectorised passes, a MaxPool
without Indices one axis at a time), never over pixels.  float16 inputs of matrix ops are
widened to float32 for the accumulation (as the cube unit's fp32 accumulator) and the result
is cast back to float16; average pooling of float16 sums in float32 and casts back, max
pooling stays in the input dtype (exact).
"""
from __future__ import annotations

import itertools
import math
from typing import NamedTuple, Optional

import numpy as np

from ge import workspace
from ge.ops import native, openblas, winograd
from ge.ops.common import broadcast_shape
from ge.ops.registry import OpDef, OpKind, TensorType, register
from ge.errors import InvalidNode, invalid_attr

# -- shared geometry of sliding-window ops ------------------------------------------------


def _per_axis(attrs: dict, name: str, n: int, default: int) -> list:
    """Attribute `name` with one int per spatial axis (`default` on each when absent)."""
    value = attrs.get(name)
    if value is None or (hasattr(value, "__len__") and len(value) == 0):
        return [default] * n
    value = [int(v) for v in (value if isinstance(value, (list, tuple)) else np.atleast_1d(value))]
    if len(value) != n:
        raise InvalidNode(f"attribute [{name}] has {len(value)} values, the op has {n} "
                          "spatial axes", "Give one value per spatial axis.")
    return value


def _steps(attrs: dict, nd: int) -> tuple:
    """(strides, dilations) of a sliding window op; each must be at least 1."""
    strides = _per_axis(attrs, "strides", nd, 1)
    dilations = _per_axis(attrs, "dilations", nd, 1)
    if any(v < 1 for v in strides + dilations):
        raise InvalidNode(f"strides {strides} and dilations {dilations} must be at least 1",
                          "Use positive strides and dilations.")
    return strides, dilations


class Window(NamedTuple):
    """Geometry of a sliding window op over the spatial axes."""

    begin: list          # pads before
    end: list            # pads after
    extra: list          # ceil_mode: extra end padding the last window needs
    out: list            # output sizes
    strides: list
    dilations: list


def _window_geometry(in_spatial, kernel, attrs, ceil_mode=False) -> Window:
    """Pads (begin, end) and output sizes of a sliding window op, following auto_pad.
    For ceil_mode, the extra end padding needed by the last window is `extra`."""
    nd = len(in_spatial)
    strides, dilations = _steps(attrs, nd)
    auto_pad = attrs.get("auto_pad", "NOTSET")
    if isinstance(auto_pad, bytes):
        auto_pad = auto_pad.decode()
    span = [(k - 1) * d + 1 for k, d in zip(kernel, dilations)]
    if auto_pad in ("SAME_UPPER", "SAME_LOWER"):
        out = [-(-i // s) for i, s in zip(in_spatial, strides)]
        total = [max(0, (o - 1) * s + w - i) for o, s, w, i in zip(out, strides, span, in_spatial)]
        small = [t // 2 for t in total]
        if auto_pad == "SAME_UPPER":
            begin, end = small, [t - b for t, b in zip(total, small)]
        else:
            begin, end = [t - b for t, b in zip(total, small)], small
    elif auto_pad in ("VALID", "NOTSET", ""):
        pads = [0] * (2 * nd) if auto_pad == "VALID" else _per_axis(attrs, "pads", 2 * nd, 0)
        if any(p < 0 for p in pads):
            raise invalid_attr("Conv/Pool", "pads", pads, "pads must not be negative.",
                               "Use non-negative pads (crop with Slice instead).")
        begin, end = pads[:nd], pads[nd:]
        out = []
        for i, w, s, b, e in zip(in_spatial, span, strides, begin, end):
            if ceil_mode:
                o = -(-(i + b + e - w) // s) + 1
                if (o - 1) * s >= i + b:   # last window would start in the end padding
                    o -= 1
            else:
                o = (i + b + e - w) // s + 1
            out.append(o)
    else:
        raise InvalidNode(f"auto_pad [{auto_pad}] is not supported",
                          "Use NOTSET, SAME_UPPER, SAME_LOWER or VALID.")
    if any(o <= 0 for o in out):
        raise InvalidNode(f"window op output would be empty: input {tuple(in_spatial)}, "
                          f"kernel {tuple(kernel)}, pads {begin + end}, strides {strides}",
                          "Check kernel_shape, pads and strides against the input shape.")
    extra = [max(0, (o - 1) * s + w - (i + b + e))
             for o, s, w, i, b, e in zip(out, strides, span, in_spatial, begin, end)]
    return Window(begin, end, extra, out, strides, dilations)


def _pad_spatial(x: np.ndarray, begin, end, value, take=None) -> np.ndarray:
    """x with `value` around its spatial axes: one filled buffer and one copy into it (what
    np.pad does for a constant, without its per-axis passes).  `take`: workspace.zeros, for
    the conv whose declaration (`conv_workspace`) counts the buffer."""
    if not any(begin) and not any(end):
        return x
    if min(begin) < 0 or min(end) < 0:
        return np.pad(x, [(0, 0), (0, 0)] + list(zip(begin, end)), mode="constant", constant_values=value)
    shape = x.shape[:2] + tuple(d + b + e for d, b, e in zip(x.shape[2:], begin, end))
    if take is not None and value == 0:
        out = take(shape, x.dtype)
    else:
        out = np.zeros(shape, x.dtype) if value == 0 else np.full(shape, value, x.dtype)
    out[(slice(None), slice(None)) + tuple(slice(b, b + d) for b, d in zip(begin, x.shape[2:]))] = x
    return out


def _tap(xp: np.ndarray, offset, out, strides) -> np.ndarray:
    """The strided view of padded input `xp` that kernel tap `offset` reads for every output."""
    index = (slice(None), slice(None)) + tuple(
        slice(o, o + (n - 1) * s + 1, s) for o, n, s in zip(offset, out, strides))
    return xp[index]


def _taps(kernel, dilations):
    return [tuple(k * d for k, d in zip(tap, dilations))
            for tap in itertools.product(*[range(k) for k in kernel])]


def _windows(xp: np.ndarray, out, kernel, strides, dilations) -> np.ndarray:
    """View (N, C, *kernel, *out) of every window of padded input `xp` (no copy)."""
    st = xp.strides
    nd = len(out)
    shape = xp.shape[:2] + tuple(kernel) + tuple(out)
    strides = st[:2] + tuple(st[2 + i] * dilations[i] for i in range(nd)) \
        + tuple(st[2 + i] * strides[i] for i in range(nd))
    return np.lib.stride_tricks.as_strided(xp, shape, strides, writeable=False)


def _compute_dtype(dtype):
    """float16 is widened to float32 for the arithmetic (the cube's fp32 accumulator); 8-bit
    integers (GE's int8 cube ops, as in AMCT deploy graphs) are summed exactly in float64."""
    if is_int8(dtype):
        return np.dtype(np.float64)
    return np.dtype(np.float32) if np.dtype(dtype) == np.float16 else np.dtype(dtype)


def is_int8(dtype) -> bool:
    """An 8-bit integer: the cube's int8 x int8 -> int32 path."""
    dt = np.dtype(dtype)
    return dt.kind in "iu" and dt.itemsize == 1


def cube_result_dtype(dtype) -> np.dtype:
    """What a Conv/MatMul/Gemm writes: its input's dtype, int32 for int8 inputs (GE's Conv2D,
    MatMul and FullyConnection with DT_INT8 data accumulate into DT_INT32)."""
    return np.dtype(np.int32) if is_int8(dtype) else np.dtype(dtype)


def _to_result(y: np.ndarray, in_dtype) -> np.ndarray:
    if is_int8(in_dtype):
        return np.rint(y).astype(np.int64).astype(np.int32)
    return y.astype(in_dtype, copy=False)


def _bias_shape(nd: int):
    return (-1,) + (1,) * nd


# -- Conv ------------------------------------------------------------------------------------


def _conv_check(x_shape, w_shape, group):
    if len(x_shape) < 3 or len(w_shape) != len(x_shape):
        raise InvalidNode(f"Conv input rank {len(x_shape)} and weight rank {len(w_shape)} "
                          "must be equal and at least 3", "Use NCW, NCHW or NCDHW data.")
    if group < 1:
        raise InvalidNode(f"Conv group {group} must be at least 1", "Fix the group attribute.")
    if x_shape[1] != w_shape[1] * group or w_shape[0] % group:
        raise InvalidNode(f"Conv channels do not match: input C={x_shape[1]}, weight "
                          f"{tuple(w_shape)}, group={group}",
                          "Weight must be [C_out, C_in/group, k...] with C_out divisible by group.")


_DEPTHWISE_BLOCK = 1 << 16   # output elements per channel block: keeps the tap loop in cache


def _phases(xp, strides):
    """Split padded input (N, C, *spatial) into its prod(strides) decimated phases, so that a
    strided window op becomes a unit-stride one: returns (N, C, n_phases, *phase_shape)."""
    n, c = xp.shape[:2]
    nd = len(strides)
    if all(s == 1 for s in strides):
        return xp.reshape((n, c, 1) + xp.shape[2:])
    extra = [(-d) % s for d, s in zip(xp.shape[2:], strides)]
    if any(extra):
        xp = np.pad(xp, [(0, 0), (0, 0)] + [(0, e) for e in extra])
    q = [d // s for d, s in zip(xp.shape[2:], strides)]
    split = xp.reshape((n, c) + sum(((qi, s) for qi, s in zip(q, strides)), ()))
    order = (0, 1) + tuple(3 + 2 * i for i in range(nd)) + tuple(2 + 2 * i for i in range(nd))
    return np.ascontiguousarray(split.transpose(order)).reshape((n, c, -1) + tuple(q))


def _depthwise(xp, wt, out, kernel, strides, dilations):
    """Depthwise conv (group == C, multiplier m = wt.shape[1]): for each block of channels,
    one vectorised multiply-add per kernel tap over the whole block.  Strides are removed by
    a phase split; then every tap reads one contiguous run of the flattened phase ("wide
    rows": each output row spans the full phase width and is cropped at the end), so numpy's
    inner loops stay long."""
    n, channels, m = xp.shape[0], wt.shape[0], wt.shape[1]
    phases = _phases(xp, strides)
    q = phases.shape[3:]
    nd = len(out)
    flat = [math.prod(q[i + 1:]) for i in range(nd)]
    plane, length = math.prod(q), out[0] * flat[0]
    src = [int(np.ravel_multi_index(tuple(o % s for o, s in zip(off, strides)), strides)) * plane
           + sum((o // s) * f for o, s, f in zip(off, strides, flat))
           for off in _taps(kernel, dilations)]
    xs = phases.reshape(n, channels, -1)
    tail = max(src) + length - xs.shape[-1]
    if tail > 0:
        xs = np.pad(xs, [(0, 0), (0, 0), (0, tail)])
    y = np.empty((n, channels, m, length), dtype=wt.dtype)
    chunk = max(1, _DEPTHWISE_BLOCK // (n * m * length))
    for c0 in range(0, channels, chunk):
        c1 = min(channels, c0 + chunk)
        block = y[:, c0:c1]
        tmp = np.empty_like(block)
        for t, start in enumerate(src):
            view = xs[:, c0:c1, None, start:start + length]
            wv = wt[c0:c1, :, t].reshape(1, -1, m, 1)
            if t == 0:
                np.multiply(view, wv, out=block)
            else:
                np.multiply(view, wv, out=tmp)
                block += tmp
    y = y.reshape((n, channels, m, out[0]) + tuple(q[1:]))
    return y[(Ellipsis,) + tuple(slice(0, o) for o in out[1:])]


def conv_compute(inputs, attrs):
    b = inputs[2] if len(inputs) > 2 else None
    return [conv_forward(inputs[0], inputs[1], attrs, b)]


def conv_output_shape(x_shape, w_shape, attrs) -> tuple:
    return tuple(x_shape[:1]) + (w_shape[0],) + tuple(_window_geometry(tuple(x_shape[2:]), list(w_shape[2:]),
                                                                         attrs).out)


def conv_forward(x, w, attrs, bias=None, base=None, base_owned: bool = False, relu: bool = False) -> np.ndarray:
    """conv(x, w) + bias (+ base), ReLU'd if `relu`, in x's dtype (float16 computed in
    float32, 8-bit integers exactly, to int32).  `base`, for the fused conv blocks
    (codegen/fused/conv.py): an array of the output's shape and compute dtype -- a residual,
    or the main conv's output that ResNet's downsample conv accumulates onto (`base_owned`:
    the caller reads it no more, so it may become the result).  Where the product is
    OpenBLAS's GEMM (ge/ops/openblas.py) bias and base go into its accumulator first
    (C = base + bias; C += W @ cols) rather than being added by passes over the output
    afterwards.  float32 2-D one-group convs run as one call of the compiled kernels
    (ge/ops/native.py) when they are built, the whole epilogue inside it."""
    group = int(attrs.get("group", 1))
    _conv_check(x.shape, w.shape, group)
    out_dtype = x.dtype
    ct = _compute_dtype(x.dtype)
    x, wc = workspace.astype(x, ct), w.astype(ct, copy=False)
    nd = x.ndim - 2
    kernel = list(w.shape[2:])
    win = _window_geometry(x.shape[2:], kernel, attrs)
    begin, end, out, strides, dilations = win.begin, win.end, win.out, win.strides, win.dilations
    n, c = x.shape[:2]
    cout = w.shape[0]
    cg, mg = c // group, cout // group
    p = math.prod(out)
    shape = (n, cout) + tuple(out)
    if base is not None and tuple(base.shape) != shape:
        raise InvalidNode(f"Conv accumulator shape {list(base.shape)} differs from the output {list(shape)}",
                          "Recompile the model with this version of atc_py.")
    if _takes_native(ct, x.shape, w.shape, group):
        return _conv_result(_native_conv(x, w, win, bias, base, base_owned, relu), out_dtype)
    b = bias.astype(ct, copy=False).reshape(_bias_shape(nd)) if bias is not None else None
    if winograd.applies(ct, w.shape, group, strides, dilations, out):
        y = winograd.conv3x3(x, w, begin, out, bias)           # U cached per weight array as given
        return _conv_result(_relu(_added(y, None, base), relu), out_dtype)
    xp = _pad_spatial(x, begin, end, 0, workspace.zeros)
    if group > 1 and cg == 1:
        y = _depthwise(xp, wc.reshape(group, mg, -1), out, kernel, strides, dilations).reshape(shape)
        return _conv_result(_relu(_added(y, b, base), relu), out_dtype)
    if all(k == 1 for k in kernel):
        cols = workspace.contiguous(_tap(xp, [0] * nd, out, strides)).reshape(n, group, cg, p)  # a view at stride 1
    else:
        cols = workspace.contiguous(_windows(xp, out, kernel, strides, dilations)).reshape(
            n, group, cg * math.prod(kernel), p)                                                # im2col
    if group > 1:
        y = np.matmul(wc.reshape(group, mg, -1), cols).reshape(shape)        # (N, G, Mg, P) via BLAS
        return _conv_result(_relu(_added(y, b, base), relu), out_dtype)
    y = _accumulator(shape, ct, b, base, base_owned)
    y2, w2 = y.reshape(n, cout, p), wc.reshape(cout, -1)
    for i in range(n):
        openblas.gemm_into(w2, cols[i, 0], y2[i], accumulate=b is not None or base is not None)
    return _conv_result(_relu(y, relu), out_dtype)


def _conv_result(y: np.ndarray, in_dtype) -> np.ndarray:
    """_to_result, a float cast made in the workspace."""
    return _to_result(y, in_dtype) if is_int8(in_dtype) else workspace.astype(y, in_dtype)


def conv_workspace(x_shape, x_dtype, w_shape, attrs, base: Optional[bool] = None) -> tuple:
    """(bytes conv_forward takes from the workspace (ge/workspace.py), in order; the index
    of the one its result is, or None: an array of its own, or the base it was given to own;
    whether that result is C-contiguous).  `base`: None without one, else whether
    conv_forward may own it (`base_owned`)."""
    ct = _compute_dtype(x_dtype)
    takes = [] if np.dtype(x_dtype) == ct else [workspace.nbytes(x_shape, ct)]
    group = int(attrs.get("group", 1))
    kernel = list(w_shape[2:])
    win = _window_geometry(tuple(x_shape[2:]), kernel, attrs)
    shape = tuple(x_shape[:1]) + (w_shape[0],) + tuple(win.out)
    cast = [] if is_int8(x_dtype) or np.dtype(x_dtype) == ct else [workspace.nbytes(shape, x_dtype)]
    if _takes_native(ct, x_shape, w_shape, group):
        native_takes, result = _native_workspace(x_shape, w_shape, win, base)
        result = None if result is None else len(takes) + result
        takes += native_takes
        return takes + cast, (len(takes) if cast else result), True
    if winograd.applies(ct, w_shape, group, win.strides, win.dilations, win.out):
        takes += winograd.workspace_takes(x_shape, w_shape, win.out)
        return takes + cast, len(takes) + len(cast) - 1, bool(cast) or not winograd.crops(win.out)
    padded = tuple(x_shape[:2]) + tuple(d + b + e for d, b, e in zip(x_shape[2:], win.begin, win.end))
    if (any(win.begin) or any(win.end)) and min(win.begin) >= 0 and min(win.end) >= 0:
        takes.append(workspace.nbytes(padded, ct))
    if group > 1 and x_shape[1] // group == 1:
        return takes + cast, (len(takes) if cast else None), True
    if not all(k == 1 for k in kernel) or tuple(win.out) != tuple(padded[2:]):   # im2col, or a strided 1x1 tap
        takes.append(workspace.nbytes(tuple(x_shape[:2]) + tuple(kernel) + tuple(win.out), ct))
    if group > 1:
        return takes + cast, (len(takes) if cast else None), True
    if base is not True:
        takes.append(workspace.nbytes(shape, ct))
    result = None if base is True or is_int8(x_dtype) else len(takes) - 1
    return takes + cast, (len(takes) if cast else result), True


def _takes_native(ct, x_shape, w_shape, group: int) -> bool:
    """Whether conv_forward runs this conv as one call of the compiled kernels: float32, 2-D,
    one group, no empty dimension (they take none; the numpy path computes a batch of 0)."""
    return ct == np.float32 and len(x_shape) == 4 and group == 1 and 0 not in tuple(x_shape) + tuple(w_shape) \
        and native.enabled()


def _native_workspace(x_shape, w_shape, win: Window, base: Optional[bool]) -> tuple:
    """(the takes of `_native_conv` (ge/ops/native.py: its output, then its work area), the
    index of its output or None when it writes into the base it owns)."""
    if winograd.applies(np.float32, w_shape, 1, win.strides, win.dilations, win.out):
        m = winograd.tiling_for(win.out).m
        tiles = x_shape[0] * -(-win.out[0] // m) * -(-win.out[1] // m)
        y = workspace.nbytes((x_shape[0], w_shape[0]) + tuple(win.out), np.float32)
        return [y, native.winograd_work(m, x_shape[1], w_shape[0], tiles) * 4], 0
    takes = [] if base is True else [workspace.nbytes((x_shape[0], w_shape[0]) + tuple(win.out), np.float32)]
    work = native.gemm_work(x_shape, w_shape, win.begin, win.out, win.strides)
    return takes + ([work * 4] if work else []), (None if base is True else 0)


def _native_conv(x, w, win: Window, bias, base, base_owned: bool, relu: bool) -> np.ndarray:
    """The float32 2-D one-group conv as one call of the compiled kernels: Winograd where the
    numpy path takes it (same tiling), else im2col + GEMM, bias, base and ReLU inside."""
    out, begin = win.out, win.begin
    if base is not None:
        base = base.astype(np.float32, copy=False)
    if winograd.applies(np.float32, w.shape, 1, win.strides, win.dilations, out):
        tiling = winograd.tiling_for(out)
        return native.winograd3x3(x, w, tiling, begin, out, bias, base, relu)
    into = base if base_owned and base is not None and base.flags.c_contiguous and base.flags.writeable else None
    return native.conv_gemm(x, w, begin, out, win.strides, win.dilations, bias, base,
                            relu, into)


def _relu(y: np.ndarray, relu: bool) -> np.ndarray:
    """y ReLU'd in place (y is the conv's own output) when asked."""
    if relu:
        np.maximum(y, 0, out=y)
    return y


def _added(y: np.ndarray, bias, base) -> np.ndarray:
    """y (this conv's own product) + bias + base, in place: the paths whose product is not
    an OpenBLAS GEMM we can accumulate into (`_accumulator`)."""
    if bias is not None:
        y += bias
    if base is not None:
        y += base
    return y


def _accumulator(shape, dtype, bias, base, base_owned: bool) -> np.ndarray:
    """A C-contiguous output holding base + bias (or the bias, or nothing yet)."""
    if base is not None:
        base = base.astype(dtype, copy=False)
        if base_owned and base.flags.c_contiguous and base.flags.writeable:
            if bias is not None:
                base += bias
            return base
        y = workspace.empty(shape, dtype)
        if bias is not None:
            np.add(base, bias, out=y)
        else:
            np.copyto(y, base)
        return y
    y = workspace.empty(shape, dtype)
    if bias is not None:
        y[...] = bias
    return y


def conv_prepare(inputs, attrs) -> None:
    """At load: the Winograd weights of a conv that will take that path (static input shape,
    constant weight), so the first forward costs what the others do."""
    x, w = inputs[0], inputs[1]
    shape = getattr(x, "shape", None)
    if not isinstance(w, np.ndarray) or getattr(x, "dtype", None) is None or shape is None \
            or not all(isinstance(d, int) for d in shape) or len(shape) != w.ndim:
        return
    try:
        win = _window_geometry(tuple(shape[2:]), list(w.shape[2:]), attrs)
    except InvalidNode:
        return
    ct, group = _compute_dtype(x.dtype), int(attrs.get("group", 1))
    wino = winograd.applies(ct, w.shape, group, win.strides, win.dilations, win.out)
    packed = None
    if _takes_native(ct, shape, w.shape, group) and native.packing():
        packed = native.packed_weights(w, winograd.tiling_for(win.out) if wino else None)  # what the GEMMs read
    if wino and packed is None:     # OpenBLAS's GEMMs (or numpy's) read U
        winograd.transformed_weights(w, winograd.tiling_for(win.out))


def _kernel_and_bias_check(op, inputs, attrs, channels_out):
    """kernel_shape (when given) must be the weight's spatial dims, and the bias (when given)
    one value per output channel: onnxruntime refuses both mismatches."""
    w = inputs[1]
    kernel = attrs.get("kernel_shape")
    if kernel is not None and len(kernel) and [int(k) for k in kernel] != list(w.shape[2:]):
        raise InvalidNode(f"{op} kernel_shape {list(kernel)} does not match the weight's spatial dims "
                          f"{list(w.shape[2:])}", "Drop kernel_shape or make it match the weight.")
    b = inputs[2] if len(inputs) > 2 else None
    if b is not None and (len(b.shape) != 1 or b.shape[0] != channels_out):
        raise InvalidNode(f"{op} bias of shape {tuple(b.shape)} must be ({channels_out},), one value per output "
                          "channel", "Fix the bias input.")


def conv_infer(inputs, attrs):
    x, w = inputs[0], inputs[1]
    group = int(attrs.get("group", 1))
    _conv_check(x.shape, w.shape, group)
    _kernel_and_bias_check("Conv", inputs, attrs, w.shape[0])
    out = _window_geometry(x.shape[2:], list(w.shape[2:]), attrs).out
    return [TensorType(cube_result_dtype(x.dtype), (x.shape[0], w.shape[0]) + tuple(out))]


def conv_compute_workspace(inputs, attrs) -> list:
    """conv_compute's Takes (ge/workspace.py): conv_forward's, its result flagged as the output."""
    takes, result, _ = conv_workspace(inputs[0].shape, inputs[0].dtype, inputs[1].shape, attrs)
    return [workspace.Take(n, i == result) for i, n in enumerate(takes)]


register(OpDef("Conv", OpKind.OUT_EWISE_FUSABLE, conv_compute, conv_infer, prepare=conv_prepare,
               workspace=conv_compute_workspace))


# -- ConvTranspose ---------------------------------------------------------------------------


class TransposedWindow(NamedTuple):
    kernel: list
    strides: list
    dilations: list
    begin: list          # output cropped at the start
    out: list            # output sizes
    full: list           # sizes before cropping


def _convt_geometry(in_spatial, w_shape, attrs) -> TransposedWindow:
    nd = len(in_spatial)
    kernel = list(w_shape[2:])
    strides, dilations = _steps(attrs, nd)
    opad = _per_axis(attrs, "output_padding", nd, 0)
    span = [(k - 1) * d + 1 for k, d in zip(kernel, dilations)]
    full = [(i - 1) * s + w + op for i, s, w, op in zip(in_spatial, strides, span, opad)]
    auto_pad = attrs.get("auto_pad", "NOTSET")
    output_shape = attrs.get("output_shape")
    if output_shape is not None and len(output_shape) or auto_pad in ("SAME_UPPER", "SAME_LOWER"):
        if output_shape is not None and len(output_shape):
            out = [int(v) for v in list(output_shape)[-nd:]]
        else:
            out = [i * s for i, s in zip(in_spatial, strides)]
        total = [max(0, f - o) for f, o in zip(full, out)]
        # ONNX: SAME_UPPER puts the odd pad at the end, anything else at the start.
        if auto_pad == "SAME_UPPER":
            begin = [t // 2 for t in total]
        else:
            begin = [t - t // 2 for t in total]
    else:
        pads = [0] * (2 * nd) if auto_pad == "VALID" else _per_axis(attrs, "pads", 2 * nd, 0)
        begin = pads[:nd]
        out = [f - b - e for f, b, e in zip(full, pads[:nd], pads[nd:])]
    return TransposedWindow(kernel, strides, dilations, begin, out, full)


def conv_transpose_compute(inputs, attrs):
    x, w = inputs[0], inputs[1]
    b = inputs[2] if len(inputs) > 2 else None
    group = int(attrs.get("group", 1))
    out_dtype = x.dtype
    ct = _compute_dtype(x.dtype)
    x, w = x.astype(ct, copy=False), w.astype(ct, copy=False)
    nd = x.ndim - 2
    n, c = x.shape[:2]
    in_spatial = list(x.shape[2:])
    kernel, strides, dilations, begin, out, full = _convt_geometry(in_spatial, w.shape, attrs)
    cg, mg = c // group, w.shape[1]
    cout = mg * group
    k = math.prod(kernel)
    # cols[n, g, m, t, p] = sum_c w[g, c, m, t] * x[n, g, c, p]   (one BLAS matmul)
    wg = w.reshape(group, cg, mg * k).transpose(0, 2, 1)
    cols = np.matmul(wg, x.reshape(n, group, cg, -1)).reshape((n, cout, k) + tuple(in_spatial))
    size = [max(f, bb + o) for f, bb, o in zip(full, begin, out)]
    y = np.zeros((n, cout) + tuple(size), dtype=ct)
    for t, offset in enumerate(_taps(kernel, dilations)):   # col2im: one scatter-add per tap
        _tap(y, offset, in_spatial, strides)[...] += cols[:, :, t]
    y = y[(slice(None), slice(None)) + tuple(slice(bb, bb + o) for bb, o in zip(begin, out))]
    if b is not None:
        y = y + b.astype(ct, copy=False).reshape(_bias_shape(nd))
    return [np.ascontiguousarray(y).astype(out_dtype, copy=False)]


def conv_transpose_infer(inputs, attrs):
    x, w = inputs[0], inputs[1]
    group = int(attrs.get("group", 1))
    if len(x.shape) < 3 or len(w.shape) != len(x.shape) or group < 1 or x.shape[1] != w.shape[0]:
        raise InvalidNode(f"ConvTranspose input {tuple(x.shape)} and weight {tuple(w.shape)} with group {group}: "
                          "ranks must be equal and at least 3, group at least 1, and the weight's first "
                          "dim the input's channels", "Weight must be [C_in, C_out/group, k...].")
    _kernel_and_bias_check("ConvTranspose", inputs, attrs, w.shape[1] * group)
    nd = len(x.shape) - 2
    strides, dilations = _steps(attrs, nd)
    opad = _per_axis(attrs, "output_padding", nd, 0)
    if any(not 0 <= p < max(s, d) for p, s, d in zip(opad, strides, dilations)):
        raise invalid_attr("ConvTranspose", "output_padding", opad, "each value must be at least 0 and less than "
                           f"max(stride, dilation) of its axis (strides {strides}, dilations {dilations}).")
    out = _convt_geometry(list(x.shape[2:]), w.shape, attrs).out
    return [TensorType(np.dtype(x.dtype), (x.shape[0], w.shape[1] * group) + tuple(out))]


register(OpDef("ConvTranspose", OpKind.OUT_EWISE_FUSABLE, conv_transpose_compute, conv_transpose_infer))


# -- Pooling ---------------------------------------------------------------------------------


def pool_kernel_shape(attrs, nd):
    kernel = attrs.get("kernel_shape")
    if kernel is None or len(kernel) != nd or any(int(k) < 1 for k in kernel):
        raise InvalidNode(f"pooling needs kernel_shape with {nd} values of at least 1, got {kernel}",
                          "Set kernel_shape on the pooling node.")
    return [int(k) for k in kernel]


def _pool_geometry(x_shape, attrs) -> tuple:
    """(kernel, Window) of a pooling op.  Explicit pads must be smaller than the kernel, as
    onnxruntime requires (a window of padding only has no value to pool)."""
    nd = len(x_shape) - 2
    kernel = pool_kernel_shape(attrs, nd)
    auto_pad = attrs.get("auto_pad", "NOTSET")
    if (auto_pad.decode() if isinstance(auto_pad, bytes) else auto_pad) in ("NOTSET", ""):
        pads = _per_axis(attrs, "pads", 2 * nd, 0)
        if any(p >= kernel[i % nd] for i, p in enumerate(pads)):
            raise invalid_attr("Pool", "pads", pads, f"each pad must be smaller than the kernel {kernel}.",
                               "Use pads smaller than kernel_shape.")
    return kernel, _window_geometry(x_shape[2:], kernel, attrs, ceil_mode=bool(attrs.get("ceil_mode", 0)))


def _lowest(dtype):
    dtype = np.dtype(dtype)
    return -np.inf if dtype.kind == "f" else np.iinfo(dtype).min


def max_pool_compute(inputs, attrs):
    """Y, and Indices: where each maximum was read, as an index into the flattened input
    (N, C and the spatial dims; storage_order 1 counts the spatial dims column-major).  Ties
    go to the first tap in window order, padding never wins (ONNX's reference)."""
    x = inputs[0]
    kernel, win = _pool_geometry(x.shape, attrs)
    begin, end, extra, out, strides, dilations = win.begin, win.end, win.extra, win.out, win.strides, win.dilations
    if int(attrs.get("_outputs", 2)) < 2 and x.dtype == np.float32 and x.ndim == 4 and x.size and native.enabled():
        return [native.max_pool2d(x, kernel, begin, out, strides, dilations)]      # one C pass, no padded copy
    # max is exact in any dtype: no widening.
    xp = _pad_spatial(x, begin, [e + a for e, a in zip(end, extra)], _lowest(x.dtype))
    y, tap_of = None, None
    taps = _taps(kernel, dilations)
    if int(attrs.get("_outputs", 2)) < 2:           # no Indices output: the maxima alone
        return [_separable_max(xp, kernel, out, strides, dilations)]
    for t, offset in enumerate(taps):
        view = _tap(xp, offset, out, strides)
        if y is None:
            y, tap_of = view.copy(), np.zeros(view.shape, np.int64)
            continue
        better = view > y
        y = np.where(better, view, y)
        tap_of[better] = t
    return [y, _pool_indices(x.shape, tap_of, np.asarray(taps, np.int64), begin, out, strides,
                             int(attrs.get("storage_order", 0)))]


def _separable_max(xp: np.ndarray, kernel, out, strides, dilations) -> np.ndarray:
    """Max over every window of padded `xp`, one spatial axis at a time: a window's max is the
    max over its rows of the max along each row, so a k x k window costs 2(k-1) passes
    instead of k*k - 1 (a 3x3/2 pool: 4 instead of 8, each on fewer elements).  NaN as the
    tap loop has it (a tap replaces the running max only when greater): a window is NaN
    when its first tap is, and otherwise ignores its NaNs -- np.fmax, then the first taps."""
    y = xp
    for axis in range(len(out)):
        k, d, s, n = kernel[axis], dilations[axis], strides[axis], out[axis]

        def tap(j, src=y, axis=axis):
            index = [slice(None)] * src.ndim
            index[2 + axis] = slice(j * d, j * d + (n - 1) * s + 1, s)
            return src[tuple(index)]

        if k == 1:
            y = tap(0)
            continue
        reduced = np.fmax(tap(0), tap(1))
        for j in range(2, k):
            np.fmax(reduced, tap(j), out=reduced)
        y = reduced
    y = np.ascontiguousarray(y)
    if np.may_share_memory(y, xp):          # all-1 kernel: a view of the input, never returned as such
        y = y.copy()
    if y.dtype.kind == "f":
        first = np.isnan(_tap(xp, [0] * len(out), out, strides))
        if first.any():
            y[first] = np.nan
    return y


def _pool_indices(shape, tap_of, taps, begin, out, strides, storage_order: int) -> np.ndarray:
    """Flat input index of the tap each output took."""
    spatial = shape[2:]
    index = np.zeros(tap_of.shape, np.int64)
    coords = []
    for axis, (n, s, b) in enumerate(zip(out, strides, begin)):
        position = (np.arange(n, dtype=np.int64) * s - b).reshape((1, 1) + tuple(n if i == axis else 1
                                                                              for i in range(len(out))))
        coords.append(position + taps[:, axis][tap_of])
    order = range(len(spatial)) if storage_order == 0 else reversed(range(len(spatial)))
    for axis in order:
        index = index * spatial[axis] + coords[axis]
    base = np.arange(shape[0] * shape[1], dtype=np.int64).reshape(shape[0], shape[1], *([1] * len(spatial)))
    return base * int(np.prod(spatial, dtype=np.int64)) + index


def average_pool_compute(inputs, attrs):
    x = inputs[0]
    kernel, win = _pool_geometry(x.shape, attrs)
    begin, end, extra, out, strides, dilations = win.begin, win.end, win.extra, win.out, win.strides, win.dilations
    ct = _compute_dtype(x.dtype)
    end_all = [e + a for e, a in zip(end, extra)]
    xp = _pad_spatial(x.astype(ct, copy=False), begin, end_all, 0)
    # Divisor: pool a mask of the positions that count (input, plus explicit pads if
    # count_include_pad; the ceil_mode extension never counts).
    spatial = tuple(x.shape[2:])
    if int(attrs.get("count_include_pad", 0)):
        mask = np.ones((1, 1) + tuple(i + b + e for i, b, e in zip(spatial, begin, end)), ct)
        mask = _pad_spatial(mask, [0] * len(spatial), extra, 0)
    else:
        mask = _pad_spatial(np.ones((1, 1) + spatial, ct), begin, end_all, 0)
    y = np.zeros(x.shape[:2] + tuple(out), ct)
    count = np.zeros((1, 1) + tuple(out), ct)
    for offset in _taps(kernel, dilations):
        y += _tap(xp, offset, out, strides)
        count += _tap(mask, offset, out, strides)
    y /= count
    return [y.astype(x.dtype, copy=False)]


def pool_infer(inputs, attrs):
    x = inputs[0]
    _, window = _pool_geometry(x.shape, attrs)
    out = window.out
    return [TensorType(np.dtype(x.dtype), tuple(x.shape[:2]) + tuple(out))]


def max_pool_infer(inputs, attrs):
    if int(attrs.get("storage_order", 0)) not in (0, 1):
        raise invalid_attr("MaxPool", "storage_order", attrs.get("storage_order"), "it must be 0 (row-major) or "
                           "1 (column-major).")
    y = pool_infer(inputs, attrs)[0]
    return [y, TensorType(np.dtype(np.int64), y.shape)]        # Y, Indices


# Windowed pools are OUT_EWISE_FUSABLE as in TVM: they may absorb an elementwise tail.
register(OpDef("MaxPool", OpKind.OUT_EWISE_FUSABLE, max_pool_compute, max_pool_infer, sized_outputs=True))
register(OpDef("AveragePool", OpKind.OUT_EWISE_FUSABLE, average_pool_compute, pool_infer))


def _global_axes(x):
    return tuple(range(2, x.ndim))


def global_avg_compute(inputs, attrs):
    x = inputs[0]
    y = np.mean(x, axis=_global_axes(x), keepdims=True, dtype=_compute_dtype(x.dtype))
    return [y.astype(x.dtype, copy=False)]


def global_max_compute(inputs, attrs):
    x = inputs[0]
    return [np.max(x, axis=_global_axes(x), keepdims=True)]


def global_infer(inputs, attrs):
    x = inputs[0]
    if len(x.shape) < 3:
        raise InvalidNode(f"global pooling needs an N x C x D1... input of rank 3 or more, got {tuple(x.shape)}",
                          "Give the node an N x C x spatial input.")
    return [TensorType(np.dtype(x.dtype), tuple(x.shape[:2]) + (1,) * (len(x.shape) - 2))]


# Global pools reduce all spatial axes: REDUCE, so an elementwise chain may end in them.
register(OpDef("GlobalAveragePool", OpKind.REDUCE, global_avg_compute, global_infer))
register(OpDef("GlobalMaxPool", OpKind.REDUCE, global_max_compute, global_infer))


# -- MatMul / Gemm ---------------------------------------------------------------------------


def matmul_shape(a, b) -> tuple:
    """numpy.matmul's output shape, including 1-D promotion and batch broadcasting."""
    a, b = tuple(a), tuple(b)
    if not a or not b:
        raise InvalidNode("MatMul inputs must have rank >= 1", "Check the MatMul inputs.")
    a2 = (1,) + a if len(a) == 1 else a
    b2 = b + (1,) if len(b) == 1 else b
    if a2[-1] != b2[-2]:
        raise InvalidNode(f"MatMul inner dimensions differ: {a} x {b}",
                          "The last axis of A must equal the second-to-last axis of B.")
    try:
        batch = broadcast_shape(a2[:-2], b2[:-2])          # symbolic batch dims too
    except InvalidNode:
        raise InvalidNode(f"MatMul batch dimensions do not broadcast: {a} x {b}",
                          "Make the leading axes of A and B broadcastable.") from None
    shape = batch + (a2[-2], b2[-1])
    if len(a) == 1:
        shape = shape[:-2] + shape[-1:]
    if len(b) == 1:
        shape = shape[:-1]
    return shape


def matmul_compute(inputs, attrs):
    a, b = inputs[0], inputs[1]
    ct = _compute_dtype(a.dtype)
    y = np.matmul(a.astype(ct, copy=False), b.astype(ct, copy=False))
    return [_to_result(np.asarray(y), a.dtype)]


def matmul_infer(inputs, attrs):
    return [TensorType(cube_result_dtype(inputs[0].dtype), matmul_shape(inputs[0].shape, inputs[1].shape))]


register(OpDef("MatMul", OpKind.OUT_EWISE_FUSABLE, matmul_compute, matmul_infer))


def gemm_dims(a_shape, b_shape, attrs):
    if len(a_shape) != 2 or len(b_shape) != 2:
        raise InvalidNode(f"Gemm needs 2-D A and B, got {tuple(a_shape)} and "
                          f"{tuple(b_shape)}", "Use MatMul for other ranks.")
    m, k = a_shape[::-1] if int(attrs.get("transA", 0)) else a_shape
    k2, n = b_shape[::-1] if int(attrs.get("transB", 0)) else b_shape
    if k != k2:
        raise InvalidNode(f"Gemm inner dimensions differ: {k} vs {k2}",
                          "Check transA/transB and the shapes of A and B.")
    return int(m), int(k), int(n)


def gemm_compute(inputs, attrs):
    a, b = inputs[0], inputs[1]
    c = inputs[2] if len(inputs) > 2 else None
    gemm_dims(a.shape, b.shape, attrs)
    ct = _compute_dtype(a.dtype)
    a, b2 = a.astype(ct, copy=False), b.astype(ct, copy=False)
    if int(attrs.get("transA", 0)):
        a = a.T
    if int(attrs.get("transB", 0)):
        b2 = b2.T
    y = a @ b2
    alpha, beta = float(attrs.get("alpha", 1.0)), float(attrs.get("beta", 1.0))
    if alpha != 1.0:
        y *= ct.type(alpha)
    if c is not None:
        c = c.astype(ct, copy=False)
        y += c if beta == 1.0 else c * ct.type(beta)
    return [_to_result(y, inputs[0].dtype)]


def gemm_infer(inputs, attrs):
    m, _, n = gemm_dims(inputs[0].shape, inputs[1].shape, attrs)
    return [TensorType(cube_result_dtype(inputs[0].dtype), (m, n))]


register(OpDef("Gemm", OpKind.OUT_EWISE_FUSABLE, gemm_compute, gemm_infer))
