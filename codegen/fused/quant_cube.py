"""Int8 cube kernels: QuantConvBNReluFusionOp and QuantMatMulBiasActFusionOp.

What the kernel does, as the cube and its epilogue on the NPU do it:
1. int8 x int8 -> int32: ``acc = conv(x_q - x_zp, w_q - w_zp)`` (or ``matmul``), summed
   exactly (products of 8-bit values are summed in float64, exact here, then cast to int32);
   an int32 bias (``b_q``, in the accumulator's scale) joins the accumulator;
2. dequantize: ``v = float32(acc) * deq_scale`` with deq_scale = x_scale * w_scale per output
   channel (AMCT's AscendDequant deq_scale; BatchNorm folded into it at compile time);
3. the epilogue: a chain of ONNX/AMCT ops on ``v`` -- float bias, activation, rounding points
   (QuantizeLinear -> DequantizeLinear pairs the graph has), residual Add of a dequantized
   int8 or float input, and the final QuantizeLinear / AscendQuant that writes int8.
   It is stored in the ``epilogue`` attr in autofuse's sub-graph JSON (codegen/fused/
   autofused.py): input 0 is ``v``, inputs 1.. are the kernel's inputs from EXTRA_SLOT on,
   each step runs its op's own compute in float32 -- the graph's semantics, op by op.

Inputs: [x_q, w_q, b_q | None, extra epilogue inputs...].  Attrs: the Conv attrs (conv) or
nothing (matmul: W is [K, N]), ``x_zero_point``, ``w_zero_point``, ``deq_scale`` (numpy),
``epilogue`` (JSON), ``activation`` (for readers; Netron's relu_flag).
The cube multiplies int8 under every precision mode (`Work.cube_dtype`); its tensors are
priced in their own dtype (int8 in and out: half the bytes of fp16).
"""
from __future__ import annotations

import numpy as np

from codegen.fused import autofused
from codegen.registry import kernel_of, register
from codegen.work import Work
from ge.errors import AtcError
from ge.ops.common import FLOAT_TYPES
from ge.ops.quant import F32, integer_conv, integer_matmul
from ge.ops.registry import OpDef, OpKind, TensorType, get_op

QUANT_CONV = "QuantConvBNReluFusionOp"
QUANT_MATMUL = "QuantMatMulBiasActFusionOp"
EXTRA_SLOT = 3          # epilogue inputs start here


def _slot(inputs, i):
    return inputs[i] if len(inputs) > i else None


def _channel_view(array: np.ndarray, rank: int, conv: bool) -> np.ndarray:
    """Per-output-channel values shaped to broadcast on the accumulator: axis 1 of a conv
    output, the last axis of a matmul output."""
    a = np.asarray(array)
    if a.size == 1:
        return a.reshape(())
    return a.reshape((-1,) + (1,) * (rank - 2)) if conv else a.reshape(-1)


def accumulate(inputs, attrs, conv: bool) -> np.ndarray:
    """int32 accumulator of the cube (with the int32 bias)."""
    x, w, b = inputs[0], inputs[1], _slot(inputs, 2)
    xz, wz = attrs.get("x_zero_point"), attrs.get("w_zero_point")
    acc = integer_conv(x, w, attrs, xz, wz) if conv else integer_matmul(x, w, xz, wz)
    if b is not None:
        acc = acc + _channel_view(b.astype(np.int32), acc.ndim, conv)
    return acc


def dequantized(inputs, attrs, conv: bool) -> np.ndarray:
    acc = accumulate(inputs, attrs, conv)
    return acc.astype(F32) * _channel_view(np.asarray(attrs["deq_scale"], F32), acc.ndim, conv)


def _epilogue_args(inputs, v):
    return [v] + list(inputs[EXTRA_SLOT:])


def _float32_args(inputs, v, attrs):
    """The epilogue runs in float32 whatever the precision mode: float inputs that the mode
    moved to float16 go back to their stored dtype (the vector unit's fp32 path)."""
    stored = autofused.decode_subgraph(attrs["epilogue"]).inputs
    args = _epilogue_args(inputs, v)
    return [a if a is None or t is None or a.dtype not in FLOAT_TYPES else a.astype(t.dtype, copy=False)
            for a, t in zip(args, stored)]


def _compute(conv: bool):
    def compute(inputs, attrs):
        v = dequantized(inputs, attrs, conv)
        return autofused.compute(_float32_args(inputs, v, attrs), {"subgraph": attrs["epilogue"]})
    return compute


def cube_type(inputs, attrs, conv: bool) -> TensorType:
    """The accumulator's type (int32, the cube's output shape)."""
    if conv:
        shape = get_op("Conv").infer(list(inputs[:2]), attrs)[0].shape
    else:
        shape = get_op("MatMul").infer(list(inputs[:2]), {})[0].shape
    return TensorType(np.dtype(np.int32), tuple(shape))


def _infer(conv: bool):
    def infer(inputs, attrs):
        acc = cube_type(inputs, attrs, conv)
        stored = autofused.decode_subgraph(attrs["epilogue"]).inputs[0]
        if tuple(stored.shape) != tuple(acc.shape):
            raise AtcError("E16004", f"the epilogue of an int8 cube kernel expects {list(stored.shape)}, the cube "
                           f"writes {list(acc.shape)}", "Recompile the model with this version of atc_py.")
        return autofused.infer(_epilogue_args(inputs, TensorType(F32, acc.shape)), {"subgraph": attrs["epilogue"]})
    return infer


def _work(conv: bool):
    def work(inputs, outputs, attrs):
        """int8 MACs on the cube; the dequantizing multiply and the epilogue's ops on the vector
        unit; on chip: the float32 accumulator tile and the epilogue's intermediates."""
        acc = cube_type(inputs, attrs, conv)
        base = kernel_of("Conv" if conv else "MatMul").work(list(inputs[:2]), [acc], attrs if conv else {})
        total = Work(cube_macs=base.cube_macs, cube_dtype="int8", gemms=base.gemms)
        total.add_vector("alu", acc.size * (2 if _slot(inputs, 2) is not None else 1))
        epilogue = autofused.work(_epilogue_args(inputs, TensorType(F32, acc.shape)), outputs,
                                  {"subgraph": attrs["epilogue"]})
        total = total + epilogue
        total.cube_dtype = "int8"
        total.onchip_bytes = epilogue.onchip_bytes + acc.size * 4
        return total
    return work


for _op, _conv in ((QUANT_CONV, True), (QUANT_MATMUL, False)):
    register(OpDef(_op, OpKind.OUT_EWISE_FUSABLE, _compute(_conv), _infer(_conv)), _work(_conv))
