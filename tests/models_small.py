"""Tiny ONNX models for the flag tests: small enough to compile in milliseconds, with the ops
the precision and dtype flags act on (Gelu, Sigmoid, Softmax, a conv for AIPP)."""
from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


def _model(nodes, inputs, outputs, inits, opset=17):
    graph = helper.make_graph(nodes, "g", inputs, outputs, inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 8
    onnx.checker.check_model(model, full_check=True)
    return model


def mlp(rows: int = 4, width: int = 16, opset: int = 20) -> onnx.ModelProto:
    """x[rows, width] -> fc1 (MatMul+Add) -> Gelu -> fc2 (MatMul+Add) -> Sigmoid -> Softmax.
    Node names: fc1, fc1_bias, gelu, fc2, fc2_bias, sig, softmax; outputs y (softmax), h (sig input)."""
    rng = np.random.default_rng(7)
    w1 = numpy_helper.from_array((rng.standard_normal((width, width)) * 0.5).astype(np.float32), "w1")
    b1 = numpy_helper.from_array(rng.standard_normal(width).astype(np.float32), "b1")
    w2 = numpy_helper.from_array((rng.standard_normal((width, width)) * 0.5).astype(np.float32), "w2")
    b2 = numpy_helper.from_array(rng.standard_normal(width).astype(np.float32), "b2")
    nodes = [
        helper.make_node("MatMul", ["x", "w1"], ["m1"], name="fc1"),
        helper.make_node("Add", ["m1", "b1"], ["a1"], name="fc1_bias"),
        helper.make_node("Gelu", ["a1"], ["g"], name="gelu"),
        helper.make_node("MatMul", ["g", "w2"], ["m2"], name="fc2"),
        helper.make_node("Add", ["m2", "b2"], ["h"], name="fc2_bias"),
        helper.make_node("Sigmoid", ["h"], ["s"], name="sig"),
        helper.make_node("Softmax", ["s"], ["y"], name="softmax", axis=-1),
    ]
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [rows, width])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [rows, width])
    return _model(nodes, [x], [y], [w1, b1, w2, b2], opset)


def two_inputs(rows: int = 2, width: int = 8) -> onnx.ModelProto:
    """a, b [rows, width] -> add -> relu -> y; mul (a*b) -> z.  Node names add, relu, mul."""
    nodes = [helper.make_node("Add", ["a", "b"], ["s"], name="add"),
             helper.make_node("Relu", ["s"], ["y"], name="relu"),
             helper.make_node("Mul", ["a", "b"], ["z"], name="mul")]
    ins = [helper.make_tensor_value_info(n, TensorProto.FLOAT, [rows, width]) for n in ("a", "b")]
    outs = [helper.make_tensor_value_info(n, TensorProto.FLOAT, [rows, width]) for n in ("y", "z")]
    return _model(nodes, ins, outs, [])


def small_cnn(h: int = 16, w: int = 16, channels: int = 3, layout: str = "NCHW") -> onnx.ModelProto:
    """image[1, C, H, W] (or NHWC) -> conv 3x3 (8 maps) -> relu -> global pool -> y[1, 8, 1, 1]."""
    rng = np.random.default_rng(3)
    weight = numpy_helper.from_array((rng.standard_normal((8, channels, 3, 3)) * 0.2).astype(np.float32), "w")
    bias = numpy_helper.from_array(rng.standard_normal(8).astype(np.float32), "b")
    nodes = []
    src = "image"
    if layout == "NHWC":
        nodes.append(helper.make_node("Transpose", ["image"], ["nchw"], name="to_nchw", perm=[0, 3, 1, 2]))
        src = "nchw"
    nodes += [helper.make_node("Conv", [src, "w", "b"], ["c"], name="conv", pads=[1, 1, 1, 1]),
              helper.make_node("Relu", ["c"], ["r"], name="relu"),
              helper.make_node("GlobalAveragePool", ["r"], ["y"], name="pool")]
    shape = [1, channels, h, w] if layout == "NCHW" else [1, h, w, channels]
    x = helper.make_tensor_value_info("image", TensorProto.FLOAT, shape)
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8, 1, 1])
    return _model(nodes, [x], [y], [weight, bias])


