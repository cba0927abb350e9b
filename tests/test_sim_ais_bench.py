"""atc-sim takes ais_bench's command lines: dataset folders, --output_dirname and its file
names, .bin inputs with the byte-size check, --pure_data_type, --device lists, --debug,
--display_all_summary, --profiler with the op_statistic CSV, and the chip-mismatch warning."""
from __future__ import annotations

import csv
import json

import numpy as np
import pytest

import models_small
from helpers import run_ort
from test_atc_flags import atc, base, run_sim, work  # noqa: F401  (fixtures)


@pytest.fixture
def two_om(work, capsys):
    """The two-input model compiled in fp32: outputs y = relu(a + b), z = a * b."""
    path = models_small.save(models_small.two_inputs(), work / "two.onnx")
    rc, text = atc(capsys, *base(path, work / "two"), "--precision_mode=force_fp32")
    assert rc == 0, text
    return work / "two.om"


def dataset(work, n: int, fmt: str = "bin"):
    """Folders a/ and b/ with n files each (named like ais_bench users' datasets)."""
    rng = np.random.default_rng(5)
    feeds = []
    for k in range(n):
        feed = {}
        for name in "ab":
            folder = work / name
            folder.mkdir(exist_ok=True)
            array = rng.standard_normal((2, 8)).astype(np.float32)
            if fmt == "bin":
                array.tofile(folder / f"sample_{k:03d}.bin")
            else:
                np.save(folder / f"sample_{k:03d}.npy", array)
            feed[name] = array
        feeds.append(feed)
    return feeds


def test_dataset_mode_one_folder_per_input_n_files_n_inferences(work, capsys, two_om):
    feeds = dataset(work, 3)
    rc, text = run_sim(capsys, "--model", two_om, "--input", f"{work / 'a'},{work / 'b'}", "--output", work / "out",
                       "--output_dirname", "result", "--outfmt", "NPY")
    assert rc == 0, text
    assert "(3 inferences)" in text
    files = sorted(p.name for p in (work / "out" / "result").iterdir())
    assert files == [f"sample_{k:03d}_{j}.npy" for k in range(3) for j in range(2)]
    for k, feed in enumerate(feeds):
        ref = run_ort(models_small.two_inputs(), feed)
        np.testing.assert_allclose(np.load(work / "out" / "result" / f"sample_{k:03d}_0.npy"), ref["y"], rtol=1e-6)
        np.testing.assert_allclose(np.load(work / "out" / "result" / f"sample_{k:03d}_1.npy"), ref["z"], rtol=1e-6)
    summary = json.loads((work / "out" / "result_summary.json").read_text())
    assert summary["inferences"] == 3 and summary["NPU_compute_time"]["count"] == 3


def test_dataset_mode_shows_a_progress_bar(work, capsys, two_om):
    dataset(work, 4)
    rc = __import__("simulator.cli", fromlist=["main"]).main(
        ["--model", str(two_om), "--input", f"{work / 'a'},{work / 'b'}"])
    err = capsys.readouterr().err
    assert rc == 0
    assert "4/4" in err and "100%" in err


def test_one_input_model_several_files_are_several_inferences(work, capsys):
    path = models_small.save(models_small.small_cnn(8, 8), work / "cnn.onnx")
    assert atc(capsys, *base(path, work / "cnn"), "--precision_mode=force_fp32")[0] == 0
    rng = np.random.default_rng(0)
    paths = []
    for k in range(2):
        rng.standard_normal((1, 3, 8, 8)).astype(np.float32).tofile(work / f"img{k}.bin")
        paths.append(str(work / f"img{k}.bin"))
    rc, text = run_sim(capsys, "--model", work / "cnn.om", "--input", ",".join(paths), "--output", work / "o",
                       "--outfmt", "BIN")
    assert rc == 0, text
    assert sorted(p.name for p in (work / "o").glob("*.bin")) == ["img0_0.bin", "img1_0.bin"]


def test_dataset_folders_of_unequal_length_are_refused(work, capsys, two_om):
    dataset(work, 2)
    (work / "a" / "sample_002.bin").write_bytes(np.zeros(16, np.float32).tobytes())
    rc, text = run_sim(capsys, "--model", two_om, "--input", f"{work / 'a'},{work / 'b'}")
    assert rc == 1 and "E10001" in text and "[3, 2]" in text


def test_bin_input_of_the_wrong_size_names_the_sizes(work, capsys, two_om):
    dataset(work, 1)
    (work / "a" / "sample_000.bin").write_bytes(b"\0" * 60)
    rc, text = run_sim(capsys, "--model", two_om, "--input", f"{work / 'a' / 'sample_000.bin'},"
                                                             f"{work / 'b' / 'sample_000.bin'}")
    assert rc == 1 and "E10001" in text and "60 bytes" in text and "64" in text


def test_output_dirname_without_input_names_files_pure_infer_data(work, capsys, two_om):
    rc, text = run_sim(capsys, "--model", two_om, "--output", work / "out", "--output_dirname", "sub",
                       "--outfmt", "BIN", "--pure_data_type", "zero")
    assert rc == 0, text
    assert sorted(p.name for p in (work / "out" / "sub").iterdir()) == ["pure_infer_data_0.bin", "pure_infer_data_1.bin"]
    assert (work / "out" / "sub_summary.json").is_file()
    y = np.fromfile(work / "out" / "sub" / "pure_infer_data_0.bin", dtype=np.float32)
    assert not y.any()                                               # zeros in, relu(0 + 0) out


