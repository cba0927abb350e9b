"""atc-sim on gear models: --dymBatch, --dymHW, --dymDims, --dymShape, --auto_set_dymdims_mode,
--outputSize; every gear in turn when none is chosen, --compare and timings per gear; a shape
or value that is no gear is a clear error listing the gears; the Python session takes a gear."""
from __future__ import annotations

import json

import numpy as np
import onnx
import pytest

import atc_py
import gear_models
from ge.errors import AtcError
from helpers import run_ort
from test_atc_flags import atc, base, run_sim, work  # noqa: F401  (fixtures)

BATCH = ("x:-1,3,8,8", "--dynamic_batch_size=1,2,4")
IMAGE = ("x:2,3,-1,-1", "--dynamic_image_size=8,8;16,12")
DIMS = ("x:-1,-1,8;m:-1,4", "--dynamic_dims=1,4,1;2,8,2", "--input_format=ND")


def build(work, capsys, make, shape, *flags, name="g"):
    onnx.save(make(), work / f"{name}.onnx")
    rc, text = atc(capsys, *base(work / f"{name}.onnx", work / name), f"--input_shape={shape}", *flags,
                   "--precision_mode=force_fp32")
    assert rc == 0, text
    return work / f"{name}.onnx", work / f"{name}.om"


@pytest.fixture
def batch_om(work, capsys):
    return build(work, capsys, gear_models.cnn, *BATCH)


def test_every_gear_runs_in_turn_with_compare_and_its_own_time(work, capsys, batch_om):
    onnx_path, om = batch_om
    rc, text = run_sim(capsys, "--model", om, "--compare", onnx_path, "--output", work / "out")
    assert rc == 0, text
    assert "running every gear in turn" in text and text.count("[INFO] compare PASS") == 3
    for i, b in enumerate((1, 2, 4)):
        assert f"----- gear {i} ({b}): x:{b},3,8,8 -----" in text
        assert np.load(work / "out" / f"gear_{i}" / "gemm14.npy").shape == (b, 5)
    summary = json.loads((work / "out" / "summary.json").read_text())
    assert summary["compare"]["passed"] is True
    assert [g["gear"]["values"] for g in summary["gears"]] == [[1], [2], [4]]
    assert [g["inputs"][0]["shape"] for g in summary["gears"]] == [[1, 3, 8, 8], [2, 3, 8, 8], [4, 3, 8, 8]]
    assert all(g["compare"]["passed"] and g["NPU_compute_time"]["mean"] > 0 for g in summary["gears"])
    assert all(g["tasks"] == 2 for g in summary["gears"])       # MapIndex, then the gear's fused kernel


def test_dym_batch_runs_that_gear_and_matches_onnxruntime(work, capsys, batch_om):
    onnx_path, om = batch_om
    x = np.random.default_rng(3).standard_normal((2, 3, 8, 8)).astype(np.float32)
    np.save(work / "x.npy", x)
    rc, text = run_sim(capsys, "--model", om, "--dymBatch", "2", "--input", work / "x.npy", "--output", work / "o")
    assert rc == 0, text
    assert "running gear 1" in text
    np.testing.assert_allclose(np.load(work / "o" / "gemm14.npy"), run_ort(onnx.load(onnx_path), {"x": x})["gemm14"],
                               rtol=1e-4, atol=1e-5)
    assert json.loads((work / "o" / "summary.json").read_text())["gear"] == \
        {"index": 1, "flag": "dynamic_batch_size", "values": [2]}


def test_auto_set_dymdims_mode_takes_the_gear_from_the_npy_shapes(work, capsys, batch_om):
    _, om = batch_om
    np.save(work / "x.npy", np.ones((4, 3, 8, 8), np.float32))
    rc, text = run_sim(capsys, "--model", om, "--auto_set_dymdims_mode", "1", "--input", work / "x.npy")
    assert rc == 0, text
    assert "running gear 2" in text
    np.save(work / "x.npy", np.ones((3, 3, 8, 8), np.float32))
    rc, text = run_sim(capsys, "--model", om, "--auto_set_dymdims_mode", "1", "--input", work / "x.npy")
    assert rc == 1 and "E10001" in text
    assert "Input shape(s) [x:3,3,8,8] match no gear of the model" in text
    assert "gear 0 (1): x:1,3,8,8; gear 1 (2): x:2,3,8,8; gear 2 (4): x:4,3,8,8" in text


