"""atc-sim end to end: atc -> .om -> simulator, checked against onnxruntime, the cost model
and the .om's own task list; every bad input gets a coded error and no traceback."""
from __future__ import annotations

import csv
import json
import os
import pathlib
import re
import subprocess
import sys

import numpy as np
import onnx
import pytest

import cli as atc_cli
from atc_py import zoo
from codegen.om_import import load_om_graph
from simulator import cli as sim_cli
from simulator import runner
from simulator.compare import TOLERANCE, compare_one
from simulator.cost_model import load_chip
from simulator.pricing import node_costs

MODELS = tuple(zoo.MODELS)   # every zoo model, small configs
PRECISIONS = ("force_fp32", "force_fp16")
REPO = pathlib.Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """Small zoo models, each compiled by atc in both precisions: {(model, mode): (onnx, om)}."""
    root = tmp_path_factory.mktemp("sim")
    out = {}
    for name in MODELS:
        onnx_path = zoo.save(name, str(root), small=True)
        for mode in PRECISIONS:
            stem = str(root / f"{name}_{mode}")
            rc = atc_cli.main([f"--model={onnx_path}", "--framework=5", f"--output={stem}",
                               "--soc_version=Ascend910", f"--precision_mode={mode}"])
            assert rc == 0, (name, mode)
            out[(name, mode)] = (onnx_path, stem + ".om")
    return out


def sim(capsys, *argv):
    """Run atc-sim in-process; returns (exit code, stdout)."""
    rc = sim_cli.main([str(a) for a in argv])
    text = capsys.readouterr().out
    assert "Traceback" not in text
    return rc, text


# --------------------------------------------------------------------------- compare

@pytest.mark.parametrize("mode", PRECISIONS)
@pytest.mark.parametrize("name", MODELS)
def test_compare_passes(built, capsys, tmp_path, name, mode):
    onnx_path, om = built[(name, mode)]
    rc, text = sim(capsys, "--model", om, "--compare", onnx_path, "--output", tmp_path)
    assert rc == 0, text
    assert "[INFO] compare PASS" in text
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["compare"]["passed"] is True
    model = onnx.load(onnx_path)
    assert [c["reference_name"] for c in summary["compare"]["outputs"]] == [o.name for o in model.graph.output]
    for entry in summary["compare"]["outputs"]:
        expected = "fp32" if mode == "force_fp32" else "fp16"
        if entry["precision"].startswith("exact"):   # bool/int outputs (seed_addge)
            assert entry["precision"] == ("exact" if mode == "force_fp32" else "exact-after-fp16")
            assert entry["mismatch_fraction"] <= entry["tolerance"] and entry["result"] == "PASS"
            continue
        assert entry["precision"] == expected
        assert entry["tolerance"] == TOLERANCE[expected]
        assert entry["max_abs_error"] <= entry["tolerance"] * entry["scale"]
        assert entry["result"] == "PASS"


def test_compare_fails_against_a_different_model(built, capsys, tmp_path):
    """The check can fail: the same graph with one weight changed must not pass."""
    onnx_path, om = built[("seed_testmodel", "force_fp32")]
    model = onnx.load(onnx_path)
    biggest = max(model.graph.initializer, key=lambda t: np.prod(t.dims))
    array = onnx.numpy_helper.to_array(biggest) * 1.5
    biggest.CopyFrom(onnx.numpy_helper.from_array(array, biggest.name))
    other = tmp_path / "other.onnx"
    onnx.save(model, str(other))
    rc, text = sim(capsys, "--model", om, "--compare", other, "--output", tmp_path / "o")
    assert rc == sim_cli.EXIT_COMPARE_FAIL
    assert "compare FAIL" in text
    summary = json.loads((tmp_path / "o" / "summary.json").read_text())
    assert summary["compare"]["passed"] is False
    assert summary["compare"]["outputs"][0]["result"] == "FAIL"


