"""`atc` end to end: success paths, every mode, and every bad input a user can give."""
from __future__ import annotations

import json
import os

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import cli
from atc_py import zoo
from codegen.om_import import load_om_graph

from helpers import lower, netron_open


def run_atc(capsys, *args):
    rc = cli.main(list(args))
    out = capsys.readouterr()
    return rc, out.out + out.err


@pytest.fixture
def seed_model(tmp_path):
    return zoo.save("seed_testmodel", str(tmp_path), small=True)


def compile_args(model, out, *extra):
    return [f"--model={model}", "--framework=5", f"--output={out}", "--soc_version=Ascend910", *extra]


def compile_unfused(capsys, tmp_path, model):
    """Compile with every fusion switched off, so the .om mirrors the ONNX graph op for op."""
    switch = tmp_path / "off.json"
    switch.write_text(json.dumps({"Switch": {"GraphFusion": {"ALL": "off"}, "UBFusion": {"ALL": "off"}}}))
    out = tmp_path / "seed"
    assert run_atc(capsys, *compile_args(model, out, f"--fusion_switch_file={switch}"))[0] == 0
    return out


def assert_failed(rc, text, code, *paths):
    assert rc != 0
    assert cli.FAIL_LINE in text
    assert code in text, text
    assert "Traceback" not in text
    for path in paths:
        assert not os.path.exists(path), f"{path} was left behind"


# ------------------------------------------------------------------------ success paths

def test_compile_prints_atc_lines_and_writes_om(capsys, tmp_path, seed_model, monkeypatch):
    monkeypatch.chdir(tmp_path)
    out = tmp_path / "out" / "seed"
    rc, text = run_atc(capsys, *compile_args(seed_model, out))
    assert rc == 0, text
    assert text.splitlines()[0] == cli.START_LINE
    assert text.splitlines()[-1] == cli.SUCCESS_LINE
    assert (tmp_path / "out" / "seed.om").is_file()
    assert (tmp_path / "fusion_result.json").is_file()


def test_space_separated_values_work_too(capsys, tmp_path, seed_model, monkeypatch):
    monkeypatch.chdir(tmp_path)
    rc, text = run_atc(capsys, "--model", seed_model, "--framework", "5", "--output", str(tmp_path / "m"),
                       "--soc_version", "Ascend910B2")
    assert rc == 0, text
    assert (tmp_path / "m.om").is_file()


