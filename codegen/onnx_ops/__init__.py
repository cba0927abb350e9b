"""The kernel of every ONNX op of `ge.ops`: its .om type name, whether it launches, its work.

One module per module of `ge.ops`, each registering the kernels of that module's ops with
`codegen.registry.register`; this package imports every one of them.
"""
from codegen.onnx_ops import elementwise, extra, nn, normalization, quant, reduce, scatter, tensor  # noqa: F401