def test_compare_one_rules():
    ref = np.array([1.0, -2.0, 0.5], np.float32)
    ok = compare_one("y", "y", ref + np.float32(1e-5), ref, "fp32")
    assert ok.passed and ok.scale == 2.0 and ok.max_abs_error == pytest.approx(1e-5, rel=1e-2)
    assert ok.max_rel_error == pytest.approx(ok.max_abs_error / 2.0)
    assert not compare_one("y", "y", ref + np.float32(1e-3), ref, "fp32").passed
    assert compare_one("y", "y", ref + np.float32(1e-3), ref, "fp16").passed
    nan = ref.copy()
    nan[1] = np.nan
    assert not compare_one("y", "y", nan, ref, "fp16").passed
    assert not compare_one("y", "y", ref[:2], ref, "fp32").passed
    ints = np.array([1, 2, 3], np.int64)
    assert compare_one("i", "i", ints, ints, "fp32").precision == "exact"
    assert compare_one("i", "i", ints, ints, "fp16").precision == "exact-after-fp16"
    assert not compare_one("i", "i", ints + 1, ints, "fp16").passed


# --------------------------------------------------------------------------- summary

def test_summary_and_performance_block(built, capsys, tmp_path):
    onnx_path, om = built[("resnet50", "force_fp16")]
    rc, text = sim(capsys, "--model", om, "--output", tmp_path, "--loop", 3, "--warmup_count", 0,
                   "--batchsize", 4)
    assert rc == 0, text
    summary = json.loads((tmp_path / "summary.json").read_text())
    loaded = load_om_graph(om)
    chip = load_chip("Ascend910")
    costs = node_costs(loaded.graph, chip, lambda n: loaded.compute_dtypes[n.name])
    expected_ms = sum(costs[name].total_us for name in loaded.tasks) / 1e3
    npu = summary["NPU_compute_time"]
    assert set(npu) == {"min", "max", "mean", "median", "percentile(99%)", "count"}
    assert npu["count"] == 3 and npu["min"] == npu["max"] == npu["mean"]
    assert npu["mean"] == pytest.approx(expected_ms, rel=1e-12)
    assert summary["throughput"] == pytest.approx(1000 * 4 / expected_ms)
    assert summary["host_wall_time"]["count"] == 3 and summary["host_wall_time"]["min"] > 0
    assert summary["simulated"] is True and summary["soc_version"] == "Ascend910"
    assert summary["tasks"] == len(loaded.tasks)
    assert summary["precision_mode"] == "force_fp16"
    # ais_bench's block, exactly
    m = re.search(r"^\[INFO\] -----------------Performance Summary------------------\n"
                  r"\[INFO\] NPU_compute_time \(ms\): min = (\S+), max = (\S+), mean = (\S+), median = (\S+), "
                  r"percentile\(99%\) = (\S+)\n"
                  r"\[INFO\] throughput 1000\*batchsize\.mean\(4\)/NPU_compute_time\.mean\((\S+)\): (\S+)\n"
                  r"\[INFO\] ------------------------------------------------------$", text, re.M)
    assert m, text
    assert float(m.group(3)) == pytest.approx(expected_ms) and float(m.group(7)) == pytest.approx(4000 / expected_ms)
    assert "SIMULATED" in text and "host wall time" in text
    out = np.load(tmp_path / "output.npy", allow_pickle=False)
    assert out.shape == tuple(summary["outputs"][0]["shape"])


def test_outfmt_bin_and_txt(built, capsys, tmp_path):
    _, om = built[("seed_testmodel", "force_fp32")]
    for fmt in ("NPY", "BIN", "TXT"):
        rc, _ = sim(capsys, "--model", om, "--output", tmp_path / fmt, "--outfmt", fmt.lower())
        assert rc == 0
    ref = np.load(tmp_path / "NPY" / "output.npy")
    np.testing.assert_array_equal(np.fromfile(tmp_path / "BIN" / "output.bin", ref.dtype).reshape(ref.shape), ref)
    np.testing.assert_allclose(np.loadtxt(tmp_path / "TXT" / "output.txt").reshape(ref.shape), ref, rtol=1e-6)


