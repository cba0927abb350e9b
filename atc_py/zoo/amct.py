"""An AMCT-style deploy model from a float ONNX model: what AMCT's calibration writes for ATC.

Why: AMCT itself is not installable here, so the int8 bench and tests build its deploy form
to the same op spec (docs/QUANTIZATION.md): every Conv, Gemm (transA = 0, alpha = beta = 1)
and MatMul with a constant 2-D weight becomes
    x -> AscendQuant(scale = 1/scale_d, offset = 0) -> int8
      -> the same op with int8 weights (per output channel, symmetric) and an int32 bias
         round(b / (scale_d * scale_w)) -> int32
      -> AscendDequant(deq_scale = float32(scale_d * scale_w) in the low 32 bits of a uint64)
      -> the op's original float output.
scale_d is symmetric per tensor: max |x| / 127 over seeded calibration inputs run through
onnxruntime (`calibrate`).  BatchNorm stays where it is (atc folds it into deq_scale).
Everything else stays float, as in AMCT's deploy model.
"""
from __future__ import annotations

from typing import Iterable

import numpy as np
import onnx
from onnx import helper, numpy_helper

CUBE_OPS = ("Conv", "Gemm", "MatMul")


def _quantizable(node, inits) -> bool:
    if node.op_type not in CUBE_OPS or len(node.input) < 2 or node.input[1] not in inits:
        return False
    if node.op_type == "MatMul":
        return inits[node.input[1]].ndim == 2
    attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
    if node.op_type == "Gemm":
        return not attrs.get("transA", 0) and attrs.get("alpha", 1.0) == 1.0 and attrs.get("beta", 1.0) == 1.0
    return True


def calibrate(model: onnx.ModelProto, tensors: Iterable[str], feeds: Iterable[dict]) -> dict:
    """max |x| of each tensor over the calibration feeds (onnxruntime, optimizations off)."""
    import onnxruntime as ort
    probe = onnx.ModelProto()
    probe.CopyFrom(model)
    names = sorted(set(tensors))
    graph_inputs = {i.name for i in probe.graph.input}
    probe.graph.output.extend(helper.make_empty_tensor_value_info(n) for n in names if n not in graph_inputs)
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    session = ort.InferenceSession(probe.SerializeToString(), options, providers=["CPUExecutionProvider"])
    peaks = {n: 0.0 for n in names}
    for feed in feeds:
        outs = dict(zip([o.name for o in session.get_outputs()], session.run(None, feed)))
        for n in names:
            value = feed[n] if n in feed else outs[n]
            peaks[n] = max(peaks[n], float(np.max(np.abs(value))))
    return peaks


def amct_deploy(model: onnx.ModelProto, feeds: Iterable[dict]) -> onnx.ModelProto:
    """The deploy model (see the module doc); `feeds` are the calibration inputs."""
    inits = {i.name: numpy_helper.to_array(i) for i in model.graph.initializer}
    cubes = [n for n in model.graph.node if _quantizable(n, inits)]
    peaks = calibrate(model, [n.input[0] for n in cubes], feeds)
    out = onnx.ModelProto()
    out.CopyFrom(model)
    del out.graph.node[:]
    new_inits, quantized = [], {}
    by_name = {id(n): n for n in cubes}
    for node in model.graph.node:
        if id(node) not in by_name:
            out.graph.node.append(node)
            continue
        x, w_name = node.input[0], node.input[1]
        scale_d = np.float32(max(peaks[x], 1e-8) / 127.0)
        if x not in quantized:
            quantized[x] = f"{x}/AscendQuant_output"
            out.graph.node.append(helper.make_node("AscendQuant", [x], [quantized[x]], name=f"{x}/AscendQuant",
                                                   scale=float(np.float32(1.0) / scale_d), offset=0.0,
                                                   sqrt_mode=0, round_mode="Round"))
        attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
        w = inits[w_name].astype(np.float32)
        channel_axis = 1 if node.op_type == "MatMul" or (node.op_type == "Gemm" and not attrs.get("transB", 0)) else 0
        reduce = tuple(a for a in range(w.ndim) if a != channel_axis)
        scale_w = (np.maximum(np.max(np.abs(w), axis=reduce), 1e-8) / 127.0).astype(np.float32)
        shape = [1] * w.ndim
        shape[channel_axis] = -1
        w_q = np.clip(np.rint(w / scale_w.reshape(shape)), -127, 127).astype(np.int8)
        deq = (scale_d * scale_w).astype(np.float32)
        prefix = node.name or node.output[0]
        new_inits += [numpy_helper.from_array(w_q, f"{prefix}/weight_int8"),
                      numpy_helper.from_array(deq.view(np.uint32).astype(np.uint64), f"{prefix}/deq_scale")]
        inputs = [quantized[x], f"{prefix}/weight_int8"]
        if len(node.input) > 2 and node.input[2]:
            b = inits[node.input[2]].astype(np.float64).reshape(-1)
            new_inits.append(numpy_helper.from_array(np.rint(b / deq.astype(np.float64)).astype(np.int32),
                                                     f"{prefix}/bias_int32"))
            inputs.append(f"{prefix}/bias_int32")
        acc = f"{prefix}/int32_output"
        out.graph.node.append(helper.make_node(node.op_type, inputs, [acc], name=node.name, **attrs))
        out.graph.node.append(helper.make_node("AscendDequant", [acc, f"{prefix}/deq_scale"], [node.output[0]],
                                               name=f"{prefix}/AscendDequant", sqrt_mode=0, relu_flag=0, dtype=0))
    used = {i for n in out.graph.node for i in n.input}
    kept = [i for i in model.graph.initializer if i.name in used]
    del out.graph.initializer[:]
    out.graph.initializer.extend(kept + new_inits)
    return out
