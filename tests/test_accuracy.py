"""atc-sim --accuracy: an int8 .om against the float model it was quantized from -- top-1
agreement of classifier outputs and the cosine of every output, in the summary; a bad
--accuracy file is a coded error."""
import json

import numpy as np
import onnx
import pytest

import cli as atc_cli
from atc_py import zoo
from atc_py.zoo.int8 import calibration_feeds, quantize
from simulator import cli as sim_cli
from simulator.accuracy import measure

pytest.importorskip("onnxruntime.quantization")


@pytest.fixture(scope="module")
def quantized_resnet(tmp_path_factory):
    """The small ResNet-50 (a classifier), quantized by quantize_static and compiled."""
    root = tmp_path_factory.mktemp("acc")
    float_path = zoo.save("resnet50", str(root), small=True)
    model = onnx.load(float_path)
    q_path = str(root / "resnet50_qdq.onnx")
    onnx.save(quantize(model, "qdq", calibration_feeds(model, 2)), q_path)
    rc = atc_cli.main([f"--model={q_path}", "--framework=5", f"--output={root}/r8", "--soc_version=Ascend310P3"])
    assert rc == 0
    inputs = root / "inputs"
    inputs.mkdir()
    for k, feed in enumerate(calibration_feeds(model, 3, seed=100)):
        [(name, array)] = feed.items()
        np.save(inputs / f"{k}.npy", array)
    return float_path, f"{root}/r8.om", str(inputs)


def test_accuracy_reports_top1_and_cosine_over_every_input(quantized_resnet, tmp_path, capsys):
    float_path, om, inputs = quantized_resnet
    rc = sim_cli.main([f"--model={om}", f"--input={inputs}", f"--accuracy={float_path}", f"--output={tmp_path}"])
    text = capsys.readouterr().out
    assert rc == 0 and "Traceback" not in text
    assert "against the float model" in text and "top-1 agreement" in text
    summary = json.loads((tmp_path / "summary.json").read_text())
    [out] = summary["accuracy"]["outputs"]
    assert out["inferences"] == 3 and out["top1_total"] == 3
    assert 0.9 < out["cosine_min"] <= out["cosine_mean"] <= 1.0


def test_accuracy_of_a_missing_float_model_is_a_coded_error(quantized_resnet, tmp_path, capsys):
    _, om, _ = quantized_resnet
    rc = sim_cli.main([f"--model={om}", f"--accuracy={tmp_path}/nope.onnx"])
    text = capsys.readouterr().out
    assert rc != 0 and "--accuracy" in text and "E10" in text and "Traceback" not in text


def test_measure_counts_top1_rows_and_keeps_the_worst_cosine():
    class Out:
        name = "logits"

    class G:
        outputs = [Out()]

    ref = [{"logits": np.array([[1.0, 2.0, 0.0], [3.0, 0.0, 1.0]], np.float32)}]
    got = [{"logits": np.array([[1.0, 2.1, 0.0], [0.0, 3.0, 1.0]], np.float32)}]
    [a] = measure(G(), got, ref)
    assert (a.top1_agree, a.top1_total) == (1, 2) and a.cosine_min < 0.9
