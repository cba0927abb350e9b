"""PyTorch's SDPA decomposition scales Q and K each by sqrt(scale) before Q.K^T, to keep fp16
scores in range.  The graph keeps those scales where the exporter put them: the attention
pass reads them among Q's and K's views and folds their product into the kernel's `scale`
(computed in float32), and a block no attention kernel takes runs them as written.

The case that shaped this: Q and K near 60 over 64 dims.  Scaled first (64^-1/4 each, as the
export does) the scores are ~29k, within fp16; Q.K^T unscaled is ~230k: inf in fp16, then
NaN out of the Softmax, where onnxruntime on the original graph is finite.  (The scales used
to be moved after Q.K^T by a canonical rewrite and moved back where no kernel formed.)
"""
from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto

import cli
from builder import Net
from codegen.fused.attention import OP_TYPE
from fusion_passes import pipeline, reasons
from helpers import assert_matches_ort, fuse_model, op_types, run_ir, run_ort
from simulator import cli as sim_cli

SHAPE = [1, 1, 4, 64]
TOKENS, HIDDEN = 4, 64
SCALE = 64 ** -0.25


def sdpa_block(elem_type=TensorProto.FLOAT16, then_halve=False):
    """softmax((Q * s) . (K * s)^T [/ 2]) . V with s = 64^-1/4, Q, K, V graph inputs: the SDPA
    decomposition without projections, which the attention fusion does not take."""
    net = Net(opset=17)
    q, k, v = (net.input(n, SHAPE, elem_type) for n in "qkv")
    dtype = np.float16 if elem_type == TensorProto.FLOAT16 else np.float32
    s = net.const(np.array(SCALE, dtype))
    scores = net.op("MatMul", net.op("Mul", q, s), net.op("Transpose", net.op("Mul", k, s), perm=[0, 1, 3, 2]))
    if then_halve:
        scores = net.op("Div", scores, net.const(np.array(2, dtype)))
    return net.model(net.op("MatMul", net.op("Softmax", scores, axis=-1), v))


def projected_sdpa_block(elem_type=TensorProto.FLOAT16, div=False):
    """The same with one 64-wide head projected from x (identity weights, so Q = K = V = x)
    and the head views around the scales, as the exporters write SDPA: the MHA kernel forms."""
    net = Net(opset=17)
    dtype = np.float16 if elem_type == TensorProto.FLOAT16 else np.float32
    x = net.input("x", [1, TOKENS, HIDDEN], elem_type)
    eye = net.const(np.eye(HIDDEN, dtype=dtype))
    shape = net.const(np.array([1, TOKENS, 1, HIDDEN], np.int64))

    def head(perm):
        return net.op("Transpose", net.op("Reshape", net.op("MatMul", x, eye), shape), perm=perm)

    def scaled(t):
        if div:
            return net.op("Div", t, net.const(np.array(1 / SCALE, dtype)))
        return net.op("Mul", t, net.const(np.array(SCALE, dtype)))

    scores = net.op("MatMul", scaled(head([0, 2, 1, 3])), scaled(head([0, 2, 3, 1])))
    context = net.op("MatMul", net.op("Softmax", scores, axis=-1), head([0, 2, 1, 3]))
    merged = net.op("Reshape", net.op("Transpose", context, perm=[0, 2, 1, 3]),
                    net.const(np.array([1, TOKENS, HIDDEN], np.int64)))
    return net.model(merged)


