"""The seed articles' test cases: the ConvBNReLU test net, AddGe and MulReduceSum.

Why: these are the graphs the seeds quote timings for (ConvBNReLU 1200 -> 960 us, AddGe
320 -> 248 us, MulReduceSum 510 -> 425 us), so they are the first things users convert.
"""
from __future__ import annotations

import numpy as np

from atc_py.zoo import _layers as L
from atc_py.zoo._builder import ROOT, GraphBuilder

SEED_TESTMODEL, SEED_ADDGE, SEED_MULREDUCESUM = 1001, 1002, 1003


def build_seed_testmodel(small: bool = False):
    """nn.Sequential(3 x ConvBNReLU, AdaptiveAvgPool2d(1), Flatten, Linear), as in seed 2."""
    hw, chans, classes = (16, (3, 8, 16, 32), 10) if small else (224, (3, 64, 128, 256), 1000)
    g = GraphBuilder("seed_testmodel", SEED_TESTMODEL)
    x = g.input("input", np.float32, [1, 3, hw, hw])
    layers = ROOT / "layers"
    for i in range(3):
        block = layers / i
        x = L.conv(g, block / "conv", x, chans[i], chans[i + 1], 3)
        x = L.batchnorm(g, block / "bn", x, chans[i + 1])
        x = L.relu(g, block / "relu", x)
    y = L.classifier_head(g, x, layers / 3, layers / 4, layers / 5, chans[-1], classes)
    g.output(y, "output", np.float32, [1, classes])
    return g.model()


def _elementwise_shape(small: bool) -> list:
    return [2, 16, 32] if small else [8, 1024, 1024]


def build_seed_addge(small: bool = False):
    """torch.ge(torch.add(x, y), z) with z broadcast along the two leading axes ([1,1,W])."""
    shape = _elementwise_shape(small)
    g = GraphBuilder("seed_addge", SEED_ADDGE)
    x = g.input("x", np.float32, shape)
    y = g.input("y", np.float32, shape)
    z = g.input("z", np.float32, [1, 1, shape[-1]])
    out = g.op("GreaterOrEqual", [g.op("Add", [x, y]), z])
    g.output(out, "output", np.bool_, shape)
    return g.model()


def build_seed_mulreducesum(small: bool = False):
    """torch.sum(x * y, dim=-1): Mul then ReduceSum (axes as a Constant input, keepdims=0),
    exported at opset 18 where every Reduce* takes its axes as an input."""
    shape = _elementwise_shape(small)
    g = GraphBuilder("seed_mulreducesum", SEED_MULREDUCESUM, opset=18)
    x = g.input("x", np.float32, shape)
    y = g.input("y", np.float32, shape)
    prod = g.op("Mul", [x, y])
    out = g.op("ReduceSum", [prod, g.const([-1], np.int64)], keepdims=0)
    g.output(out, "output", np.float32, shape[:-1])
    return g.model()
