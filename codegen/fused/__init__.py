"""Kernels of fused ops (ConvBNReluFusionOp, MultiHeadAttentionFusionOp, autofused groups...).

Each module defines its fused op types' semantics (an `OpDef`: compute, infer, kind) and
registers their kernels in `codegen.registry`, next to the ONNX ops' kernels, so the
simulator and the cost model treat fused and unfused kernels through one ruler.  This
package imports every module.
"""
from codegen.fused import (attention, autofused, conv, gemm, layer_norm, quant_cube,  # noqa: F401  (register their kernels)
                           conv_chain, layer_norm_quant, quant_attention, squeeze_excitation)
