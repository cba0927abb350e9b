"""Graphs from real exporters import, fold, type and run like onnxruntime, unfused and fused.

torch.onnx's TorchScript exporter (opset 17, no constant folding: BatchNormalization and the
Shape/Gather/Concat chains stay) and its dynamo exporter (opset 18) on a torchvision-style
ResNet-50 and transformers BERT/ViT/GPT-2 from small configs.  Each export is made once per
session (tests/exporters.py).  Skipped when torch/transformers/onnxscript are not installed
(the `export` extra).  What each export contains is recorded in tests/REAL_EXPORTS.md.
"""
from __future__ import annotations

import os

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from codegen.fused.gemm import activation_name
from helpers import assert_matches_ort, fuse_model, lower, run_ir, run_ort

import exporters

CASES = [(m, e) for m in exporters.MODELS for e in exporters.EXPORTERS]
IDS = [f"{m}-{e}" for m, e in CASES]
# Values that only describe shapes: after folding none of these may remain as kernels.
SHAPE_OPS = {"Shape", "Size", "ConstantOfShape"}


@pytest.fixture(scope="session")
def exports(tmp_path_factory):
    return exporters.export_cache_or_skip(tmp_path_factory, "real_exports")


_LOWERED: dict = {}


def _lowered(exports, name, exporter):
    """(onnx model, IR after the generic passes), lowered once per session."""
    key = (name, exporter)
    if key not in _LOWERED:
        model = exports.model(name, exporter)
        _LOWERED[key] = (model, lower(model))
    return _LOWERED[key]


@pytest.mark.parametrize("name,exporter", CASES, ids=IDS)
def test_imports_typed_and_folded(exports, name, exporter):
    model, graph = _lowered(exports, name, exporter)
    graph.verify(require_types=True)
    for value in graph.values():
        assert value.desc.dtype is not None and value.desc.is_static(), value.name
    left = [n.name for n in graph.nodes if n.op_type in SHAPE_OPS]
    assert not left, f"shape computations left unfolded: {left}"
    for node in graph.nodes:
        if node.op_type in ("Reshape", "Expand"):
            data = [v for v in node.inputs if v is not None]
            assert len(data) == 1 and node.attrs.get("shape") is not None, node.name
    # Folding removed every node whose inputs were all constant.
    for node in graph.nodes:
        assert not all(v is None or v.is_const for v in node.inputs), f"{node.name} was not folded"


@pytest.mark.parametrize("precision", ["fp32", "fp16"])
@pytest.mark.parametrize("name,exporter", CASES, ids=IDS)
def test_matches_onnxruntime(exports, name, exporter, precision):
    model, graph = _lowered(exports, name, exporter)
    feeds = exporters.example_feeds(name)
    if "attention_mask" in feeds:
        assert (feeds["attention_mask"] == 0).any() and (feeds["attention_mask"] == 1).any()
    if "input_ids" in feeds:
        assert feeds["input_ids"].max() < exporters.SHAPES["small"]["vocab"]
    with np.errstate(over="ignore"):   # the -3.4e38 mask constant becomes -inf in fp16
        assert_matches_ort(model, graph, feeds, precision=precision)


@pytest.mark.parametrize("precision", ["fp32", "fp16"])
@pytest.mark.parametrize("name,exporter", CASES, ids=IDS)
def test_fused_matches_onnxruntime(exports, name, exporter, precision):
    """Whatever the fusion pipeline makes of a real export computes what onnxruntime does."""
    model = exports.model(name, exporter)
    graph, _ = fuse_model(model)
    graph.verify(require_types=True)
    with np.errstate(over="ignore"):
        assert_matches_ort(model, graph, exporters.example_feeds(name), precision=precision)


