"""Softmax family and normalization layers (inference form): numpy semantics and shapes.

All kernels compute in float32 for float16 data and cast the result back (statistics in
fp16 would lose too much).  Kinds: BatchNormalization is a per-channel affine map, hence
BROADCAST; Softmax/LogSoftmax and the statistic-computing norms (Layer/Instance/Group,
LRN) reduce and then broadcast back, which no autofuse group shape covers, so OPAQUE --
their fusions are named passes.
"""
from __future__ import annotations

import numpy as np

from ge.ops.common import approx_reciprocal, axis_attr, fast_impl, own_dtype_inside, same_as_input
from ge.ops.mlas_float import LAYER_NORM_MIN_ROW, layer_norm_rows
from ge.ops.registry import OpDef, OpKind, TensorType, register
from ge.errors import InvalidNode, invalid_attr


def _f32(x: np.ndarray) -> np.ndarray:
    return x.astype(np.float32) if x.dtype == np.float16 else x


# ---------------------------------------------------------------------------------------
# Softmax / LogSoftmax (opset 13: one axis, default -1)

def _softmax(inputs, attrs):
    x = inputs[0]
    axis = axis_attr("Softmax", attrs, x.ndim, -1)
    if x.size == 0:         # nothing to normalize (np.max has no identity)
        return [x.copy()]
    if own_dtype_inside(attrs):
        # high_performance / keep_fp16: exp in the data's dtype, the sum accumulated in float32
        # (the vector unit's reduce), then -- high_performance -- one reciprocal estimate per row
        # and a multiply instead of a division per element
        e = np.exp(x - np.max(x, axis=axis, keepdims=True))
        total = np.sum(e, axis=axis, keepdims=True, dtype=np.float32).astype(x.dtype)
        if fast_impl(attrs):
            return [(e * approx_reciprocal(total)).astype(x.dtype, copy=False)]
        return [(e / total).astype(x.dtype, copy=False)]
    a = _f32(x)
    e = np.exp(a - np.max(a, axis=axis, keepdims=True))
    return [(e / np.sum(e, axis=axis, keepdims=True)).astype(x.dtype, copy=False)]


def _log_softmax(inputs, attrs):
    x = inputs[0]
    axis = axis_attr("LogSoftmax", attrs, x.ndim, -1)
    if x.size == 0:
        return [x.copy()]
    a = _f32(x)
    shifted = a - np.max(a, axis=axis, keepdims=True)
    y = shifted - np.log(np.sum(np.exp(shifted), axis=axis, keepdims=True))
    return [y.astype(x.dtype, copy=False)]


def _same_with_axis(op_type: str):
    """Shape rule of Softmax/LogSoftmax: the input's type, once the axis is known valid, so a
    bad axis fails at compile time rather than in the simulator."""

    def infer(inputs, attrs):
        axis_attr(op_type, attrs, len(inputs[0].shape), -1)
        return same_as_input(inputs, attrs)

    return infer


register(OpDef(op_type="Softmax", kind=OpKind.OPAQUE, compute=_softmax, infer=_same_with_axis("Softmax")))
register(OpDef(op_type="LogSoftmax", kind=OpKind.OPAQUE, compute=_log_softmax,
               infer=_same_with_axis("LogSoftmax")))


# ---------------------------------------------------------------------------------------
# BatchNormalization, inference form: y = (x - mean) / sqrt(var + eps) * scale + B

def _channel_view(p: np.ndarray, rank: int) -> np.ndarray:
    """A per-channel (C,) parameter shaped to broadcast against an N,C,... tensor."""
    return np.asarray(p, dtype=np.float32 if p.dtype == np.float16 else p.dtype).reshape(
        (1, -1) + (1,) * (rank - 2))


