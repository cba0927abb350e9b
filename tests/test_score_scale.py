"""ScoreScale moves SDPA's two sqrt(scale) factors after Q.K^T for the attention fusion; where
no attention kernel takes the block they go back on Q and K, so the rewrite never creates an
fp16 overflow the exported graph did not have.

The case that found it: Q and K near 60 over 64 dims.  Scaled first (64^-1/4 each, as the
export does) the scores are ~29k, within fp16; Q.K^T unscaled is ~230k: inf in an fp16 build,
then NaN out of the Softmax, where onnxruntime on the original graph is finite.
"""
from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto

import cli
from builder import Net
from fusion_passes import pipeline
from helpers import assert_matches_ort, fuse_model, op_types, run_ir, run_ort
from simulator import cli as sim_cli

SHAPE = [1, 1, 4, 64]


def sdpa_block(elem_type=TensorProto.FLOAT16, then_halve=False):
    """softmax((Q * s) . (K * s)^T [/ 2]) . V with s = 64^-1/4, Q, K, V graph inputs: the SDPA
    decomposition without projections, which the attention fusion does not take."""
    net = Net(opset=17)
    q, k, v = (net.input(n, SHAPE, elem_type) for n in "qkv")
    dtype = np.float16 if elem_type == TensorProto.FLOAT16 else np.float32
    s = net.const(np.array(64 ** -0.25, dtype))
    scores = net.op("MatMul", net.op("Mul", q, s), net.op("Transpose", net.op("Mul", k, s), perm=[0, 1, 3, 2]))
    if then_halve:
        scores = net.op("Div", scores, net.const(np.array(2, dtype)))
    return net.model(net.op("MatMul", net.op("Softmax", scores, axis=-1), v))


def large_feeds(dtype=np.float16) -> dict:
    rng = np.random.default_rng(0)
    return {n: (np.full(SHAPE, 60, np.float32) + rng.standard_normal(SHAPE)).astype(dtype) for n in "qkv"}


@pytest.mark.parametrize("elem_type, dtype, then_halve", [(TensorProto.FLOAT16, np.float16, False),
                                                         (TensorProto.FLOAT, np.float32, False),
                                                         (TensorProto.FLOAT16, np.float16, True)])
def test_an_unfused_block_keeps_its_scales_before_the_product(elem_type, dtype, then_halve):
    """The rewrite fires (the attention pass could have used it), no attention kernel takes
    the block, and the scales are back on Q and K (a scale the scores had stays on them):
    the fp16 build is finite and matches onnxruntime on the original graph, an fp16 model and
    an fp32 one under force_fp16 alike."""
    model = sdpa_block(elem_type, then_halve)
    graph, stats = fuse_model(model)
    assert stats["CanonicalizePass"].by_rewrite.get("ScoreScale") == 1
    assert "MultiHeadAttentionFusionOp" not in op_types(graph)
    named, _ = fuse_model(model, passes=[type(p) for p in pipeline.fusion_passes() if p.name != "AutoFusePass"])
    qk = next(n for n in named.nodes if n.op_type == "MatMul" and n.inputs[0].producer.op_type != "Softmax")
    scales = [_scale_above(v) for v in qk.inputs]
    assert scales == [pytest.approx(64 ** -0.25, rel=1e-3)] * 2, op_types(named)
    after = [_scale_of(n) for n in qk.outputs[0].consumers if n.op_type == "Mul"]
    assert after == ([0.5] if then_halve else []), op_types(named)
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


def _scale_of(mul):
    return float(mul.inputs[1].const.reshape(())) if mul.inputs[1].is_const else None


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
