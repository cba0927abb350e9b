"""The one way tests build small ONNX models: op by op, constants as initializers.

    net = Net(opset=17)
    x = net.input("x", [2, 8])
    y = net.op("Relu", net.op("Add", x, net.const(np.ones(8))))
    model = net.model(y)

Node k is named ``n<k>`` and its output ``<optype><k>`` (lower case).  `const` keeps a numpy
array's dtype, except float64 (and Python floats), which become float32 as in every model
here.  `model` runs ONNX's strict shape inference, so outputs get their types and a
malformed test model fails where it is built.
"""
from __future__ import annotations

from typing import Optional

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


class Net:
    def __init__(self, opset: int = 17, seed: int = 7):
        self.opset = opset
        self.rng = np.random.default_rng(seed)
        self.nodes: list = []
        self.inputs: list = []
        self.inits: list = []
        self.count = 0

    def _next(self) -> int:
        self.count += 1
        return self.count

    def name(self, base: str) -> str:
        """A name no other tensor or node of this model has."""
        return f"{base}{self._next()}"

    def input(self, name: str, shape, dtype: int = TensorProto.FLOAT) -> str:
        self.inputs.append(helper.make_tensor_value_info(name, dtype, shape))
        return name

    def const(self, array, base: str = "c") -> str:
        value = np.asarray(array)
        if value.dtype == np.float64:
            value = value.astype(np.float32)
        name = self.name(base)
        self.inits.append(numpy_helper.from_array(value, name))
        return name

    def rand(self, *shape: int, scale: float = 0.3) -> str:
        """A float32 constant of seeded normal values."""
        return self.const(self.rng.standard_normal(shape) * scale, "w")

    def op(self, op_type: str, *inputs: Optional[str], outputs: int = 1, **attrs):
        """Add one node; returns its output name (a list of names when `outputs` > 1).
        An omitted optional input is "" (ONNX) or None."""
        k = self._next()
        names = [f"{op_type.lower()}{k}" + (f"_{i}" if i else "") for i in range(outputs)]
        self.nodes.append(helper.make_node(op_type, [i or "" for i in inputs], names, name=f"n{k}", **attrs))
        return names[0] if outputs == 1 else names

    def model(self, *outputs: str) -> onnx.ModelProto:
        outs = [helper.make_tensor_value_info(o, TensorProto.UNDEFINED, None) for o in outputs]
        graph = helper.make_graph(self.nodes, "g", self.inputs, outs, self.inits)
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", self.opset)])
        return onnx.shape_inference.infer_shapes(model, strict_mode=True)