def _batch_norm(inputs, attrs):
    """Inference form: Y from the running statistics.  Training form (training_mode=1, a
    training graph's node): Y from the batch's own mean and (population) variance, plus
    the updated running_mean and running_var, as ONNX defines them."""
    x, scale, bias, mean, var = inputs[:5]
    eps = float(attrs.get("epsilon", 1e-5))
    rank = max(x.ndim, 2)
    xs = _f32(x).reshape(x.shape if x.ndim >= 2 else x.shape + (1,))
    if int(attrs.get("training_mode", 0)):
        axes = (0,) + tuple(range(2, rank))
        batch_mean = xs.mean(axis=axes)
        batch_var = xs.var(axis=axes)
        momentum = float(attrs.get("momentum", 0.9))
        running_mean = _f32(mean) * momentum + batch_mean * (1 - momentum)
        running_var = _f32(var) * momentum + batch_var * (1 - momentum)
        mean, var = batch_mean, batch_var
    a = _channel_view(scale, rank) / np.sqrt(_channel_view(var, rank) + eps)
    b = _channel_view(bias, rank) - _channel_view(mean, rank) * a
    y = (xs * a + b).reshape(x.shape).astype(x.dtype, copy=False)
    if int(attrs.get("training_mode", 0)):
        return [y, running_mean.astype(inputs[3].dtype), running_var.astype(inputs[4].dtype)]
    return [y]


_BN_PARAMS = ("scale", "B", "input_mean", "input_var")


def _batch_norm_infer(inputs, attrs):
    """X of rank 1 or more (a rank-1 X is one channel), and each parameter one value per
    channel, 1-D -- onnxruntime's checks, which ONNX's own shape inference makes only from
    opset 14 on (an opset-13 model with a scalar X or a [1, C] scale reached folding)."""
    x = inputs[0]
    if not x.shape:
        raise InvalidNode("BatchNormalization needs an input X of rank 1 or more (N x C x ...), got a scalar",
                          "Give the node an N x C x ... input.")
    channels = x.shape[1] if len(x.shape) > 1 else 1
    for name, p in zip(_BN_PARAMS, list(inputs[1:5]) + [None] * (5 - len(inputs))):
        if p is None or tuple(p.shape) != (channels,):
            raise InvalidNode(f"BatchNormalization {name} of shape {None if p is None else list(p.shape)} must be "
                              f"[{channels}], one value per channel of X {list(x.shape)}",
                              "Fix the scale, B, mean and var inputs.")
    types = same_as_input(inputs, attrs)
    if int(attrs.get("training_mode", 0)):       # running_mean, running_var
        types += [TensorType(np.dtype(t.dtype), tuple(t.shape)) for t in inputs[3:5]]
    return types


# In training mode it reduces over the batch: not an elementwise map any more.
register(OpDef(op_type="BatchNormalization", kind=OpKind.BROADCAST, compute=_batch_norm, infer=_batch_norm_infer,
               kind_of=lambda attrs: OpKind.OPAQUE if int(attrs.get("training_mode", 0)) else OpKind.BROADCAST))


# ---------------------------------------------------------------------------------------
# Statistic norms: normalise over some axes, then an affine map.

def _standardize(a: np.ndarray, axes: tuple, eps: float) -> np.ndarray:
    mean = np.mean(a, axis=axes, keepdims=True)
    centered = a - mean
    var = np.mean(centered * centered, axis=axes, keepdims=True)
    return centered / np.sqrt(var + eps)


# stash_type (an ONNX TensorProto dtype number): the dtype of the Mean and InvStdDev outputs.
_STASH_DTYPES = {1: np.float32, 10: np.float16, 11: np.float64}


def _stash_dtype(attrs: dict) -> np.dtype:
    stash = int(attrs.get("stash_type", 1))
    if stash not in _STASH_DTYPES:
        raise invalid_attr("LayerNormalization", "stash_type", stash, "it must be float (1), float16 (10) or "
                           "double (11).")
    return np.dtype(_STASH_DTYPES[stash])