def test_same_input_same_bytes(capsys, tmp_path, seed_model, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert run_atc(capsys, *compile_args(seed_model, tmp_path / "a"))[0] == 0
    assert run_atc(capsys, *compile_args(seed_model, tmp_path / "b"))[0] == 0
    a, b = (tmp_path / "a.om").read_bytes(), (tmp_path / "b.om").read_bytes()
    # The model name in the header/ModelDef differs (a vs b); compare with equal names instead.
    assert run_atc(capsys, *compile_args(seed_model, tmp_path / "sub" / "a"))[0] == 0
    assert (tmp_path / "sub" / "a.om").read_bytes() == a
    assert len(a) == len(b)


def test_netron_opens_compiled_om_with_every_op_and_weight(capsys, tmp_path, seed_model, monkeypatch):
    monkeypatch.chdir(tmp_path)
    out = compile_unfused(capsys, tmp_path, seed_model)
    seen = netron_open(str(out) + ".om")
    nodes = seen["graphs"][0]["nodes"]
    loaded = load_om_graph(str(out) + ".om")
    kinds = [n["type"] for n in nodes]
    graph = loaded.graph
    from codegen.registry import kernel_of
    expected = [kernel_of(n.op_type).om_type for n in graph.nodes]
    assert [k for k in kinds if k not in ("Data", "Const", "NetOutput")] == expected
    assert "Data" in kinds and "NetOutput" in kinds
    # Weights Netron resolved equal the ONNX initializers byte for byte.
    inits = {i.name: numpy_helper.to_array(i) for i in onnx.load(seed_model).graph.initializer}
    resolved = {}
    for node in nodes:
        for arg in node["inputs"]:
            for value in arg["values"]:
                init = value.get("initializer")
                if init and init.get("data"):
                    resolved[value["name"].rsplit(":", 1)[0]] = bytes.fromhex(init["data"])
    conv_weights = [name for name in inits if name.endswith("conv.weight")]
    assert conv_weights
    for name in conv_weights:
        assert resolved[name] == inits[name].tobytes()
    # Typed outputs and edges: the Relu reads the BatchNorm's output.
    relu = next(n for n in nodes if n["type"] == "Relu")
    assert relu["inputs"][0]["values"][0]["name"].endswith("BatchNormalization:0")
    assert relu["outputs"][0]["values"][0]["type"]["dataType"] == "float32"


def test_mode1_json_roundtrip_ops_and_weights(capsys, tmp_path, seed_model, monkeypatch):
    monkeypatch.chdir(tmp_path)
    out = compile_unfused(capsys, tmp_path, seed_model)
    rc, text = run_atc(capsys, "--mode=1", f"--om={out}.om", f"--json={tmp_path / 'seed.json'}")
    assert rc == 0, text
    content = json.loads((tmp_path / "seed.json").read_text())
    assert content["header"]["magic"] == 0x444F4D49
    ops = content["model_def"]["graph"][0]["op"]
    compute_ops = [(op["name"], op["type"]) for op in ops if op["type"] not in ("Data", "Const", "NetOutput")]
    graph = lower(onnx.load(seed_model))
    from codegen.registry import kernel_of
    assert compute_ops == [(n.name, kernel_of(n.op_type).om_type) for n in graph.nodes]
    loaded = load_om_graph(f"{out}.om")
    consts = {v.name: v.const for v in loaded.graph.values() if v.is_const}
    for init in onnx.load(seed_model).graph.initializer:
        array = numpy_helper.to_array(init)
        assert consts[init.name].dtype == array.dtype
        assert consts[init.name].tobytes() == array.tobytes()


def test_mode6_shows_header_partitions_and_op_counts(capsys, tmp_path, seed_model, monkeypatch):
    monkeypatch.chdir(tmp_path)
    out = tmp_path / "seed"
    assert run_atc(capsys, *compile_args(seed_model, out))[0] == 0
    rc, text = run_atc(capsys, "--mode=6", f"--om={out}.om")
    assert rc == 0, text
    assert "Platform version: Ascend910" in text
    assert "MODEL_DEF" in text and "WEIGHTS_DATA" in text and "TASK_INFO" in text
    assert "NetOutput" in text and "Kernel tasks:" in text


def test_mode3_precheck_reports_every_node(capsys, tmp_path, seed_model):
    report = tmp_path / "check.json"
    rc, text = run_atc(capsys, f"--model={seed_model}", "--framework=5", "--mode=3", f"--check_report={report}")
    assert rc == 0, text
    content = json.loads(report.read_text())
    assert content["summary"]["total"] == len(onnx.load(seed_model).graph.node)
    assert all(node["supported"] for node in content["op_list"])


def test_mode3_precheck_names_unsupported_nodes(capsys, tmp_path):
    model = _single_op_model("Det", [2, 2], [])
    path = _save(model, tmp_path / "det.onnx")
    report = tmp_path / "check.json"
    rc, text = run_atc(capsys, f"--model={path}", "--framework=5", "--mode=3", f"--check_report={report}")
    assert rc != 0 and "E16002" in text
    content = json.loads(report.read_text())
    assert content["op_list"][0] == {"name": "n0", "op_type": "Det", "supported": False,
                                     "reason": "op type [Det] has no kernel in atc_py"}


def test_out_nodes_cuts_the_graph(capsys, tmp_path, seed_model, monkeypatch):
    monkeypatch.chdir(tmp_path)
    first_relu = next(n.name for n in onnx.load(seed_model).graph.node if n.op_type == "Relu")
    out = tmp_path / "cut"
    rc, text = run_atc(capsys, *compile_args(seed_model, out, f"--out_nodes={first_relu}:0"))
    assert rc == 0, text
    graph = load_om_graph(f"{out}.om").graph
    assert len(graph.outputs) == 1 and graph.outputs[0].desc.shape[1] == 8
    assert "Gemm" not in [n.op_type for n in graph.nodes]


# ------------------------------------------------------------------------ bad input

def _single_op_model(op_type, shape, attrs_inputs, opset=17, **attrs):
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    node = helper.make_node(op_type, ["x"], ["y"], name="n0", **attrs)
    graph = helper.make_graph([node], "g", [x], [y])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def _save(model, path):
    onnx.save(model, str(path))
    return str(path)


def test_missing_model_file(capsys, tmp_path):
    out = tmp_path / "y"
    rc, text = run_atc(capsys, *compile_args(tmp_path / "nope.onnx", out))
    assert_failed(rc, text, "E10001", f"{out}.om")
    assert "does not exist" in text


def test_empty_model_value(capsys, tmp_path):
    rc, text = run_atc(capsys, "--model=", "--framework=5", f"--output={tmp_path / 'y'}", "--soc_version=Ascend910")
    assert_failed(rc, text, "E10004")


def test_non_onnx_bytes(capsys, tmp_path):
    bad = tmp_path / "bad.onnx"
    bad.write_bytes(b"\x00\xffthis is not a protobuf\xff" * 10)
    out = tmp_path / "y"
    rc, text = run_atc(capsys, *compile_args(bad, out))
    assert_failed(rc, text, "E16001", f"{out}.om")


def test_truncated_onnx(capsys, tmp_path, seed_model):
    data = open(seed_model, "rb").read()
    cut = tmp_path / "cut.onnx"
    cut.write_bytes(data[: len(data) // 2])
    out = tmp_path / "y"
    rc, text = run_atc(capsys, *compile_args(cut, out))
    assert_failed(rc, text, "E16001", f"{out}.om")


def test_cyclic_graph(capsys, tmp_path):
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])
    y = helper.make_tensor_value_info("b", TensorProto.FLOAT, [2])
    nodes = [helper.make_node("Add", ["x", "b"], ["a"], name="add_a"),
             helper.make_node("Relu", ["a"], ["b"], name="relu_b")]
    model = helper.make_model(helper.make_graph(nodes, "g", [x], [y]),
                              opset_imports=[helper.make_opsetid("", 17)])
    out = tmp_path / "y"
    rc, text = run_atc(capsys, *compile_args(_save(model, tmp_path / "cyc.onnx"), out))
    assert_failed(rc, text, "E16005", f"{out}.om")
    assert "cycle" in text


def test_unsupported_op_names_node_and_type(capsys, tmp_path):
    out = tmp_path / "y"
    path = _save(_single_op_model("Det", [2, 2], []), tmp_path / "det.onnx")
    rc, text = run_atc(capsys, *compile_args(path, out))
    assert_failed(rc, text, "E16002", f"{out}.om")
    assert "[n0]" in text and "[Det]" in text


@pytest.mark.parametrize("framework", ["3", "0", "1"])
def test_other_frameworks_refused(capsys, tmp_path, seed_model, framework):
    out = tmp_path / "y"
    rc, text = run_atc(capsys, f"--model={seed_model}", f"--framework={framework}", f"--output={out}",
                       "--soc_version=Ascend910")
    assert_failed(rc, text, "E10001", f"{out}.om")
    assert "only 5(Onnx) is supported" in text


def test_missing_framework(capsys, tmp_path, seed_model):
    rc, text = run_atc(capsys, f"--model={seed_model}", f"--output={tmp_path / 'y'}", "--soc_version=Ascend910")
    assert_failed(rc, text, "E10007")


def test_unknown_soc_lists_valid_ones(capsys, tmp_path, seed_model):
    out = tmp_path / "y"
    rc, text = run_atc(capsys, f"--model={seed_model}", "--framework=5", f"--output={out}",
                       "--soc_version=Ascend999")
    assert_failed(rc, text, "E10001", f"{out}.om")
    for soc in ("Ascend910", "Ascend910B2", "Ascend310P3"):
        assert soc in text


@pytest.mark.parametrize("shape, code", [
    ("input", "E10002"),                  # no colon
    ("input:1,a,16,16", "E10002"),        # not an integer
    ("nosuch:1,3,16,16", "E10016"),       # unknown input name
    ("input:1,3,16", "E10011"),           # wrong rank
    ("input:2,3,16,16", "E10011"),        # conflicts with a fixed dim
    ("input:1,0,16,16", "E10011"),        # zero dim
])
def test_bad_input_shape(capsys, tmp_path, seed_model, shape, code):
    name = onnx.load(seed_model).graph.input[0].name
    out = tmp_path / "y"
    rc, text = run_atc(capsys, *compile_args(seed_model, out, f"--input_shape={shape.replace('input', name)}"))
    assert_failed(rc, text, code, f"{out}.om")


def test_dynamic_dim_without_input_shape_says_how_to_fix(capsys, tmp_path):
    model = _single_op_model("Relu", ["batch", 4], [])
    path = _save(model, tmp_path / "dyn.onnx")
    out = tmp_path / "y"
    rc, text = run_atc(capsys, *compile_args(path, out))
    assert_failed(rc, text, "E10001", f"{out}.om")
    assert "[x]" in text and '--input_shape="x:1,4"' in text
    rc, text = run_atc(capsys, *compile_args(path, out, "--input_shape=x:3,4"))
    assert rc == 0, text
    assert load_om_graph(f"{out}.om").graph.inputs[0].desc.shape == (3, 4)


def test_external_data_inside_folder_loads(capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    model = _matmul_model()
    onnx.save(model, str(tmp_path / "m.onnx"), save_as_external_data=True, all_tensors_to_one_file=True,
              location="m.data", size_threshold=0)
    rc, text = run_atc(capsys, *compile_args(tmp_path / "m.onnx", tmp_path / "m"))
    assert rc == 0, text
    consts = [v.const for v in load_om_graph(str(tmp_path / "m.om")).graph.values() if v.is_const]
    assert any(np.array_equal(c, np.arange(12, dtype=np.float32).reshape(4, 3)) for c in consts)


def test_external_data_escaping_the_folder_is_refused(capsys, tmp_path):
    model = _matmul_model()
    sub = tmp_path / "sub"
    sub.mkdir()
    onnx.save(model, str(sub / "m.onnx"), save_as_external_data=True, all_tensors_to_one_file=True,
              location="m.data", size_threshold=0)
    os.replace(sub / "m.data", tmp_path / "m.data")
    loaded = onnx.load(str(sub / "m.onnx"), load_external_data=False)
    for init in loaded.graph.initializer:
        for entry in init.external_data:
            if entry.key == "location":
                entry.value = "../m.data"
    onnx.save(loaded, str(sub / "m.onnx"))
    out = tmp_path / "y"
    rc, text = run_atc(capsys, *compile_args(sub / "m.onnx", out))
    assert_failed(rc, text, "E16003", f"{out}.om")
    assert "outside" in text


def _matmul_model():
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])
    w = numpy_helper.from_array(np.arange(12, dtype=np.float32).reshape(4, 3), "w")
    node = helper.make_node("MatMul", ["x", "w"], ["y"], name="mm")
    return helper.make_model(helper.make_graph([node], "g", [x], [y], [w]),
                             opset_imports=[helper.make_opsetid("", 17)])


