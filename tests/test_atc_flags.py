"""Huawei's atc flags as users paste them: gflags forms, tuning flags, input formats, precision
aliases, --output_type and --input_fp16_nodes (checked numerically against onnxruntime),
and the fusion switch file's line form."""
from __future__ import annotations

import json
import os

import numpy as np
import pytest

import cli
from codegen.om_import import load_om_graph
from simulator import cli as sim_cli

import models_small
from helpers import run_ort


def atc(capsys, *args):
    rc = cli.main([str(a) for a in args])
    out = capsys.readouterr()
    text = out.out + out.err
    assert "Traceback" not in text
    return rc, text


def base(model, out, *extra, soc="Ascend910"):
    return [f"--model={model}", "--framework=5", f"--output={out}", f"--soc_version={soc}", *extra]


@pytest.fixture
def work(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    for var in ("GE_FUSION_DISABLE_LIST", "ASCEND_GLOBAL_LOG_LEVEL", "GE_GRAPH_FUSION_LOG", "AUTOFUSE_DFX_FLAGS"):
        monkeypatch.delenv(var, raising=False)
    return tmp_path


@pytest.fixture
def mlp(work):
    return models_small.save(models_small.mlp(), work / "mlp.onnx")


@pytest.fixture
def two(work):
    return models_small.save(models_small.two_inputs(), work / "two.onnx")


def run_sim(capsys, *args):
    rc = sim_cli.main([str(a) for a in args])
    text = capsys.readouterr().out
    assert "Traceback" not in text
    return rc, text


def failed(rc, text, code, *paths):
    assert rc != 0, text
    assert cli.FAIL_LINE in text and code in text, text
    for path in paths:
        assert not os.path.exists(path), f"{path} left behind"


# --------------------------------------------------------------------------- gflags forms

def test_single_dash_flags_compile_like_double_dash(work, capsys, mlp):
    rc, text = atc(capsys, f"-model={mlp}", "-framework=5", "-output", work / "a", "-soc_version=Ascend910",
                   "-log", "error")
    assert rc == 0, text
    assert (work / "a.om").is_file()
    assert (work / "a.om").read_bytes() == (work / "a.om").read_bytes()
    rc, text = atc(capsys, *base(mlp, work / "a"))
    assert rc == 0


def test_single_dash_rewrites_names_not_negative_values():
    assert cli.gflags_argv(["-model=x", "-input_shape", "-1,3", "--log=info", "-h"]) == \
        ["--model=x", "--input_shape", "-1,3", "--log=info", "-h"]


def test_single_dash_unknown_flag_names_the_flag(work, capsys, mlp):
    rc, text = atc(capsys, *base(mlp, work / "a"), "-no_such_flag=1")
    failed(rc, text, "E10001", work / "a.om")
    assert "--no_such_flag" in text


@pytest.mark.parametrize("flag", ["--auto_tune_mode=RL,GA", "--buffer_optimize=l2_optimize",
                                  "--disable_reuse_memory=1", "--op_compiler_cache_mode=enable",
                                  "--enable_single_stream=true", "--op_debug_level=0"])
def test_tuning_flags_are_accepted_with_a_no_effect_warning(work, capsys, mlp, flag):
    rc, text = atc(capsys, *base(mlp, work / "m"), flag)
    assert rc == 0, text
    assert "W10100" in text and flag.split("=")[0] in text


def test_tuning_flag_with_a_value_atc_refuses_is_e10001(work, capsys, mlp):
    rc, text = atc(capsys, *base(mlp, work / "m"), "--buffer_optimize=l9_optimize")
    failed(rc, text, "E10001", work / "m.om")
    assert "l2_optimize" in text


# --------------------------------------------------------------------------- input formats, modes

@pytest.mark.parametrize("fmt,rank", [("NHWC", 4), ("NCHW", 4), ("ND", 4), ("NCDHW", 5), ("NDHWC", 5)])
def test_input_format_is_recorded_on_inputs_of_its_rank(work, capsys, fmt, rank):
    from onnx import TensorProto, helper
    shape = [1, 2, 3, 4, 5][:rank]
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, shape)
    model = helper.make_model(helper.make_graph([helper.make_node("Relu", ["x"], ["y"], name="r")], "g", [x], [y]),
                              opset_imports=[helper.make_opsetid("", 17)])
    path = models_small.save(model, work / "r.onnx")
    rc, text = atc(capsys, *base(path, work / "r"), f"--input_format={fmt}")
    assert rc == 0, text
    assert load_om_graph(str(work / "r.om")).graph.inputs[0].desc.format == fmt


