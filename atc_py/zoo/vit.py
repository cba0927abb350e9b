"""HF ViTForImageClassification (ViT-Base/16) as an opset-17 export writes it.

Why: ViT-Base is the seeds' vision transformer (15.4 ms -> 11.2 ms) and an attention form
(no mask, scale applied to the scores by Mul) on which other tools' attention fusion
misses; LayerNorm is the LayerNormalization op, pre-LN.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from atc_py.zoo import _layers as L
from atc_py.zoo._builder import ROOT, GraphBuilder, Mod

SEED = 6006
LN_EPS = 1e-12


@dataclass(frozen=True)
class VitConfig:
    layers: int = 12
    hidden: int = 768
    heads: int = 12
    ffn: int = 3072
    image: int = 224
    patch: int = 16
    classes: int = 1000

    @property
    def tokens(self) -> int:
        return (self.image // self.patch) ** 2 + 1


SMALL = VitConfig(layers=2, hidden=32, heads=2, ffn=64, image=32, patch=8, classes=10)


def _embeddings(g: GraphBuilder, mod: Mod, pixels: str, c: VitConfig) -> str:
    """Conv patchify -> flatten(2) -> transpose(1, 2) -> cat(CLS) -> + position embeddings."""
    proj = mod / "patch_embeddings" / "projection"
    x = L.conv(g, proj, pixels, 3, c.hidden, c.patch, stride=c.patch, bias=True, gain=1.0, pad=0)
    pe = mod / "patch_embeddings"
    x = g.op("Reshape", [x, g.const([1, c.hidden, c.tokens - 1], np.int64, pe)], pe)
    x = g.op("Transpose", [x], pe, perm=[0, 2, 1])
    cls = g.param(mod.p("cls_token"), g.normal((1, 1, c.hidden), 1.0))
    # cls_token.expand(batch, -1, -1); the exporter folds the -1s to 1 for Expand.
    cls = g.op("Expand", [cls, g.const([1, 1, 1], np.int64, mod)], mod)
    x = g.op("Concat", [cls, x], mod, axis=1)
    pos = g.param(mod.p("position_embeddings"), g.normal((1, c.tokens, c.hidden), 0.5))
    return g.op("Add", [x, pos], mod)


def _self_attention(g: GraphBuilder, mod: Mod, x: str, c: VitConfig) -> str:
    d, s = c.hidden // c.heads, c.tokens
    q = L.linear(g, mod / "query", x, c.hidden, c.hidden)
    k = L.linear(g, mod / "key", x, c.hidden, c.hidden)
    v = L.linear(g, mod / "value", x, c.hidden, c.hidden)
    kt = L.split_heads(g, mod, k, 1, s, c.heads, d, perm=(0, 2, 3, 1))
    v = L.split_heads(g, mod, v, 1, s, c.heads, d)
    q = L.split_heads(g, mod, q, 1, s, c.heads, d)
    scores = g.op("MatMul", [q, kt], mod)
    scores = g.op("Mul", [scores, g.const(1.0 / math.sqrt(d), np.float32, mod)], mod)
    probs = g.op("Softmax", [scores], mod, axis=-1)
    return L.merge_heads(g, mod, g.op("MatMul", [probs, v], mod), 1, s, c.hidden)


def _layer(g: GraphBuilder, mod: Mod, x: str, c: VitConfig) -> str:
    h = L.layernorm(g, mod / "layernorm_before", x, c.hidden, LN_EPS)
    attn = mod / "attention"
    h = _self_attention(g, attn / "attention", h, c)
    h = L.linear(g, attn / "output" / "dense", h, c.hidden, c.hidden)
    x = g.op("Add", [h, x], mod)
    h = L.layernorm(g, mod / "layernorm_after", x, c.hidden, LN_EPS)
    inter = mod / "intermediate"
    h = L.gelu_erf(g, inter / "intermediate_act_fn", L.linear(g, inter / "dense", h, c.hidden, c.ffn))
    out = mod / "output"
    h = L.linear(g, out / "dense", h, c.ffn, c.hidden)
    return g.op("Add", [h, x], out)


def build_vit_base(small: bool = False):
    """ViT-Base/16: pixel_values [1,3,224,224] -> logits [1,1000].  Small: 2 layers,
    hidden 32, 2 heads, 32x32 image, patch 8 (17 tokens), 10 classes."""
    c = SMALL if small else VitConfig()
    g = GraphBuilder("vit_base", SEED)
    pixels = g.input("pixel_values", np.float32, [1, 3, c.image, c.image])
    vit = ROOT / "vit"
    x = _embeddings(g, vit / "embeddings", pixels, c)
    layers = (vit / "encoder").child("layer", hidden=True)   # a ModuleList: no scope
    for i in range(c.layers):
        x = _layer(g, layers / i, x, c)
    x = L.layernorm(g, vit / "layernorm", x, c.hidden, LN_EPS)
    cls = g.op("Gather", [x, g.const(0, np.int64)], axis=1)
    y = L.gemm(g, ROOT / "classifier", cls, c.hidden, c.classes)
    g.output(y, "logits", np.float32, [1, c.classes])
    return g.model()
