"""SuperKernel: scope parsing, planning of consecutive runs, .om records, pricing and report."""
from __future__ import annotations

import numpy as np
import onnx
import pytest

import cli
from atc_py import zoo
from codegen import super_kernel
from ge.errors import AtcError
from ge.ir import Graph, TensorDesc
from codegen.om_import import load_om_graph
from om_format.container import load_task_def, read_om
from simulator.cost_model import load_chip, price_super_kernel
from simulator.pricing import graph_specs, price_tasks

from simulator.executor import run_graph

from helpers import random_feeds, run_ort


def _chain(names):
    g = Graph("g")
    v = g.new_value("x", TensorDesc(np.dtype(np.float32), (4, 64)))
    g.inputs.append(v)
    for name in names:
        v = g.make_node("Relu", [v], name=name, descs=[TensorDesc(np.dtype(np.float32), (4, 64))]).outputs[0]
    g.outputs.append(v)
    return g


def test_plan_prefix_regex_and_all():
    g = _chain(["/a/0", "/a/1", "/b/0", "/a/2", "/a/3", "/a/4", "/c/0"])
    assert super_kernel.plan(g.nodes, "/a/") == [["/a/0", "/a/1"], ["/a/2", "/a/3", "/a/4"]]
    assert super_kernel.plan(g.nodes, "/b/") == []            # a run of one is not a super kernel
    assert super_kernel.plan(g.nodes, "re:^/(a|b)/") == [["/a/0", "/a/1", "/b/0", "/a/2", "/a/3", "/a/4"]]
    assert super_kernel.plan(g.nodes, "all") == [[n.name for n in g.nodes]]
    assert super_kernel.plan(g.nodes, "/a/,/b/") == [["/a/0", "/a/1"], ["/a/2", "/a/3", "/a/4"]]
    assert super_kernel.plan(g.nodes, "") == []


def test_bad_regex_is_a_parameter_error():
    with pytest.raises(AtcError) as err:
        super_kernel.scope_matcher("re:(")
    assert err.value.code == "E10001" and "--super_kernel_scope" in err.value.message


def test_super_kernel_pricing_saves_launches_by_the_documented_terms():
    g = _chain([f"k{i}" for i in range(6)])
    chip = load_chip("Ascend910")
    dtype_of = lambda node: np.dtype(np.float16)  # noqa: E731
    plain = price_tasks(g, chip, dtype_of)
    grouped = price_tasks(g, chip, dtype_of, {f"k{i}": "sk" for i in range(6)})
    expected = price_super_kernel(chip, graph_specs(g, dtype_of, chip)).total_us
    assert plain.launches == 6 and grouped.launches == 1
    assert grouped.total_us == pytest.approx(expected)
    assert grouped.total_us < plain.total_us


def test_cli_super_kernel_scope_records_groups_reports_and_keeps_numbers(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    model_path = zoo.save("bert_base", str(tmp_path), small=True)
    base = ["--model=" + model_path, "--framework=5", "--soc_version=Ascend910", "--log=info",
            "--precision_mode=force_fp32"]
    assert cli.main(base + ["--output=plain"]) == 0
    plain_text = capsys.readouterr().out
    assert cli.main(base + ["--output=sk", "--super_kernel_scope=/encoder/layer.0/"]) == 0
    text = capsys.readouterr().out
    assert "Super kernels formed: 1" in text and "Super kernels formed" not in plain_text
    launches = int(next(l for l in text.splitlines() if "launches with super kernels" in l).split(": ")[1])
    after = int(next(l for l in text.splitlines() if "launches after fusion" in l).split(": ")[1])
    covered = int(text.split("covering ")[1].split(" ")[0])
    assert launches == after - covered + 1
    speed = lambda t: float(next(l for l in t.splitlines() if "Overall speedup" in l).split(": ")[1][:-1])  # noqa
    assert speed(text) > speed(plain_text)
    tasks = load_task_def(read_om("sk.om"))
    members = [t.op_name for t in tasks.task if "super_kernel" in t.attr]
    loaded = load_om_graph("sk.om")
    by_name = {n.name: n for n in loaded.graph.nodes}
    assert len(members) == covered
    assert all(any(o.startswith("/encoder/layer.0/") for o in [m, *by_name[m].origin]) for m in members)
    assert {n.provenance.get("super_kernel") for n in loaded.graph.nodes if n.name in members} == {"sk_0"}
    model = onnx.load(model_path)
    feeds = random_feeds(model)
    ours = run_graph(loaded.graph, feeds, lambda n: loaded.compute_dtypes[n.name])
    ref = run_ort(model, feeds)
    for name, value in ref.items():
        np.testing.assert_allclose(ours[name], value, rtol=1e-4, atol=1e-4)


def test_cli_rejects_bad_scope(tmp_path, capsys):
    model_path = zoo.save("seed_testmodel", str(tmp_path), small=True)
    rc = cli.main([f"--model={model_path}", "--framework=5", f"--output={tmp_path / 'm'}",
                   "--soc_version=Ascend910", "--super_kernel_scope=re:("])
    assert rc != 0 and "E10001" in capsys.readouterr().out
    assert not (tmp_path / "m.om").exists()


def test_simulator_prices_super_kernels_and_keeps_outputs(tmp_path, capsys, monkeypatch):
    import json
    from simulator import cli as sim_cli
    monkeypatch.chdir(tmp_path)
    model_path = zoo.save("seed_testmodel", str(tmp_path), small=True)
    base = ["--model=" + model_path, "--framework=5", "--soc_version=Ascend910"]
    assert cli.main(base + ["--output=plain"]) == 0
    assert cli.main(base + ["--output=sk", "--super_kernel_scope=all"]) == 0
    capsys.readouterr()
    summaries = {}
    for name in ("plain", "sk"):
        rc = sim_cli.main(["--model", f"{name}.om", "--output", f"run_{name}", "--compare", model_path,
                           "--profile", f"prof_{name}"])
        assert rc == 0, capsys.readouterr().out
        summaries[name] = json.loads((tmp_path / f"run_{name}" / "summary.json").read_text())
        capsys.readouterr()
    plain_ms = summaries["plain"]["NPU_compute_time"]["mean"]
    sk_ms = summaries["sk"]["NPU_compute_time"]["mean"]
    loaded = load_om_graph("sk.om")
    chip = load_chip("Ascend910")
    specs = graph_specs(loaded.graph, lambda n: loaded.compute_dtypes[n.name], chip)
    expected = price_super_kernel(chip, specs).total_us / 1e3
    assert sk_ms == pytest.approx(expected, rel=1e-6) and sk_ms < plain_ms
    outs = {name: {p.name: np.load(p) for p in (tmp_path / f"run_{name}").glob("*.npy")} for name in summaries}
    assert outs["plain"].keys() == outs["sk"].keys() and outs["plain"]
    for key in outs["plain"]:
        np.testing.assert_array_equal(outs["plain"][key], outs["sk"][key])
    trace = json.loads(next((tmp_path / "prof_sk").glob("*.json")).read_text())
    slices = [e for e in trace if e.get("ph") == "X" and e.get("tid") == 0]
    assert {e["args"]["super_kernel"] for e in slices} == {"sk_0"}
    assert sum(e["dur"] for e in slices) / 1e3 == pytest.approx(sk_ms, rel=1e-6)