def large(shape, dtype=np.float16, seed=0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return (np.full(shape, 60, np.float32) + rng.standard_normal(shape)).astype(dtype)


def large_feeds(dtype=np.float16) -> dict:
    return {n: large(SHAPE, dtype, seed) for seed, n in enumerate("qkv")}


@pytest.mark.parametrize("elem_type, dtype, then_halve", [(TensorProto.FLOAT16, np.float16, False),
                                                         (TensorProto.FLOAT, np.float32, False),
                                                         (TensorProto.FLOAT16, np.float16, True)])
def test_an_unfused_block_keeps_its_scales_before_the_product(elem_type, dtype, then_halve):
    """No attention kernel takes the block (the miss says why), and the scales stay on Q and K
    where the exporter put them (a scale the scores had stays on them): the fp16 build is
    finite and matches onnxruntime on the original graph, an fp16 model and an fp32 one under
    force_fp16 alike."""
    model = sdpa_block(elem_type, then_halve)
    graph, stats = fuse_model(model)
    assert OP_TYPE not in op_types(graph)
    [miss] = stats["MultiHeadAttentionFusionPass"].misses
    assert miss.code == reasons.UNSUPPORTED_VARIANT and "expected a linear projection" in miss.constraint
    named, _ = fuse_model(model, passes=[type(p) for p in pipeline.fusion_passes() if p.name != "AutoFusePass"])
    qk = next(n for n in named.nodes if n.op_type == "MatMul" and n.inputs[0].producer.op_type != "Softmax")
    scales = [_scale_above(v) for v in qk.inputs]
    assert scales == [pytest.approx(SCALE, rel=1e-3)] * 2, op_types(named)
    after = [_scale_of(n) for n in qk.outputs[0].consumers if n.op_type in ("Mul", "Div")]
    assert after == ([2.0] if then_halve else []), op_types(named)
    feeds = large_feeds(dtype)
    assert np.isfinite(list(run_ort(model, feeds).values())[0]).all()
    got = list(run_ir(graph, feeds, "force_fp16").values())[0]
    assert np.isfinite(got).all()
    assert_matches_ort(model, graph, feeds, precision="fp16")
    assert_matches_ort(model, graph, feeds, precision="fp32")


def _scale_above(value):
    """The scalar a Mul on the way up from a MatMul operand (through views) scales by."""
    node = value.producer
    while node is not None and node.op_type in ("Transpose", "Reshape"):
        node = node.inputs[0].producer
    return _scale_of(node) if node is not None and node.op_type == "Mul" else None


def _scale_of(node):
    return float(node.inputs[1].const.reshape(())) if node.inputs[1].is_const else None


@pytest.mark.parametrize("div", [False, True], ids=["mul", "div"])
@pytest.mark.parametrize("elem_type, dtype", [(TensorProto.FLOAT16, np.float16), (TensorProto.FLOAT, np.float32)])
def test_the_kernel_takes_the_scales_and_does_not_overflow(elem_type, dtype, div):
    """With projections the whole block is one MHA kernel: the two Muls (or Divs) are its
    members, its scale is their product 64^-1/2, and on the large inputs its float32 scores
    stay finite in an fp16 build and match onnxruntime's fp16 run of the original graph."""
    model = projected_sdpa_block(elem_type, div)
    graph, stats = fuse_model(model)
    assert op_types(graph) == [OP_TYPE], op_types(graph)
    assert stats["MultiHeadAttentionFusionPass"].misses == []
    [node] = graph.nodes
    assert node.attrs["scale"] == pytest.approx(64 ** -0.5, rel=1e-3 if dtype == np.float16 else 1e-6)
    feeds = {"x": large([1, TOKENS, HIDDEN], dtype)}
    assert np.isfinite(list(run_ort(model, feeds).values())[0]).all()
    assert np.isfinite(list(run_ir(graph, feeds, "force_fp16").values())[0]).all()
    assert_matches_ort(model, graph, feeds, precision="fp16")
    if dtype == np.float32:         # an fp16 model's reference is fp16 arithmetic: fp16's rule
        assert_matches_ort(model, graph, feeds, precision="fp32")


def test_the_fp16_om_of_the_block_passes_compare(tmp_path, capsys):
    """End to end: atc --precision_mode=force_fp16, then atc-sim --compare on those inputs."""
    model = sdpa_block()
    path = tmp_path / "sdpa.onnx"
    onnx.save(model, path)
    rc = cli.main([f"--model={path}", "--framework=5", f"--output={tmp_path / 'sdpa'}", "--soc_version=Ascend910",
                   "--precision_mode=force_fp16"])
    assert rc == 0, capsys.readouterr().out
    files = []
    for name, array in large_feeds().items():
        np.save(tmp_path / f"{name}.npy", array)
        files.append(str(tmp_path / f"{name}.npy"))
    capsys.readouterr()
    rc = sim_cli.main(["--model", str(tmp_path / "sdpa.om"), "--input", ",".join(files), "--compare", str(path)])
    text = capsys.readouterr().out
    assert rc == 0 and "compare PASS" in text, text
