"""The sweep harness's pure-Python parts (bench/sweep/analysis.py): attention layers found by
structure, atc's miss lines parsed and tied to nodes, totals.  No torch, no peers."""
import os
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from bench.sweep import analysis, ours

MISS = ("[DEBUG] [GE] fusion miss NF2003 UnsupportedAttribute: pass ConvBNReluFusionPass, anchor /b/conv1/Conv, "
        "ops ['Conv', 'BatchNormalization']: group != 1 is not fused (Conv /b/conv1/Conv: group = 8); "
        "tensors {'x': {'shape': [1, 8, 4, 4], 'dtype': 'float32'}}")


def _attention_graph():
    """Eager attention (Q·Kᵀ, scale, mask, Softmax, ·V) and a classifier Softmax after a weight GEMM."""
    w = numpy_helper.from_array(np.ones((4, 4), np.float32), "w")
    scale = numpy_helper.from_array(np.array(0.5, np.float32), "scale")
    nodes = [
        helper.make_node("Transpose", ["k"], ["kt"], name="kT", perm=[0, 2, 1]),
        helper.make_node("MatMul", ["q", "kt"], ["s"], name="qk"),
        helper.make_node("Mul", ["s", "scale"], ["ss"], name="scale_mul"),
        helper.make_node("Add", ["ss", "mask"], ["sm"], name="mask_add"),
        helper.make_node("Softmax", ["sm"], ["p"], name="attn_softmax", axis=-1),
        helper.make_node("MatMul", ["p", "v"], ["o"], name="pv"),
        helper.make_node("MatMul", ["o", "w"], ["logits"], name="head"),
        helper.make_node("Softmax", ["logits"], ["probs"], name="cls_softmax", axis=-1),
        helper.make_node("Conv", ["img", "cw"], ["c"], name="dw", group=2, dilations=[2, 2]),
    ]
    f = lambda n, s: helper.make_tensor_value_info(n, TensorProto.FLOAT, s)  # noqa: E731
    graph = helper.make_graph(nodes, "g", [f("q", [1, 3, 4]), f("k", [1, 3, 4]), f("v", [1, 3, 4]),
                                           f("mask", [1, 3, 3]), f("img", [1, 2, 5, 5])],
                              [f("probs", [1, 3, 4]), f("c", [1, 2, 1, 1])],
                              [w, scale, numpy_helper.from_array(np.ones((2, 1, 3, 3), np.float32), "cw")])
    return helper.make_model(graph).graph


def test_attention_found_by_structure_and_classifier_softmax_is_not():
    g = analysis.OnnxGraph(_attention_graph())
    layers = g.attention_softmaxes()
    assert [(a["softmax"], a["qk"], a["pv"]) for a in layers] == [("attn_softmax", "qk", "pv")]
    assert layers[0]["form"] == "Q:- K:Transpose | MatMul>Mul>Add>Softmax>MatMul"
    assert g.convs() == [{"name": "dw", "group": 2, "dilated": True}]


def test_miss_line_parsed_and_tied_to_its_node():
    misses = analysis.parse_misses("noise\n" + MISS + "\n")
    assert len(misses) == 1
    m = misses[0]
    assert (m["code"], m["reason"], m["pass"], m["anchor"]) == ("NF2003", "UnsupportedAttribute",
                                                                "ConvBNReluFusionPass", "/b/conv1/Conv")
    assert m["op_types"] == ["Conv", "BatchNormalization"]
    assert m["constraint"].startswith("group != 1 is not fused")
    assert analysis.misses_about("/b/conv1/Conv", misses) == misses
    assert analysis.misses_about("/b/conv1/Con", misses) == []     # a prefix of a name is not the name
    verdict = analysis.classify(misses, "ConvBNReluFusionPass", "/b/conv1/Conv")
    assert verdict["source"] == "own-pass"
    assert verdict["key"] == "ConvBNReluFusionPass NF2003 UnsupportedAttribute: group != N is not fused (Conv <node>: group = N)"
    assert analysis.classify([], "ConvBNReluFusionPass")["source"] == "none"


