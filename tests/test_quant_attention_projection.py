"""QuantAttentionProjection: the int8 Q, K, V projections reading one tensor join their int8
attention kernel -- the exact op types after the pass, the numbers against onnxruntime, the
misses with their reasons, quantize_static's BERT in QDQ and QOperator form, and the price."""
import numpy as np
import onnx
import pytest
from onnx import helper, numpy_helper

from fusion_passes import reasons
from fusion_passes.canonical import CanonicalizePass
from fusion_passes.quant_attention import QuantAttentionFusionPass
from fusion_passes.quant_attention_projection import QuantAttentionProjectionFusionPass
from fusion_passes.quant_matmul_bias_act import QuantMatMulBiasActFusionPass
from simulator.compare import compare_one

from helpers import fuse_model, op_types, run_ir, run_ort
from test_fusion_quant import model_of, vi
from test_quant_attention import B, D, H, L, qdq_attention

S = np.float32
RNG = np.random.default_rng(41)
E = H * D
PASSES = [CanonicalizePass, QuantAttentionFusionPass, QuantMatMulBiasActFusionPass, QuantAttentionProjectionFusionPass]


def projected_attention(k_input="x", q_output=False, rescale=False):
    """int8 x -> three QDQ projections (DQ(x) @ DQ(W) + DQ(b int32) -> Q) -> Reshape ->
    Transpose -> the int8 attention of test_quant_attention."""
    att = qdq_attention()
    inits = [(i.name, numpy_helper.to_array(i)) for i in att.graph.initializer]
    inits += [("xs", S(0.05)), ("xz", np.int8(1)), ("heads", np.array([B, L, H, D])), ("root", S(0.7))]
    nodes = []
    for role, zp, source in (("q", 2, "x"), ("k", -1, k_input), ("v", 0, "x")):
        w = RNG.integers(-127, 127, (E, E)).astype(np.int8)
        ws = RNG.uniform(0.002, 0.006, E).astype(S)
        rescaled = ("q", "k") if rescale else ()
        scaled = [f"{role}s1", f"{role}z1"] if role in rescaled else [f"{role}s", f"{role}z"]
        if role in rescaled:
            inits += [(f"{role}s1", S(0.04)), (f"{role}z1", np.int8(1))]
        inits += [(f"w{role}", w), (f"w{role}s", ws), (f"w{role}z", np.zeros(E, np.int8)),
                  (f"b{role}", RNG.integers(-500, 500, E).astype(np.int32)), (f"b{role}s", (S(0.05) * ws).astype(S)),
                  (f"b{role}z", np.zeros(E, np.int32))]
        nodes += [helper.make_node("DequantizeLinear", [source, "xs", "xz"], [f"{role}_x"]),
                  helper.make_node("DequantizeLinear", [f"w{role}", f"w{role}s", f"w{role}z"], [f"{role}_w"], axis=1),
                  helper.make_node("DequantizeLinear", [f"b{role}", f"b{role}s", f"b{role}z"], [f"{role}_b"], axis=0),
                  helper.make_node("MatMul", [f"{role}_x", f"{role}_w"], [f"{role}_mm"]),
                  helper.make_node("Add", [f"{role}_mm", f"{role}_b"], [f"{role}_f"]),
                  helper.make_node("QuantizeLinear", [f"{role}_f"] + scaled, [f"{role}_p"])]
        viewed = f"{role}_p"
        if role in rescaled:       # SDPA: Q and K times sqrt(scale), requantized to the attention's scale
            nodes += [helper.make_node("DequantizeLinear", [f"{role}_p"] + scaled, [f"{role}_pd"]),
                      helper.make_node("Mul", [f"{role}_pd", "root"], [f"{role}_pm"]),
                      helper.make_node("QuantizeLinear", [f"{role}_pm", f"{role}s", f"{role}z"], [f"{role}_p2"])]
            viewed = f"{role}_p2"
        nodes += [helper.make_node("Reshape", [viewed, "heads"], [f"{role}_r"]),
                  helper.make_node("Transpose", [f"{role}_r"], [role], perm=[0, 2, 1, 3])]
    inputs = [vi("x", np.int8, [B, L, E]), vi("mask", S, [B, 1, 1, L])]
    if k_input != "x":
        inputs.append(vi(k_input, np.int8, [B, L, E]))
    outputs = [onnx.ValueInfoProto(name="y")] + ([onnx.ValueInfoProto(name="q_p")] if q_output else [])
    return model_of(nodes + list(att.graph.node), inputs, outputs, inits)


