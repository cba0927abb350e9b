"""MultiHeadAttentionFusionOp: softmax(Q.K^T * scale + bias [+ mask]) . V with the Q/K/V
projections, rotary embedding and head split/merge inside one kernel.

Why one kernel: unfused, attention writes Q, K, V, the [B,H,Sq,Skv] scores, the masked
scores and the probabilities to global memory and reads them back; fused, they stay in
UB/L0 and only the hidden states, the weights, the bias/mask and the merged context cross
global memory.

Input slots (SLOTS; absent optional slots are None):
  x_q [B,Sq,Kq]       hidden states the queries are projected from
  w_q [Kq,H*D], b_q [H*D]           query projection (head h: columns h*D:(h+1)*D)
  x_k [B,Skv,Kk], w_k [Kk,Hkv*D], b_k     key projection, Hkv KV heads
  x_v [B,Skv,Kv], w_v [Kv,Hkv*Dv], b_v    value projection
                      (x_q, x_k, x_v are one tensor for self-attention; K and V read the
                      encoder output in cross-attention).  Without its weight, a role's x
                      is already projected: [B,S,heads*dim], head h at columns h*dim (the
                      projection stays its own GEMM when something else reads it, e.g.
                      DeBERTa's relative-position bias reads Q and K); attribute
                      <role>_offset: the heads start at that column of a wider projection
                      (a packed QKV projection whose K and V also go to a KV cache)
  with kv_layout "bhsd", x_k [B,Hkv,Skv,D] and x_v [B,Hkv,Skv,Dv] are a decoder's KV cache
                      read as it is (the cache concatenated with the new tokens' heads,
                      written by its own Concat kernel as the `present` output, as GE's
                      IncreFlashAttention/PromptFlashAttention read it), without weights
  bias                additive, broadcasting to [B,H,Sq,Skv] (position bias, padding mask)
  mask                a second additive term (mask_kind "add") or a bool tensor: where it is
                      not mask_keep (default True) the score is mask_value (mask_kind "where")
  rope_cos, rope_sin  [B|1,S,R/2] rotary tables applied to Q and K after the projection
                      (RotaryEmbedding semantics, ge/ops/rotary.py); to Q only with
                      rotary_k 0 (K from a KV cache was rotated before it was written),
                      then [B|1,Sq,R/2]
Attrs: num_heads H, kv_heads Hkv (grouped-query: query head h reads KV head h // (H/Hkv)),
head_dim D, v_head_dim Dv, scale, mask_kind, mask_value, nan_guard (1: probabilities that
are NaN -- a row masked entirely with -inf -- are 0, SDPA's guard), rotary_dim R (0: none),
rotary_interleaved, rotary_k (default 1), kv_layout ("bsh" default, or "bhsd"), q_offset /
k_offset / v_offset (default 0).
Output: [B,Sq,H*Dv].  float16 data is computed in float32 (the cube's fp32 accumulator,
softmax statistics in fp32) and cast back.
"""
from __future__ import annotations

import numpy as np

from codegen.fused.slots import Slots
from codegen.registry import register
from codegen.work import Gemm, Work
from ge.errors import InvalidNode
from ge.ops.common import approx_reciprocal, fast_impl, own_dtype_inside
from ge.ops.registry import OpDef, OpKind, TensorType
from ge.ops.rotary import rotate

OP_TYPE = "MultiHeadAttentionFusionOp"
MASK_KINDS = ("none", "add", "where")
KV_LAYOUTS = ("bsh", "bhsd")
SLOTS = Slots("x_q", "w_q", "b_q", "x_k", "w_k", "b_k", "x_v", "w_v", "b_v", "bias", "mask", "rope_cos",
              "rope_sin", required=("x_q", "x_k", "x_v"))
ROLES = ("q", "k", "v")


def _bad(message: str) -> InvalidNode:
    return InvalidNode(f"{OP_TYPE}: {message}", "Check the fused attention node's inputs and attributes.")


