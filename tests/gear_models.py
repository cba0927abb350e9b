"""Small models with dynamic dims for the gear tests (--dynamic_batch_size / _image_size / _dims)."""
from __future__ import annotations

import numpy as np
import onnx

from builder import Net


def cnn() -> onnx.ModelProto:
    """x[N, 3, H, W] -> Conv+BN+Relu -> GlobalAveragePool -> Flatten -> Gemm -> y[N, 5]: every
    N, H, W runs, so it takes batch and image-size gears."""
    net = Net(opset=17)
    x = net.input("x", ["N", 3, "H", "W"])
    c = net.op("Conv", x, net.rand(4, 3, 3, 3), net.rand(4), pads=[1, 1, 1, 1])
    b = net.op("BatchNormalization", c, net.const(np.full(4, 1.1)), net.rand(4), net.rand(4),
               net.const(np.full(4, 0.9)))
    r = net.op("Relu", b)
    p = net.op("GlobalAveragePool", r)
    f = net.op("Flatten", p)
    y = net.op("Gemm", f, net.rand(5, 4), net.rand(5), transB=1)
    return net.model(y)


def seq() -> onnx.ModelProto:
    """x[B, S, 8] and m[B, 4] (ND): a projection, softmax over the sequence, a mean, and the
    second input's own branch -- gears fill B, S of x and B of m, in that order."""
    net = Net(opset=18)
    x = net.input("x", ["B", "S", 8])
    m = net.input("m", ["B", 4])
    h = net.op("Add", net.op("MatMul", x, net.rand(8, 8)), net.rand(8))
    s = net.op("Softmax", h, axis=1)
    y = net.op("ReduceMean", s, net.const(np.array([1], np.int64)), keepdims=0)
    z = net.op("Relu", net.op("MatMul", m, net.rand(4, 6)))
    return net.model(y, z)


def static_batch() -> onnx.ModelProto:
    """x[1, 3, 8, 8]: the batch axis is fixed by the model."""
    net = Net(opset=17)
    x = net.input("x", [1, 3, 8, 8])
    return net.model(net.op("Relu", x))


def feeds_for(shapes: dict, seed: int = 0) -> dict:
    rng = np.random.default_rng(seed)
    return {name: rng.standard_normal(dims).astype(np.float32) for name, dims in shapes.items()}