def _layer_norm(inputs, attrs):
    """Y, and the optional Mean and InvStdDev outputs (over the normalized axes, kept as 1s),
    in the stash_type dtype."""
    x, scale = inputs[0], inputs[1]
    bias = inputs[2] if len(inputs) > 2 else None
    axis = axis_attr("LayerNormalization", attrs, x.ndim, -1)
    axes = tuple(range(axis, x.ndim))
    eps = float(attrs.get("epsilon", 1e-5))
    stash = _stash_dtype(attrs)
    norm_shape = x.shape[axis:]
    row = int(np.prod(norm_shape, dtype=np.int64))
    if x.dtype == np.float32 and row >= LAYER_NORM_MIN_ROW and x.size:
        # float32 data: onnxruntime's own order of operations, so a QuantizeLinear after it
        # rounds as onnxruntime's does (ge/ops/mlas_float.py)
        rows = x.size // row
        flat = [None if p is None else np.broadcast_to(np.asarray(p, np.float32), norm_shape).reshape(row)
                for p in (scale, bias)]
        y, mean, inv_std = layer_norm_rows(x.reshape(rows, row), flat[0], flat[1], eps)
        stats = x.shape[:axis] + (1,) * len(norm_shape)
        return [y.reshape(x.shape), mean.reshape(stats).astype(stash, copy=False),
                inv_std.reshape(stats).astype(stash, copy=False)]
    xf = _f32(x)
    mean = np.mean(xf, axis=axes, keepdims=True)
    centered = xf - mean
    inv_std = 1.0 / np.sqrt(np.mean(centered * centered, axis=axes, keepdims=True) + eps)
    y = centered * inv_std * _f32(scale)
    if bias is not None:
        y = y + _f32(bias)
    return [y.astype(x.dtype, copy=False), mean.astype(stash, copy=False), inv_std.astype(stash, copy=False)]


def _layer_norm_infer(inputs, attrs):
    x = inputs[0]
    axis = axis_attr("LayerNormalization", attrs, len(x.shape), -1)
    for name, p in zip(("Scale", "B"), inputs[1:3]):
        # broadcast against X, as the compute does and onnxruntime allows
        if p is not None and (len(p.shape) > len(x.shape)
                              or any(d != 1 and d != xd for d, xd in zip(reversed(p.shape), reversed(x.shape)))):
            raise InvalidNode(f"LayerNormalization {name} of shape {tuple(p.shape)} does not broadcast to the "
                              f"normalized shape {tuple(x.shape[axis:])}", "Fix the scale and bias inputs.")
    stats = tuple(x.shape[:axis]) + (1,) * (len(x.shape) - axis)
    stash = _stash_dtype(attrs)
    return same_as_input(inputs, attrs) + [TensorType(stash, stats), TensorType(stash, stats)]


register(OpDef(op_type="LayerNormalization", kind=OpKind.OPAQUE, compute=_layer_norm, infer=_layer_norm_infer))


def _instance_norm(inputs, attrs):
    x, scale, bias = inputs[:3]
    y = _standardize(_f32(x), tuple(range(2, x.ndim)), float(attrs.get("epsilon", 1e-5)))
    y = y * _channel_view(scale, x.ndim) + _channel_view(bias, x.ndim)
    return [y.astype(x.dtype, copy=False)]


def _instance_norm_infer(inputs, attrs):
    x, scale, bias = inputs[:3]
    if len(x.shape) < 3:
        raise InvalidNode(f"InstanceNormalization needs an N x C x D1... input of rank 3 or more, got {x.shape}",
                          "Give the node an N x C x spatial input.")
    for name, p in (("scale", scale), ("B", bias)):
        if p is None or tuple(p.shape) != (x.shape[1],):
            raise InvalidNode(f"InstanceNormalization {name} of shape {None if p is None else p.shape} must be "
                              f"({x.shape[1]},), one value per channel", "Fix the scale and bias inputs.")
    return same_as_input(inputs, attrs)


def _rms_axes(op_type: str, attrs: dict, rank: int) -> tuple:
    return tuple(range(axis_attr(op_type, attrs, rank, -1), rank))


