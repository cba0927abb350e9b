"""HF BertModel (bert-base-uncased layout) as a TorchScript export writes it.

Why: BERT-base is the seeds' transformer (12.3 ms -> 9.2 ms) and the graph on which
LayerNorm, GELU, attention and SkipLayerNorm fusions are judged.  LayerNorm is written
decomposed (ReduceMean ... Add beta); `opset=18` moves the ReduceMean axes into an
input, the variant on which other tools' LayerNorm fusions are known to break.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Optional

import numpy as np

from atc_py.zoo import _layers as L
from atc_py.zoo._builder import ROOT, GraphBuilder, Mod

SEED = 3003
LN_EPS = 1e-12
# get_extended_attention_mask: (1 - mask) * -10000 (classic exports; newer HF uses
# finfo.min, which overflows to -inf in float16).
MASK_VALUE = -10000.0


@dataclass(frozen=True)
class BertConfig:
    layers: int = 12
    hidden: int = 768
    heads: int = 12
    ffn: int = 3072
    seq: int = 128
    vocab: int = 30522
    max_positions: int = 512
    type_vocab: int = 2
    batch: int = 1


SMALL = BertConfig(layers=2, hidden=32, heads=2, ffn=64, seq=8, vocab=100, max_positions=16)


def _embeddings(g: GraphBuilder, c: BertConfig, input_ids: str) -> str:
    emb = ROOT / "embeddings"
    word = g.param(emb.p("word_embeddings.weight"), g.normal((c.vocab, c.hidden), 1.0))
    pos = g.param(emb.p("position_embeddings.weight"), g.normal((c.max_positions, c.hidden), 0.5))
    typ = g.param(emb.p("token_type_embeddings.weight"), g.normal((c.type_vocab, c.hidden), 0.5))
    x = g.op("Gather", [word, input_ids], emb / "word_embeddings")
    # token_type_ids and position_ids are buffers the exporter folds to constants.
    tt_ids = g.const(np.zeros((1, c.seq), np.int64), np.int64, emb)
    x = g.op("Add", [x, g.op("Gather", [typ, tt_ids], emb / "token_type_embeddings")], emb)
    pos_ids = g.const(np.arange(c.seq, dtype=np.int64)[None], np.int64, emb)
    x = g.op("Add", [x, g.op("Gather", [pos, pos_ids], emb / "position_embeddings")], emb)
    return L.layernorm_decomposed(g, emb / "LayerNorm", x, c.hidden, LN_EPS)


def _extended_mask(g: GraphBuilder, mask: str) -> str:
    """mask[:, None, None, :] -> float -> (1 - m) * MASK_VALUE, shape [B,1,1,S]."""
    m = g.op("Unsqueeze", [mask, g.const([1], np.int64)])
    m = g.op("Unsqueeze", [m, g.const([2], np.int64)])
    m = g.op("Cast", [m], to=1)
    m = g.op("Sub", [g.const(1.0, np.float32), m])
    return g.op("Mul", [m, g.const(MASK_VALUE, np.float32)])


def _self_attention(g: GraphBuilder, mod: Mod, x: str, mask: str, c: BertConfig) -> str:
    d = c.hidden // c.heads
    q = L.linear(g, mod / "query", x, c.hidden, c.hidden)
    k = L.linear(g, mod / "key", x, c.hidden, c.hidden)
    v = L.linear(g, mod / "value", x, c.hidden, c.hidden)
    kt = L.split_heads(g, mod, k, c.batch, c.seq, c.heads, d, perm=(0, 2, 3, 1))
    v = L.split_heads(g, mod, v, c.batch, c.seq, c.heads, d)
    q = L.split_heads(g, mod, q, c.batch, c.seq, c.heads, d)
    scores = g.op("MatMul", [q, kt], mod)
    scores = g.op("Div", [scores, g.const(math.sqrt(d), np.float32, mod)], mod)
    probs = g.op("Softmax", [g.op("Add", [scores, mask], mod)], mod, axis=-1)
    ctx = g.op("MatMul", [probs, v], mod)
    return L.merge_heads(g, mod, ctx, c.batch, c.seq, c.hidden)


def _layer(g: GraphBuilder, mod: Mod, x: str, mask: str, c: BertConfig) -> str:
    attn = mod / "attention"
    a = _self_attention(g, attn / "self", x, mask, c)
    out = attn / "output"
    a = L.linear(g, out / "dense", a, c.hidden, c.hidden)
    x = L.layernorm_decomposed(g, out / "LayerNorm", g.op("Add", [a, x], out), c.hidden, LN_EPS)
    inter = mod / "intermediate"
    h = L.linear(g, inter / "dense", x, c.hidden, c.ffn)
    h = L.gelu_erf(g, inter / "intermediate_act_fn", h)
    out = mod / "output"
    h = L.linear(g, out / "dense", h, c.ffn, c.hidden)
    return L.layernorm_decomposed(g, out / "LayerNorm", g.op("Add", [h, x], out), c.hidden, LN_EPS)


def build_bert_base(small: bool = False, opset: int = 17, pooler: bool = True, batch: int = 1,
                    seq: int = 0, config: Optional[BertConfig] = None):
    """BERT-base (inputs input_ids/attention_mask [batch,128] int64; outputs last_hidden_state
    [batch,128,768] and, with `pooler`, pooler_output [batch,768]).  Small: 2 layers, hidden 32.
    `batch` and `seq` (0: the config's) fix the shapes, as the inference guides' "_fix" exports do;
    `config` replaces both sizes (a test between small and base)."""
    c = replace(config or (SMALL if small else BertConfig()), batch=batch, **({"seq": seq} if seq else {}))
    g = GraphBuilder("bert_base", SEED, opset=opset)
    ids = g.input("input_ids", np.int64, [c.batch, c.seq])
    mask = g.input("attention_mask", np.int64, [c.batch, c.seq])
    x = _embeddings(g, c, ids)
    ext = _extended_mask(g, mask)
    layers = (ROOT / "encoder").child("layer", hidden=True)   # a ModuleList: no scope
    for i in range(c.layers):
        x = _layer(g, layers / i, x, ext, c)
    x = g.output(x, "last_hidden_state", np.float32, [c.batch, c.seq, c.hidden])
    if pooler:
        pool = ROOT / "pooler"
        cls = g.op("Gather", [x, g.const(0, np.int64, pool)], pool, axis=1)
        y = g.op("Tanh", [L.gemm(g, pool / "dense", cls, c.hidden, c.hidden)], pool / "activation")
        g.output(y, "pooler_output", np.float32, [c.batch, c.hidden])
    return g.model()
