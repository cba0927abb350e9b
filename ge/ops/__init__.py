"""Semantics of the ONNX ops the IR accepts: numpy compute, shape rule, kind, config inputs.

Each module below registers its ops with `ge.ops.registry.register` when imported; this
package imports every one of them, so any import of `ge.ops...` sees the whole table.
Adding an op family is adding a module and its line here (and its kernel in codegen/onnx_ops).
"""
from ge.ops import (ascend_quant, elementwise, extra, nn, normalization, quant, quant_contrib,  # noqa: F401
                    reduce, rotary, scatter, tensor)  # (register their ops)
