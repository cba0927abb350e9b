"""LayerNormQuantFusionOp: a LayerNormalization whose readers quantize it, as one vector
kernel that writes int8.

Why: in an int8 transformer every LayerNorm is read by QuantizeLinear / AscendQuant (the
next int8 GEMMs' input, and in QDQ/QOperator graphs the residual's int8 copy).  Unfused,
the LayerNorm writes its float rows and a second kernel reads them back to quantize; here
the rows are normalized and quantized in the buffer, and only int8 leaves the core.

What the kernel does (the graph's own ops, in order, in the ``subgraph`` attr in autofuse's
sub-graph JSON, codegen/fused/autofused.py): the LayerNormalization, then for each
quantizing reader its int8-shape views (Reshape) and its QuantizeLinear / AscendQuant.
Outputs: the quantized tensors, then the float normalized tensor when other readers need
it.  Numerics: every member runs in its stored dtype (float32) whatever the precision mode
-- the statistics and the scale multiply never round to fp16 before the quantize, as the
int8 cube kernels' epilogues do -- so the int8 values are what onnxruntime computes.
Inputs: x, gamma, beta (as the LayerNorm reads them), then the views' shape constants.
"""
from __future__ import annotations

from codegen.fused import autofused
from codegen.fused.quant_attention import compute_stored, infer_subgraph
from codegen.registry import register
from ge.ops.registry import OpDef, OpKind

OP_TYPE = "LayerNormQuantFusionOp"


def _work(inputs, outputs, attrs):
    """The LayerNorm's and the quantizers' vector work; the normalized rows stay on chip."""
    return autofused.work(list(inputs), outputs, {"subgraph": attrs["subgraph"]})


register(OpDef(OP_TYPE, OpKind.OPAQUE, compute_stored, infer_subgraph), _work)