def test_unknown_input_format_is_refused(work, capsys, mlp):
    rc, text = atc(capsys, *base(mlp, work / "m"), "--input_format=NC1HWC0")
    failed(rc, text, "E10001", work / "m.om")


@pytest.mark.parametrize("flag,recorded", [("--precision_mode=allow_mix_precision_fp16", "allow_mix_precision"),
                                           ("--precision_mode_v2=origin", "must_keep_origin_dtype"),
                                           ("--precision_mode_v2=fp16", "force_fp16"),
                                           ("--precision_mode_v2=mixed_float16", "allow_mix_precision")])
def test_precision_mode_spellings(work, capsys, mlp, flag, recorded):
    rc, text = atc(capsys, *base(mlp, work / "m"), flag)
    assert rc == 0, text
    assert load_om_graph(str(work / "m.om")).precision_mode == recorded


def test_precision_mode_and_v2_together_are_refused(work, capsys, mlp):
    rc, text = atc(capsys, *base(mlp, work / "m"), "--precision_mode=force_fp32", "--precision_mode_v2=fp16")
    failed(rc, text, "E10001", work / "m.om")


# --------------------------------------------------------------------------- --output_type

def _sim_outputs(capsys, om, out, *extra):
    rc, text = run_sim(capsys, "--model", om, "--output", out, *extra)
    assert rc == 0, text
    summary = json.loads((out / "summary.json").read_text())
    return {e["name"]: np.load(e["file"]) for e in summary["outputs"]}


def test_output_type_fp16_casts_every_float_output(work, capsys, two):
    rc, text = atc(capsys, *base(two, work / "t"), "--output_type=FP16", "--precision_mode=force_fp32")
    assert rc == 0, text
    loaded = load_om_graph(str(work / "t.om"))
    assert [str(v.desc.dtype) for v in loaded.graph.outputs] == ["float16", "float16"]
    assert [v.name for v in loaded.graph.outputs] == ["y", "z"]
    feeds = {n: np.random.default_rng(i).standard_normal((2, 8)).astype(np.float32) for i, n in enumerate("ab")}
    for n, a in feeds.items():
        np.save(work / f"{n}.npy", a)
    got = _sim_outputs(capsys, work / "t.om", work / "o", "--input", f"{work / 'a.npy'},{work / 'b.npy'}")
    ref = run_ort(models_small.two_inputs(), feeds)
    for name in ("y", "z"):
        assert got[name].dtype == np.float16
        np.testing.assert_array_equal(got[name], ref[name].astype(np.float16))   # fp32 compute, one rounding


def test_output_type_per_node_with_integer_types(work, capsys, two):
    rc, text = atc(capsys, *base(two, work / "t"), '--output_type="relu:0:UINT8;mul:0:INT32"',
                   "--precision_mode=force_fp32")
    assert rc == 0, text
    loaded = load_om_graph(str(work / "t.om"))
    assert [str(v.desc.dtype) for v in loaded.graph.outputs] == ["uint8", "int32"]
    feeds = {n: (np.random.default_rng(i).standard_normal((2, 8)) * 4).astype(np.float32) for i, n in enumerate("ab")}
    for n, a in feeds.items():
        np.save(work / f"{n}.npy", a)
    got = _sim_outputs(capsys, work / "t.om", work / "o", "--input", f"{work / 'a.npy'},{work / 'b.npy'}")
    ref = run_ort(models_small.two_inputs(), feeds)
    np.testing.assert_array_equal(got["y"], ref["y"].astype(np.uint8))
    np.testing.assert_array_equal(got["z"], ref["z"].astype(np.int32))


def test_output_type_fp32_on_fp16_kernels_returns_fp32(work, capsys, mlp):
    rc, text = atc(capsys, *base(mlp, work / "m"), "--output_type=FP32")
    assert rc == 0, text
    loaded = load_om_graph(str(work / "m.om"))
    assert str(loaded.graph.outputs[0].desc.dtype) == "float32"


@pytest.mark.parametrize("spec,code,words", [
    ("FP8", "E10001", "FP32"), ("BF16", "E10001", "FP32"), ("nosuch:0:FP16", "E10016", "nosuch"),
    ("relu:3:FP16", "E10016", "index 3"), ("add:0:FP16", "E10001", "--out_nodes"), ("relu:FP16", "E10001", "node_name"),
    ("relu:0:FP16;relu:0:FP32", "E10001", "twice")])
def test_output_type_refusals(work, capsys, two, spec, code, words):
    rc, text = atc(capsys, *base(two, work / "t"), f"--output_type={spec}")
    failed(rc, text, code, work / "t.om")
    assert words in text


