"""MultiHeadAttentionFusionOp: self-attention from the hidden states to the merged heads.

Why one kernel: unfused, attention writes Q, K, V, the [B,H,S,S] scores, the masked scores
and the probabilities to global memory and reads them back; fused, they stay in UB/L0 and
only x, the weights, the mask and the merged context cross global memory.

Inputs: x [B,S,hidden], Wqkv [hidden, 3*H*D] (Q | K | V columns, head h of each at
columns h*D:(h+1)*D, i.e. the order a [B,S,H,D] reshape implies), bqkv [3*H*D], then
optional mask: an additive tensor broadcasting to [B,H,S,S] (mask_kind "add") or a bool
tensor where False positions get `mask_value` (mask_kind "where_causal").
Attrs: num_heads, head_dim, scale (applied to Q.K^T), mask_kind, mask_value.
Output: [B,S,H*D].  float16 data is computed in float32 (the cube's fp32 accumulator,
softmax statistics in fp32) and cast back.
"""
from __future__ import annotations

import numpy as np

from codegen.registry import register
from codegen.work import Work
from ge.ops.common import approx_reciprocal, fast_impl, own_dtype_inside
from ge.ops.registry import OpDef, OpKind, TensorType
from ge.errors import InvalidNode

OP_TYPE = "MultiHeadAttentionFusionOp"
MASK_KINDS = ("none", "add", "where_causal")


def _dims(x_shape, w_shape, b_shape, attrs):
    """(B, S, hidden, H, D), checking the weights agree with num_heads/head_dim."""
    heads, head_dim = int(attrs["num_heads"]), int(attrs["head_dim"])
    width = 3 * heads * head_dim
    if len(x_shape) != 3 or tuple(w_shape) != (x_shape[2], width) or tuple(b_shape) != (width,):
        raise InvalidNode(f"{OP_TYPE}: x {tuple(x_shape)}, Wqkv {tuple(w_shape)}, bqkv "
                          f"{tuple(b_shape)} do not fit num_heads={heads}, head_dim={head_dim}",
                          "x must be [B,S,hidden], Wqkv [hidden, 3*H*D] and bqkv [3*H*D].")
    if attrs.get("mask_kind", "none") not in MASK_KINDS:
        raise InvalidNode(f"{OP_TYPE}: mask_kind [{attrs.get('mask_kind')}] is not one of "
                          f"{MASK_KINDS}", "Use one of the supported mask kinds.")
    return int(x_shape[0]), int(x_shape[1]), int(x_shape[2]), heads, head_dim


def compute(inputs, attrs):
    x, w, b = inputs[:3]
    mask = inputs[3] if len(inputs) > 3 else None
    batch, seq, _, heads, head_dim = _dims(x.shape, w.shape, b.shape, attrs)
    ct = np.dtype(np.float32) if x.dtype == np.float16 else x.dtype
    qkv = np.matmul(x.astype(ct, copy=False), w.astype(ct, copy=False)) + b.astype(ct, copy=False)
    q, k, v = qkv.reshape(batch, seq, 3, heads, head_dim).transpose(2, 0, 3, 1, 4)  # 3 x [B,H,S,D]
    scores = np.matmul(q, k.swapaxes(-1, -2))
    scores *= ct.type(float(attrs.get("scale", 1.0)))
    kind = attrs.get("mask_kind", "none")
    if kind == "add":
        scores = scores + mask.astype(ct, copy=False)
    elif kind == "where_causal":
        scores = np.where(mask, scores, ct.type(float(attrs["mask_value"])))
    scores -= np.max(scores, axis=-1, keepdims=True)
    if own_dtype_inside(attrs) and x.dtype == np.float16:
        # high_performance / keep_fp16 softmax: exp in float16, the sum in float32, then a
        # reciprocal estimate and a multiply (high_performance) or a division (keep_fp16)
        probs16 = np.exp(scores.astype(np.float16))
        total = np.sum(probs16, axis=-1, keepdims=True, dtype=np.float32).astype(np.float16)
        probs16 = probs16 * approx_reciprocal(total) if fast_impl(attrs) else probs16 / total
        probs = probs16.astype(ct)
    else:
        probs = np.exp(scores)
        if fast_impl(attrs):
            probs *= approx_reciprocal(np.sum(probs, axis=-1, keepdims=True))
        else:
            probs /= np.sum(probs, axis=-1, keepdims=True)
    ctx = np.matmul(probs, v)                                               # [B,H,S,D]
    y = ctx.transpose(0, 2, 1, 3).reshape(batch, seq, heads * head_dim)
    return [np.ascontiguousarray(y).astype(x.dtype, copy=False)]


def infer(inputs, attrs):
    x, w, b = inputs[:3]
    batch, seq, _, heads, head_dim = _dims(x.shape, w.shape, b.shape, attrs)
    if attrs.get("mask_kind", "none") != "none":
        if len(inputs) < 4 or inputs[3] is None:
            raise InvalidNode(f"{OP_TYPE}: mask_kind {attrs['mask_kind']} needs a mask input",
                              "Give the mask tensor as the fourth input.")
        try:
            ok = np.broadcast_shapes(tuple(inputs[3].shape), (batch, heads, seq, seq)) == (batch, heads, seq, seq)
        except ValueError:
            ok = False
        if not ok:
            raise InvalidNode(f"{OP_TYPE}: mask {tuple(inputs[3].shape)} does not broadcast to "
                              f"the scores {(batch, heads, seq, seq)}", "Give a [B|1,H|1,S|1,S] mask.")
    return [TensorType(np.dtype(x.dtype), (batch, seq, heads * head_dim))]


def work(inputs, outputs, attrs):
    """Cube: the QKV projection, Q.K^T and P.V.  Vector: bias, scale, mask and softmax
    (max, sub, exp, sum, div as the Softmax op counts them).  The head split and merge are
    strided loads/stores of the tiles, not vector moves.  On chip: Q, K, V, the scores and
    the probabilities."""
    x, w, b = inputs[:3]
    batch, seq, hidden, heads, head_dim = _dims(x.shape, w.shape, b.shape, attrs)
    width = 3 * heads * head_dim
    scores = batch * heads * seq * seq
    result = Work(cube_macs=batch * seq * hidden * width + 2 * scores * head_dim)
    result.add_vector("alu", batch * seq * width)            # bias
    result.add_vector("alu", scores)                          # scale
    if attrs.get("mask_kind", "none") != "none":
        result.add_vector("alu", scores)                      # mask add / select
    result.add_vector("alu", 3 * scores)                      # softmax max, sub, sum
    result.add_vector("transcendental", scores)               # exp
    if fast_impl(attrs):                                      # normalise: reciprocal estimate x
        result.add_vector("alu", scores)
    else:                                                     # normalise: a division
        result.add_vector("div", scores)
    itemsize = np.dtype(x.dtype).itemsize
    result.onchip_bytes = itemsize * (2 * scores + batch * seq * width)
    return result


register(OpDef(OP_TYPE, OpKind.OUT_EWISE_FUSABLE, compute, infer), work)