def test_input_files_and_folder_match_random(built, capsys, tmp_path):
    onnx_path, om = built[("bert_base", "force_fp32")]
    graph = load_om_graph(om).graph
    feeds = runner.random_inputs(graph, seed=3)
    assert np.all(feeds["attention_mask"] == 1)
    ids = feeds["input_ids"]
    assert ids.min() >= 0 and ids.max() < 10
    files = []
    folder = tmp_path / "in"
    folder.mkdir()
    for value in graph.inputs:
        path = folder / f"{runner.safe_name(value.name)}.npy"
        np.save(path, feeds[value.name])
        files.append(str(path))
    runs = {"random": ("--seed", 3), "files": ("--input", ",".join(files)), "folder": ("--input", folder)}
    outs = {}
    for key, extra in runs.items():
        rc, text = sim(capsys, "--model", om, "--output", tmp_path / key, "--compare", onnx_path, *extra)
        assert rc == 0, text
        outs[key] = np.load(tmp_path / key / "last_hidden_state.npy")
    np.testing.assert_array_equal(outs["random"], outs["files"])
    np.testing.assert_array_equal(outs["random"], outs["folder"])


def test_soc_version_override(built, capsys, tmp_path):
    _, om = built[("resnet50", "force_fp16")]
    times = {}
    for soc in ("Ascend910", "Ascend310P3"):
        rc, _ = sim(capsys, "--model", om, "--soc_version", soc, "--output", tmp_path / soc)
        assert rc == 0
        summary = json.loads((tmp_path / soc / "summary.json").read_text())
        assert summary["soc_version"] == soc
        times[soc] = summary["NPU_compute_time"]["mean"]
    assert times["Ascend910"] != times["Ascend310P3"]


