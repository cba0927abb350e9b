"""The Python API: atc_py.compile returns the report as data, atc_py.InferSession runs the .om
like ais_bench's and onnxruntime's sessions; the CLIs give the same results."""
from __future__ import annotations

import numpy as np
import pytest

import atc_py
import cli
from ge.errors import AtcError

import models_small
from helpers import run_ort


@pytest.fixture
def mlp(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    return models_small.save(models_small.mlp(), tmp_path / "mlp.onnx")


def test_compile_returns_the_report_as_data_and_prints_nothing(tmp_path, mlp, capsys):
    report = atc_py.compile(mlp, output=tmp_path / "m", soc_version="Ascend910")
    assert capsys.readouterr().out == ""
    assert (tmp_path / "m.om").is_file()
    assert report["om"] == str(tmp_path / "m.om")
    assert report["kernels_before"] == 7 and report["kernels_after"] == 3
    assert report["overall_speedup"] > 1
    assert [p["pass"] for p in report["patterns"]] == ["MatMulBiasActFusionPass"]
    assert report["outputs"] == [{"name": "y", "shape": [4, 16], "dtype": "float32"}]


def test_compile_matches_the_cli_byte_for_byte(tmp_path, mlp, capsys):
    atc_py.compile(mlp, output=tmp_path / "api" / "m", soc_version="Ascend910", precision_mode="force_fp32",
                   output_type="FP16")
    assert cli.main([f"--model={mlp}", "--framework=5", f"--output={tmp_path / 'cli' / 'm'}",
                     "--soc_version=Ascend910", "--precision_mode=force_fp32", "--output_type=FP16"]) == 0
    assert (tmp_path / "api" / "m.om").read_bytes() == (tmp_path / "cli" / "m.om").read_bytes()


def test_compile_takes_a_model_proto_and_python_values(tmp_path):
    report = atc_py.compile(models_small.two_inputs(), output=tmp_path / "t", soc_version="Ascend910B2",
                            input_fp16_nodes=["a", "b"], disable_reuse_memory=True, enable_small_channel=False)
    assert [i["dtype"] for i in report["inputs"]] == ["float16", "float16"]
    assert report["io"]["input_fp16_nodes"] == ["a", "b"]
    assert any(w.startswith("W10100") for w in report["warnings"])


def test_compile_lists_precision_overrides(tmp_path, mlp):
    keep = tmp_path / "keep.cfg"
    keep.write_text("softmax\n")
    report = atc_py.compile(mlp, output=tmp_path / "m", soc_version="Ascend910", keep_dtype=keep,
                            op_select_implmode="high_performance", optypelist_for_implmode=["Gelu"])
    rows = {r["kernel"]: r for r in report["precision_overrides"]}
    assert rows["softmax"]["dtype_before"] == "float16" and rows["softmax"]["dtype"] == "float32"
    gelu = next(r for r in rows.values() if "gelu" in r["origin_ops"])
    assert gelu["impl_mode"] == "high_performance"


def test_compile_errors_are_atc_errors(tmp_path, mlp):
    with pytest.raises(AtcError) as err:
        atc_py.compile(mlp, output=tmp_path / "m", soc_version="Ascend999")
    assert err.value.code == "E10001"
    with pytest.raises(AtcError) as err:
        atc_py.compile(mlp, output=tmp_path / "m", soc_version="Ascend910", no_such_option=1)
    assert err.value.code == "E10001" and "--no_such_option" in err.value.message
    assert not (tmp_path / "m.om").exists()


def test_infer_session_runs_like_ais_bench_and_onnxruntime(tmp_path, mlp):
    atc_py.compile(mlp, output=tmp_path / "m", soc_version="Ascend910", precision_mode="force_fp32")
    session = atc_py.InferSession(tmp_path / "m.om")
    (inp,), (out,) = session.get_inputs(), session.get_outputs()
    assert (inp.name, inp.shape, inp.datatype, inp.size) == ("x", (4, 16), "float32", 256)
    assert (out.name, out.shape, out.datatype) == ("y", (4, 16), "float32")
    x = np.random.default_rng(1).standard_normal((4, 16)).astype(np.float32)
    y, = session.infer([x])
    np.testing.assert_allclose(y, run_ort(models_small.mlp(), {"x": x})["y"], rtol=1e-5, atol=1e-6)
    y2, = session.run(None, {"x": x})                   # onnxruntime's form
    np.testing.assert_array_equal(y, y2)
    summary = session.summary()
    assert summary["simulated"] is True and summary["NPU_compute_time"]["count"] == 2
    assert summary["NPU_compute_time"]["mean"] > 0 and summary["exec_time_list"] == [summary["NPU_compute_time"]["mean"]] * 2
    assert session.sumary() == summary                 # ais_bench's spelling
    assert summary["H2D_latency"]["mean"] > 0 and summary["throughput"] > 0


def test_infer_session_on_another_chip_warns_and_reprices(tmp_path, mlp):
    atc_py.compile(mlp, output=tmp_path / "m", soc_version="Ascend910")
    own = atc_py.InferSession(tmp_path / "m.om")
    other = atc_py.InferSession(tmp_path / "m.om", soc_version="Ascend310P3")
    assert own.warnings == [] and other.warnings[0].code == "W10111"
    x = np.zeros((4, 16), np.float32)
    own.infer(x)
    other.infer(x)
    assert own.soc_version == "Ascend910" and other.soc_version == "Ascend310P3"
    assert own.summary()["NPU_compute_time"]["mean"] != other.summary()["NPU_compute_time"]["mean"]


def test_infer_session_refuses_wrong_feeds(tmp_path, mlp):
    atc_py.compile(mlp, output=tmp_path / "m", soc_version="Ascend910")
    session = atc_py.InferSession(tmp_path / "m.om")
    with pytest.raises(AtcError):
        session.infer([np.zeros((4, 16), np.float32), np.zeros(1)])
    with pytest.raises(AtcError):
        session.infer([np.zeros((3, 16), np.float32)])
    with pytest.raises(AtcError):
        session.summary()                                  # nothing ran yet


def test_the_readme_python_example_runs_as_written(tmp_path, monkeypatch, capsys):
    """The README's Python block, executed verbatim on the bundled example model."""
    import re
    from pathlib import Path

    from atc_py import zoo
    readme = (Path(__file__).resolve().parent.parent / "README.md").read_text()
    block = re.search(r"```python\n(.*?)```", readme, re.S).group(1)
    monkeypatch.chdir(tmp_path)
    (tmp_path / "models").mkdir()
    import onnx
    onnx.save(zoo.build("seed_testmodel", small=True), str(tmp_path / "models" / "seed_testmodel.onnx"))
    exec(compile(block, "README.md", "exec"), {})
    out = capsys.readouterr().out
    assert "kernels," in out and "ms simulated" in out
    assert (tmp_path / "out" / "seed.om").is_file()