def test_output_dirname_without_output_is_ignored_with_a_warning(work, capsys, two_om):
    rc, text = run_sim(capsys, "--model", two_om, "--output_dirname", "sub")
    assert rc == 0 and "W10112" in text, text


@pytest.mark.parametrize("bad", ["../up", "a/b", ".."])
def test_output_dirname_must_be_one_folder_name(work, capsys, two_om, bad):
    rc, text = run_sim(capsys, "--model", two_om, "--output", work / "out", "--output_dirname", bad)
    assert rc == 1 and "E10001" in text


def test_pure_data_type_random_is_seeded_and_zero_is_zero(work, capsys, two_om):
    outs = {}
    for kind in ("random", "zero"):
        rc, text = run_sim(capsys, "--model", two_om, "--pure_data_type", kind, "--output", work / kind)
        assert rc == 0, text
        outs[kind] = np.load(work / kind / "z.npy")
    assert outs["random"].any() and not outs["zero"].any()
    rc, _ = run_sim(capsys, "--model", two_om, "--pure_data_type", "ones")
    assert rc == 1


def test_pure_data_type_defaults_to_zero_as_ais_bench_and_to_random_for_compare(work, capsys, two_om):
    rc, text = run_sim(capsys, "--model", two_om)
    assert rc == 0 and "inputs: zero" in text, text
    rc, text = run_sim(capsys, "--model", two_om, "--compare", work / "two.onnx")
    assert rc == 0 and "inputs: random (seed 0)" in text, text


def test_device_lists_warn_and_run_once(work, capsys, two_om):
    rc, text = run_sim(capsys, "--model", two_om, "--device", "0,1,2,3")
    assert rc == 0 and "W10110" in text and text.count("Performance Summary") == 1


def test_debug_prints_the_io_table(work, capsys, two_om):
    rc, text = run_sim(capsys, "--model", two_om, "--debug", "1")
    assert rc == 0, text
    assert "[DEBUG] input:" in text and "#0    a  (2, 8)  float32  64  64" in text
    assert "#1    z  (2, 8)  float32  64  64" in text and "aclExec cost" in text


def test_display_all_summary_adds_copy_latencies(work, capsys, two_om):
    rc, text = run_sim(capsys, "--model", two_om, "--display_all_summary", "true")
    assert rc == 0, text
    lines = text.splitlines()
    order = [i for i, l in enumerate(lines) if l.startswith(("[INFO] H2D_latency", "[INFO] NPU_compute_time (ms)",
                                                               "[INFO] D2H_latency"))]
    assert [lines[i].split()[1] for i in order] == ["H2D_latency", "NPU_compute_time", "D2H_latency"]
    rc, text = run_sim(capsys, "--model", two_om)
    assert "H2D_latency" not in text


def test_profiler_writes_op_summary_and_op_statistic_under_output(work, capsys, two_om):
    rc, text = run_sim(capsys, "--model", two_om, "--output", work / "out", "--profiler", "1")
    assert rc == 0, text
    prof = work / "out" / "profiler"
    assert {p.name for p in prof.iterdir()} == {"op_summary_0.csv", "op_statistic_0.csv", "msprof_0.json"}
    with open(prof / "op_statistic_0.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    assert list(rows[0]) == ["Device_id", "OP Type", "Core Type", "Count", "Total Time(us)", "Avg Time(us)",
                             "Min Time(us)", "Max Time(us)", "Ratio(%)"]
    with open(prof / "op_summary_0.csv", newline="") as f:
        tasks = list(csv.DictReader(f))
    assert sum(int(r["Count"]) for r in rows) == len(tasks)
    assert abs(sum(float(r["Total Time(us)"]) for r in rows) - sum(float(t["Task Duration(us)"]) for t in tasks)) < 1e-2
    assert abs(sum(float(r["Ratio(%)"]) for r in rows) - 100.0) < 0.01
    rc, text = run_sim(capsys, "--model", two_om, "--profiler", "1")
    assert rc == 0 and "W10112" in text


def test_running_on_another_chip_warns_in_acl_words(work, capsys, two_om):
    rc, text = run_sim(capsys, "--model", two_om, "--soc_version", "Ascend910B2")
    assert rc == 0, text
    assert "W10111" in text and "supported socVersion=Ascend910B2, but the model socVersion=Ascend910" in text
    assert "priced on Ascend910B2" in text
    rc, text = run_sim(capsys, "--model", two_om, "--soc_version", "Ascend910")
    assert "W10111" not in text


def test_compare_after_output_type_casts(work, capsys):
    path = models_small.save(models_small.two_inputs(), work / "two.onnx")
    for spec in ("FP16", '"relu:0:UINT8;mul:0:INT32"'):
        rc, text = atc(capsys, *base(path, work / "t"), f"--output_type={spec}")
        assert rc == 0, text
        rc, text = run_sim(capsys, "--model", work / "t.om", "--compare", path)
        assert rc == 0 and "compare PASS" in text, text
