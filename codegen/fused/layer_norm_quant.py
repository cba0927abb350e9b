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
it.  Numerics: the members run in the kernel's float compute dtype, as the unfused LayerNorm
and quantize kernels ran under the precision mode, so the fusion changes no number (in
fp32 the int8 values are onnxruntime's).  Running the LayerNorm in float32 under force_fp16
was tried: BERT-base QDQ's --compare max error went from 0.125 to 0.164 (its fp16 input is
rounded either way; only the 12 layers' requantization flips moved) at the same price.
Inputs: x, gamma, beta (as the LayerNorm reads them), then the views' shape constants.
"""
from __future__ import annotations

from codegen.fused import autofused
from codegen.registry import register
from ge.ops.registry import OpDef, OpKind

OP_TYPE = "LayerNormQuantFusionOp"


def _work(inputs, outputs, attrs):
    """The LayerNorm's and the quantizers' vector work; the normalized rows stay on chip."""
    return autofused.work(list(inputs), outputs, {"subgraph": attrs["subgraph"]})


# the sub-graph runs as an autofused group does: in the dtype the executor gives its float
# inputs (the precision mode's), each member's own kernel
register(OpDef(OP_TYPE, OpKind.OPAQUE, autofused.compute, autofused.infer), _work)
