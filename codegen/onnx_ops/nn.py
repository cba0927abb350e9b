"""Kernels of the cube ops and pooling (ge/ops/nn.py): .om type and work rule.

Cube ops count multiply-accumulates and give the shape of each product (`Gemm`: a conv per
image and group, a MatMul with a weight as one product over all rows); a bias adds one
vector ALU op per output element;
pools count vector ops per output element and kernel tap.
"""
from __future__ import annotations

import math

from codegen.registry import register
from codegen.work import Gemm, Work, cube_operand_dtype
from ge.ops.nn import gemm_dims, pool_kernel_shape


def conv_gemm(x, w, out, attrs: dict) -> Gemm:
    """A conv as the cube runs it: per image and group, [out pixels, Cin/g x window] x
    [Cin/g x window, Cout/g], reading the feature map (not an im2col copy) from memory."""
    group = int(attrs.get("group", 1))
    window = math.prod(w.shape[2:])
    images, cout = int(x.shape[0]), int(w.shape[0])
    pixels = out.size // max(images * cout, 1)      # `out` may be stored permuted (ViT's patch embedding)
    return Gemm(batch=images, groups=group, m=pixels, n=cout // group, k=int(w.shape[1]) * window,
                k_window=window, a_elements=math.prod(x.shape[1:]) // group)


def matmul_gemm(a_shape, b_shape, out_shape) -> Gemm:
    """numpy matmul as cube products.  When B has no batch of its own (a weight), A's leading
    axes are just more rows of one product; otherwise one product per batch entry."""
    a, b = tuple(int(d) for d in a_shape), tuple(int(d) for d in b_shape)
    k = a[-1]
    n = b[-1] if len(b) > 1 else 1
    if math.prod(b[:-2]) == 1:
        m = math.prod(a[:-1])
        return Gemm(batch=1, m=m, n=n, k=k, a_elements=m * k, shared_b=True)
    m = a[-2] if len(a) > 1 else 1
    batch = math.prod(out_shape) // max(m * n, 1)
    return Gemm(batch=batch, m=m, n=n, k=k, a_elements=m * k, shared_b=False)


def _conv_work(inputs, outputs, attrs):
    work = Work.of_gemms(conv_gemm(inputs[0], inputs[1], outputs[0], attrs),      # N*Cout*out * Cin/g * prod(k)
                         cube_dtype=cube_operand_dtype(inputs[0], inputs[1]))
    if len(inputs) > 2 and inputs[2] is not None:
        work.add_vector("alu", outputs[0].size)
    return work


def _conv_transpose_work(inputs, outputs, attrs):
    x, w = inputs[0], inputs[1]
    group, k = int(attrs.get("group", 1)), math.prod(w.shape[2:])
    cg, pixels = int(x.shape[1]) // group, math.prod(x.shape[2:])
    # every input pixel scatters Mg*K products: [pixels, Cin/g] x [Cin/g, Mg*K] per image and group
    gemm = Gemm(batch=int(x.shape[0]), groups=group, m=pixels, n=int(w.shape[1]) * k, k=cg, a_elements=cg * pixels)
    adds = x.size // x.shape[1] * w.shape[1] * group * k   # col2im: one add per column entry
    work = Work.of_gemms(gemm).add_vector("alu", adds)
    if len(inputs) > 2 and inputs[2] is not None:
        work.add_vector("alu", outputs[0].size)
    return work


def _max_pool_work(inputs, outputs, attrs):
    k = math.prod(pool_kernel_shape(attrs, len(inputs[0].shape) - 2))
    return Work().add_vector("alu", outputs[0].size * max(k - 1, 1))


def _average_pool_work(inputs, outputs, attrs):
    k = math.prod(pool_kernel_shape(attrs, len(inputs[0].shape) - 2))
    return Work().add_vector("alu", outputs[0].size * k).add_vector("div", outputs[0].size)


def _global_avg_work(inputs, outputs, attrs):
    return Work().add_vector("alu", inputs[0].size).add_vector("div", outputs[0].size)


def _global_max_work(inputs, outputs, attrs):
    return Work().add_vector("alu", inputs[0].size)


def _matmul_work(inputs, outputs, attrs):
    return Work.of_gemms(matmul_gemm(inputs[0].shape, inputs[1].shape, outputs[0].shape),
                         cube_dtype=cube_operand_dtype(inputs[0], inputs[1]))


def _gemm_work(inputs, outputs, attrs):
    m, k, n = gemm_dims(inputs[0].shape, inputs[1].shape, attrs)
    work = Work.of_gemms(Gemm(batch=1, m=m, n=n, k=k, a_elements=m * k),
                         cube_dtype=cube_operand_dtype(inputs[0], inputs[1]))
    if float(attrs.get("alpha", 1.0)) != 1.0:
        work.add_vector("alu", m * n)
    if len(inputs) > 2 and inputs[2] is not None:
        work.add_vector("alu", m * n * (1 if float(attrs.get("beta", 1.0)) == 1.0 else 2))
    return work


register("Conv", _conv_work, "Conv2D")
register("ConvTranspose", _conv_transpose_work, "Deconvolution")
register("MaxPool", _max_pool_work, "MaxPoolV3")
register("AveragePool", _average_pool_work, "AvgPool")
register("GlobalAveragePool", _global_avg_work)
register("GlobalMaxPool", _global_max_work)
register("MatMul", _matmul_work, "BatchMatMul")
register("Gemm", _gemm_work, "GemmD")
