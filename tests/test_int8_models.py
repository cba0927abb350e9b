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


@pytest.mark.parametrize("disabled,exposed", [((), 15), (("LayerNormQuantFusionOp",), 20)])
def test_qoperator_bert_every_int8_tensor_equals_onnxruntime(disabled, exposed):
    """The issue's rule at its strictest: with float kernels in fp32, every int8 tensor the
    fused QOperator BERT computes (cube kernels, attention, the GELU group, each LayerNorm's
    quantize) equals onnxruntime's exactly -- no step of drift for 12 layers to amplify.  A
    config between small and base (hidden 128, 32 tokens) reaches the near-ties that small
    misses: before the kernels followed MLAS (LayerNorm and Erf summation and fma order,
    QLinearAdd's fma, the QOperator requantization multiplier), 14 of its 21 int8 tensors
    differed from onnxruntime's.  With every pass the projections' Q, K, V live inside the
    attention kernel (fewer int8 tensors leave a kernel); without LayerNormQuant they stay
    kernels of their own (its QOperator Q/K/V inputs are three tensors), so both are checked."""
    import onnx
    from atc_py.zoo.bert import BertConfig, build_bert_base
    model = build_bert_base(config=BertConfig(layers=2, hidden=128, heads=2, ffn=512, seq=32, vocab=100,
                                              max_positions=32))
    quantized = quantize(model, "qoperator", calibration_feeds(model, 2))
    graph, _ = fuse(quantized, disabled_ops=disabled)
    assert {"QuantMatMulBiasActFusionOp", "QuantMultiHeadAttentionFusionOp", "LayerNormalization"} <= set(op_types(graph))
    produced = {o for n in quantized.graph.node for o in n.output}
    int8 = [v for n in graph.nodes for v in n.outputs if np.dtype(v.desc.dtype) == np.int8 and v.name in produced]
    probe = onnx.ModelProto()
    probe.CopyFrom(quantized)
    probe.graph.output.extend(onnx.helper.make_tensor_value_info(v.name, onnx.TensorProto.INT8, None) for v in int8)
    feeds = calibration_feeds(model, 1, seed=5)[0]
    reference = run_ort(probe, feeds)
    graph.outputs = list(graph.outputs) + [v for v in int8 if not v.is_graph_output]
    got = run_ir(graph, feeds)
    assert len(int8) >= exposed
    differ = [v.name for v in int8 if not np.array_equal(got[v.name], reference[v.name])]
    assert not differ, f"{len(differ)} of {len(int8)} int8 tensors differ from onnxruntime's: {differ[:3]}"
    for name in ("last_hidden_state", "pooler_output"):
        assert np.max(np.abs(got[name] - reference[name])) <= 1e-5
