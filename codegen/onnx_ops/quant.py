"""Kernels of the quantized ops (ge/ops/quant.py, quant_contrib.py, ascend_quant.py).

Integer matrix ops run on the cube in int8 (`Work.cube_dtype`), at the chip's int8 MAC rate,
with their requantization on the vector unit; quantize/dequantize ops are vector work per
element.  Their tensors are priced in their own (8-bit) dtype, so they move half the bytes
of fp16 tensors.
"""
from __future__ import annotations

import math

from codegen.registry import register
from codegen.work import Work, cube_operand_dtype, per_element
from ge.ops.nn import gemm_dims

# multiply by the scale, round, add the zero point, saturate
register("QuantizeLinear", per_element(alu=4), "Quantize")
register("DequantizeLinear", per_element(alu=3), "Dequantize")      # cast, subtract, multiply
register("DynamicQuantizeLinear", per_element(alu=6))              # min/max pass + quantize
register("AscendQuant", per_element(alu=4))
register("AscendDequant", per_element(alu=3))
register("AscendAntiQuant", per_element(alu=3))


def _int_cube(macs: int, a, b, out, requant: bool) -> Work:
    work = Work(cube_macs=macs, cube_dtype=cube_operand_dtype(a, b))
    if requant:     # int32 -> float multiply, round, zero point, saturate
        work.add_vector("alu", 4 * out.size)
    return work


def _conv_macs(w, out) -> int:
    return out.size * math.prod(w.shape[1:])


def _matmul_integer_work(inputs, outputs, attrs):
    return _int_cube(outputs[0].size * int(inputs[0].shape[-1]), inputs[0], inputs[1], outputs[0], False)


def _conv_integer_work(inputs, outputs, attrs):
    return _int_cube(_conv_macs(inputs[1], outputs[0]), inputs[0], inputs[1], outputs[0], False)


def _qlinear_conv_work(inputs, outputs, attrs):
    return _int_cube(_conv_macs(inputs[3], outputs[0]), inputs[0], inputs[3], outputs[0], True)


def _qlinear_matmul_work(inputs, outputs, attrs):
    return _int_cube(outputs[0].size * int(inputs[0].shape[-1]), inputs[0], inputs[3], outputs[0], True)


def _qgemm_work(inputs, outputs, attrs):
    m, k, n = gemm_dims(inputs[0].shape, inputs[3].shape, attrs)
    return _int_cube(m * k * n, inputs[0], inputs[3], outputs[0], True)


def _qlinear_gap_work(inputs, outputs, attrs):
    return Work().add_vector("alu", inputs[0].size).add_vector("alu", 4 * outputs[0].size)


register("MatMulInteger", _matmul_integer_work)
register("ConvInteger", _conv_integer_work)
register("QLinearConv", _qlinear_conv_work)
register("QLinearMatMul", _qlinear_matmul_work)
register("QGemm", _qgemm_work)
register("QLinearAdd", per_element(alu=8))       # two dequantizing multiply-adds, round, saturate
register("QLinearMul", per_element(alu=7))
register("QLinearGlobalAveragePool", _qlinear_gap_work)
register("QLinearSigmoid", per_element(move=1))  # a 256-entry lookup table
register("QLinearLeakyRelu", per_element(move=1))
register("QLinearSoftmax", per_element(alu=6, transcendental=1, div=1))
