"""torchvision EfficientNet-B4: MBConv blocks (expand 1x1, depthwise kxk, squeeze-excite,
project 1x1), SiLU as Sigmoid*Mul, BN kept.

Why: the depthwise convs (group = channels), the SE gate and SiLU are the patterns ResNet
lacks; B4 is the seeds' EfficientNet (18.6 ms -> 13.8 ms).  Small config: width 0.25,
one or two blocks per stage (9 blocks, two with skip Adds), 32x32 input.
"""
from __future__ import annotations

import math

import numpy as np

from atc_py.zoo import _layers as L
from atc_py.zoo._builder import ROOT, GraphBuilder, Mod

SEED = 4004
# B0 stages: (expand_ratio, kernel, stride, in_channels, out_channels, layers)
B0_STAGES = ((1, 3, 1, 32, 16, 1), (6, 3, 2, 16, 24, 2), (6, 5, 2, 24, 40, 2),
             (6, 3, 2, 40, 80, 3), (6, 5, 1, 80, 112, 3), (6, 5, 2, 112, 192, 4),
             (6, 3, 1, 192, 320, 1))
FULL = dict(width=1.4, depth=1.8, resolution=380, classes=1000, layers=None)
SMALL = dict(width=0.25, depth=1.0, resolution=32, classes=10, layers=(1, 2, 1, 1, 2, 1, 1))


def make_divisible(v: float, divisor: int = 8) -> int:
    """torchvision's _make_divisible: round to a multiple of 8, never below 90% of v."""
    new_v = max(divisor, int(v + divisor / 2) // divisor * divisor)
    return new_v + divisor if new_v < 0.9 * v else new_v


def conv_bn_act(g: GraphBuilder, mod: Mod, x: str, cin: int, cout: int, k: int, stride: int = 1,
                groups: int = 1, act: bool = True) -> str:
    """Conv2dNormActivation: Sequential(Conv (no bias), BatchNorm2d, SiLU)."""
    y = L.conv(g, mod / 0, x, cin, cout, k, stride=stride, groups=groups, gain=2.0 if act else 1.0)
    y = L.batchnorm(g, mod / 1, y, cout)
    return L.silu(g, mod / 2, y) if act else y


def squeeze_excite(g: GraphBuilder, mod: Mod, x: str, channels: int, squeeze: int) -> str:
    """SqueezeExcitation: scale = sigmoid(fc2(silu(fc1(avgpool(x))))); return scale * x."""
    s = g.op("GlobalAveragePool", [x], mod / "avgpool")
    s = L.conv(g, mod / "fc1", g.set_ms(s, g.ms(x)), channels, squeeze, 1, bias=True)
    s = L.silu(g, mod / "activation", s)
    s = L.conv(g, mod / "fc2", s, squeeze, channels, 1, bias=True, gain=1.0)
    s = g.op("Sigmoid", [s], mod / "scale_activation")
    return g.set_ms(g.op("Mul", [s, x], mod), g.ms(x))


def mbconv(g: GraphBuilder, mod: Mod, x: str, expand: int, k: int, stride: int, cin: int, cout: int) -> str:
    block, i = mod / "block", 0
    hidden = make_divisible(cin * expand)
    y = x
    if expand != 1:
        y = conv_bn_act(g, block / i, y, cin, hidden, 1)
        i += 1
    y = conv_bn_act(g, block / i, y, hidden, hidden, k, stride=stride, groups=hidden)
    y = squeeze_excite(g, block / (i + 1), y, hidden, max(1, cin // 4))
    y = conv_bn_act(g, block / (i + 2), y, hidden, cout, 1, act=False)
    if stride == 1 and cin == cout:
        y = L.add(g, mod, y, x)   # stochastic depth is the identity in eval mode
    return y


def build_efficientnet_b4(small: bool = False):
    """EfficientNet-B4 (width 1.4, depth 1.8, input [1,3,380,380]); see module doc for small."""
    cfg = SMALL if small else FULL
    g = GraphBuilder("efficientnet_b4", SEED)
    hw = cfg["resolution"]
    x = g.input("input", np.float32, [1, 3, hw, hw])
    features = ROOT / "features"
    stem = make_divisible(B0_STAGES[0][3] * cfg["width"])
    x = conv_bn_act(g, features / 0, x, 3, stem, 3, stride=2)
    cin = stem
    for s, (expand, k, stride, _, out, layers) in enumerate(B0_STAGES):
        cout = make_divisible(out * cfg["width"])
        n = cfg["layers"][s] if cfg["layers"] else int(math.ceil(layers * cfg["depth"]))
        for b in range(n):
            x = mbconv(g, features / (s + 1) / b, x, expand, k, stride if b == 0 else 1, cin, cout)
            cin = cout
    head = 4 * cin
    x = conv_bn_act(g, features / (len(B0_STAGES) + 1), x, cin, head, 1)
    y = L.classifier_head(g, x, ROOT / "avgpool", ROOT, ROOT / "classifier" / 1, head, cfg["classes"])
    g.output(y, "output", np.float32, [1, cfg["classes"]])
    return g.model()