def _dims(s: dict, attrs: dict) -> dict:
    """Every size of the node, after checking the inputs agree with the attributes."""
    heads, kv_heads = int(attrs["num_heads"]), int(attrs.get("kv_heads", attrs["num_heads"]))
    d, dv = int(attrs["head_dim"]), int(attrs.get("v_head_dim", attrs["head_dim"]))
    xq, xk, xv = (tuple(s[f"x_{r}"].shape) for r in ROLES)
    if heads <= 0 or kv_heads <= 0 or heads % kv_heads:
        raise _bad(f"num_heads {heads} is not a multiple of kv_heads {kv_heads}")
    layout = attrs.get("kv_layout", "bsh")
    if layout not in KV_LAYOUTS:
        raise _bad(f"kv_layout [{layout}] is not one of {KV_LAYOUTS}")
    cache = layout == "bhsd"
    if cache:
        if len(xk) != 4 or len(xv) != 4 or xk[:3] != xv[:3] or xk[1] != kv_heads or xk[3] != d or xv[3] != dv \
                or s["w_k"] is not None or s["w_v"] is not None or len(xq) != 3 or xq[0] != xk[0]:
            raise _bad(f"kv_layout bhsd needs x_k [B,{kv_heads},Skv,{d}] and x_v [B,{kv_heads},Skv,{dv}] without "
                       f"weights and x_q [B,Sq,K] of the same B; got {xq}, {xk}, {xv}")
    elif len(xq) != 3 or len(xk) != 3 or len(xv) != 3 or not xq[0] == xk[0] == xv[0] or xk[1] != xv[1]:
        raise _bad(f"x_q {xq}, x_k {xk} and x_v {xv} must be [B,S,K] with one B (and one S for K and V)")
    widths = {"q": heads * d, "k": kv_heads * d, "v": kv_heads * dv}
    for r in ROLES:
        if cache and r != "q":
            continue
        x, w, b, width = s[f"x_{r}"], s[f"w_{r}"], s[f"b_{r}"], widths[r]
        offset = int(attrs.get(f"{r}_offset", 0))
        expect = (x.shape[2], width) if w is not None else None
        if w is None and (offset < 0 or x.shape[2] < offset + width):
            raise _bad(f"projected x_{r} {tuple(x.shape)} has not {width} features from column {offset}")
        if w is not None and (tuple(w.shape) != expect or offset):
            raise _bad(f"w_{r} is {tuple(w.shape)}, expected {expect} (and no {r}_offset)")
        if b is not None and (w is None or tuple(b.shape) != (width,)):
            raise _bad(f"b_{r} is {tuple(b.shape)}, expected {(width,)} with w_{r}")
    xkv = (xk[0], xk[2]) if cache else xk
    kind = attrs.get("mask_kind", "none")
    if kind not in MASK_KINDS:
        raise _bad(f"mask_kind [{kind}] is not one of {MASK_KINDS}")
    scores = (xq[0], heads, xq[1], xkv[1])
    for name in ("bias", "mask"):
        t = s[name]
        if t is None:
            if name == "mask" and kind != "none":
                raise _bad(f"mask_kind {kind} needs a mask input")
            continue
        try:
            ok = len(t.shape) <= 4 and np.broadcast_shapes(tuple(t.shape), scores) == scores
        except ValueError:
            ok = False
        if not ok:
            raise _bad(f"{name} {tuple(t.shape)} does not broadcast to the scores {scores}")
    rot = int(attrs.get("rotary_dim", 0))
    rotate_k = bool(int(attrs.get("rotary_k", 1)))
    if rot:
        cos = s["rope_cos"]
        if cos is None or s["rope_sin"] is None or (rotate_k and xq[1] != xkv[1]) or rot % 2 or rot > d \
                or len(cos.shape) != 3 or cos.shape[0] not in (1, xq[0]) or tuple(cos.shape[1:]) != (xq[1], rot // 2) \
                or tuple(s["rope_sin"].shape) != tuple(cos.shape):
            raise _bad(f"rotary_dim {rot} needs rope_cos/rope_sin [B|1,Sq,{rot // 2}] (and Sq == Skv to rotate K)")
    return dict(batch=xq[0], sq=xq[1], skv=xkv[1], heads=heads, kv_heads=kv_heads, d=d, dv=dv, rot=rot,
                rotate_k=rotate_k, cache=cache,
                k={r: s[f"x_{r}"].shape[2] if s[f"w_{r}"] is not None else 0 for r in ROLES})


def _project(s, role, heads, dim, ct, attrs):
    x, w, b = s[f"x_{role}"], s[f"w_{role}"], s[f"b_{role}"]
    if x.ndim == 4:                                   # a KV cache, [B,heads,S,dim] already
        return x.astype(ct)
    if w is None:
        offset = int(attrs.get(f"{role}_offset", 0))
        y = x[..., offset:offset + heads * dim].astype(ct)
    else:
        y = np.matmul(x.astype(ct, copy=False), w.astype(ct, copy=False))
    if b is not None:
        y += b.astype(ct, copy=False)
    return y.reshape(x.shape[0], x.shape[1], heads, dim).transpose(0, 2, 1, 3)     # [B,heads,S,dim]


def compute(inputs, attrs):
    s = SLOTS.read(inputs)
    n = _dims(s, attrs)
    x = s["x_q"]
    ct = np.dtype(np.float32) if x.dtype == np.float16 else x.dtype
    q = _project(s, "q", n["heads"], n["d"], ct, attrs)
    k = _project(s, "k", n["kv_heads"], n["d"], ct, attrs)
    v = _project(s, "v", n["kv_heads"], n["dv"], ct, attrs)
    if n["rot"]:
        cos = s["rope_cos"].astype(ct)[:, None]
        sin = s["rope_sin"].astype(ct)[:, None]
        interleaved = bool(int(attrs.get("rotary_interleaved", 0)))
        q = rotate(q, cos, sin, n["rot"], interleaved)
        if n["rotate_k"]:
            k = rotate(k, cos, sin, n["rot"], interleaved)
    group = n["heads"] // n["kv_heads"]
    if group > 1:                                     # query head h reads KV head h // group
        k, v = np.repeat(k, group, axis=1), np.repeat(v, group, axis=1)
    scores = np.matmul(q, k.swapaxes(-1, -2))
    scores *= ct.type(float(attrs.get("scale", 1.0)))
    if s["bias"] is not None:
        scores = scores + s["bias"].astype(ct, copy=False)
    kind = attrs.get("mask_kind", "none")
    if kind == "add":
        scores = scores + s["mask"].astype(ct, copy=False)
    elif kind == "where":
        keep = s["mask"] if int(attrs.get("mask_keep", 1)) else np.logical_not(s["mask"])
        scores = np.where(keep, scores, ct.type(float(attrs["mask_value"])))
    with np.errstate(invalid="ignore"):              # a row of -inf gives NaN, as Softmax does
        scores = scores - np.max(scores, axis=-1, keepdims=True)
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
    if int(attrs.get("nan_guard", 0)):
        probs = np.where(np.isnan(probs), ct.type(0.0), probs)
    ctx = np.matmul(probs, v)                                               # [B,H,Sq,Dv]
    y = ctx.transpose(0, 2, 1, 3).reshape(n["batch"], n["sq"], n["heads"] * n["dv"])
    return [np.ascontiguousarray(y).astype(x.dtype, copy=False)]


def infer(inputs, attrs):
    s = SLOTS.read(inputs)
    n = _dims(s, attrs)
    return [TensorType(np.dtype(s["x_q"].dtype), (n["batch"], n["sq"], n["heads"] * n["dv"]))]


def work(inputs, outputs, attrs):
    """Cube: the Q/K/V projections (of the roles that have weights), Q.K^T and P.V (KV heads
    are read by their query groups, not copied; Q, K and V operands read from memory when the
    kernel does not project them).  Vector: projection biases, rotary (3 ops per rotated Q/K
    element), and on the scores the scale, bias/mask and softmax (max, sub, exp, sum, div as
    the Softmax op counts them) and the NaN guard.  The head split and merge are strided loads/stores of the tiles, not vector
    moves.  On chip: Q, K, V, the scores and the probabilities."""
    s = SLOTS.read(inputs)
    n = _dims(s, attrs)
    b, sq, skv, h, hkv, d, dv = (n[k] for k in ("batch", "sq", "skv", "heads", "kv_heads", "d", "dv"))
    q_cols, k_cols, v_cols = h * d, hkv * d, hkv * dv
    scores = b * h * sq * skv
    projections = [Gemm(batch=1, m=rows, n=cols, k=n["k"][role], a_elements=rows * n["k"][role])
                   for role, rows, cols in (("q", b * sq, q_cols), ("k", b * skv, k_cols), ("v", b * skv, v_cols))
                   if n["k"][role]]
    # One product per KV head, its query group's rows stacked (how a grouped-query kernel reads
    # each KV head once).  K and V (and Q) come from global memory when the kernel does not
    # project them itself (a KV cache, an already projected input): every core working on a
    # head streams that head's whole K and V whatever share of the query rows it has.  The
    # work on the scores is Q.K^T's epilogue: it splits over the cores as the scores do.
    score_ops = [("alu", scores)]                             # scale
    for name in ("bias", "mask"):
        if s[name] is not None:
            score_ops.append(("alu", scores))                 # bias add, mask add / select
    score_ops += [("alu", 3 * scores), ("transcendental", scores)]   # softmax max, sub, sum; exp
    # normalise: a reciprocal estimate x, or a division
    score_ops.append(("alu", scores) if fast_impl(attrs) else ("div", scores))
    if int(attrs.get("nan_guard", 0)):
        score_ops.append(("alu", scores))
    group = h // hkv
    rows = group * sq
    result = Work.of_gemms(
        *projections,
        Gemm(batch=b * hkv, m=rows, n=skv, k=d, a_elements=rows * d, shared_b=False,
             a_onchip=bool(n["k"]["q"]), b_onchip=bool(n["k"]["k"]), epilogue=tuple(score_ops)),  # Q.K^T
        Gemm(batch=b * hkv, m=rows, n=dv, k=skv, shared_b=False, a_onchip=True,
             b_onchip=bool(n["k"]["v"])))                                                      # P.V
    biases = sum(b * (sq if name == "b_q" else skv) * cols for name, cols in
                 (("b_q", q_cols), ("b_k", k_cols), ("b_v", v_cols)) if s[name] is not None)
    if biases:
        result.add_vector("alu", biases)
    if n["rot"]:
        result.add_vector("alu", 3 * b * (h * sq + (hkv * skv if n["rotate_k"] else 0)) * n["rot"])
    itemsize = np.dtype(s["x_q"].dtype).itemsize
    result.onchip_bytes = itemsize * (2 * scores + b * sq * q_cols + b * skv * (k_cols + v_cols))
    return result


register(OpDef(OP_TYPE, OpKind.OUT_EWISE_FUSABLE, compute, infer), work)
