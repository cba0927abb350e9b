"""Decoder LLM steps (issue 12, item 4): a decoder exported with past_key_values inputs and
present outputs compiles once with dynamic sequence and cache lengths; the simulator runs the
prompt's prefill then 8 decode steps, feeding each step's present back as the next past, and
matches onnxruntime at every step; the report and the profile show prefill vs per-token time.

Tiny configs (2 layers, hidden 32): Llama and Qwen2 (grouped-query attention, rotary) and
GPT-2, with the TorchScript exporter; Llama and GPT-2 also with dynamo (a dynamo export takes
~20 s; bench/bench_decoder.py runs all six exports)."""
from __future__ import annotations

import os

import numpy as np
import onnx
import pytest

import atc_py
import exporters
from simulator import cli as sim_cli
from simulator import decode

CASES = [("llama", "torchscript"), ("qwen2", "torchscript"), ("gpt2", "torchscript"), ("llama", "dynamo"),
         ("gpt2", "dynamo")]
STEPS = 8


@pytest.fixture(scope="module")
def decoders(tmp_path_factory):
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    pytest.importorskip("onnxscript")
    root = tmp_path_factory.mktemp("decoders")
    cache = {}

    def get(name, exporter, precision="force_fp32"):
        key = (name, exporter, precision)
        if key not in cache:
            path = str(root / f"{name}_{exporter}.onnx")
            if not os.path.exists(path):
                exporters.export_decoder(name, exporter, path)
            out = str(root / f"{name}_{exporter}_{precision}")
            report = atc_py.compile(path, output=out, soc_version="Ascend910", precision_mode=precision,
                                    input_shape=exporters.decoder_input_shape(onnx.load(path)))
            cache[key] = (path, out + ".om", report)
        return cache[key]

    return get


@pytest.mark.parametrize("name,exporter", CASES, ids=[f"{n}-{e}" for n, e in CASES])
def test_prefill_and_eight_decode_steps_match_onnxruntime_step_by_step(decoders, name, exporter):
    onnx_path, om, report = decoders(name, exporter)
    session = atc_py.InferSession(om)
    assert session.model.graph.is_dynamic
    fused = {p["pattern"]: p["effect"] for p in report["patterns"] if p["effect"]}
    assert fused.get("AutoFuse", 0) >= 2, fused               # groups fuse on the symbolic sizes
    prompt = decode.prompt_tokens(session.model.graph, batch=1, length=6)
    steps = decode.generate(session, prompt, STEPS, onnx_path)
    assert [s.kind for s in steps] == ["prefill"] + ["decode"] * STEPS
    assert [s.cache_length for s in steps] == [0] + list(range(6, 6 + STEPS))
    for step in steps:
        assert step.compares and step.passed, (step.index, [c.describe() for c in step.compares])
        assert all(c.precision == "fp32" for c in step.compares if c.dtype.startswith("float"))
    assert all(s.npu_time_ms > 0 for s in steps)
    assert len(session.model.timings_by_shape) == STEPS + 1      # every step priced at its own sizes


def test_fp16_decoder_steps_match_within_fp16_tolerance(decoders):
    onnx_path, om, _ = decoders("llama", "torchscript", "force_fp16")
    session = atc_py.InferSession(om)
    steps = decode.generate(session, decode.prompt_tokens(session.model.graph, 2, 4), STEPS, onnx_path)
    assert all(s.passed for s in steps), [c.describe() for s in steps for c in s.compares if not c.passed]


def test_the_report_prices_prefill_and_one_decode_step(decoders):
    _, _, report = decoders("gpt2", "torchscript")
    rows = {row["scenario"]: row for row in report["dynamic"]["scenarios"]}
    prefill = next(r for label, r in rows.items() if label.startswith("prefill"))
    step = next(r for label, r in rows.items() if label.startswith("decode step"))
    assert prefill["time_us"] > 0 and step["time_us"] > 0
    assert prefill["inputs"]["past_key_values.0.key"][2] == 0 and step["inputs"]["input_ids"][1] == 1
    assert step["inputs"]["past_key_values.0.key"][2] == prefill["inputs"]["input_ids"][1]


def test_atc_sim_decode_steps_prints_each_step_and_writes_a_profile_per_step(decoders, tmp_path, capsys):
    onnx_path, om, _ = decoders("gpt2", "torchscript")
    profile = str(tmp_path / "prof")
    rc = sim_cli.main(["--model", om, "--decode_steps", str(STEPS), "--dymShape", "input_ids:1,5", "--compare",
                       onnx_path, "--profile", profile, "--output", str(tmp_path / "out")])
    text = capsys.readouterr().out
    assert rc == 0, text
    assert "prefill of 5 tokens" in text and "decode step 8 (cache 12)" in text
    assert "compare PASS at every step" in text and "per-token (decode) NPU_compute_time" in text
    assert sorted(f for f in os.listdir(profile) if f.startswith("op_summary")) == \
        sorted(f"op_summary_0_step{k}.csv" for k in range(STEPS + 1))
    import json
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert len(summary["decode"]) == STEPS + 1 and summary["prefill_ms"] > 0 and summary["decode_mean_ms"] > 0


def test_a_model_without_a_cache_is_refused_clearly(tmp_path, capsys):
    from builder import Net
    net = Net()
    model = net.model(net.op("Relu", net.input("x", ["N", 4])))
    atc_py.compile(model, output=str(tmp_path / "m"), soc_version="Ascend910", input_shape="x:-1,4")
    assert sim_cli.main(["--model", str(tmp_path / "m.om"), "--decode_steps", "2"]) == 1
    assert "E10001" in capsys.readouterr().out
    _ = np
