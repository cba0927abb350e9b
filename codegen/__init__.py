"""Kernels and lowering: every op's kernel (its .om type, launch, work), fused kernels, the .om
writer and reader.

Importing `codegen` registers every kernel, explicitly: first the ONNX ops' kernels
(`codegen.onnx_ops`, one per op of `ge.ops`), then the fused kernels (`codegen.fused`), then
the ops GE inserts itself (`codegen.aipp`: static AIPP from --insert_op_conf;
`codegen.map_index`: the gear index of a multi-batch model).
"""
from codegen import onnx_ops, fused, aipp, map_index  # noqa: F401  (register every kernel)
