"""A tiny ONNX graph builder that names things the way PyTorch's exporter does.

Why: fusion passes, provenance and reports are tested against what real exports look
like, so nodes are called "/layer1/layer1.0/conv1/Conv" (module scope + op type, "_1",
"_2" for repeats), their outputs "<node>_output_<i>", parameters "layer1.0.conv1.weight",
and transposed MatMul weights "onnx::MatMul_<n>".  Weights come from one seeded numpy
Generator per model so every build is byte-identical.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence, Union

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

# PyTorch exports carry the IR version of their onnx library; 8 is what opset 17/18
# exports from torch 2.x write, and every onnxruntime >= 1.14 reads it.
IR_VERSION = 8


@dataclass(frozen=True)
class Mod:
    """A module position: its parameter path ("layer1.0.conv1") and export scope.

    Numeric children of a container are shown as "<parent>.<i>" in the scope, as the
    exporter does ("/layer1/layer1.0"); a ModuleList is never called, so `hidden=True`
    leaves it out of the scope but still lends its name ("/encoder/layer.0").
    """

    path: tuple = ()
    scope: str = ""
    last: str = ""

    def child(self, name: Union[str, int], hidden: bool = False) -> "Mod":
        name = str(name)
        shown = f"{self.last}.{name}" if name.isdigit() and self.last else name
        scope = self.scope if hidden else f"{self.scope}/{shown}"
        return Mod(self.path + (name,), scope, shown)

    def __truediv__(self, name: Union[str, int]) -> "Mod":
        return self.child(name)

    def p(self, leaf: str) -> str:
        """Parameter name of `leaf` in this module."""
        return ".".join(self.path + (leaf,))


ROOT = Mod()

_NP_TO_ONNX = {np.dtype(np.float32): TensorProto.FLOAT, np.dtype(np.int64): TensorProto.INT64,
               np.dtype(np.bool_): TensorProto.BOOL, np.dtype(np.float16): TensorProto.FLOAT16,
               np.dtype(np.int32): TensorProto.INT32}


def onnx_dtype(dtype) -> int:
    return _NP_TO_ONNX[np.dtype(dtype)]


class GraphBuilder:
    """Accumulates nodes, initializers and graph inputs/outputs for one model."""

    def __init__(self, name: str, seed: int, opset: int = 17):
        self.name = name
        self.opset = opset
        self.rng = np.random.default_rng(seed)
        self.nodes: list = []
        # Weights go straight into the final proto: copying ~500 MB of tensors through
        # make_graph/make_model would double the build time of the big models.
        self._model = onnx.ModelProto()
        self.inputs: list = []
        self.outputs: list = []
        self._taken: set = set()
        self._anon = 0
        # Expected mean square of values (over the random weights, for unit-variance
        # inputs); BatchNorm running stats are set from it so every BN really normalises.
        self.mean_square: dict = {}

    # -- names -------------------------------------------------------------------
    def _unique(self, base: str) -> str:
        name, i = base, 0
        while name in self._taken:
            i += 1
            name = f"{base}_{i}"
        self._taken.add(name)
        return name

    # -- graph interface ---------------------------------------------------------
    def input(self, name: str, dtype, shape: Sequence[int]) -> str:
        self.inputs.append(helper.make_tensor_value_info(name, onnx_dtype(dtype), list(shape)))
        return name

    def output(self, value: str, name: str, dtype, shape: Sequence[int]) -> str:
        """Expose `value` as graph output `name` (an Identity-free rename of the producer)."""
        for node in self.nodes:
            for i, out in enumerate(node.output):
                if out == value:
                    node.output[i] = name
            for i, inp in enumerate(node.input):
                if inp == value:
                    node.input[i] = name
        self.outputs.append(helper.make_tensor_value_info(name, onnx_dtype(dtype), list(shape)))
        return name

    def op(self, op_type: str, inputs: Sequence[str], mod: Mod = ROOT, n_out: int = 1, **attrs):
        """Add one node in `mod`'s scope; returns its output name (a list if n_out > 1)."""
        name = self._unique(f"{mod.scope}/{op_type}")
        outs = [f"{name}_output_{i}" for i in range(n_out)]
        self.nodes.append(helper.make_node(op_type, list(inputs), outs, name=name, **attrs))
        return outs[0] if n_out == 1 else outs

    def const(self, value, dtype, mod: Mod = ROOT) -> str:
        """A Constant node, which is how the exporter writes scalars and shape tensors."""
        arr = np.asarray(value, dtype=dtype)
        return self.op("Constant", [], mod, value=numpy_helper.from_array(arr))

    def param(self, name: str, array: np.ndarray) -> str:
        """An initializer (a trained parameter or buffer) under its state-dict name."""
        if name in self._taken:
            raise ValueError(f"duplicate initializer {name}")
        self._taken.add(name)
        array = np.asarray(array)
        tensor = self._model.graph.initializer.add()
        tensor.name = name
        tensor.data_type = onnx_dtype(array.dtype)
        tensor.dims.extend(array.shape)
        tensor.raw_data = np.ascontiguousarray(array).astype(array.dtype.newbyteorder("<"), copy=False).tobytes()
        return name

    def anon_param(self, op_type: str, array: np.ndarray) -> str:
        """An initializer the exporter made itself (e.g. a transposed Linear weight)."""
        self._anon += 1
        return self.param(f"onnx::{op_type}_{self._anon}", array)

    def model(self) -> onnx.ModelProto:
        """The finished model; call once (the builder hands over its proto)."""
        model = self._model
        model.ir_version = IR_VERSION
        model.producer_name, model.producer_version = "pytorch", "2.4.0"
        model.opset_import.add(domain="", version=self.opset)
        graph = model.graph
        graph.name = self.name
        graph.node.extend(self.nodes)
        graph.input.extend(self.inputs)
        graph.output.extend(self.outputs)
        return model

    def ms(self, value: str) -> float:
        return self.mean_square.get(value, 1.0)

    def set_ms(self, value: str, ms: float) -> str:
        self.mean_square[value] = float(ms)
        return value

    # -- deterministic weights ---------------------------------------------------
    def normal(self, shape: Sequence[int], std: float, mean: float = 0.0) -> np.ndarray:
        out = self.rng.standard_normal(tuple(shape), dtype=np.float32)
        out *= np.float32(std)
        if mean:
            out += np.float32(mean)
        return out

    def uniform(self, shape: Sequence[int], low: float, high: float) -> np.ndarray:
        return self.rng.uniform(low, high, tuple(shape)).astype(np.float32)