@pytest.mark.parametrize("exporter", exporters.EXPORTERS)
@pytest.mark.parametrize("name", ["bert", "gpt2"])
def test_padding_mask_reaches_the_output(exports, name, exporter):
    """The comparison above is sensitive to the mask: an all-ones mask changes the result."""
    model, graph = _lowered(exports, name, exporter)
    feeds = exporters.example_feeds(name)
    ones = dict(feeds, attention_mask=np.ones_like(feeds["attention_mask"]))
    padded, unpadded = run_ir(graph, feeds)["output"], run_ir(graph, ones)["output"]
    assert not np.allclose(padded[0], unpadded[0], atol=1e-3)     # sequence 0 is padded
    np.testing.assert_allclose(padded[1], unpadded[1], rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(unpadded, run_ort(model, ones)["output"], rtol=1e-4, atol=1e-4)


# ---------------------------------------------------------------- attention and linears fuse

TRANSFORMERS = [(m, e) for m in ("bert", "vit", "gpt2") for e in exporters.EXPORTERS]
TRANSFORMER_IDS = [f"{m}-{e}" for m, e in TRANSFORMERS]
SMALL_LAYERS = 2            # exporters.build(size="small")
MHA = "MultiHeadAttentionFusionOp"
MHA_PASS = "MultiHeadAttentionFusionPass"
_FUSED: dict = {}


def _fused(exports, name, exporter, passes=None):
    """(graph, {pass: stats}) of the fusion pipeline (or only `passes`) on an export, once per session."""
    key = (name, exporter, tuple(p.__name__ for p in passes or ()))
    if key not in _FUSED:
        _FUSED[key] = fuse_model(exports.model(name, exporter), passes=passes)
    return _FUSED[key]


@pytest.mark.parametrize("name,exporter", TRANSFORMERS, ids=TRANSFORMER_IDS)
def test_every_attention_block_is_one_mha_kernel(exports, name, exporter):
    graph, stats = _fused(exports, name, exporter)
    counts = graph.op_type_counts()
    assert counts.get(MHA) == SMALL_LAYERS, counts
    mha = stats[MHA_PASS]
    assert (mha.match_times, mha.effect_times, mha.misses) == (SMALL_LAYERS, SMALL_LAYERS, []), \
        [m.constraint for m in mha.misses]


@pytest.mark.parametrize("name,exporter", TRANSFORMERS, ids=TRANSFORMER_IDS)
def test_no_softmax_or_attention_matmul_is_left(exports, name, exporter):
    graph, _ = _fused(exports, name, exporter)
    counts = graph.op_type_counts()
    assert "Softmax" not in counts and "MatMul" not in counts and "Transpose" not in counts, counts


def _mha_only():
    """Canonicalization (the form the pass reads) and the MHA pass, nothing else."""
    from fusion_passes.canonical import CanonicalizePass
    from fusion_passes.multi_head_attention import MultiHeadAttentionFusionPass
    return [CanonicalizePass, MultiHeadAttentionFusionPass]


@pytest.mark.parametrize("name,exporter", TRANSFORMERS, ids=TRANSFORMER_IDS)
def test_mha_masks_are_the_computed_padding_mask_or_none(exports, name, exporter):
    """BERT/GPT-2: the transformers-5 `Where(mask, 0, -3.4e38)` tensor (padding, plus causal for
    GPT-2) is the kernel's additive bias input; ViT: none (dynamo's all-zero Add is dropped).
    MHA pass alone, so the mask's producer is still the exporter's Where (autofuse takes it later)."""
    from codegen.fused.attention import SLOTS
    graph, _ = _fused(exports, name, exporter, _mha_only())
    for node in (n for n in graph.nodes if n.op_type == MHA):
        slots = SLOTS.read(node.inputs)
        assert node.attrs["mask_kind"] == "none" and slots["mask"] is None
        if name == "vit":
            assert slots["bias"] is None
        else:
            assert slots["bias"].producer is not None and slots["bias"].producer.op_type == "Where"


@pytest.mark.parametrize("precision", ["fp32", "fp16"])
@pytest.mark.parametrize("name,exporter", TRANSFORMERS, ids=TRANSFORMER_IDS)
def test_mha_kernels_alone_match_onnxruntime(exports, name, exporter, precision):
    """Only the MHA pass: every other op stays as exported, so a wrong attention kernel shows."""
    graph, _ = _fused(exports, name, exporter, _mha_only())
    assert graph.op_type_counts().get(MHA) == SMALL_LAYERS
    with np.errstate(over="ignore"):
        assert_matches_ort(exports.model(name, exporter), graph, exporters.example_feeds(name), precision=precision)


@pytest.mark.parametrize("exporter", exporters.EXPORTERS)
def test_gpt2_conv1d_linears_are_fused_gemms(exports, exporter):
    """GPT-2's `Reshape -> Gemm(W, C) -> Reshape` linears: c_attn goes into MHA, c_fc (+tanh GELU)
    and both c_proj (+residual) into fused GEMMs that read and write the [B,S,*] tensors, so no
    Gemm, Tanh or residual Add is left and no Reshape touches a fused GEMM."""
    graph, stats = _fused(exports, "gpt2", exporter)
    counts = graph.op_type_counts()
    assert "Gemm" not in counts and "Tanh" not in counts and "Pow" not in counts, counts
    gemms = [n for n in graph.nodes if "MatMulBias" in n.op_type or n.op_type == "LayerNormMatMulFusionOp"]
    assert len(gemms) == 3 * SMALL_LAYERS
    assert sorted(activation_name(n.attrs) for n in gemms) == [""] * 4 + ["FastGelu"] * 2
    assert sum(len(n.inputs) == 4 for n in gemms if n.op_type == "MatMulBiasFusionOp") == 2 * SMALL_LAYERS  # residual
    for node in gemms:
        assert len(node.outputs[0].desc.shape) == 3
        assert all(len(v.desc.shape) == 3 for v in node.inputs[:1])
        assert not any(u.op_type == "Reshape" for v in node.outputs for u in v.consumers)
    assert stats["MatMulBiasActFusionPass"].misses == []


@pytest.mark.skipif(not os.environ.get("ATC_SLOW_TESTS"),
                    reason="12-layer exports are slow: bench/bench_exports.py checks them; ATC_SLOW_TESTS=1 runs this")
@pytest.mark.parametrize("exporter", exporters.EXPORTERS)
def test_bert_12_layers_fuses_twelve_mha_kernels(exports, exporter):
    model = exports.model("bert", exporter, layers=12)
    graph, stats = fuse_model(model)
    counts = graph.op_type_counts()
    assert counts.get(MHA) == 12 and "Softmax" not in counts, counts
    assert stats[MHA_PASS].misses == []
    with np.errstate(over="ignore"):
        assert_matches_ort(model, graph, exporters.example_feeds("bert", layers=12), precision="fp16")


def test_exporter_forms(exports):
    """The forms REAL_EXPORTS.md describes; a torch/transformers change that alters them fails here."""
    hist = {key: exporters.op_histogram(exports.model(*key)) for key in CASES}
    opsets = {key: exporters.default_opset(exports.model(*key)) for key in CASES}
    for (name, exporter), opset in opsets.items():
        assert opset == (exporters.DYNAMO_OPSET if exporter == "dynamo" else exporters.TORCHSCRIPT_OPSET)
    assert hist["resnet50", "torchscript"]["BatchNormalization"] == 17       # kept: no folding
    assert "BatchNormalization" not in hist["resnet50", "dynamo"]            # folded into Conv
    for name in ("bert", "vit", "gpt2"):
        for exporter in exporters.EXPORTERS:
            assert hist[name, exporter]["LayerNormalization"] == 5, (name, exporter)
        assert "Shape" in hist[name, "torchscript"]                         # run-time shape chains
        assert "Shape" not in hist[name, "dynamo"]
    assert hist["bert", "dynamo"].get("GatherND") == 1                       # mask indexing
    assert hist["gpt2", "dynamo"]["Split"] == 2 and hist["gpt2", "torchscript"]["Split"] == 2


# ---------------------------------------------------------------- ops added for these graphs

def _one_node(op_type, inputs, outputs, initializers=(), **attrs):
    node = helper.make_node(op_type, [i.name for i in inputs] + [t.name for t in initializers],
                            [o.name for o in outputs], **attrs)
    graph = helper.make_graph([node], op_type, list(inputs), list(outputs), list(initializers))
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])