def test_output_type_names_an_inner_node_together_with_out_nodes(work, capsys, two):
    rc, text = atc(capsys, *base(two, work / "t"), "--out_nodes=add:0", "--output_type=add:0:FP16")
    assert rc == 0, text
    loaded = load_om_graph(str(work / "t.om"))
    assert [str(v.desc.dtype) for v in loaded.graph.outputs] == ["float16"]


# --------------------------------------------------------------------------- --input_fp16_nodes

def test_input_fp16_nodes_make_the_input_fp16_and_match_onnxruntime(work, capsys, two):
    rc, text = atc(capsys, *base(two, work / "t"), '--input_fp16_nodes="a"', "--precision_mode=force_fp32")
    assert rc == 0, text
    loaded = load_om_graph(str(work / "t.om"))
    assert [(v.name, str(v.desc.dtype)) for v in loaded.graph.inputs] == [("a", "float16"), ("b", "float32")]
    a = np.random.default_rng(0).standard_normal((2, 8)).astype(np.float16)
    b = np.random.default_rng(1).standard_normal((2, 8)).astype(np.float32)
    np.save(work / "a.npy", a)
    np.save(work / "b.npy", b)
    got = _sim_outputs(capsys, work / "t.om", work / "o", "--input", f"{work / 'a.npy'},{work / 'b.npy'}")
    ref = run_ort(models_small.two_inputs(), {"a": a.astype(np.float32), "b": b})
    np.testing.assert_allclose(got["y"], ref["y"], rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(got["z"], ref["z"], rtol=1e-6, atol=1e-6)
    rc, text = run_sim(capsys, "--model", work / "t.om", "--compare", two)   # random fp16 a, cast for ORT
    assert rc == 0 and "compare PASS" in text, text


@pytest.mark.parametrize("spec,code", [("nosuch", "E10016"), ("a;a", "E10001"), (";", "E10001")])
def test_input_fp16_nodes_refusals(work, capsys, two, spec, code):
    rc, text = atc(capsys, *base(two, work / "t"), f"--input_fp16_nodes={spec}")
    failed(rc, text, code, work / "t.om")


# --------------------------------------------------------------------------- switch file forms

def _fused(om):
    return [n.op_type for n in load_om_graph(str(om)).graph.nodes]


def test_switch_file_line_form_switches_a_pass_off(work, capsys, mlp):
    switch = work / "fusion_switch.cfg"
    switch.write_text("# one pass a line, as Huawei's example\nMatMulBiasActFusionPass:off\n\n")
    rc, text = atc(capsys, *base(mlp, work / "m"), f"--fusion_switch_file={switch}")
    assert rc == 0, text
    assert not any(t.startswith("MatMulBias") for t in _fused(work / "m.om"))


def test_switch_file_maps_huawei_pass_names_and_warns_on_the_rest(work, capsys, mlp):
    switch = work / "fusion_switch.cfg"
    switch.write_text("RequantFusionPass:off\nTbeConvDequantQuantFusionPass:off\nMatMulBiasAddFusionPass:off\n")
    rc, text = atc(capsys, *base(mlp, work / "m"), f"--fusion_switch_file={switch}", "--log=info")
    assert rc == 0, text
    assert not any(t.startswith("MatMulBias") for t in _fused(work / "m.om"))
    assert "[MatMulBiasAddFusionPass] is taken as [MatMulBiasActFusionPass]" in text
    assert text.count("W10101") == 2 and "RequantFusionPass" in text and "no equivalent" in text


def test_switch_file_line_form_all_off(work, capsys, mlp):
    switch = work / "off.cfg"
    switch.write_text("ALL:off\n")
    rc, text = atc(capsys, *base(mlp, work / "m"), f"--fusion_switch_file={switch}")
    assert rc == 0, text
    assert not any(t.endswith("FusionOp") for t in _fused(work / "m.om"))


@pytest.mark.parametrize("content,words", [("MatMulBiasActFusionPass:off\nnot a switch\n", "line 2"),
                                           ("MatMulBiasActFusionPass:maybe\n", "line 1"),
                                           ("{\"Switch\": ", "not valid JSON")])
def test_bad_switch_file_lines_name_the_line(work, capsys, mlp, content, words):
    switch = work / "s.cfg"
    switch.write_text(content)
    rc, text = atc(capsys, *base(mlp, work / "m"), f"--fusion_switch_file={switch}")
    failed(rc, text, "E10001", work / "m.om")
    assert words in text
