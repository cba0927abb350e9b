"""Semantics of the com.microsoft quantized ops that onnxruntime's `quantize_static` writes in
QOperator format: QGemm, QLinearAdd, QLinearMul, QLinearGlobalAveragePool, QLinearSoftmax,
QLinearSigmoid, QLinearLeakyRelu.

Why these: they are what ResNet, MobileNet and BERT become under `quantize_static(...,
quant_format=QOperator)` (bench/int8 lists the op census).  Each follows onnxruntime's CPU
kernel: the binary ops combine the dequantized operands with float32 scale ratios and round
half to even once (MLAS's QLinearAdd/QLinearMul), the pool sums in int32, the lookup-table
ops (Sigmoid, LeakyRelu, Softmax) are dequantize -> float op -> quantize per element.
"""
from __future__ import annotations

import numpy as np

from ge.errors import AtcError, InvalidNode
from ge.ops.common import broadcast_shape
from ge.ops.mlas_float import fma_f32
from ge.ops.nn import gemm_dims
from ge.ops.quant import (F32, _quant_attrs, check_per_tensor, dequantize, integer_matmul, param, param_shapes,
                          quant_dtype, quantize, requantize)
from ge.ops.registry import OpDef, OpKind, TensorType, get_op, register

MS = "com.microsoft"


def _out_type(op_type: str, attrs: dict, shape, zero_point: str = "C_zero_point") -> list:
    return [TensorType(quant_dtype(op_type, param(attrs, zero_point)), tuple(shape))]


# -- QGemm --------------------------------------------------------------------------------------


def qgemm_compute(inputs, attrs):
    """alpha * a_scale * b_scale * ((A - a_zp) @ (B - b_zp) + C), C an int32 bias in the
    accumulator's scale; requantized to y when y_scale is given, else float32."""
    a, b = inputs[0], inputs[3]
    c = inputs[6] if len(inputs) > 6 else None
    a_s, a_z = _quant_attrs(attrs, "a_scale", "a_zero_point")
    b_s, b_z = _quant_attrs(attrs, "b_scale", "b_zero_point")
    if int(attrs.get("transA", 0)):
        a = a.T
    if int(attrs.get("transB", 0)):
        b = b.T
    acc = integer_matmul(a, b, a_z, b_z)
    if c is not None:
        acc = acc + c.astype(np.int32)
    scale = np.float32(attrs.get("alpha", 1.0)) * np.asarray(a_s, F32) * np.asarray(b_s, F32)
    y_s = param(attrs, "y_scale")
    if y_s is None:
        return [acc.astype(F32) * scale]
    y_z = param(attrs, "y_zero_point")
    return [requantize(acc, scale / np.asarray(y_s, F32), y_z if y_z is not None else 0, quant_dtype("QGemm", y_z))]


_QGEMM_CONFIG = ((1, "a_scale"), (2, "a_zero_point"), (4, "b_scale"), (5, "b_zero_point"), (7, "y_scale"),
                 (8, "y_zero_point"))


def _check_per_tensor(op_type: str, inputs, attrs, config, but: tuple = ()) -> dict:
    """Every scale and zero point of `config` (bar `but`) per tensor, as onnxruntime's
    com.microsoft kernels take them; their shapes."""
    shapes = param_shapes(inputs, attrs, config)
    for name, shape in shapes.items():
        if name not in but:
            check_per_tensor(op_type, name, shape)
    return shapes


def qgemm_infer(inputs, attrs):
    m, _, n = gemm_dims(inputs[0].shape, inputs[3].shape, attrs)
    shapes = _check_per_tensor("QGemm", inputs, attrs, _QGEMM_CONFIG, but=("b_scale", "b_zero_point"))
    for name in ("b_scale", "b_zero_point"):       # per tensor or per column
        if name in shapes and shapes[name] not in ((), (1,), (n,)):
            raise InvalidNode(f"QGemm {name} of shape {list(shapes[name])} must be a scalar, a 1-D tensor of one "
                              f"value or [{n}], one per column", "Give a per-tensor or per-column B quantization.")
    if param(attrs, "y_scale") is None:
        return [TensorType(F32, (m, n))]
    return _out_type("QGemm", attrs, (m, n), "y_zero_point")


