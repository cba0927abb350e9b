"""The Graph Fusion Report, fusion_result.json, the two switch sources and the debug dumps."""
from __future__ import annotations

import json
import os
import re

import numpy as np
import onnx
import pytest
from google.protobuf import text_format
from onnx import TensorProto, helper, numpy_helper

import cli
from atc_py import zoo
from codegen.om_import import load_om_graph
from om_format.schema import ModelDef

from helpers import netron_open

REPORT_LINE = re.compile(r"^\[GE\]( (Pattern: \w+|Matched: \d+ times|Fused into: .+|Estimated speedup: \d+\.\d\dx|"
                         r"Rejected: \d+ candidate\(s\) failed a check \(--log=debug shows why\)|"
                         r"Switched off: \d+ candidate\(s\) \(disabled by .+\)|"
                         r"Total operators (before|after) fusion: \d+|Kernel launches (before|after) fusion: \d+|"
                         r"Overall speedup: \d+\.\d\dx|Graph Fusion Report:))?$")


@pytest.fixture
def workdir(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    for var in ("GE_FUSION_DISABLE_LIST", "ASCEND_GLOBAL_LOG_LEVEL", "GE_GRAPH_FUSION_LOG", "AUTOFUSE_DFX_FLAGS"):
        monkeypatch.delenv(var, raising=False)
    zoo.save("seed_testmodel", str(tmp_path), small=True)
    return tmp_path


def atc(capsys, *extra, model="seed_testmodel.onnx", out="out/m"):
    rc = cli.main([f"--model={model}", "--framework=5", f"--output={out}", "--soc_version=Ascend910", *extra])
    return rc, capsys.readouterr().out


def fused_types(path="out/m.om"):
    return [n.op_type for n in load_om_graph(path).graph.nodes]


def test_report_printed_with_log_info_in_the_seed_format(workdir, capsys):
    rc, text = atc(capsys, "--log=info")
    assert rc == 0, text
    lines = [l for l in text.splitlines() if l.startswith("[GE]")]
    assert lines[:3] == ["[GE] Graph Fusion Report:", "[GE]", "[GE] Pattern: ConvBNReLU"]
    assert all(REPORT_LINE.match(l) for l in lines), [l for l in lines if not REPORT_LINE.match(l)]
    assert "[GE] Fused into: ConvBNReluFusionOp" in lines
    assert "[GE] Total operators before fusion: 12" in lines
    after = int(next(l for l in lines if "operators after" in l).split(": ")[1])
    assert after == len(fused_types())
    assert float(next(l for l in lines if "Overall speedup" in l).split(": ")[1][:-1]) > 1.0


def test_report_follows_the_ge_environment_variables(workdir, capsys, monkeypatch):
    rc, text = atc(capsys)
    assert rc == 0 and "Graph Fusion Report" not in text
    monkeypatch.setenv("ASCEND_GLOBAL_LOG_LEVEL", "1")
    monkeypatch.setenv("GE_GRAPH_FUSION_LOG", "1")
    rc, text = atc(capsys)
    assert rc == 0 and "[GE] Graph Fusion Report:" in text


def test_fusion_result_json_layout(workdir, capsys):
    assert atc(capsys)[0] == 0
    content = json.loads((workdir / "fusion_result.json").read_text())
    graph_fusion = content["session_and_graph_id_0_0"]["graph_fusion"]
    assert graph_fusion["ConvBNReluFusionPass"] == {"effect_times": "3", "match_times": "3"}
    assert graph_fusion["ConvPoolFCFusionPass"] == {"effect_times": "1", "match_times": "1"}


def test_disable_list_restores_the_unfused_kernels(workdir, capsys, monkeypatch):
    monkeypatch.setenv("GE_FUSION_DISABLE_LIST", "ConvBNReluFusionOp")
    rc, text = atc(capsys, "--log=info")
    assert rc == 0, text
    types = fused_types()
    assert "ConvBNReluFusionOp" not in types
    # ConvPoolFC builds on a fused conv block, so with ConvBNReLU off the head stays unfused too.
    assert types.count("Conv") == 3 and types.count("BatchNormalization") == 3 and types.count("Relu") == 3
    block = text.split("Pattern: ConvBNReLU")[1].split("[GE]\n")[0]
    assert "Matched: 0 times" in block and "Fused into: none" in block
    assert "Switched off: 3 candidate(s) (disabled by GE_FUSION_DISABLE_LIST)" in block
    content = json.loads((workdir / "fusion_result.json").read_text())
    assert content["session_and_graph_id_0_0"]["graph_fusion"]["ConvBNReluFusionPass"] == \
        {"effect_times": "0", "match_times": "3"}        # GE's counts: every match vs the rewritten ones


def test_matched_counts_fused_matches_and_rejected_ones_have_their_own_line(workdir, capsys):
    """The first conv block's conv output is also a model output: that candidate is refused
    (NF2001), the other two fuse.  "Matched" says 2, "Rejected" 1; fusion_result.json keeps
    GE's match_times (3) and effect_times (2)."""
    rc, text = atc(capsys, "--log=debug", "--out_nodes=/layers/layers.0/conv/Conv:0;/layers/layers.5/Gemm:0")
    assert rc == 0, text
    block = text.split("Pattern: ConvBNReLU")[1].split("Pattern:")[0]
    assert "Matched: 2 times" in block and "Rejected: 1 candidate(s) failed a check" in block
    assert "fusion miss NF2001" in text
    content = json.loads((workdir / "fusion_result.json").read_text())
    assert content["session_and_graph_id_0_0"]["graph_fusion"]["ConvBNReluFusionPass"] == \
        {"effect_times": "2", "match_times": "3"}


def test_switch_file_all_off_then_one_on(workdir, capsys):
    switch = workdir / "switch.json"
    switch.write_text(json.dumps({"Switch": {"GraphFusion": {"ALL": "off"}, "UBFusion": {"ALL": "off"}}}))
    assert atc(capsys, f"--fusion_switch_file={switch}")[0] == 0
    unfused = fused_types()
    assert not any(t.endswith("FusionOp") for t in unfused)
    switch.write_text(json.dumps({"Switch": {"GraphFusion": {"ALL": "off", "ConvBNReluFusionPass": "on"}}}))
    assert atc(capsys, f"--fusion_switch_file={switch}")[0] == 0
    types = fused_types()
    assert types.count("ConvBNReluFusionOp") == 3 and "ConvPoolFCFusionOp" not in types


def test_unknown_switch_names_warn_with_valid_names(workdir, capsys, monkeypatch):
    monkeypatch.setenv("GE_FUSION_DISABLE_LIST", "NoSuchFusionOp")
    switch = workdir / "switch.json"
    switch.write_text(json.dumps({"Switch": {"GraphFusion": {"NoSuchPass": "off"}}}))
    rc, text = atc(capsys, f"--fusion_switch_file={switch}")
    assert rc == 0
    assert "unknown fused op [NoSuchFusionOp]" in text and "ConvBNReluFusionOp" in text
    assert "unknown fusion pass [NoSuchPass]" in text and "ConvBNReluFusionPass" in text


@pytest.mark.parametrize("content", ["{not json", json.dumps({"GraphFusion": {}}),
                                     json.dumps({"Switch": {"GraphFusion": {"ALL": "maybe"}}})])
def test_bad_switch_file_is_an_error(workdir, capsys, content):
    switch = workdir / "switch.json"
    switch.write_text(content)
    rc, text = atc(capsys, f"--fusion_switch_file={switch}")
    assert rc != 0 and "E10001" in text and "--fusion_switch_file" in text
    assert not os.path.exists("out/m.om")


def _grouped_conv_model():
    rng = np.random.default_rng(0)
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4, 8, 8])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    inits = [numpy_helper.from_array(rng.standard_normal((4, 2, 3, 3)).astype(np.float32), "w"),
             numpy_helper.from_array(rng.random(4).astype(np.float32) + 0.5, "s"),
             numpy_helper.from_array(rng.standard_normal(4).astype(np.float32), "b"),
             numpy_helper.from_array(rng.standard_normal(4).astype(np.float32), "m"),
             numpy_helper.from_array(rng.random(4).astype(np.float32) + 0.5, "v")]
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], name="conv_g2", group=2, pads=[1, 1, 1, 1]),
             helper.make_node("BatchNormalization", ["c", "s", "b", "m", "v"], ["n"], name="bn"),
             helper.make_node("Relu", ["n"], ["y"], name="relu")]
    return helper.make_model(helper.make_graph(nodes, "g", [x], [y], inits),
                             opset_imports=[helper.make_opsetid("", 17)])


