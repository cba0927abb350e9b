"""RotaryEmbedding (ONNX opset 23): rotary position embedding of Q or K.

Why here: exporters at opsets 17/18 write RoPE as `x*cos + rotate_half(x)*sin` (Slice, Neg,
Concat, two Muls and an Add per tensor); the canonicalization stage rewrites that into this
op, which runs as one kernel or inside the attention kernel (`rotate`, shared with it).

Inputs: X [B, H, S, D] (or [B, S, H*D] with attribute num_heads), cos_cache and sin_cache
[B|1, S, R/2] without position_ids, or [max_position+1, R/2] with position_ids [B, S].
Attributes: rotary_embedding_dim R (0: the whole head, D), interleaved (0: the two halves of
the first R features rotate together, GPT-NeoX/Llama's rotate_half; 1: features 2i, 2i+1).
Features past R pass through unchanged.  One relaxation of the standard: a cache with batch
1 broadcasts over the batch (transformers' caches are computed for one position row).
"""
from __future__ import annotations

import numpy as np

from ge.errors import InvalidNode
from ge.ops.registry import OpDef, OpKind, TensorType, register


def _err(message: str) -> InvalidNode:
    return InvalidNode(f"RotaryEmbedding: {message}", "Check the node's inputs and attributes.")


def rotate(x: np.ndarray, cos: np.ndarray, sin: np.ndarray, rotary_dim: int, interleaved: bool) -> np.ndarray:
    """x [..., S, D] rotated over its first `rotary_dim` features by cos/sin that broadcast
    to x[..., :rotary_dim // 2] (the half tables); the rest of the features pass through."""
    half = rotary_dim // 2
    out = x.copy()
    if interleaved:
        x1, x2 = x[..., 0:rotary_dim:2], x[..., 1:rotary_dim:2]
        out[..., 0:rotary_dim:2] = x1 * cos - x2 * sin
        out[..., 1:rotary_dim:2] = x2 * cos + x1 * sin
    else:
        x1, x2 = x[..., :half], x[..., half:rotary_dim]
        out[..., :half] = x1 * cos - x2 * sin
        out[..., half:rotary_dim] = x2 * cos + x1 * sin
    return out


def _dims(x_shape, cos_shape, has_positions: bool, attrs):
    """(heads, seq, head_dim, rotary_dim) of a valid node."""
    if len(x_shape) == 4:
        batch, heads, seq, head_dim = x_shape
    elif len(x_shape) == 3:
        heads = int(attrs.get("num_heads", 0))
        if heads <= 0 or x_shape[2] % heads:
            raise _err(f"a 3-D input {tuple(x_shape)} needs num_heads dividing its last axis")
        batch, seq, head_dim = x_shape[0], x_shape[1], x_shape[2] // heads
    else:
        raise _err(f"input of rank {len(x_shape)}; expected [B,H,S,D] or [B,S,H*D]")
    rot = int(attrs.get("rotary_embedding_dim", 0)) or head_dim
    if rot % 2 or rot > head_dim:
        raise _err(f"rotary_embedding_dim {rot} must be even and at most the head size {head_dim}")
    want_last = rot // 2
    if has_positions:
        ok = len(cos_shape) == 2 and cos_shape[1] == want_last
    else:
        ok = len(cos_shape) == 3 and cos_shape[0] in (1, batch) and cos_shape[1] == seq and cos_shape[2] == want_last
    if not ok:
        raise _err(f"cos/sin caches {tuple(cos_shape)} do not fit input {tuple(x_shape)} with rotary dim {rot}")
    return heads, seq, head_dim, rot


def compute(inputs, attrs):
    x, cos, sin = inputs[:3]
    positions = inputs[3] if len(inputs) > 3 else None
    heads, seq, head_dim, rot = _dims(x.shape, cos.shape, positions is not None, attrs)
    if positions is not None:
        positions = np.asarray(positions).astype(np.int64)
        if positions.size and (positions.min() < 0 or positions.max() >= cos.shape[0]):
            raise _err(f"position_ids outside the caches' {cos.shape[0]} rows")
        cos, sin = cos[positions], sin[positions]                        # [B, S, R/2]
    x4 = x if x.ndim == 4 else x.reshape(x.shape[0], seq, heads, head_dim).transpose(0, 2, 1, 3)
    out = rotate(x4, cos[:, None].astype(x.dtype), sin[:, None].astype(x.dtype), rot,
                 bool(int(attrs.get("interleaved", 0))))
    if x.ndim == 3:
        out = out.transpose(0, 2, 1, 3).reshape(x.shape)
    return [np.ascontiguousarray(out)]


def infer(inputs, attrs):
    x, cos, sin = inputs[:3]
    has_positions = len(inputs) > 3 and inputs[3] is not None
    _dims(x.shape, cos.shape, has_positions, attrs)
    if tuple(sin.shape) != tuple(cos.shape):
        raise _err(f"sin_cache {tuple(sin.shape)} and cos_cache {tuple(cos.shape)} differ")
    return [TensorType(np.dtype(x.dtype), tuple(x.shape))]


register(OpDef("RotaryEmbedding", OpKind.INJECTIVE, compute, infer))   # mixes features: not elementwise