def feeds(extra=()):
    mask = np.zeros((B, 1, 1, L), S)
    mask[..., -2:] = -10000.0
    return {n: RNG.integers(-100, 100, (B, L, E)).astype(np.int8) for n in ("x",) + tuple(extra)} | {"mask": mask}


def _close(model, graph, f, mode="force_fp32"):
    expected, got = run_ort(model, f)["y"], run_ir(graph, f, mode)["y"]
    check = compare_one("y", "y", got, expected, "int8" if mode == "force_fp32" else "int8-fp16", step=1.0)
    assert check.passed, check.describe()
    return expected, got


@pytest.mark.parametrize("mode", ["force_fp32", "force_fp16"])
def test_projections_join_the_int8_attention(mode):
    model = projected_attention()
    unmerged, _ = fuse_model(model, passes=PASSES[:-1])
    assert sorted(op_types(unmerged)) == ["QuantMatMulBiasActFusionOp"] * 3 + ["QuantMultiHeadAttentionFusionOp"]
    graph, results = fuse_model(model, passes=PASSES)
    assert op_types(graph) == ["QuantMultiHeadAttentionFusionOp"]
    assert results["QuantAttentionProjectionFusionPass"].changes == 1
    kernel = graph.nodes[0]
    assert kernel.inputs[0].name == "x" and kernel.outputs[0].desc.dtype == np.int8
    f = feeds()
    expected, got = _close(model, graph, f, mode)
    # the projections run as written inside the kernel: the same int8 as the unmerged kernels
    assert np.array_equal(got, run_ir(unmerged, f, mode)["y"])
    if mode == "force_fp32":
        assert np.mean(got == expected) > 0.98


def test_merged_kernel_reads_x_once_and_launches_once():
    from codegen.om_builder import compute_dtype
    from simulator.cost_model import load_chip
    from simulator.pricing import node_costs
    model = projected_attention()
    chip = load_chip("Ascend310P3")
    totals = {}
    for name, passes in (("unmerged", PASSES[:-1]), ("merged", PASSES)):
        graph, _ = fuse_model(model, passes=passes)
        costs = node_costs(graph, chip, lambda n: compute_dtype(n, "force_fp16"))
        totals[name] = sum(costs[n.name].total_us for n in graph.nodes)
        kernel = next(n for n in graph.nodes if n.op_type == "QuantMultiHeadAttentionFusionOp")
        macs = costs[kernel.name]
        if name == "merged":       # 3 projections + Q.K^T + P.V, every one on the int8 cube
            from simulator.pricing import kernel_spec
            spec = kernel_spec(kernel, compute_dtype(kernel, "force_fp16"))
            assert spec.work.cube_dtype == "int8" and len(spec.work.gemms) == 5
            assert spec.work.cube_macs == 3 * B * L * E * E + 2 * B * H * L * L * D
            assert macs.launches == 1
    assert totals["merged"] < totals["unmerged"]


def test_projections_of_different_inputs_are_a_miss_with_its_reason():
    model = projected_attention(k_input="x2")
    graph, results = fuse_model(model, passes=PASSES)
    assert sorted(op_types(graph)) == ["QuantMatMulBiasActFusionOp"] * 3 + ["QuantMultiHeadAttentionFusionOp"]
    [miss] = results["QuantAttentionProjectionFusionPass"].misses
    assert miss.code == reasons.NO_SHARED_DATA and "do not read one int8 tensor" in miss.constraint
    _close(model, graph, feeds(("x2",)))


def test_a_projection_read_elsewhere_is_a_miss_with_its_reason():
    model = projected_attention(q_output=True)
    graph, results = fuse_model(model, passes=PASSES)
    assert sorted(op_types(graph)) == ["QuantMatMulBiasActFusionOp"] * 3 + ["QuantMultiHeadAttentionFusionOp"]
    [miss] = results["QuantAttentionProjectionFusionPass"].misses
    assert miss.code == reasons.OTHER_CONSUMERS and "Q projection" in miss.constraint
    f = feeds()
    expected, got = run_ort(model, f), run_ir(graph, f)
    assert np.array_equal(got["q_p"], expected["q_p"])