def test_misses_are_logged_at_debug_and_dumped_as_json(workdir, capsys, monkeypatch):
    onnx.save(_grouped_conv_model(), str(workdir / "g2.onnx"))
    monkeypatch.setenv("AUTOFUSE_DFX_FLAGS", f"--debug_dir={workdir / 'dbg'}")
    rc, text = atc(capsys, "--log=debug", model="g2.onnx")
    assert rc == 0, text
    assert "NF2003" in text and "conv_g2" in text and "group" in text
    dumps = sorted((workdir / "dbg").glob("fusion_failure_*.json"))
    assert dumps
    miss = json.loads(dumps[0].read_text())
    assert miss["error_code"] == "NF2003" and miss["pass"] == "ConvBNReluFusionPass"
    assert "Conv" in miss["op_types"] and miss["tensors"]
    assert "group" in miss["constraint"]


def test_codegen_compile_debug_writes_a_pbtxt_per_fused_kernel(workdir, capsys, monkeypatch):
    monkeypatch.setenv("AUTOFUSE_DFX_FLAGS", f"--debug_dir={workdir / 'dbg'};--codegen_compile_debug=true")
    assert atc(capsys)[0] == 0
    fused = [n for n in load_om_graph("out/m.om").graph.nodes if n.provenance.get("pass")]
    files = sorted((workdir / "dbg").glob("*.pbtxt"))
    assert len(files) == len(fused)
    model = text_format.Parse(files[0].read_text(), ModelDef())
    types = [op.type for op in model.graph[0].op]
    assert "Data" in types and "NetOutput" in types and "Conv2D" in types
    seen = netron_open(files[0].with_suffix(".om"))
    drawn = [n["type"] for n in seen["graphs"][0]["nodes"]]
    assert drawn == [t for t in types if t != "Const"]


def test_fused_head_is_split_over_its_conv_not_its_tiny_output():
    """The head kernel's final output is [1, 10]; its conv stage is what the cores share."""
    import numpy as np
    from simulator.cost_model import load_chip
    from simulator.pricing import node_costs
    from helpers import fuse_model
    graph, _ = fuse_model(zoo.build("seed_testmodel", small=True))
    head = next(n for n in graph.nodes if n.op_type == "ConvPoolFCFusionOp")
    costs = node_costs(graph, load_chip("Ascend910"), lambda n: np.dtype(np.float16))
    assert head.outputs[0].desc.size <= 16
    assert costs[head.name].cores_used > 1
