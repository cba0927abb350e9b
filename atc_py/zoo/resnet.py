"""torchvision ResNet-50/101 (bottleneck, v1.5: stride on the 3x3 conv), BN kept unfolded.

Why: ResNet-50 is the seeds' headline model (53 ConvBNReLU matches); ResNet-101 is the
same pattern at twice the depth.  Small configs keep the full block counts (so the Conv
counts stay 53 / 104) and shrink only the widths (base 8) and the input (32x32).
"""
from __future__ import annotations

import numpy as np

from atc_py.zoo import _layers as L
from atc_py.zoo._builder import ROOT, GraphBuilder, Mod

SEEDS = {"resnet50": 5050, "resnet101": 5101}
BLOCKS = {"resnet50": (3, 4, 6, 3), "resnet101": (3, 4, 23, 3)}
EXPANSION = 4
# The last BN of each residual branch is scaled down (torchvision's zero_init_residual
# idea, softened) so the residual stream is dominated by the identity path, as in
# trained ResNets.
RESIDUAL_GAMMA = 0.5


def _bottleneck(g: GraphBuilder, mod: Mod, x: str, cin: int, planes: int, stride: int) -> str:
    cout = planes * EXPANSION
    out = L.conv(g, mod / "conv1", x, cin, planes, 1)
    out = L.relu(g, mod / "relu", L.batchnorm(g, mod / "bn1", out, planes))
    out = L.conv(g, mod / "conv2", out, planes, planes, 3, stride=stride)
    out = L.relu(g, mod / "relu_1", L.batchnorm(g, mod / "bn2", out, planes))
    out = L.conv(g, mod / "conv3", out, planes, cout, 1)
    out = L.batchnorm(g, mod / "bn3", out, cout, gamma=RESIDUAL_GAMMA)
    identity = x
    if stride != 1 or cin != cout:
        ds = mod / "downsample"
        identity = L.conv(g, ds / 0, x, cin, cout, 1, stride=stride, gain=1.0)
        identity = L.batchnorm(g, ds / 1, identity, cout)
    return L.relu(g, mod / "relu_2", L.add(g, mod, out, identity))


def build_resnet(name: str, small: bool = False, batch: int = 1):
    """Build torchvision's resnet50/resnet101 (input [batch,3,224,224]; small: base width 8,
    32x32).  `batch` fixes the batch dim, as `--input_shape` would on a dynamic export."""
    base, hw, classes = (8, 32, 10) if small else (64, 224, 1000)
    g = GraphBuilder(name, SEEDS[name])
    x = g.input("input", np.float32, [batch, 3, hw, hw])
    x = L.conv(g, ROOT / "conv1", x, 3, base, 7, stride=2)
    x = L.relu(g, ROOT / "relu", L.batchnorm(g, ROOT / "bn1", x, base))
    x = g.op("MaxPool", [x], ROOT / "maxpool", ceil_mode=0, dilations=[1, 1], kernel_shape=[3, 3],
             pads=[1, 1, 1, 1], strides=[2, 2])
    cin = base
    for stage, blocks in enumerate(BLOCKS[name]):
        layer = ROOT / f"layer{stage + 1}"
        planes = base * 2 ** stage
        for b in range(blocks):
            stride = 2 if (b == 0 and stage > 0) else 1
            x = _bottleneck(g, layer / b, x, cin, planes, stride)
            cin = planes * EXPANSION
    y = L.classifier_head(g, x, ROOT / "avgpool", ROOT, ROOT / "fc", cin, classes)
    g.output(y, "output", np.float32, [batch, classes])
    return g.model()


def build_resnet50(small: bool = False, batch: int = 1):
    return build_resnet("resnet50", small, batch)


def build_resnet101(small: bool = False, batch: int = 1):
    return build_resnet("resnet101", small, batch)
