"""The zoo's models quantized the ways people deploy them on Ascend inference chips.

    quantize(model, form, feeds) -> onnx.ModelProto
form "qdq" / "qoperator": onnxruntime's recommended flow -- `quant_pre_process` (shape
inference, BatchNorm folded into Conv, MatMul+Add into Gemm) then `quantize_static` with
the calibration `feeds` (int8 activations and per-channel int8 weights, QDQ or QOperator
format); form "amct": the AMCT-style deploy model of atc_py/zoo/amct.py.  Seeded inputs
(`calibration_feeds`) make every build the same.
"""
from __future__ import annotations

import os
import tempfile
from typing import Iterable

import numpy as np
import onnx

FORMS = ("qdq", "qoperator", "amct")


def calibration_feeds(model: onnx.ModelProto, count: int, seed: int = 0) -> list:
    """`count` seeded inputs: N(0, 1) floats, token ids below 100, all-ones masks."""
    rng = np.random.default_rng(seed)
    inits = {i.name for i in model.graph.initializer}
    feeds = []
    for _ in range(count):
        feed = {}
        for info in model.graph.input:
            if info.name in inits:
                continue
            t = info.type.tensor_type
            shape = [d.dim_value or 1 for d in t.shape.dim]
            dtype = onnx.helper.tensor_dtype_to_np_dtype(t.elem_type)
            if np.issubdtype(dtype, np.integer):
                feed[info.name] = (np.ones(shape, dtype) if "mask" in info.name.lower()
                                   else rng.integers(0, 100, shape).astype(dtype))
            else:
                feed[info.name] = rng.standard_normal(shape).astype(dtype)
        feeds.append(feed)
    return feeds


def quantize(model: onnx.ModelProto, form: str, feeds: Iterable[dict]) -> onnx.ModelProto:
    feeds = list(feeds)
    if form == "amct":
        from atc_py.zoo.amct import amct_deploy
        return amct_deploy(model, feeds)
    from onnxruntime.quantization import CalibrationDataReader, QuantFormat, QuantType, quantize_static
    from onnxruntime.quantization.shape_inference import quant_pre_process

    class Reader(CalibrationDataReader):
        def __init__(self):
            self.it = iter(feeds)

        def get_next(self):
            return next(self.it, None)

    with tempfile.TemporaryDirectory() as tmp:
        src, pre, dst = (os.path.join(tmp, f) for f in ("float.onnx", "pre.onnx", "int8.onnx"))
        onnx.save(model, src)
        quant_pre_process(src, pre)
        quantize_static(pre, dst, Reader(), quant_format=QuantFormat.QDQ if form == "qdq" else QuantFormat.QOperator,
                        activation_type=QuantType.QInt8, weight_type=QuantType.QInt8, per_channel=True)
        return onnx.load(dst)