@pytest.mark.parametrize("form", ["qdq", "qoperator"])
def test_quantize_static_bert_attention_takes_its_projections_in_every_layer(form):
    pytest.importorskip("onnxruntime.quantization")
    from atc_py.zoo import build
    from atc_py.zoo.int8 import calibration_feeds, quantize
    model = build("bert_base", small=True)
    quantized = quantize(model, form, calibration_feeds(model, 2))
    graph, results = fuse_model(quantized)
    assert results["QuantAttentionProjectionFusionPass"].changes == 2 and not results[
        "QuantAttentionProjectionFusionPass"].misses
    for kernel in (n for n in graph.nodes if n.op_type == "QuantMultiHeadAttentionFusionOp"):
        feeder = kernel.inputs[0].producer
        assert feeder is not None and feeder.op_type == "LayerNormQuantFusionOp"     # reads the int8 hidden states
    # the pooler is the only GEMM kernel left on its own; the rest sit in epilogue groups
    assert op_types(graph).count("QuantMatMulBiasActFusionOp") == 1
    f = calibration_feeds(model, 1, seed=5)[0]
    expected = run_ort(quantized, f)
    for mode in ("force_fp32", "force_fp16"):
        got = run_ir(graph, f, mode)
        for name, ref in expected.items():
            if mode == "force_fp32":
                assert np.max(np.abs(got[name].astype(np.float64) - ref)) <= 1e-4 * max(1.0, np.abs(ref).max())
            else:
                check = compare_one(name, name, got[name], ref, "int8-fp16")
                assert check.passed, (name, check.describe())


def test_amct_attention_reads_its_int8_projections_in_one_float_kernel():
    """AMCT quantizes the Q/K/V GEMMs but not attention: the float attention kernel reads
    the three int8 GEMMs' float outputs as they are (ComputedProjection) -- no head views,
    Softmax or score MatMul kernels left -- and the numbers match onnxruntime."""
    pytest.importorskip("onnxruntime.quantization")
    from atc_py.zoo import build
    from atc_py.zoo.int8 import calibration_feeds, quantize
    from simulator.amct_reference import to_standard_onnx
    model = build("bert_base", small=True)
    quantized = quantize(model, "amct", calibration_feeds(model, 2))
    graph, results = fuse_model(quantized)
    mha = results["MultiHeadAttentionFusionPass"]
    assert mha.changes == 2 and not mha.misses
    assert not {"Softmax", "Transpose", "MatMul"} & set(op_types(graph))
    for node in graph.nodes:
        if "MultiHeadAttentionFusionOp" in (node.op_type, node.attrs.get("anchor")):
            readers = [v.producer.op_type for v in node.inputs[:3] if v is not None and v.producer is not None]
            assert readers == ["QuantMatMulBiasActFusionOp"] * 3
    f = calibration_feeds(model, 1, seed=5)[0]
    expected = run_ort(to_standard_onnx(quantized), f)
    for mode in ("force_fp32", "force_fp16"):
        got = run_ir(graph, f, mode)
        for name, ref in expected.items():
            check = compare_one(name, name, got[name], ref, "int8" if mode == "force_fp32" else "int8-fp16")
            assert check.passed, (mode, name, check.describe())


@pytest.mark.parametrize("mode", ["force_fp32", "force_fp16"])
def test_sdpa_rescaled_projections_join_with_their_rescale(mode):
    """SDPA scales Q and K by sqrt(scale) after the projection (DQ -> Mul -> Q): the kernel takes
    those steps as written (it was an NF2006 miss, 'not the int8 result of its own projection')."""
    model = projected_attention(rescale=True)
    unmerged, _ = fuse_model(model, passes=PASSES[:-1])
    assert "QuantMatMulBiasActFusionOp" in op_types(unmerged)
    graph, results = fuse_model(model, passes=PASSES)
    assert op_types(graph) == ["QuantMultiHeadAttentionFusionOp"] and not results[
        "QuantAttentionProjectionFusionPass"].misses
    f = feeds()
    expected, got = _close(model, graph, f, mode)
    if mode == "force_fp32":
        assert np.array_equal(got, run_ir(unmerged, f, mode)["y"])
