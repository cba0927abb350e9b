"""Kernels of fused ops (ConvBNReluFusionOp, MultiHeadAttentionFusionOp, autofused groups...).

Each module registers its fused op types in `codegen.ops.registry`, next to the ONNX ops,
so the simulator and the cost model treat fused and unfused kernels through one ruler.
"""
import importlib
import pkgutil

for _module in sorted(m.name for m in pkgutil.iter_modules(__path__)):
    importlib.import_module(f"{__name__}.{_module}")
