"""atc_py: ONNX -> GE-like IR -> fused kernels -> .om, and a simulator that runs the .om.

The Python API (docs in atc_py/api.py and simulator/session.py):
    atc_py.compile(model, output=..., soc_version=..., **atc_options) -> report dict
    atc_py.InferSession(om_path, soc_version=None) -> get_inputs(), get_outputs(), infer(), summary()
Imported lazily so `import atc_py` stays cheap and the packages keep their import order.
"""
from __future__ import annotations

__all__ = ["compile", "InferSession", "AtcError"]


def __getattr__(name):
    if name == "compile":
        from atc_py.api import compile as compile_model
        return compile_model
    if name == "InferSession":
        from simulator.session import InferSession
        return InferSession
    if name == "AtcError":
        from ge.errors import AtcError
        return AtcError
    raise AttributeError(f"module 'atc_py' has no attribute {name!r}")
