"""Layer snippets shared by the zoo families, written node-for-node as PyTorch exports them.

Why: the CNN families share Conv/BN/activation blocks and the transformer families share
Linear, LayerNorm, GELU and head splitting; writing each once keeps the exported
patterns identical across models (the fusion passes match these exact shapes).

Weight scales keep activations O(1) through any depth: He init for convs, BatchNorm
running stats matched to the expected statistics of their input (tracked through the
build as a mean square per value, as calibration on real data would give) with gammas
near 1, std 1/sqrt(fan-in) for transformer Linears (near PyTorch's default), LayerNorm
affine near (1, 0).  Parameters are never all-ones or all-zeros, so a pass that drops
a bias or a gamma changes the numbers.
"""
from __future__ import annotations

import math

import numpy as np

from atc_py.zoo._builder import GraphBuilder, Mod

F32 = np.float32
I64 = np.int64


# -- convolutional blocks ------------------------------------------------------------
def conv(g: GraphBuilder, mod: Mod, x: str, cin: int, cout: int, k: int, stride: int = 1,
         groups: int = 1, bias: bool = False, gain: float = 2.0, pad: int = -1) -> str:
    """nn.Conv2d, padding (k-1)//2 unless `pad` >= 0, He-initialised (fan-in; `gain` 2
    for ReLU-like consumers, 1 for linear ones)."""
    fan_in = cin // groups * k * k
    inputs = [x, g.param(mod.p("weight"), g.normal((cout, cin // groups, k, k), math.sqrt(gain / fan_in)))]
    if bias:
        inputs.append(g.param(mod.p("bias"), g.normal((cout,), 0.05)))
    p = (k - 1) // 2 if pad < 0 else pad
    y = g.op("Conv", inputs, mod, dilations=[1, 1], group=groups, kernel_shape=[k, k],
             pads=[p, p, p, p], strides=[stride, stride])
    return g.set_ms(y, gain * g.ms(x))


def batchnorm(g: GraphBuilder, mod: Mod, x: str, c: int, eps: float = 1e-5, gamma: float = 1.0) -> str:
    """nn.BatchNorm2d in eval mode (kept, not folded), its running variance near the
    input's expected mean square.  `gamma` scales the affine weight (e.g. a smaller last BN
    in a residual branch)."""
    ms = g.ms(x)
    names = [g.param(mod.p("weight"), g.uniform((c,), 0.8 * gamma, 1.2 * gamma)),
             g.param(mod.p("bias"), g.normal((c,), 0.1)),
             g.param(mod.p("running_mean"), g.normal((c,), 0.1 * ms ** 0.5)),
             g.param(mod.p("running_var"), g.uniform((c,), 0.8 * ms, 1.25 * ms))]
    y = g.op("BatchNormalization", [x] + names, mod, epsilon=eps, momentum=0.9)
    return g.set_ms(y, gamma * gamma + 0.01)


def relu(g: GraphBuilder, mod: Mod, x: str) -> str:
    """nn.ReLU.  Its mean square is bounded by the input's; using the bound (not the
    zero-mean 1/2) keeps BN stats from under-estimating on positive residual streams."""
    return g.set_ms(g.op("Relu", [x], mod), g.ms(x))


def add(g: GraphBuilder, mod: Mod, a: str, b: str) -> str:
    """A residual Add (the branch first, as torch writes `out += identity`)."""
    return g.set_ms(g.op("Add", [a, b], mod), g.ms(a) + g.ms(b))


def silu(g: GraphBuilder, mod: Mod, x: str) -> str:
    """nn.SiLU as the exporter writes it: x * sigmoid(x)."""
    return g.set_ms(g.op("Mul", [x, g.op("Sigmoid", [x], mod)], mod), 0.36 * g.ms(x))


def gemm(g: GraphBuilder, mod: Mod, x: str, din: int, dout: int, std: float = 0.0) -> str:
    """nn.Linear on a 2-D input: Gemm with the [out, in] weight and transB=1."""
    std = std or 1.0 / math.sqrt(din)
    w = g.param(mod.p("weight"), g.normal((dout, din), std))
    b = g.param(mod.p("bias"), g.normal((dout,), 0.02))
    return g.op("Gemm", [x, w, b], mod, alpha=1.0, beta=1.0, transB=1)


def classifier_head(g: GraphBuilder, x: str, pool: Mod, flatten: Mod, fc: Mod,
                    channels: int, classes: int) -> str:
    """GlobalAveragePool -> Flatten -> Gemm, the torchvision classification head."""
    pooled = g.op("GlobalAveragePool", [x], pool)
    flat = g.op("Flatten", [pooled], flatten, axis=1)
    return gemm(g, fc, flat, channels, classes)


# -- transformer pieces ---------------------------------------------------------------
def linear(g: GraphBuilder, mod: Mod, x: str, din: int, dout: int, std: float = 0.0,
           transposed_weight: bool = True) -> str:
    """nn.Linear on a 3-D input: MatMul with the exporter's pre-transposed [in, out] copy
    ("onnx::MatMul_<n>"), then Add with the bias first, as traced exports have it.
    `transposed_weight=False` keeps the state-dict name (GPT-2's Conv1D stores [in, out]).
    Default std 1/sqrt(in) keeps outputs O(1), so attention scores are not all ~0."""
    w = g.normal((din, dout), std or 1.0 / math.sqrt(din))
    w_name = g.anon_param("MatMul", w) if transposed_weight else g.param(mod.p("weight"), w)
    b = g.param(mod.p("bias"), g.normal((dout,), 0.02))
    return g.op("Add", [b, g.op("MatMul", [x, w_name], mod)], mod)


def ln_params(g: GraphBuilder, mod: Mod, hidden: int, gamma: str = "weight", beta: str = "bias"):
    return (g.param(mod.p(gamma), g.normal((hidden,), 0.1, mean=1.0)),
            g.param(mod.p(beta), g.normal((hidden,), 0.1)))


def layernorm(g: GraphBuilder, mod: Mod, x: str, hidden: int, eps: float) -> str:
    """nn.LayerNorm as the LayerNormalization op (opset >= 17 exports)."""
    w, b = ln_params(g, mod, hidden)
    return g.op("LayerNormalization", [x, w, b], mod, axis=-1, epsilon=eps)


def reduce_mean_last(g: GraphBuilder, mod: Mod, x: str) -> str:
    """ReduceMean over the last axis, keepdims=1: axes attribute before opset 18, input from 18."""
    if g.opset >= 18:
        return g.op("ReduceMean", [x, g.const([-1], I64, mod)], mod, keepdims=1)
    return g.op("ReduceMean", [x], mod, axes=[-1], keepdims=1)


def layernorm_decomposed(g: GraphBuilder, mod: Mod, x: str, hidden: int, eps: float) -> str:
    """LayerNorm in primitives, as older exports (and HF BERT traced below opset 17) write
    it: (x - mean) / sqrt(mean((x - mean)^2) + eps) * gamma + beta."""
    w, b = ln_params(g, mod, hidden)
    mean = reduce_mean_last(g, mod, x)
    centred = g.op("Sub", [x, mean], mod)
    sq = g.op("Pow", [centred, g.const(2.0, F32, mod)], mod)
    var = reduce_mean_last(g, mod, sq)
    std = g.op("Sqrt", [g.op("Add", [var, g.const(eps, F32, mod)], mod)], mod)
    normed = g.op("Div", [centred, std], mod)
    return g.op("Add", [g.op("Mul", [normed, w], mod), b], mod)


def gelu_erf(g: GraphBuilder, mod: Mod, x: str) -> str:
    """Exact GELU as exported: x * 0.5 * (1 + erf(x / 1.41421))."""
    e = g.op("Erf", [g.op("Div", [x, g.const(1.4142135381698608, F32, mod)], mod)], mod)
    one_plus = g.op("Add", [e, g.const(1.0, F32, mod)], mod)
    return g.op("Mul", [g.op("Mul", [x, one_plus], mod), g.const(0.5, F32, mod)], mod)


def gelu_tanh(g: GraphBuilder, mod: Mod, x: str) -> str:
    """GPT-2's gelu_new: 0.5*x*(1 + tanh(sqrt(2/pi)*(x + 0.044715*x^3)))."""
    half_x = g.op("Mul", [g.const(0.5, F32, mod), x], mod)
    cube = g.op("Pow", [x, g.const(3.0, F32, mod)], mod)
    inner = g.op("Add", [x, g.op("Mul", [g.const(0.044715, F32, mod), cube], mod)], mod)
    t = g.op("Tanh", [g.op("Mul", [g.const(math.sqrt(2.0 / math.pi), F32, mod), inner], mod)], mod)
    return g.op("Mul", [half_x, g.op("Add", [g.const(1.0, F32, mod), t], mod)], mod)


def split_heads(g: GraphBuilder, mod: Mod, x: str, batch: int, seq: int, heads: int,
                head_dim: int, perm=(0, 2, 1, 3)) -> str:
    """[B,S,hidden] -> Reshape [B,S,H,D] -> Transpose (perm (0,2,3,1) gives K^T [B,H,D,S])."""
    r = g.op("Reshape", [x, g.const([batch, seq, heads, head_dim], I64, mod)], mod)
    return g.op("Transpose", [r], mod, perm=list(perm))


def merge_heads(g: GraphBuilder, mod: Mod, x: str, batch: int, seq: int, hidden: int) -> str:
    """[B,H,S,D] -> Transpose (0,2,1,3) -> Reshape [B,S,hidden]."""
    t = g.op("Transpose", [x], mod, perm=[0, 2, 1, 3])
    return g.op("Reshape", [t, g.const([batch, seq, hidden], I64, mod)], mod)