def test_a_value_that_is_no_gear_lists_the_gears(work, capsys, batch_om):
    _, om = batch_om
    rc, text = run_sim(capsys, "--model", om, "--dymBatch", "3")
    assert rc == 1 and "Gear [3] is not one of the model's gears" in text
    assert "gear 2 (4): x:4,3,8,8" in text
    rc, text = run_sim(capsys, "--model", om, "--dymHW", "8,8")
    assert rc == 1 and "the model's gears are --dynamic_batch_size, not --dynamic_image_size" in text


def test_input_files_without_a_gear_choice_are_refused(work, capsys, batch_om):
    _, om = batch_om
    np.save(work / "x.npy", np.ones((2, 3, 8, 8), np.float32))
    rc, text = run_sim(capsys, "--model", om, "--input", work / "x.npy")
    assert rc == 1 and "--auto_set_dymdims_mode=1" in text
    rc, text = run_sim(capsys, "--model", om, "--dymBatch", "4", "--input", work / "x.npy")
    assert rc == 1 and "shape [2, 3, 8, 8]; input [x] has shape [4, 3, 8, 8]" in text


def test_dym_hw_on_an_image_size_model(work, capsys):
    onnx_path, om = build(work, capsys, gear_models.cnn, *IMAGE)
    rc, text = run_sim(capsys, "--model", om, "--dymHW", "16,12", "--compare", onnx_path, "--output", work / "o")
    assert rc == 0 and "compare PASS" in text, text
    summary = json.loads((work / "o" / "summary.json").read_text())
    assert summary["inputs"][0]["shape"] == [2, 3, 16, 12] and summary["gear"]["values"] == [16, 12]
    rc, text = run_sim(capsys, "--model", om, "--dymHW", "16")
    assert rc == 1 and "it must be height,width" in text


@pytest.mark.parametrize("flag", ["--dymDims", "--dymShape"])
def test_dym_dims_and_dym_shape_name_the_gear_by_its_shapes(work, capsys, flag):
    onnx_path, om = build(work, capsys, gear_models.seq, *DIMS)
    rc, text = run_sim(capsys, "--model", om, flag, "x:2,8,8;m:2,4", "--compare", onnx_path)
    assert rc == 0 and "running gear 1" in text and "compare PASS" in text, text
    rc, text = run_sim(capsys, "--model", om, flag, "x:2,4,8;m:2,4")
    assert rc == 1 and "match no gear" in text and "gear 0 (1,4,1): x:1,4,8; m:1,4" in text
    rc, text = run_sim(capsys, "--model", om, flag, "x:2,8")
    assert rc == 1 and "match no gear" in text
    rc, text = run_sim(capsys, "--model", om, flag, "x=2,8")
    assert rc == 1 and f"parameter [{flag}] is invalid" in text


def test_gear_flags_on_a_static_model(work, capsys):
    onnx.save(gear_models.cnn(), work / "s.onnx")
    rc, text = atc(capsys, *base(work / "s.onnx", work / "s"), "--input_shape=x:2,3,8,8")
    assert rc == 0, text
    rc, text = run_sim(capsys, "--model", work / "s.om", "--dymBatch", "2")
    assert rc == 1 and "has no gears" in text
    rc, text = run_sim(capsys, "--model", work / "s.om", "--dymShape", "x:2,3,8,8")
    assert rc == 0, text
    rc, text = run_sim(capsys, "--model", work / "s.om", "--dymShape", "x:4,3,8,8")
    assert rc == 1 and "static shapes" in text


def test_output_size_is_checked_against_each_output(work, capsys, batch_om):
    _, om = batch_om
    rc, text = run_sim(capsys, "--model", om, "--dymBatch", "4", "--outputSize", "80")
    assert rc == 0, text                          # float32[4, 5] fits 80 bytes
    rc, text = run_sim(capsys, "--model", om, "--outputSize", "40")
    assert rc == 1 and "Output [gemm14] needs 80 bytes (float32 [4, 5]); --outputSize gives its buffer 40" in text
    rc, text = run_sim(capsys, "--model", om, "--outputSize", "80,80")
    assert rc == 1 and "gives 2 size(s); the model has 1 output(s)" in text
    rc, text = run_sim(capsys, "--model", om, "--outputSize", "-5")
    assert rc == 1 and "parameter [--outputSize] is invalid" in text