def test_python_dash_m_entry_point(built, tmp_path):
    _, om = built[("seed_testmodel", "force_fp16")]
    env = dict(os.environ, PYTHONPATH=str(REPO))
    proc = subprocess.run([sys.executable, "-m", "simulator", "--model", om, "--loop", "2"], cwd=tmp_path,
                          env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "Performance Summary" in proc.stdout


# --------------------------------------------------------------------------- profile

OP_SUMMARY_HEAD = [
    "Device_id", "Model ID", "Task ID", "Stream ID", "Op Name", "OP Type", "OP State", "Task Type",
    "Task Start Time(us)", "Task Duration(us)", "Task Wait Time(us)", "Block Dim", "Mix Block Dim",
    "HF32 Eligible", "Input Shapes", "Input Data Types", "Input Formats", "Output Shapes",
    "Output Data Types", "Output Formats", "Context ID", "aicore_time(us)", "aic_mac_ratio",
    "aic_mte2_ratio", "aiv_time(us)", "aiv_vec_ratio", "aiv_mte2_time(us)", "aiv_mte3_time(us)"]
ROOFLINE_COLUMNS = [
    "Bound", "FLOPs", "Arithmetic Intensity(FLOP/B)", "Achieved GFLOPS", "Peak GFLOPS", "FLOPS Utilization",
    "GM Bytes", "DDR Bytes", "L2 Hit Bytes", "Achieved DDR GB/s", "Peak DDR GB/s", "DDR Utilization"]


@pytest.mark.parametrize("name", ["bert_base", "resnet50"])
def test_profile_matches_task_list(built, capsys, tmp_path, name):
    _, om = built[(name, "force_fp16")]
    rc, _ = sim(capsys, "--model", om, "--profile", tmp_path / "prof", "--output", tmp_path / "out")
    assert rc == 0
    loaded = load_om_graph(om)
    nodes = {n.name: n for n in loaded.graph.nodes}
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())

    with open(tmp_path / "prof" / "op_summary_0.csv", newline="") as f:
        reader = csv.DictReader(f)
        header = reader.fieldnames
        rows = list(reader)
    assert header == OP_SUMMARY_HEAD + ["Fusion Pass", "Origin Ops"] + ROOFLINE_COLUMNS
    assert [r["Op Name"] for r in rows] == loaded.tasks
    clock = 0.0
    for row in rows:
        node = nodes[row["Op Name"]]
        assert row["Task Type"] in ("AI_CORE", "AI_VECTOR")
        assert float(row["Task Start Time(us)"]) == pytest.approx(clock, abs=2e-3 * (1 + len(rows)))
        clock += float(row["Task Duration(us)"])
        assert row["Origin Ops"].split(";") == node.origin
        assert row["Fusion Pass"] == (node.provenance.get("pass") or "N/A")
        timed = "aicore_time(us)" if row["Task Type"] == "AI_CORE" else "aiv_time(us)"
        assert row[timed] == row["Task Duration(us)"]
        assert int(row["Block Dim"]) >= 1
        assert row["Input Data Types"].split(";")[0].startswith("DT_")
        # Roofline: the bound is one the cost model names; intensity is FLOPs per GM byte;
        # nothing beats its peak.
        assert row["Bound"] in ("cube", "vector", "memory", "launch")
        flops, gm = float(row["FLOPs"]), float(row["GM Bytes"])
        assert float(row["Arithmetic Intensity(FLOP/B)"]) == pytest.approx(flops / gm, rel=1e-3, abs=1e-3)
        assert float(row["Achieved GFLOPS"]) <= float(row["Peak GFLOPS"]) * (1 + 1e-6)
        assert float(row["Achieved DDR GB/s"]) <= float(row["Peak DDR GB/s"]) * (1 + 1e-3)
        assert float(row["DDR Bytes"]) <= gm + 1
    assert clock / 1e3 == pytest.approx(summary["NPU_compute_time"]["mean"], rel=1e-3)
    if name == "bert_base":
        assert any(r["Fusion Pass"] != "N/A" and ";" in r["Origin Ops"] for r in rows)

    events = json.loads((tmp_path / "prof" / "msprof_0.json").read_text())
    threads = {e["tid"]: e["args"]["name"] for e in events if e["ph"] == "M" and e["name"] == "thread_name"}
    assert {"cube", "vector", "MTE2", "MTE3"} <= set(threads.values())
    stream_tids = {tid for tid, n in threads.items() if n.startswith("Stream")}
    kernels = [e for e in events if e["ph"] == "X" and e["tid"] in stream_tids]
    assert [e["name"] for e in kernels] == loaded.tasks
    assert all(e["dur"] > 0 and "fusion_pass" in e["args"] and e["args"]["origin_ops"] for e in kernels)
    assert all(e["args"]["roofline"]["bound"] == e["args"]["bound"] for e in kernels)
    if name == "resnet50":   # a conv does more arithmetic per byte than a pooling does
        intensity = {}
        for e in kernels:
            op = e["args"]["op_type"]
            intensity[op] = max(intensity.get(op, 0.0), e["args"]["roofline"]["arithmetic_intensity"])
        assert intensity["ConvBNReluFusionOp"] > 4 * intensity["MaxPoolV3"]
    pipe_slices = [e for e in events if e["ph"] == "X" and e["tid"] not in stream_tids]
    assert pipe_slices and {e["args"]["kernel"] for e in pipe_slices} <= set(loaded.tasks)
    by_name = {e["name"]: e for e in kernels}
    for e in pipe_slices:   # every pipe slice lies inside its kernel's slice
        k = by_name[e["args"]["kernel"]]
        assert k["ts"] - 1e-6 <= e["ts"] and e["ts"] + e["dur"] <= k["ts"] + k["dur"] + 1e-6


# --------------------------------------------------------------------------- bad input

def _save_inputs(graph, folder, **override):
    folder.mkdir(exist_ok=True)
    feeds = runner.random_inputs(graph)
    feeds.update(override)
    paths = []
    for name, array in feeds.items():
        path = folder / f"{runner.safe_name(name)}.npy"
        np.save(path, array)
        paths.append(str(path))
    return paths


@pytest.fixture
def bert_om(built):
    return built[("bert_base", "force_fp32")][1]


def _expect_error(capsys, code, *argv):
    rc, text = sim(capsys, *argv)
    assert rc == sim_cli.EXIT_ERROR, text
    assert f"[ERROR] {code}" in text, text
    assert "Solution:" in text
    return text