def _rms(a: np.ndarray, axes: tuple, eps: float) -> np.ndarray:
    """1 / sqrt(mean(a^2) + eps) over `axes`, kept for broadcasting."""
    return 1.0 / np.sqrt(np.mean(a * a, axis=axes, keepdims=True) + a.dtype.type(eps))


def _stash(x: np.ndarray, attrs: dict) -> np.ndarray:
    """x in the precision the statistics are computed in: float32 (stash_type 1, the
    default) or x's own type (any other stash_type: ONNX allows only 1 for float16 data in
    practice, and a narrower stash only loses accuracy)."""
    return x.astype(np.float32) if int(attrs.get("stash_type", 1)) == 1 and x.dtype == np.float16 else x


def _check_scale(op_type: str, x, scale, axes: tuple) -> None:
    normalized = tuple(x.shape[axes[0]:]) if axes else ()
    try:
        ok = np.broadcast_shapes(tuple(scale.shape), normalized) == normalized
    except ValueError:
        ok = False
    if not ok:
        raise invalid_attr(op_type, "scale", list(scale.shape),
                           f"it must broadcast to the normalized shape {list(normalized)}.",
                           "Give the scale the shape of the normalized axes.")


def _rms_norm(inputs, attrs):
    """ONNX RMSNormalization (opset 23): Normalized = X / sqrt(mean(X^2) + eps) over the axes
    from `axis` on, computed in float32 (stash_type 1), cast back to X's type, then times
    Scale in X's type -- transformers' LlamaRMSNorm op for op."""
    x, scale = inputs[0], inputs[1]
    axes = _rms_axes("RMSNormalization", attrs, x.ndim)
    _check_scale("RMSNormalization", x, scale, axes)
    a = _stash(x, attrs)
    normalized = (a * _rms(a, axes, float(attrs.get("epsilon", 1e-5)))).astype(x.dtype, copy=False)
    return [(normalized * scale.astype(x.dtype, copy=False)).astype(x.dtype, copy=False)]


def _rms_norm_infer(op_type: str):
    def infer(inputs, attrs):
        x, scale = inputs[0], inputs[1]
        axes = _rms_axes(op_type, attrs, len(x.shape))
        _check_scale(op_type, x, scale, axes)
        out = same_as_input(inputs, attrs)
        if op_type == "SimplifiedLayerNormalization":     # optional inv_std_var, float32, kept dims
            kept = tuple(d if i < len(x.shape) - len(axes) else 1 for i, d in enumerate(x.shape))
            out.append(TensorType(np.dtype(np.float32), kept))
        return out
    return infer


def _simplified_layer_norm(inputs, attrs):
    """onnxruntime's SimplifiedLayerNormalization (an RMSNorm its transformer optimizer
    writes, in the ONNX domain): like RMSNormalization, but the scale is applied in float32
    before the one rounding to X's type; second output inv_std_var (float32)."""
    x, scale = inputs[0], inputs[1]
    axes = _rms_axes("SimplifiedLayerNormalization", attrs, x.ndim)
    _check_scale("SimplifiedLayerNormalization", x, scale, axes)
    a = x.astype(np.float32)
    inv = _rms(a, axes, float(attrs.get("epsilon", 1e-5)))
    return [(a * inv * scale.astype(np.float32)).astype(x.dtype, copy=False), inv.astype(np.float32)]


register(OpDef(op_type="RMSNormalization", kind=OpKind.OPAQUE, compute=_rms_norm,
               infer=_rms_norm_infer("RMSNormalization")))
register(OpDef(op_type="SimplifiedLayerNormalization", kind=OpKind.OPAQUE, compute=_simplified_layer_norm,
               infer=_rms_norm_infer("SimplifiedLayerNormalization")))


register(OpDef(op_type="InstanceNormalization", kind=OpKind.OPAQUE, compute=_instance_norm,
               infer=_instance_norm_infer))


