"""Numpy implementations, shape rules and work counts of the ONNX ops the IR accepts.

Each module registers its ops with `codegen.ops.registry.register`; importing this package
imports every module in it, so adding an op is adding a file (or a function to one).
"""
import importlib
import pkgutil

for _module in sorted(m.name for m in pkgutil.iter_modules(__path__)):
    importlib.import_module(f"{__name__}.{_module}")
