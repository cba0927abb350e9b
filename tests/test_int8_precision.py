"""Precision modes on an int8 model, as ATC documents them for quantized models: every mode
leaves the int8 kernels int8 (their cube multiplies int8, priced at the int8 rate); only the
float kernels around them follow the mode.  Small BERT quantized by quantize_static: int8 GEMM
and int8 attention kernels in one graph."""
import numpy as np
import pytest

from codegen.om_builder import compute_dtype
from simulator.compare import compare_one
from simulator.pricing import kernel_spec

from helpers import fuse_model, run_ir, run_ort

pytest.importorskip("onnxruntime.quantization")
INT8_KERNELS = ("QuantMatMulBiasActFusionOp", "QuantMultiHeadAttentionFusionOp")
MODES = ("force_fp16", "force_fp32", "allow_mix_precision", "must_keep_origin_dtype", "allow_fp32_to_fp16")


@pytest.fixture(scope="module")
def bert_int8():
    from atc_py.zoo import build
    from atc_py.zoo.int8 import calibration_feeds, quantize
    model = build("bert_base", small=True)
    quantized = quantize(model, "qdq", calibration_feeds(model, 2))
    graph, _ = fuse_model(quantized)
    return quantized, graph, calibration_feeds(model, 1, seed=9)[0]


def _int8(node) -> bool:
    return node.op_type in INT8_KERNELS or node.attrs.get("anchor") in INT8_KERNELS


@pytest.mark.parametrize("mode", MODES)
def test_every_mode_keeps_the_int8_kernels_int8(bert_int8, mode):
    _, graph, _ = bert_int8
    kernels = [n for n in graph.nodes if _int8(n)]
    assert {n.op_type for n in kernels} >= {"QuantMultiHeadAttentionFusionOp"}
    for node in kernels:
        spec = kernel_spec(node, compute_dtype(node, mode))
        assert spec.work.cube_dtype == "int8", (node.name, mode)
    # the float kernels around them follow the mode (the embeddings' Add group); a LayerNorm
    # its readers quantize is one LayerNormQuant kernel whose outputs stay int8
    floats = [n for n in graph.nodes if n.op_type == "AutofusedKernel" and not n.attrs.get("anchor")]
    expected = np.float16 if mode == "force_fp16" else np.float32
    assert floats and all(compute_dtype(n, mode) == expected for n in floats)
    norms = [n for n in graph.nodes if n.op_type == "LayerNormQuantFusionOp"]
    assert norms and all(np.dtype(v.desc.dtype) == np.int8 for n in norms for v in n.outputs)


@pytest.mark.parametrize("mode", ["force_fp16", "force_fp32"])
def test_the_numbers_follow_the_modes_rule(bert_int8, mode):
    quantized, graph, feeds = bert_int8
    expected, got = run_ort(quantized, feeds), run_ir(graph, feeds, mode)
    for name, ref in expected.items():
        check = compare_one(name, name, got[name], ref, "int8" if mode == "force_fp32" else "int8-fp16")
        assert check.passed, (name, check.describe())