def _group_norm_groups(x_shape, scale_shape, bias_shape, attrs) -> int:
    """num_groups, checked: it divides C, and scale/bias hold one value per channel or per group."""
    groups = int(attrs["num_groups"]) if "num_groups" in attrs else 0
    if len(x_shape) < 2:
        raise InvalidNode(f"GroupNormalization needs an N x C x ... input, got {tuple(x_shape)}",
                          "Give the node an N x C x spatial input.")
    c = x_shape[1]
    if groups <= 0 or c % groups:
        raise invalid_attr("GroupNormalization", "num_groups", groups or None,
                           f"it must divide the channel count {c}.", "Fix num_groups in the ONNX model.")
    for name, shape in (("scale", scale_shape), ("bias", bias_shape)):
        if tuple(shape) not in ((c,), (groups,)):
            raise InvalidNode(f"GroupNormalization {name} of shape {tuple(shape)} must hold one value per channel "
                              f"({c}) or per group ({groups})", "Fix the scale and bias inputs.")
    return groups


def _group_norm(inputs, attrs):
    """Scale/bias per channel (opset 21) or per group (opset 18); their length tells which
    (when num_groups == C both readings agree)."""
    x, scale, bias = inputs[:3]
    groups = _group_norm_groups(x.shape, scale.shape, bias.shape, attrs)
    n, c = x.shape[0], x.shape[1]
    grouped = _f32(x).reshape((n, groups, -1))
    y = _standardize(grouped, (2,), float(attrs.get("epsilon", 1e-5))).reshape(x.shape)
    if scale.size == groups and groups != c:
        scale, bias = np.repeat(scale, c // groups), np.repeat(bias, c // groups)
    y = y * _channel_view(scale, x.ndim) + _channel_view(bias, x.ndim)
    return [y.astype(x.dtype, copy=False)]


def _group_norm_infer(inputs, attrs):
    x, scale, bias = inputs[:3]
    _group_norm_groups(x.shape, scale.shape, bias.shape, attrs)
    return same_as_input(inputs, attrs)


register(OpDef(op_type="GroupNormalization", kind=OpKind.OPAQUE, compute=_group_norm, infer=_group_norm_infer))


# ---------------------------------------------------------------------------------------
# LRN across channels: y = x / (bias + alpha/size * sum_{window} x^2) ^ beta

def _lrn_size(attrs) -> int:
    if "size" not in attrs or int(attrs["size"]) < 1:
        raise invalid_attr("LRN", "size", attrs.get("size"), "a positive window size is required.",
                           "Set LRN's size in the ONNX model.")
    return int(attrs["size"])


def _lrn(inputs, attrs):
    x = inputs[0]
    size = _lrn_size(attrs)
    alpha, beta, bias = (float(attrs.get("alpha", 1e-4)), float(attrs.get("beta", 0.75)),
                         float(attrs.get("bias", 1.0)))
    a = _f32(x)
    lo, hi = (size - 1) // 2, size - 1 - (size - 1) // 2     # floor / ceil of (size-1)/2
    pad = [(0, 0)] * a.ndim
    pad[1] = (lo + 1, hi)                                     # +1: a zero row for the cumsum
    csum = np.cumsum(np.pad(a * a, pad), axis=1)
    c = a.shape[1]
    window = np.take(csum, np.arange(size, size + c), axis=1) - np.take(csum, np.arange(c), axis=1)
    y = a / np.power(bias + (alpha / size) * window, beta)
    return [y.astype(x.dtype, copy=False)]


def _lrn_infer(inputs, attrs):
    _lrn_size(attrs)
    if len(inputs[0].shape) < 3:
        raise InvalidNode(f"LRN needs an N x C x D1... input of rank 3 or more, got {inputs[0].shape}",
                          "Give the node an N x C x spatial input.")
    return same_as_input(inputs, attrs)


register(OpDef(op_type="LRN", kind=OpKind.OPAQUE, compute=_lrn, infer=_lrn_infer))
