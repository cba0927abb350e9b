"""QuantMultiHeadAttentionFusionOp: attention whose graph quantizes Q, K, P and V, as one
kernel with both products on the int8 cube.

What the kernel does (the graph's own ops, in order, in the ``subgraph`` attr in autofuse's
sub-graph JSON, codegen/fused/autofused.py):
1. the int8 views of the operands the pattern took (head split: Reshape, Transpose) -- the
   kernel reads Q, K and V where the projections wrote them;
2. ``S = QuantBatchMatMul(q, k)``: int8 x int8 -> int32, exact (integer_matmul), times
   ``deq_scale = q_scale * k_scale`` in float32 -- DequantizeLinear(q) @ DequantizeLinear(k);
3. the score chain as written: the rounding points (QuantizeLinear -> DequantizeLinear), the
   scale (Div/Mul by a constant), the mask Add, Softmax, and the QuantizeLinear that makes P
   int8;
4. ``O = QuantBatchMatMul(p, v)``, then the output's QuantizeLinear and int8 views (head
   merge).
Float steps run in float32 whatever the precision mode (the vector unit's fp32 path, as the
int8 cube kernels' epilogues do); the cube multiplies int8 (`Work.cube_dtype`).
Inputs: the int8 operands, then what the score chain reads (mask, constants), in the order
the sub-graph's refs number them.
"""
from __future__ import annotations

import numpy as np

from codegen.fused import autofused
from codegen.registry import register
from codegen.work import Gemm, Work
from ge.ops.common import FLOAT_TYPES
from ge.ops.quant import F32, integer_matmul
from ge.ops.registry import OpDef, OpKind, TensorType
from ge.ops.nn import matmul_shape

QUANT_ATTENTION = "QuantMultiHeadAttentionFusionOp"
QUANT_BATCH_MATMUL = "QuantBatchMatMul"      # a member op of the kernel's sub-graph only


# -- the member op: int8 x int8 -> dequantized float32 -----------------------------------------

def _bmm_compute(inputs, attrs):
    acc = integer_matmul(inputs[0], inputs[1], attrs.get("a_zero_point"), attrs.get("b_zero_point"))
    return [acc.astype(F32) * np.asarray(attrs["deq_scale"], F32).reshape(())]


def _bmm_infer(inputs, attrs):
    return [TensorType(F32, tuple(matmul_shape(inputs[0].shape, inputs[1].shape)))]


def _bmm_work(inputs, outputs, attrs):
    """int8 MACs on the cube, with the product's shape so the cost model pads and splits it
    as any cube product (its operands are the kernel's on-chip Q, K, P, V); the dequantizing
    multiply on the vector unit."""
    out, k = outputs[0], int(inputs[0].shape[-1])
    m, n = (int(out.shape[-2]), int(out.shape[-1])) if len(out.shape) >= 2 else (1, int(out.shape[-1]))
    batch = out.size // (m * n) if m * n else 0
    gemm = Gemm(batch=batch, m=m, n=n, k=k, shared_b=len(inputs[1].shape) <= 2, a_onchip=True, b_onchip=True)
    return Work.of_gemms(gemm, cube_dtype="int8").add_vector("alu", out.size)


register(OpDef(QUANT_BATCH_MATMUL, OpKind.OUT_EWISE_FUSABLE, _bmm_compute, _bmm_infer, domain="ai.atc_py.internal"),
         _bmm_work)


# -- the kernel -------------------------------------------------------------------------------

def _float32_args(inputs, attrs):
    """Float inputs the precision mode moved to float16 go back to their stored dtype."""
    stored = autofused.decode_subgraph(attrs["subgraph"]).inputs
    return [a if a is None or t is None or a.dtype not in FLOAT_TYPES else a.astype(t.dtype, copy=False)
            for a, t in zip(inputs, stored)]


def _compute(inputs, attrs):
    return autofused.compute(_float32_args(inputs, attrs), {"subgraph": attrs["subgraph"]})


def _infer(inputs, attrs):
    return autofused.infer(list(inputs), {"subgraph": attrs["subgraph"]})


def _work(inputs, outputs, attrs):
    """The members' work (two int8 cube products, the score chain on the vector unit); the
    scores and probabilities stay on chip."""
    total = autofused.work(list(inputs), outputs, {"subgraph": attrs["subgraph"]})
    total.cube_dtype = "int8"
    return total


register(OpDef(QUANT_ATTENTION, OpKind.OPAQUE, _compute, _infer), _work)