def _info(name, elem, shape):
    return helper.make_tensor_value_info(name, elem, shape)


@pytest.mark.parametrize("batch_dims,data_shape,indices", [
    (0, (3, 4, 5), [[0, 1], [2, -1], [1, 0]]),                 # index depth 2 of rank 3
    (0, (2, 8), [[[[0, 7]], [[1, 3]]], [[[1, -8]], [[0, 0]]]]),  # mask-style 4-D indices
    (1, (2, 3, 4), [[[1], [2]], [[0], [-1]]]),                  # batch_dims=1
])
def test_gather_nd_matches_onnxruntime(batch_dims, data_shape, indices):
    indices = np.asarray(indices, dtype=np.int64)
    out_shape = indices.shape[:-1] + data_shape[batch_dims + indices.shape[-1]:]
    model = _one_node("GatherND", [_info("x", TensorProto.FLOAT, data_shape)], [_info("y", TensorProto.FLOAT, out_shape)],
                      [onnx.numpy_helper.from_array(indices, "idx")], batch_dims=batch_dims)
    feeds = {"x": np.random.default_rng(0).standard_normal(data_shape).astype(np.float32)}
    graph = lower(model)
    assert [n.op_type for n in graph.nodes] == ["GatherND"]
    assert_matches_ort(model, graph, feeds)


