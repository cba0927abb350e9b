"""ResNet-50, MobileNetV2 and BERT-base (small configs) in the three quantized forms:
onnxruntime's quantize_static (QDQ, QOperator) and the AMCT-style deploy model.  Every
int8 cube op fuses into an int8 kernel and the .om's numbers match onnxruntime."""
import numpy as np
import pytest

from atc_py.zoo import build
from atc_py.zoo.int8 import calibration_feeds, quantize
from simulator.amct_reference import has_amct_ops, to_standard_onnx

from helpers import fuse_model as fuse, op_types, run_ir, run_ort

pytest.importorskip("onnxruntime.quantization")
QUANT_KERNELS = ("QuantConvBNReluFusionOp", "QuantMatMulBiasActFusionOp")


def _int8_cube_ops(model) -> int:
    """Cube ops with a constant int8 weight in the quantized model."""
    inits = {i.name: i.data_type for i in model.graph.initializer}
    int8 = {n.output[0] for n in model.graph.node if n.op_type == "DequantizeLinear" and inits.get(n.input[0]) == 3}
    count = 0
    for n in model.graph.node:
        if n.op_type in ("QLinearConv", "QLinearMatMul", "QGemm") and inits.get(n.input[3]) == 3:
            count += 1
        elif n.op_type in ("Conv", "Gemm", "MatMul") and (n.input[1] in int8 or inits.get(n.input[1]) == 3):
            count += 1
    return count


@pytest.mark.parametrize("form", ["qdq", "qoperator", "amct"])
@pytest.mark.parametrize("name", ["resnet50", "mobilenet_v2", "bert_base"])
def test_quantized_zoo_model_fuses_and_matches(name, form):
    model = build(name, small=True)
    quantized = quantize(model, form, calibration_feeds(model, 2))
    graph, results = fuse(quantized)
    fused = results["QuantConvBNReluFusionPass"].changes + results["QuantMatMulBiasActFusionPass"].changes
    assert fused == _int8_cube_ops(quantized) > 0
    assert not [n for n in graph.nodes if n.op_type in ("Conv", "QLinearConv", "Gemm", "QGemm")]
    feeds = calibration_feeds(model, 1, seed=5)[0]
    reference = run_ort(to_standard_onnx(quantized) if has_amct_ops(quantized) else quantized, feeds)
    got = run_ir(graph, feeds)                      # float kernels in fp32: the int8 rule, one step
    for key, ref in reference.items():
        assert np.max(np.abs(got[key].astype(np.float64) - ref)) <= 1e-4 * max(1.0, np.abs(ref).max())
