"""HF GPT2LMHeadModel (gpt2, 124M) as an opset-17 export writes it.

Why: GPT-2 brings the decoder patterns BERT and ViT lack: packed QKV (one MatMul + Split),
a causal mask sliced from a lower-triangular buffer and applied with Where, tanh-GELU,
pre-LN with the LayerNormalization op, and a vocabulary-sized lm head.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from atc_py.zoo import _layers as L
from atc_py.zoo._builder import ROOT, GraphBuilder, Mod

SEED = 2002
LN_EPS = 1e-5
MASK_VALUE = float(np.finfo(np.float32).min)   # HF: torch.finfo(dtype).min


@dataclass(frozen=True)
class Gpt2Config:
    layers: int = 12
    hidden: int = 768
    heads: int = 12
    seq: int = 64
    vocab: int = 50257
    positions: int = 1024


SMALL = Gpt2Config(layers=2, hidden=32, heads=2, seq=8, vocab=100, positions=16)


def _attention(g: GraphBuilder, mod: Mod, x: str, causal: str, c: Gpt2Config) -> str:
    d = c.hidden // c.heads
    qkv = L.linear(g, mod / "c_attn", x, c.hidden, 3 * c.hidden, transposed_weight=False)
    split = g.const([c.hidden] * 3, np.int64, mod)
    q, k, v = g.op("Split", [qkv, split], mod, n_out=3, axis=2)
    q = L.split_heads(g, mod, q, 1, c.seq, c.heads, d)
    kt = L.split_heads(g, mod, k, 1, c.seq, c.heads, d, perm=(0, 2, 3, 1))
    v = L.split_heads(g, mod, v, 1, c.seq, c.heads, d)
    scores = g.op("MatMul", [q, kt], mod)
    scores = g.op("Div", [scores, g.const(math.sqrt(d), np.float32, mod)], mod)
    # bias[:, :, k_len - q_len:k_len, :k_len] of the [1,1,P,P] lower-triangular buffer.
    mask = g.op("Slice", [causal, g.const([0, 0], np.int64, mod), g.const([c.seq, c.seq], np.int64, mod),
                          g.const([2, 3], np.int64, mod)], mod)
    scores = g.op("Where", [mask, scores, g.const(MASK_VALUE, np.float32, mod)], mod)
    probs = g.op("Softmax", [scores], mod, axis=-1)
    ctx = L.merge_heads(g, mod, g.op("MatMul", [probs, v], mod), 1, c.seq, c.hidden)
    return L.linear(g, mod / "c_proj", ctx, c.hidden, c.hidden, transposed_weight=False)


def _block(g: GraphBuilder, mod: Mod, x: str, causal: str, c: Gpt2Config) -> str:
    h = _attention(g, mod / "attn", L.layernorm(g, mod / "ln_1", x, c.hidden, LN_EPS), causal, c)
    x = g.op("Add", [h, x], mod)
    mlp = mod / "mlp"
    h = L.layernorm(g, mod / "ln_2", x, c.hidden, LN_EPS)
    h = L.linear(g, mlp / "c_fc", h, c.hidden, 4 * c.hidden, transposed_weight=False)
    h = L.gelu_tanh(g, mlp / "act", h)
    h = L.linear(g, mlp / "c_proj", h, 4 * c.hidden, c.hidden, transposed_weight=False)
    return g.op("Add", [x, h], mod)


def build_gpt2(small: bool = False):
    """GPT-2 124M: input_ids [1,64] int64 -> logits [1,64,50257].  Small: 2 layers,
    hidden 32, 2 heads, vocab 100, seq 8 (of 16 positions, so the mask Slice cuts)."""
    c = SMALL if small else Gpt2Config()
    g = GraphBuilder("gpt2", SEED)
    ids = g.input("input_ids", np.int64, [1, c.seq])
    tr = ROOT / "transformer"
    wte_w = g.normal((c.vocab, c.hidden), 1.0 / math.sqrt(c.hidden))
    wte = g.param(tr.p("wte.weight"), wte_w)
    wpe = g.param(tr.p("wpe.weight"), g.normal((c.positions, c.hidden), 0.1))
    x = g.op("Gather", [wte, ids], tr / "wte")
    pos_ids = g.const(np.arange(c.seq, dtype=np.int64)[None], np.int64, tr)
    x = g.op("Add", [x, g.op("Gather", [wpe, pos_ids], tr / "wpe")], tr)
    # Every layer registers the same buffer; the exporter keeps one copy.
    tril = np.tril(np.ones((c.positions, c.positions), dtype=bool))[None, None]
    causal = g.param(tr.p("h.0.attn.bias"), tril)
    blocks = tr.child("h", hidden=True)   # a ModuleList: no scope
    for i in range(c.layers):
        x = _block(g, blocks / i, x, causal, c)
    x = L.layernorm(g, tr / "ln_f", x, c.hidden, LN_EPS)
    # lm_head is tied to wte; the exporter writes the transposed copy as its own initializer.
    lm_w = g.anon_param("MatMul", np.ascontiguousarray(wte_w.T))
    y = g.op("MatMul", [x, lm_w], ROOT / "lm_head")
    g.output(y, "logits", np.float32, [1, c.seq, c.vocab])
    return g.model()
