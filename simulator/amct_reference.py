"""An AMCT deploy model as standard ONNX, so onnxruntime can be its `--compare` reference.

Each AMCT op becomes the ONNX ops of its documented formula (docs/QUANTIZATION.md):
- AscendQuant: ``Cast(int8, Clip(Round|Floor|Ceil|trunc(x * scale [* scale] + offset), -128, 127))``
  (onnxruntime's Round rounds half to even, as the op's "Round" mode does);
- AscendDequant: ``[Relu](Cast(float, x) * deq_scale)`` with deq_scale decoded from its uint64
  low word, per output channel, then Cast to float16 when dtype = 1;
- AscendAntiQuant: ``(Cast(float, x) - offset) * scale [* scale]``;
- an int8 Conv / MatMul / Gemm (int32 out): ConvInteger / MatMulInteger, plus the int32 bias
  with Add (Gemm's transB applied to the constant weight).
The rest of the model is untouched.  The lowering is the spec written as ONNX, independent of
the simulator's kernels, which is what makes it a reference.
"""
from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

AMCT_OPS = ("AscendQuant", "AscendDequant", "AscendAntiQuant")
_ROUND = {"Round": "Round", "Floor": "Floor", "Ceil": "Ceil", "Ceiling": "Ceil"}


def has_amct_ops(model: onnx.ModelProto) -> bool:
    return any(n.op_type in AMCT_OPS and n.domain in ("", "ai.onnx") for n in model.graph.node)


class _Rewriter:
    def __init__(self, model: onnx.ModelProto):
        self.model = model
        self.inits = {i.name: i for i in model.graph.initializer}
        self.nodes: list = []
        self.new_inits: list = []
        self.count = 0

    def name(self, base: str) -> str:
        self.count += 1
        return f"{base}__ref{self.count}"

    def const(self, base: str, array) -> str:
        name = self.name(base)
        self.new_inits.append(numpy_helper.from_array(np.asarray(array), name))
        return name

    def op(self, op_type: str, inputs, output: str = "", **attrs) -> str:
        out = output or self.name(op_type)
        self.nodes.append(helper.make_node(op_type, list(inputs), [out], **attrs))
        return out

    def array(self, name: str) -> np.ndarray:
        return numpy_helper.to_array(self.inits[name])


def _attrs(node) -> dict:
    return {a.name: helper.get_attribute_value(a) for a in node.attribute}


def _scale(attrs) -> np.float32:
    s = np.float32(attrs["scale"])
    return s * s if int(attrs.get("sqrt_mode", 0)) else s


def _quant(rw: _Rewriter, node, attrs) -> None:
    x, y = node.input[0], node.output[0]
    v = rw.op("Add", [rw.op("Mul", [rw.op("Cast", [x], to=TensorProto.FLOAT), rw.const("scale", _scale(attrs))]),
                      rw.const("offset", np.float32(attrs.get("offset", 0.0)))])
    mode = attrs.get("round_mode", b"Round")
    mode = mode.decode() if isinstance(mode, bytes) else mode
    if mode in ("Trunc", "Truncate"):
        v = rw.op("Mul", [rw.op("Sign", [v]), rw.op("Floor", [rw.op("Abs", [v])])])
    else:
        v = rw.op(_ROUND[mode], [v])
    v = rw.op("Clip", [v, rw.const("lo", np.float32(-128)), rw.const("hi", np.float32(127))])
    rw.op("Cast", [v], y, to=TensorProto.INT8)


def _dequant(rw: _Rewriter, node, attrs, rank: int) -> None:
    deq = rw.array(node.input[1])
    scale = (deq & np.uint64(0xFFFFFFFF)).astype(np.uint32).view(np.float32) if deq.dtype == np.uint64 \
        else deq.astype(np.float32)
    scale = scale.reshape(-1)
    if int(attrs.get("sqrt_mode", 0)):
        scale = scale * scale
    if scale.size > 1:
        scale = scale.reshape((-1,) + (1,) * (rank - 2)) if rank in (4, 5) else scale
    v = rw.op("Mul", [rw.op("Cast", [node.input[0]], to=TensorProto.FLOAT), rw.const("deq", scale)])
    if int(attrs.get("relu_flag", 0)):
        v = rw.op("Relu", [v])
    to = TensorProto.FLOAT16 if int(attrs.get("dtype", 0)) == 1 else TensorProto.FLOAT
    rw.op("Cast", [v], node.output[0], to=to)


def _anti_quant(rw: _Rewriter, node, attrs) -> None:
    v = rw.op("Sub", [rw.op("Cast", [node.input[0]], to=TensorProto.FLOAT),
                      rw.const("offset", np.float32(attrs.get("offset", 0.0)))])
    v = rw.op("Mul", [v, rw.const("scale", _scale(attrs))])
    to = TensorProto.FLOAT16 if int(attrs.get("dtype", 0)) == 1 else TensorProto.FLOAT
    rw.op("Cast", [v], node.output[0], to=to)


def _int8_cube(rw: _Rewriter, node, attrs, rank: int) -> None:
    x, w = node.input[0], node.input[1]
    bias = node.input[2] if len(node.input) > 2 and node.input[2] else ""
    if node.op_type == "Conv":
        acc = rw.op("ConvInteger", [x, w], **attrs)
        if bias:
            b = rw.array(bias).reshape((-1,) + (1,) * (rank - 2))
            bias = rw.const("bias", b.astype(np.int32))
    else:
        if node.op_type == "Gemm" and int(attrs.get("transB", 0)):
            w = rw.const("weight_t", np.ascontiguousarray(rw.array(w).T))
        acc = rw.op("MatMulInteger", [x, w])
    if bias:
        rw.op("Add", [acc, bias], node.output[0])
    else:
        rw.op("Identity", [acc], node.output[0])


def to_standard_onnx(model: onnx.ModelProto) -> onnx.ModelProto:
    out = onnx.ModelProto()
    out.CopyFrom(model)
    rw = _Rewriter(out)
    producer = {o: n for n in out.graph.node for o in n.output}

    def rank(value: str) -> int:
        """4 for a conv's output (channels on axis 1), 2 for a GEMM's (channels last)."""
        node = producer.get(value)
        return len(rw.inits[node.input[1]].dims) if node is not None and node.op_type == "Conv" else 2

    int8 = {name for name, t in rw.inits.items() if t.data_type in (TensorProto.INT8, TensorProto.UINT8)}
    int8 |= {n.output[0] for n in out.graph.node if n.op_type == "AscendQuant"}
    for node in out.graph.node:
        attrs = _attrs(node)
        if node.op_type == "AscendQuant":
            _quant(rw, node, attrs)
        elif node.op_type == "AscendDequant":
            _dequant(rw, node, attrs, rank(node.input[0]))
        elif node.op_type == "AscendAntiQuant":
            _anti_quant(rw, node, attrs)
        elif node.op_type in ("Conv", "Gemm", "MatMul") and node.input[0] in int8:
            _int8_cube(rw, node, attrs, rank(node.output[0]))
        else:
            rw.nodes.append(node)
    del out.graph.node[:]
    out.graph.node.extend(rw.nodes)
    out.graph.initializer.extend(rw.new_inits)
    return out