def tiny_bert(seq: int = 8, hidden: int = 16, vocab: int = 32) -> onnx.ModelProto:
    """input_ids, segment_ids, input_mask [1, seq] int64 (a BERT inference guide's three inputs)
    -> word + segment embeddings -> LayerNorm -> fc (MatMul+Add) -> Gelu -> fc -> masked -> y.
    Node names: word_emb, seg_emb, emb_add, ln, fc1, fc1_bias, gelu, fc2, fc2_bias, mask_cast,
    mask_unsq, mask_mul."""
    rng = np.random.default_rng(5)
    arr = lambda shape, name, scale=0.5: numpy_helper.from_array(  # noqa: E731
        (rng.standard_normal(shape) * scale).astype(np.float32), name)
    inits = [arr((vocab, hidden), "word"), arr((2, hidden), "seg"), arr((hidden,), "gamma", 0.1),
             arr((hidden,), "beta", 0.1), arr((hidden, hidden), "w1"), arr((hidden,), "b1"),
             arr((hidden, hidden), "w2"), arr((hidden,), "b2"),
             numpy_helper.from_array(np.array([2], np.int64), "axis2")]
    nodes = [
        helper.make_node("Gather", ["word", "input_ids"], ["we"], name="word_emb"),
        helper.make_node("Gather", ["seg", "segment_ids"], ["se"], name="seg_emb"),
        helper.make_node("Add", ["we", "se"], ["e"], name="emb_add"),
        helper.make_node("LayerNormalization", ["e", "gamma", "beta"], ["n"], name="ln", axis=-1),
        helper.make_node("MatMul", ["n", "w1"], ["m1"], name="fc1"),
        helper.make_node("Add", ["m1", "b1"], ["a1"], name="fc1_bias"),
        helper.make_node("Gelu", ["a1"], ["g"], name="gelu"),
        helper.make_node("MatMul", ["g", "w2"], ["m2"], name="fc2"),
        helper.make_node("Add", ["m2", "b2"], ["h"], name="fc2_bias"),
        helper.make_node("Cast", ["input_mask"], ["mf"], name="mask_cast", to=TensorProto.FLOAT),
        helper.make_node("Unsqueeze", ["mf", "axis2"], ["mu"], name="mask_unsq"),
        helper.make_node("Mul", ["h", "mu"], ["y"], name="mask_mul"),
    ]
    ins = [helper.make_tensor_value_info(n, TensorProto.INT64, [1, seq])
           for n in ("input_ids", "segment_ids", "input_mask")]
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, seq, hidden])
    return _model(nodes, ins, [y], inits, opset=20)


def video_cnn(frames: int = 4, size: int = 8, channels: int = 3) -> onnx.ModelProto:
    """clip[1, C, D, H, W] (NCDHW) -> conv3d 3x3x3 (4 maps) -> relu -> global pool -> y[1, 4, 1, 1, 1]."""
    rng = np.random.default_rng(9)
    weight = numpy_helper.from_array((rng.standard_normal((4, channels, 3, 3, 3)) * 0.2).astype(np.float32), "w")
    bias = numpy_helper.from_array(rng.standard_normal(4).astype(np.float32), "b")
    nodes = [helper.make_node("Conv", ["clip", "w", "b"], ["c"], name="conv3d", pads=[1] * 6),
             helper.make_node("Relu", ["c"], ["r"], name="relu"),
             helper.make_node("GlobalAveragePool", ["r"], ["y"], name="pool")]
    x = helper.make_tensor_value_info("clip", TensorProto.FLOAT, [1, channels, frames, size, size])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 1, 1, 1])
    return _model(nodes, [x], [y], [weight, bias])


def save(model: onnx.ModelProto, path) -> str:
    onnx.save(model, str(path))
    return str(path)
