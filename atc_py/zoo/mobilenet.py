"""torchvision MobileNetV2: inverted residual blocks (expand 1x1, depthwise 3x3, project 1x1),
ReLU6 as the exporter writes it (Clip with min/max inputs), BN kept.

Why: the third model of the int8 bench (bench/bench_int8.py) next to ResNet-50 and BERT-base:
depthwise convs and ReLU6 are what int8 deployments on Ascend 310 quantize most often, and
their per-channel weight scales and clipped activations are what ResNet does not exercise.
Small config: width 0.25, one block per stage, 32x32 input, 10 classes.
"""
from __future__ import annotations

import numpy as np

from atc_py.zoo import _layers as L
from atc_py.zoo._builder import ROOT, GraphBuilder, Mod
from atc_py.zoo.efficientnet import make_divisible

SEED = 2002
# (expand_ratio t, channels c, repeats n, stride s) -- torchvision's inverted_residual_setting
SETTINGS = ((1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2), (6, 96, 3, 1), (6, 160, 3, 2),
            (6, 320, 1, 1))
FULL = dict(width=1.0, resolution=224, classes=1000, repeats=None)
SMALL = dict(width=0.25, resolution=32, classes=10, repeats=(1, 1, 1, 1, 1, 1, 1))


def relu6(g: GraphBuilder, mod: Mod, x: str) -> str:
    lo, hi = g.const(0.0, np.float32), g.const(6.0, np.float32)
    return g.set_ms(g.op("Clip", [x, lo, hi], mod), min(g.ms(x), 36.0))


def conv_bn_relu6(g: GraphBuilder, mod: Mod, x: str, cin: int, cout: int, k: int, stride: int = 1,
                  groups: int = 1, act: bool = True) -> str:
    """Conv2dNormActivation(..., activation_layer=ReLU6): Conv (no bias), BatchNorm2d, ReLU6."""
    y = L.conv(g, mod / 0, x, cin, cout, k, stride=stride, groups=groups, gain=2.0 if act else 1.0)
    y = L.batchnorm(g, mod / 1, y, cout)
    return relu6(g, mod / 2, y) if act else y


def inverted_residual(g: GraphBuilder, mod: Mod, x: str, cin: int, cout: int, stride: int, expand: int) -> str:
    conv, i = mod / "conv", 0
    hidden = int(round(cin * expand))
    y = x
    if expand != 1:
        y = conv_bn_relu6(g, conv / i, y, cin, hidden, 1)
        i += 1
    y = conv_bn_relu6(g, conv / i, y, hidden, hidden, 3, stride=stride, groups=hidden)
    y = L.conv(g, conv / (i + 1), y, hidden, cout, 1, gain=1.0)
    y = L.batchnorm(g, conv / (i + 2), y, cout, gamma=0.5 if stride == 1 and cin == cout else 1.0)
    if stride == 1 and cin == cout:
        y = L.add(g, mod, x, y)
    return y


def build_mobilenet_v2(small: bool = False, batch: int = 1):
    """MobileNetV2 (width 1.0, input [batch,3,224,224]); see the module doc for small."""
    cfg = SMALL if small else FULL
    g = GraphBuilder("mobilenet_v2", SEED)
    hw = cfg["resolution"]
    x = g.input("input", np.float32, [batch, 3, hw, hw])
    features = ROOT / "features"
    cin = make_divisible(32 * cfg["width"])
    x = conv_bn_relu6(g, features / 0, x, 3, cin, 3, stride=2)
    index = 1
    for s, (t, c, n, stride) in enumerate(SETTINGS):
        cout = make_divisible(c * cfg["width"])
        for b in range(cfg["repeats"][s] if cfg["repeats"] else n):
            x = inverted_residual(g, features / index, x, cin, cout, stride if b == 0 else 1, t)
            cin, index = cout, index + 1
    last = make_divisible(1280 * max(1.0, cfg["width"]))
    x = conv_bn_relu6(g, features / index, x, cin, last, 1)
    y = L.classifier_head(g, x, ROOT / "avgpool", ROOT, ROOT / "classifier" / 1, last, cfg["classes"])
    g.output(y, "output", np.float32, [batch, cfg["classes"]])
    return g.model()