def test_coverage_and_totals():
    tasks = [{"op_name": "k1", "op_type": "ConvBNReluFusionOp", "origin_op_names": ["c1", "bn1"],
              "fusion_pass": "ConvBNReluFusionPass"},
             {"op_name": "c2", "op_type": "Conv2D", "origin_op_names": ["c2"], "fusion_pass": None},
             {"op_name": "c4", "op_type": "Conv2D", "origin_op_names": ["c4", "view4"], "fusion_pass": ""},
             {"op_name": "k3", "op_type": "AutofusedKernel", "origin_op_names": ["c3"], "fusion_pass": "AutoFusePass"},
             {"op_name": "m", "op_type": "MultiHeadAttentionFusionOp", "origin_op_names": ["sm"]}]
    cov = analysis.coverage(tasks)
    assert analysis.fused(cov["c1"]) and analysis.fused(cov["c3"]) and not analysis.fused(cov["c2"])
    assert not analysis.fused(cov["c4"])          # a plain conv with a view folded into it runs alone
    assert analysis.is_mha(cov["sm"]) and not analysis.is_mha(cov.get("nope"))
    row = {"file": "f", "family": "x", "export_ok": True, "compile_ok": True, "kernels": 10, "attn_layers": 2,
           "mha_layers": 1, "mha_kernels": 1, "convs": 4, "convs_fused": 3, "compare_fp32": "PASS",
           "compare_fp16": "FAIL", "peers": {"ort": {"kernels_noview": 12}, "tvm": {"kernels_noview": 7},
                                             "openvino": {"error": "x"}}}
    assert analysis.best_peer(row) == ("tvm", 7)
    t = analysis.totals([row, {"file": "g", "family": "x", "export_ok": False, "compile_ok": False}])
    assert (t["files"], t["compiled"], t["attn_layers"], t["mha_layers"], t["convs_fused"]) == (2, 1, 2, 1, 3)
    assert (t["compare_fp32_pass"], t["compare_fp16_pass"], t["compare_fp16_run"]) == (1, 0, 1)
    assert (t["peer_fewer"], t["peer_gap"]) == (1, 3)


def test_peer_counts_reused_only_for_the_same_onnx_bytes(tmp_path):
    """--peers-from: the peers never see atc_py, so their counts of the same ONNX bytes carry
    over between runs; a file whose bytes changed (or a row without its hash) is measured again."""
    import json

    from bench.sweep import run

    model = tmp_path / "m.onnx"
    model.write_bytes(b"one export")
    peers = {"ort": {"kernels_noview": 7}}
    rows = [{"file": "m.dynamo", "peers": peers, "onnx_sha256": run.file_sha256(str(model))},
            {"file": "old.dynamo", "peers": peers}]
    (tmp_path / "results.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert run.reused_peers(str(tmp_path), "m.dynamo", str(model)) == peers
    assert run.reused_peers(str(tmp_path), "old.dynamo", str(model)) is None
    assert run.reused_peers(str(tmp_path), "absent.dynamo", str(model)) is None
    model.write_bytes(b"a new export")
    assert run.reused_peers(str(tmp_path), "m.dynamo", str(model)) is None


def test_the_tools_import_the_checkout_the_sweep_runs_from(tmp_path, monkeypatch):
    """`atc` beside the venv's python imports the atc_py that venv installed, which may be
    another checkout (a stale editable install did this: a sweep of a main snapshot measured
    older code).  Here a stale `cli` comes first on the path; the sweep's tools still get ours."""
    stale = tmp_path / "stale"
    stale.mkdir()
    (stale / "cli.py").write_text("")
    monkeypatch.setenv("PYTHONPATH", str(stale))
    result = ours.run([sys.executable, "-c", "import cli; print(cli.__file__)"], 120, cwd=str(tmp_path))
    assert result["rc"] == 0, result["out"]
    assert result["out"].strip() == os.path.join(ours.CHECKOUT, "cli.py")
    assert ours.checkout_env({"PYTHONPATH": "a"})["PYTHONPATH"] == os.pathsep.join([ours.CHECKOUT, "a"])