@pytest.mark.parametrize("damage", ["truncate", "flip_payload", "bad_magic"])
def test_corrupt_om_to_mode1(capsys, tmp_path, seed_model, monkeypatch, damage):
    monkeypatch.chdir(tmp_path)
    out = tmp_path / "seed"
    assert run_atc(capsys, *compile_args(seed_model, out))[0] == 0
    data = bytearray((tmp_path / "seed.om").read_bytes())
    if damage == "truncate":
        data = data[: len(data) // 2]
    elif damage == "flip_payload":
        data[len(data) // 2] ^= 0xFF
    else:
        data[0:4] = b"XXXX"
    bad = tmp_path / "bad.om"
    bad.write_bytes(bytes(data))
    js = tmp_path / "bad.json"
    rc, text = run_atc(capsys, "--mode=1", f"--om={bad}", f"--json={js}")
    assert_failed(rc, text, "E10003", str(js))


def test_bad_mode_and_log_values(capsys, tmp_path, seed_model):
    rc, text = run_atc(capsys, *compile_args(seed_model, tmp_path / "y", "--mode=9"))
    assert_failed(rc, text, "E10001")
    rc, text = run_atc(capsys, *compile_args(seed_model, tmp_path / "y", "--log=loud"))
    assert_failed(rc, text, "E10010")


def test_unknown_option_is_an_error(capsys, tmp_path, seed_model):
    rc, text = run_atc(capsys, *compile_args(seed_model, tmp_path / "y", "--no_such_flag=1"))
    assert_failed(rc, text, "E10001", str(tmp_path / "y.om"))


def test_output_that_is_a_directory(capsys, tmp_path, seed_model):
    rc, text = run_atc(capsys, *compile_args(seed_model, str(tmp_path) + "/"))
    assert_failed(rc, text, "E10022")


def test_help(capsys):
    rc = cli.main(["--help"])
    text = capsys.readouterr().out
    assert rc == 0 and "--soc_version" in text and "--framework" in text


def test_unwritable_output_is_a_clear_error_and_leaves_nothing(capsys, tmp_path, seed_model, monkeypatch):
    monkeypatch.chdir(tmp_path)
    blocker = tmp_path / "file_not_dir"
    blocker.write_text("x")
    rc, text = run_atc(capsys, *compile_args(seed_model, blocker / "sub" / "y"))
    assert_failed(rc, text, "E13004")
    assert "Failed to write" in text


def test_failing_debug_dump_removes_the_om(capsys, tmp_path, seed_model, monkeypatch):
    monkeypatch.chdir(tmp_path)
    blocker = tmp_path / "dbg"
    blocker.write_text("a file where the debug folder should be")
    monkeypatch.setenv("AUTOFUSE_DFX_FLAGS", f"--debug_dir={blocker}")
    out = tmp_path / "y"
    rc, text = run_atc(capsys, *compile_args(_grouped_conv_path(tmp_path), out))
    assert_failed(rc, text, "E13004", f"{out}.om", tmp_path / "fusion_result.json")


def _grouped_conv_path(tmp_path):
    """A model whose conv has group=2, so the ConvBNReLU pass records a miss to dump."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4, 8, 8])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    w = numpy_helper.from_array(np.ones((4, 2, 3, 3), np.float32), "w")
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], group=2, pads=[1, 1, 1, 1], name="conv"),
             helper.make_node("Relu", ["c"], ["y"], name="relu")]
    model = helper.make_model(helper.make_graph(nodes, "g", [x], [y], [w]),
                              opset_imports=[helper.make_opsetid("", 17)])
    return _save(model, tmp_path / "g2.onnx")


def test_out_nodes_named_twice_is_refused(capsys, tmp_path, seed_model):
    relu = next(n.name for n in onnx.load(seed_model).graph.node if n.op_type == "Relu")
    out = tmp_path / "y"
    rc, text = run_atc(capsys, *compile_args(seed_model, out, f"--out_nodes={relu}:0;{relu}:0"))
    assert_failed(rc, text, "E10001", f"{out}.om")
    assert "named twice" in text


@pytest.mark.parametrize("name", ["efficientnet_b4", "bert_base", "gpt2"])
def test_builds_are_deterministic_across_processes(tmp_path, name):
    """Same input, same bytes: autofuse's JSON sub-graphs, MHA packing and the weights layout
    included.  Two processes with different hash seeds, so no set or dict order can leak in."""
    import subprocess
    import sys
    model = zoo.save(name, str(tmp_path), small=True)
    blobs = []
    for seed in ("1", "2"):
        out = tmp_path / seed / "m"
        env = {**os.environ, "PYTHONHASHSEED": seed}
        proc = subprocess.run([sys.executable, os.path.join(os.path.dirname(cli.__file__), "cli.py"),
                               *compile_args(model, out)], cwd=tmp_path, env=env, capture_output=True, text=True)
        assert proc.returncode == 0, proc.stdout + proc.stderr
        blobs.append((tmp_path / seed / "m.om").read_bytes())
    assert blobs[0] == blobs[1]


def test_folders_made_for_a_failed_build_are_removed(capsys, tmp_path, seed_model, monkeypatch):
    monkeypatch.chdir(tmp_path)
    blocker = tmp_path / "dbg"
    blocker.write_text("a file where the debug folder should be")
    monkeypatch.setenv("AUTOFUSE_DFX_FLAGS", f"--debug_dir={blocker}")
    out = tmp_path / "new" / "deeper" / "y"
    rc, text = run_atc(capsys, *compile_args(_grouped_conv_path(tmp_path), out))
    assert_failed(rc, text, "E13004")
    assert not (tmp_path / "new").exists()