def test_gear_choices_exclude_each_other(work, capsys, batch_om):
    _, om = batch_om
    rc, text = run_sim(capsys, "--model", om, "--dymBatch", "2", "--dymShape", "x:2,3,8,8")
    assert rc == 1 and "cannot be used together" in text
    rc, text = run_sim(capsys, "--model", om, "--auto_set_dymdims_mode", "1")
    assert rc == 1 and "no --input" in text


def test_profile_per_gear(work, capsys, batch_om):
    _, om = batch_om
    rc, text = run_sim(capsys, "--model", om, "--profile", work / "prof")
    assert rc == 0, text
    for i in range(3):
        rows = (work / "prof" / f"gear_{i}" / "op_summary_0.csv").read_text().splitlines()
        assert "ascend_mbatch_shape_mapindex" in rows[1] and f"_ascend_mbatch_batch_{i}" in rows[2]


def test_infer_session_takes_a_gear(work, capsys, batch_om):
    onnx_path, om = batch_om
    session = atc_py.InferSession(om)
    assert [(i.name, i.shape) for i in session.get_inputs()] == [("x", (-1, 3, 8, 8))]
    assert session.get_inputs()[0].size == 4 * 3 * 8 * 8 * 4          # the largest gear's buffer
    assert [g["values"] for g in session.get_dynamic_gears()] == [[1], [2], [4]]
    model = onnx.load(onnx_path)
    rng = np.random.default_rng(0)
    for batch in (4, 1):
        x = rng.standard_normal((batch, 3, 8, 8)).astype(np.float32)
        y, = session.infer([x])                                    # the gear of the input's shape
        np.testing.assert_allclose(y, run_ort(model, {"x": x})["gemm14"], rtol=1e-4, atol=1e-5)
    assert session.set_dynamic_batchsize(2) == 1
    assert session.get_inputs()[0].shape == (2, 3, 8, 8)
    with pytest.raises(AtcError, match="shape"):
        session.infer([np.ones((4, 3, 8, 8), np.float32)])        # batch 2 is set: a batch-4 input is wrong
    y, = session.infer([np.ones((4, 3, 8, 8), np.float32)], gear=(4,))
    assert y.shape == (4, 5)
    assert session.set_gear({"x": [1, 3, 8, 8]}) == 0 and session.set_gear(2) == 2
    gears = session.summary()["gears"]
    assert [g["values"] for g in gears] == [[1], [4]] and gears[0]["NPU_compute_time"]["count"] == 1
    with pytest.raises(AtcError, match="not one of the model's gears"):
        session.set_dynamic_batchsize(3)
    with pytest.raises(AtcError, match="not --dynamic_image_size"):
        session.set_dynamic_hw(8, 8)


def test_a_gear_is_prepared_once_and_the_gears_share_one_workspace(work, capsys, batch_om):
    """Switching gears reuses each gear's view (its plan prepared once) and one pool of
    memory: running gear 4 after gear 1 maps only what gear 1's buffers cannot serve, and
    running gear 1 again maps nothing (ge/workspace.py)."""
    from simulator import runner

    _, om = batch_om
    session = atc_py.InferSession(om)
    first = session._root.for_gear(0)
    assert session._root.for_gear(0) is first and first.workspace is session._root.workspace
    for batch in (1, 4, 1, 4):
        session.infer([np.ones((batch, 3, 8, 8), np.float32)])
    ws = session._root.workspace
    count = len(ws)
    view = session._root.for_gear(2)
    plan = view.plan
    session.infer([np.ones((1, 3, 8, 8), np.float32)])
    session.infer([np.ones((4, 3, 8, 8), np.float32)])
    assert view.plan is plan and len(ws) == count and ws.grown == 0
    assert runner.forward(view, {"x": np.ones((4, 3, 8, 8), np.float32)})     # the same pool, no new buffer
    assert len(ws) == count