def test_wrong_number_of_inputs(bert_om, capsys, tmp_path):
    paths = _save_inputs(load_om_graph(bert_om).graph, tmp_path / "in")
    text = _expect_error(capsys, "E10001", "--model", bert_om, "--input", paths[0])
    assert "1 file(s) given" in text and "2 input(s)" in text


def test_wrong_shape(bert_om, capsys, tmp_path):
    graph = load_om_graph(bert_om).graph
    paths = _save_inputs(graph, tmp_path / "in", input_ids=np.zeros((1, 3), np.int64))
    text = _expect_error(capsys, "E10001", "--model", bert_om, "--input", ",".join(paths))
    assert "shape [1, 3]" in text


def test_wrong_dtype(bert_om, capsys, tmp_path):
    graph = load_om_graph(bert_om).graph
    shape = graph.inputs[0].desc.shape
    paths = _save_inputs(graph, tmp_path / "in", input_ids=np.zeros(shape, np.int32))
    text = _expect_error(capsys, "E10001", "--model", bert_om, "--input", ",".join(paths))
    assert "dtype int32" in text


def test_missing_input_file(bert_om, capsys, tmp_path):
    text = _expect_error(capsys, "E10001", "--model", bert_om, "--input",
                         f"{tmp_path / 'no.npy'},{tmp_path / 'no2.npy'}")
    assert "does not exist" in text


class _Touch:
    """Unpickling this creates a file: proof that an input was (wrongly) unpickled."""

    def __init__(self, path):
        self.path = path

    def __reduce__(self):
        return (pathlib.Path.touch, (pathlib.Path(self.path),))


def test_pickled_npy_is_refused_not_unpickled(bert_om, capsys, tmp_path):
    marker = tmp_path / "unpickled"
    bad = tmp_path / "evil.npy"
    np.save(bad, np.array([_Touch(str(marker))], dtype=object), allow_pickle=True)
    text = _expect_error(capsys, "E10001", "--model", bert_om, "--input", f"{bad},{bad}")
    assert "pickle" in text
    assert not marker.exists()


def test_corrupt_and_missing_om(built, capsys, tmp_path):
    _, om = built[("seed_testmodel", "force_fp32")]
    data = pathlib.Path(om).read_bytes()
    truncated = tmp_path / "truncated.om"
    truncated.write_bytes(data[: len(data) // 2])
    flipped = tmp_path / "flipped.om"
    flipped.write_bytes(data[:200] + bytes(b ^ 0xFF for b in data[200:400]) + data[400:])
    for path in (truncated, flipped, tmp_path / "missing.om"):
        _expect_error(capsys, "E10003", "--model", path)
    _expect_error(capsys, "E13026", "--model", tmp_path)   # a folder is not a model file


def test_bad_flags(built, capsys, tmp_path):
    _, om = built[("seed_testmodel", "force_fp32")]
    _expect_error(capsys, "E10001", "--model", om, "--device", "zero")
    _expect_error(capsys, "E10001", "--model", om, "--outfmt", "CSV")
    _expect_error(capsys, "E10013", "--model", om, "--loop", "0")
    _expect_error(capsys, "E10001", "--model", om, "--no_such_flag", "1")
    _expect_error(capsys, "E10001", "--model", om, "--soc_version", "Ascend999")
    _expect_error(capsys, "E10001", "--input", "x.npy")                       # no --model
    _expect_error(capsys, "E10001", "--model", om, "--compare", tmp_path / "none.onnx")
    (tmp_path / "afile").write_text("x")
    _expect_error(capsys, "E10001", "--model", om, "--output", tmp_path / "afile")


def test_decisions_after_fp16_may_flip_on_a_small_fraction_only():
    ref = np.zeros(10000, dtype=bool)
    few = ref.copy()
    few[:5] = True                                   # 5e-4 of the elements flipped
    many = ref.copy()
    many[:50] = True                                 # 5e-3
    assert compare_one("y", "y", few, ref, "fp16").passed
    assert compare_one("y", "y", few, ref, "fp16").precision == "exact-after-fp16"
    assert not compare_one("y", "y", many, ref, "fp16").passed
    assert not compare_one("y", "y", few, ref, "fp32").passed      # after fp32 kernels: exact
