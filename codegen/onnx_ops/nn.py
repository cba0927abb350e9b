"""Kernels of the cube ops and pooling (ge/ops/nn.py): .om type and work rule.

Cube ops count multiply-accumulates (a bias adds one vector ALU op per output element);
pools count vector ops per output element and kernel tap.
"""
from __future__ import annotations

import math

from codegen.registry import register
from codegen.work import Work, cube_operand_dtype
from ge.ops.nn import gemm_dims, pool_kernel_shape


def _conv_work(inputs, outputs, attrs):
    w = inputs[1]
    macs = outputs[0].size * math.prod(w.shape[1:])     # N*Cout*out * Cin/group * prod(k)
    work = Work(cube_macs=macs, cube_dtype=cube_operand_dtype(inputs[0], w))
    if len(inputs) > 2 and inputs[2] is not None:
        work.add_vector("alu", outputs[0].size)
    return work


def _conv_transpose_work(inputs, outputs, attrs):
    x, w = inputs[0], inputs[1]
    group, k = int(attrs.get("group", 1)), math.prod(w.shape[2:])
    macs = x.size * w.shape[1] * k                  # every input pixel scatters Mg*K products
    adds = x.size // x.shape[1] * w.shape[1] * group * k   # col2im: one add per column entry
    work = Work(cube_macs=macs).add_vector("alu", adds)
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
    return Work(cube_macs=outputs[0].size * int(inputs[0].shape[-1]),
                cube_dtype=cube_operand_dtype(inputs[0], inputs[1]))


def _gemm_work(inputs, outputs, attrs):
    m, k, n = gemm_dims(inputs[0].shape, inputs[1].shape, attrs)
    work = Work(cube_macs=m * k * n, cube_dtype=cube_operand_dtype(inputs[0], inputs[1]))
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