def test_gather_nd_rejects_out_of_range_indices():
    from ge.errors import AtcError
    model = _one_node("GatherND", [_info("x", TensorProto.FLOAT, (2, 3))], [_info("y", TensorProto.FLOAT, (1,))],
                      [onnx.numpy_helper.from_array(np.array([[0, 3]], dtype=np.int64), "idx")])
    with pytest.raises(AtcError) as err:    # constant indices: refused at compile time already
        run_ir(lower(model), {"x": np.zeros((2, 3), np.float32)})
    assert err.value.code == "E16004"


@pytest.mark.parametrize("src,like", [(TensorProto.FLOAT, TensorProto.INT64), (TensorProto.INT64, TensorProto.FLOAT),
                                      (TensorProto.FLOAT, TensorProto.BOOL)])
def test_cast_like_matches_onnxruntime(src, like):
    model = _one_node("CastLike", [_info("x", src, (2, 3)), _info("t", like, (1,))], [_info("y", like, (2, 3))])
    rng = np.random.default_rng(1)
    x = (rng.standard_normal((2, 3)) * 5).astype(helper.tensor_dtype_to_np_dtype(src))
    feeds = {"x": x, "t": np.zeros((1,), helper.tensor_dtype_to_np_dtype(like))}
    graph = lower(model)
    assert graph.outputs[0].desc.dtype == np.dtype(helper.tensor_dtype_to_np_dtype(like))
    assert_matches_ort(model, graph, feeds)


# ---------------------------------------------------------------- every Conv in a fused kernel

CONV_KERNELS = ("ConvBNReluFusionOp", "ConvPoolFCFusionOp", "AutofusedKernel")
# Small exports (tests/REAL_EXPORTS.md): ResNet-50 with one Bottleneck per stage (17 Conv, a
# downsample in every stage), ViT with 2 layers.  Kernels = nodes that launch a task.
KERNELS = {"resnet50": {"ConvBNReluFusionOp": 12, "ConvPoolFCFusionOp": 1, "MaxPool": 1},
           "vit": 12}


@pytest.mark.parametrize("exporter", exporters.EXPORTERS)
@pytest.mark.parametrize("name", ["resnet50", "vit"])
def test_every_conv_in_a_fused_kernel(exports, name, exporter):
    """No bare Conv after the pipeline, on both exporters' graphs: ResNet's downsample convs
    (Conv+BN in TorchScript, a lone Conv with the BN folded in dynamo) are residual convs of
    their stage's conv3 kernel; ViT's patch conv stores its output as [B, HW, C] next to the
    CLS token, and autofuse adds the position embedding in the same kernel."""
    from codegen.registry import kernel_of
    model = exports.model(name, exporter)
    graph, stats = fuse_model(model)
    types = [n.op_type for n in graph.nodes]
    assert "Conv" not in types and "BatchNormalization" not in types
    convs = {n.name for n in model.graph.node if n.op_type == "Conv"}
    covered = {o for n in graph.nodes if n.op_type in CONV_KERNELS for o in n.origin}
    assert convs and convs <= covered
    assert stats["ConvBNReluFusionPass"].misses == []
    kernels = [n for n in graph.nodes if not kernel_of(n.op_type).no_task]
    if name == "resnet50":
        assert graph.op_type_counts() == KERNELS[name]
        assert sum(1 for n in graph.nodes if n.attrs.get("residual_conv")) == 4    # one per stage
        assert len(convs) == 17
    else:
        patch = next(n for n in graph.nodes if n.op_type == "AutofusedKernel")
        assert patch.attrs["member_ops"] == ["ConvBNReluFusionOp", "Add"]
        assert tuple(patch.outputs[0].desc.shape) == (2, 17, 64)               # [B, 1 + HW, C]
        onnx_types = {n.name: n.op_type for n in model.graph.node}
        assert sorted(onnx_types[o] for o in patch.origin) == ["Add", "Concat", "Conv", "Reshape", "Transpose"]
        assert len(kernels) == KERNELS[name]
