"""Issue 8, every failure coded: what escaped as E19999 (or ran for minutes, or was silently
accepted) now has a specific code.

Findings covered: 10 (E19999 for a deeply nested switch file, a non-UTF-8 node name, a NUL in
an external-data location, ASCEND_GLOBAL_LOG_LEVEL=², atc-sim --seed -1), 11 (a backtracking
--super_kernel_scope regex), 12 (--loop without bound, repeated flags accepted, --mode=1 JSON
not byte-stable across processes).
"""
from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from atc_py import zoo
from sandbox import ROOT, run_tool


@pytest.fixture(scope="module")
def seed(tmp_path_factory):
    root = tmp_path_factory.mktemp("seed")
    model = zoo.save("seed_testmodel", str(root), small=True)
    result = run_tool("atc", [f"--model={model}", "--framework=5", f"--output={root}/m", "--soc_version=Ascend910"],
                      str(root))
    assert result.verdict == "ok", result.text
    return model, str(root / "m.om")


def _atc(tmp_path, *args, env=None):
    return run_tool("atc", list(args), str(tmp_path), env=env)


def _compile_args(model, tmp_path, *extra):
    return [f"--model={model}", "--framework=5", f"--output={tmp_path}/o", "--soc_version=Ascend910", *extra]


def _coded(result, code):
    assert result.verdict == "coded" and code in result.codes, (result.verdict, result.text[-1500:])


# --------------------------------------------------------------------------- finding 10

def test_f10_deeply_nested_switch_file_is_e10001(seed, tmp_path):
    model, _ = seed
    (tmp_path / "deep.json").write_text('{"Switch": ' + "[" * 100000 + "]" * 100000 + "}")
    _coded(_atc(tmp_path, *_compile_args(model, tmp_path, f"--fusion_switch_file={tmp_path}/deep.json")), "E10001")


def test_f10_switch_file_that_is_a_fifo_is_refused(seed, tmp_path):
    model, _ = seed
    os.mkfifo(tmp_path / "fifo.json")
    _coded(_atc(tmp_path, *_compile_args(model, tmp_path, f"--fusion_switch_file={tmp_path}/fifo.json")), "E13026")


def test_f10_non_utf8_node_name_is_e16001(tmp_path):
    graph = helper.make_graph([helper.make_node("Relu", ["x"], ["y"], name="RELUNAME")], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])])
    data = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString()
    (tmp_path / "bad.onnx").write_bytes(data.replace(b"RELUNAME", b"RELU\xff\xfeME"))
    _coded(_atc(tmp_path, *_compile_args(tmp_path / "bad.onnx", tmp_path)), "E16001")


def test_f10_nul_in_an_external_data_location_is_e16003(tmp_path):
    weight = TensorProto(name="w", data_type=TensorProto.FLOAT, dims=[4, 4])
    weight.data_location = TensorProto.EXTERNAL
    for key, value in (("location", "w\0.bin"), ("offset", "0"), ("length", "64")):
        entry = weight.external_data.add()
        entry.key, entry.value = key, value
    graph = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["y"], name="mm")], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])], [weight])
    (tmp_path / "ext.onnx").write_bytes(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
                                        .SerializeToString())
    _coded(_atc(tmp_path, *_compile_args(tmp_path / "ext.onnx", tmp_path)), "E16003")


@pytest.mark.parametrize("value", ["²", "abc", "-1"])
def test_f10_log_level_environment_that_is_not_a_digit_is_e13024(seed, tmp_path, value):
    model, _ = seed
    _coded(_atc(tmp_path, *_compile_args(model, tmp_path), env={"ASCEND_GLOBAL_LOG_LEVEL": value}), "E13024")
    assert not os.path.exists(tmp_path / "o.om")


def test_f10_superscript_digits_elsewhere_are_coded(seed, tmp_path):
    model, _ = seed
    _coded(_atc(tmp_path, *_compile_args(model, tmp_path), env={"AUTOFUSE_FLAGS": "--max_fusion_size=²"}), "E10001")
    _coded(_atc(tmp_path, *_compile_args(model, tmp_path, "--out_nodes=x:²")), "E10001")


def test_f10_sim_negative_seed_is_e10013(seed, tmp_path):
    _, om = seed
    _coded(run_tool("atc-sim", ["--model", om, "--seed", "-1"], str(tmp_path)), "E10013")


# --------------------------------------------------------------------------- finding 11

def test_f11_backtracking_scope_regex_on_a_long_name_finishes_at_once(tmp_path):
    """`^(a+)+$` against 'aaa…a!' takes Python's re 2^n steps; RE2 is linear."""
    names = ["a" * 40 + "!", "a" * 41 + "!"]
    nodes = [helper.make_node("Relu", ["x"], ["h"], name=names[0]), helper.make_node("Sigmoid", ["h"], ["y"],
                                                                                     name=names[1])]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])])
    (tmp_path / "a.onnx").write_bytes(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
                                      .SerializeToString())
    result = _atc(tmp_path, *_compile_args(tmp_path / "a.onnx", tmp_path, "--super_kernel_scope=re:^(a+)+$"))
    assert result.verdict == "ok" and result.seconds < 20, (result.verdict, result.seconds, result.text[-800:])


@pytest.mark.parametrize("scope", ["re:(a)\\1", "re:(?<=a)b", "re:a{1000}{1000}"])
def test_f11_regexes_re2_cannot_run_are_e10001(seed, tmp_path, scope):
    model, _ = seed
    _coded(_atc(tmp_path, *_compile_args(model, tmp_path, f"--super_kernel_scope={scope}")), "E10001")


# --------------------------------------------------------------------------- finding 12

@pytest.mark.parametrize("flag", ["--loop", "--warmup_count"])
def test_f12_loop_is_bounded(seed, tmp_path, flag):
    _, om = seed
    result = run_tool("atc-sim", ["--model", om, flag, str(10 ** 12)], str(tmp_path))
    _coded(result, "E10013")
    assert result.seconds < 20


def test_f12_repeated_flags_are_refused(seed, tmp_path):
    model, om = seed
    _coded(_atc(tmp_path, *_compile_args(model, tmp_path, f"--output={tmp_path}/other")), "E10001")
    assert not os.path.exists(tmp_path / "o.om") and not os.path.exists(tmp_path / "other.om")
    _coded(run_tool("atc-sim", ["--model", om, "--loop", "2", "--loop", "3"], str(tmp_path)), "E10001")


def test_f12_mode1_json_is_byte_stable_across_processes(seed, tmp_path):
    _, om = seed
    blobs = []
    for hash_seed in ("1", "2", "3"):
        path = tmp_path / f"m{hash_seed}.json"
        proc = subprocess.run([sys.executable, os.path.join(ROOT, "cli.py"), "--mode=1", f"--om={om}",
                               f"--json={path}"], cwd=tmp_path, capture_output=True, text=True,
                              env={**os.environ, "PYTHONHASHSEED": hash_seed})
        assert proc.returncode == 0, proc.stdout + proc.stderr
        blobs.append(path.read_bytes())
    assert blobs[0] == blobs[1] == blobs[2]
