"""torchvision DenseNet-121 as the TorchScript exporter writes it: pre-activation dense layers
(Concat of every earlier feature map -> BN -> ReLU -> 1x1 conv -> BN -> ReLU -> 3x3 conv),
transitions (BN -> ReLU -> 1x1 conv -> 2x2 AveragePool), BN kept unfolded.

Why: DenseNet is the calibration set's memory-heavy CNN (Ascend 310P3 throughput peaks at
batch 8 and falls after): every layer re-reads and copies all earlier features, and its BN
sits *before* a conv, where ConvBNReLU cannot fold it.  Small config: growth 4, init 8,
two layers per block, 32x32 input.
"""
from __future__ import annotations

import numpy as np

from atc_py.zoo import _layers as L
from atc_py.zoo._builder import ROOT, GraphBuilder, Mod

SEED = 1210
FULL = dict(growth=32, init=64, bn_size=4, blocks=(6, 12, 24, 16), resolution=224, classes=1000)
SMALL = dict(growth=4, init=8, bn_size=4, blocks=(2, 2, 2, 2), resolution=32, classes=10)


def _concat(g: GraphBuilder, mod: Mod, features: list, channels: list) -> str:
    """torch.cat(features, 1): one Concat of every earlier feature map (also of just one)."""
    y = g.op("Concat", features, mod, axis=1)
    ms = sum(g.ms(f) * c for f, c in zip(features, channels)) / sum(channels)
    return g.set_ms(y, ms)


def _dense_layer(g: GraphBuilder, mod: Mod, features: list, channels: list, growth: int, bn_size: int) -> str:
    cin, mid = sum(channels), bn_size * growth
    x = _concat(g, mod, features, channels)
    x = L.relu(g, mod / "relu1", L.batchnorm(g, mod / "norm1", x, cin))
    x = L.conv(g, mod / "conv1", x, cin, mid, 1)
    x = L.relu(g, mod / "relu2", L.batchnorm(g, mod / "norm2", x, mid))
    return L.conv(g, mod / "conv2", x, mid, growth, 3, gain=1.0)


def _transition(g: GraphBuilder, mod: Mod, x: str, cin: int, cout: int) -> str:
    x = L.relu(g, mod / "relu", L.batchnorm(g, mod / "norm", x, cin))
    x = L.conv(g, mod / "conv", x, cin, cout, 1, gain=1.0)
    y = g.op("AveragePool", [x], mod / "pool", ceil_mode=0, count_include_pad=1, kernel_shape=[2, 2],
             pads=[0, 0, 0, 0], strides=[2, 2])
    return g.set_ms(y, g.ms(x))


def build_densenet121(small: bool = False, batch: int = 1):
    """DenseNet-121 (input [batch,3,224,224], output [batch,1000]); see module doc for small."""
    cfg = SMALL if small else FULL
    g = GraphBuilder("densenet121", SEED)
    hw = cfg["resolution"]
    x = g.input("input", np.float32, [batch, 3, hw, hw])
    features = ROOT / "features"
    x = L.conv(g, features / "conv0", x, 3, cfg["init"], 7, stride=2)
    x = L.relu(g, features / "relu0", L.batchnorm(g, features / "norm0", x, cfg["init"]))
    x = g.op("MaxPool", [x], features / "pool0", ceil_mode=0, dilations=[1, 1], kernel_shape=[3, 3],
             pads=[1, 1, 1, 1], strides=[2, 2])
    c = cfg["init"]
    for b, layers in enumerate(cfg["blocks"]):
        block = features / f"denseblock{b + 1}"
        feats, chans = [x], [c]
        for i in range(layers):
            feats.append(_dense_layer(g, block / f"denselayer{i + 1}", feats, chans, cfg["growth"], cfg["bn_size"]))
            chans.append(cfg["growth"])
        x = _concat(g, block, feats, chans)
        c = sum(chans)
        if b + 1 < len(cfg["blocks"]):
            x = _transition(g, features / f"transition{b + 1}", x, c, c // 2)
            c //= 2
    x = L.relu(g, ROOT, L.batchnorm(g, features / "norm5", x, c))
    y = L.classifier_head(g, x, ROOT, ROOT, ROOT / "classifier", c, cfg["classes"])
    g.output(y, "output", np.float32, [batch, cfg["classes"]])
    return g.model()