register(OpDef("QGemm", OpKind.OUT_EWISE_FUSABLE, qgemm_compute, qgemm_infer, domain=MS, array_config=True,
               config_inputs=_QGEMM_CONFIG))


# -- binary ops ---------------------------------------------------------------------------------

_BINARY_CONFIG = ((1, "A_scale"), (2, "A_zero_point"), (4, "B_scale"), (5, "B_zero_point"),
                  (6, "C_scale"), (7, "C_zero_point"))


def _binary_params(attrs):
    a_s, a_z = _quant_attrs(attrs, "A_scale", "A_zero_point")
    b_s, b_z = _quant_attrs(attrs, "B_scale", "B_zero_point")
    c_s, c_z = _quant_attrs(attrs, "C_scale", "C_zero_point")
    for s in (a_s, b_s, c_s):
        if s.size != 1:
            raise AtcError("E16004", "QLinearAdd/QLinearMul take per-tensor scales only.", "Re-quantize the model.")
    return [np.float32(s.reshape(())) for s in (a_s, b_s, c_s)], [0 if z is None else z.reshape(()) for z in (a_z, b_z, c_z)]


def _centered_f32(x, zp):
    return (x.astype(np.int32) - np.int32(zp)).astype(F32)


def qlinear_add_compute(inputs, attrs):
    """MLAS's x86-64 AVX2 kernel step for step (MlasQLinearAddKernelAvx2Helper,
    core/mlas/lib/qladd_avx2.cpp, built with FMA contraction): ratios ``r_A = A_scale /
    C_scale``, ``r_B = B_scale / C_scale`` in float32; ``fixed = C_zp - fma(r_A, A_zp, r_B *
    B_zp)``; then ``fma(a, r_A, fma(b, r_B, fixed))`` -- or, where A is the broadcast scalar,
    ``fma(b, r_B, fma(a, r_A, fixed))`` -- each fma rounding once, and the sum rounded half to
    even and saturated.  BERT-base's GELU ``Erf + 1`` puts sums on exact .5 ties (r_B * 127
    = 127.5000458 with C_zp = -128): any other order of the same operations rounds some of
    them the other way (measured against onnxruntime 1.32, tests/test_ops_quant.py)."""
    (a_s, b_s, c_s), (a_z, b_z, c_z) = _binary_params(attrs)
    ratio_a, ratio_b = np.float32(a_s / c_s), np.float32(b_s / c_s)
    fixed = np.float32(np.float32(c_z) - fma_f32(ratio_a, np.float32(a_z), np.float32(ratio_b * np.float32(b_z))))
    a, b = inputs[0].astype(np.float32), inputs[3].astype(np.float32)
    if _scalar_span(a, b):
        v = fma_f32(b, ratio_b, fma_f32(a, ratio_a, fixed))
    else:
        v = fma_f32(a, ratio_a, fma_f32(b, ratio_b, fixed))
    return [quantize(v, np.float32(1.0), 0, quant_dtype("QLinearAdd", param(attrs, "C_zero_point")))]


def _scalar_span(a: np.ndarray, b: np.ndarray) -> bool:
    """Whether onnxruntime's broadcast loop hands the kernel A as the scalar of each span: A is
    one element, or A's innermost axis is broadcast against B's."""
    if a.size == 1:
        return b.size > 1
    return a.ndim > 0 and b.ndim > 0 and a.shape[-1] == 1 and b.shape[-1] > 1


def qlinear_mul_compute(inputs, attrs):
    """``C_zp + (a - A_zp)(b - B_zp) * (A_scale * B_scale / C_scale)`` in float32 (the integer
    product is exact), then rounded half to even and saturated: the output zero point is
    added *before* the rounding, as onnxruntime 1.32's x86-64 kernel does (measured on exact
    .5 products: adding it after the rounding, as MLAS's SSE2 source reads, rounds
    118.5 - 23 to 95 where onnxruntime gives 96)."""
    (a_s, b_s, c_s), (a_z, b_z, c_z) = _binary_params(attrs)
    product = _centered_f32(inputs[0], a_z) * _centered_f32(inputs[3], b_z)
    v = np.float32(c_z) + product * np.float32((a_s * b_s) / c_s)
    return [quantize(v, np.float32(1.0), 0, quant_dtype("QLinearMul", param(attrs, "C_zero_point")))]


def _binary_infer(op_type):
    def infer(inputs, attrs):
        for name, shape in param_shapes(inputs, attrs, _BINARY_CONFIG).items():
            if shape != ():     # onnxruntime's schema: rank 0, not even [1]
                raise InvalidNode(f"{op_type} {name} of shape {list(shape)} must be a scalar (rank 0)",
                                  "Give the node scalar scales and zero points.")
        _binary_params(attrs)
        return _out_type(op_type, attrs, broadcast_shape(inputs[0].shape, inputs[3].shape))
    return infer


for _op, _compute in (("QLinearAdd", qlinear_add_compute), ("QLinearMul", qlinear_mul_compute)):
    register(OpDef(_op, OpKind.BROADCAST, _compute, _binary_infer(_op), config_inputs=_BINARY_CONFIG,
                   domain=MS, array_config=True))


# -- QLinearGlobalAveragePool -------------------------------------------------------------------


def _gap_axes(x_shape, attrs) -> tuple:
    return tuple(range(1, len(x_shape) - 1)) if int(attrs.get("channels_last", 0)) else tuple(range(2, len(x_shape)))


def qlinear_gap_compute(inputs, attrs):
    """int32 sum over the spatial axes, then rint((sum - n * x_zp) * x_scale / (y_scale * n)) + y_zp."""
    x = inputs[0]
    x_s, x_z = _quant_attrs(attrs, "x_scale", "x_zero_point")
    y_s, y_z = _quant_attrs(attrs, "y_scale", "y_zero_point")
    axes = _gap_axes(x.shape, attrs)
    n = int(np.prod([x.shape[a] for a in axes]))
    total = x.astype(np.int32).sum(axis=axes, keepdims=True, dtype=np.int64) - \
        n * int(0 if x_z is None else np.asarray(x_z).reshape(()))
    mult = np.asarray(x_s, F32) / (np.asarray(y_s, F32) * np.float32(n))
    return [requantize(total.astype(np.int32), mult, 0 if y_z is None else y_z, quant_dtype("QLinearGlobalAveragePool", y_z))]


_GAP_CONFIG = ((1, "x_scale"), (2, "x_zero_point"), (3, "y_scale"), (4, "y_zero_point"))


def qlinear_gap_infer(inputs, attrs):
    _check_per_tensor("QLinearGlobalAveragePool", inputs, attrs, _GAP_CONFIG)
    shape = list(inputs[0].shape)
    for a in _gap_axes(shape, attrs):
        shape[a] = 1
    return _out_type("QLinearGlobalAveragePool", attrs, shape, "y_zero_point")


register(OpDef("QLinearGlobalAveragePool", OpKind.REDUCE, qlinear_gap_compute, qlinear_gap_infer, domain=MS,
               config_inputs=_GAP_CONFIG, array_config=True))


# -- lookup-table ops: dequantize -> float op -> quantize ---------------------------------------

_UNARY_CONFIG = ((1, "X_scale"), (2, "X_zero_point"), (3, "Y_scale"), (4, "Y_zero_point"))


def _lut_op(op_type: str, float_op: str, float_attrs):
    def compute(inputs, attrs):
        x_s, x_z = _quant_attrs(attrs, "X_scale", "X_zero_point")
        y_s, y_z = _quant_attrs(attrs, "Y_scale", "Y_zero_point")
        v = get_op(float_op).compute([dequantize(inputs[0], x_s, x_z)], float_attrs(attrs))[0]
        return [quantize(v, y_s, 0 if y_z is None else y_z, quant_dtype(op_type, y_z))]

    def infer(inputs, attrs):
        _check_per_tensor(op_type, inputs, attrs, _UNARY_CONFIG)
        return _out_type(op_type, attrs, inputs[0].shape, "Y_zero_point")

    kind = OpKind.OPAQUE if float_op == "Softmax" else OpKind.ELEMWISE
    register(OpDef(op_type, kind, compute, infer, config_inputs=_UNARY_CONFIG, domain=MS, array_config=True))


_lut_op("QLinearSigmoid", "Sigmoid", lambda attrs: {})
_lut_op("QLinearLeakyRelu", "LeakyRelu", lambda attrs: {"alpha": float(attrs.get("alpha", 0.01))})
_lut_op("QLinearSoftmax", "Softmax", lambda attrs: {"axis": int(attrs.get("axis", -1))})
