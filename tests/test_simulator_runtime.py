"""The numeric executor as a runtime: BLAS threads from the free cores, kernels prepared at
load, honest --loop statistics, and many inferences spread over processes."""
import pickle

import numpy as np
import pytest

import cli as atc_cli
from atc_py import zoo
from ge.errors import AtcError
from simulator import blas, host_memory, runner
from simulator import cli as sim_cli
from simulator.executor import execute, prepare, run_graph


def _compiled(tmp_path_factory, name: str, soc_version: str, small: bool = True) -> str:
    """The zoo model `name`, compiled with atc; the .om's path."""
    d = tmp_path_factory.mktemp(name)
    path = zoo.save(name, str(d), small=small)
    assert atc_cli.main([f"--model={path}", "--framework=5", f"--output={d / name}", f"--soc_version={soc_version}",
                         "--log=error"]) == 0
    return str(d / f"{name}.om")


@pytest.fixture(scope="module")
def om(tmp_path_factory):
    return _compiled(tmp_path_factory, "resnet50", "Ascend310P3")


def test_blas_threads_follow_the_free_cores():
    assert blas.usable_cores() >= 1
    assert 1 <= blas.free_cores() <= blas.usable_cores()
    assert blas.busy_elsewhere() >= 0
    if blas.threads() is None:
        pytest.skip("no OpenBLAS reachable in this numpy build")
    before = blas.threads()
    try:
        assert blas.set_threads(1) == 1
        assert blas.fit_to_free_cores() == blas.threads() >= 1
        assert "usable core" in blas.describe()
    finally:
        blas.set_threads(before)


def _minor_faults() -> int:
    import resource
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt


def test_freed_activation_memory_is_reused_without_page_faults():
    """A forward's outputs, freed, serve the next forward without being faulted in again:
    glibc would otherwise unmap (or trim) them and every forward would pay ~one fault per 4 KB."""
    if not host_memory.keep_freed_memory():
        pytest.skip("no glibc mallopt in this process")

    def forward_like():          # activations of a few sizes, touched, then all freed
        arrays = [np.ones(n, np.float32) for n in (5 << 20, 3 << 20, 5 << 20, 1 << 20)]
        return sum(a.nbytes for a in arrays)

    forward_like()
    before = _minor_faults()
    touched = forward_like() + forward_like()
    assert _minor_faults() - before < touched // 4096 // 20     # default glibc: about one per page


def test_prepared_plan_converts_constants_once_and_matches_run_graph(om):
    model = runner.load_model(om)
    assert model._plan is not None                    # prepared at load
    feeds = runner.random_inputs(model.graph)
    consts = [arg[1] for step in model.plan.steps for arg in step.args if arg and arg[0]]
    assert consts and all(c.dtype == np.float16 for c in consts if c.dtype.kind == "f")
    first = execute(model.plan, feeds)
    again = execute(model.plan, feeds)
    ref = run_graph(model.graph, feeds, model.dtype_of)
    for name in ref:
        np.testing.assert_array_equal(first[name], ref[name])
        np.testing.assert_array_equal(again[name], ref[name])
    # the same converted arrays serve every forward
    assert [arg[1] for step in model.plan.steps for arg in step.args if arg and arg[0]][0] is consts[0]
    assert prepare(model.graph, model.dtype_of).steps[0].node is model.plan.steps[0].node


def test_loop_statistics_are_per_timed_forward_and_the_first_forward_is_reported(om):
    model = runner.load_model(om)
    feeds = runner.random_inputs(model.graph)
    result = runner.run(model, feeds, loop=4, warmup_count=0)
    host = result.host_time_ms
    assert host["count"] == 4 and host["min"] <= host["median"] <= host["max"]
    assert result.first_forward_ms > 0
    warm = runner.run(model, feeds, loop=2, warmup_count=1)
    assert warm.host_time_ms["count"] == 2 and warm.first_forward_ms > 0


_FIRST_FORWARD = """
import json, resource, statistics, sys, time
from simulator import runner
model = runner.load_model(sys.argv[1])           # as atc-sim loads it: kernels prepared
feeds = runner.random_inputs(model.graph, 0)
times, peaks = [], [resource.getrusage(resource.RUSAGE_SELF).ru_maxrss]
for _ in range(6):
    t0 = time.thread_time()
    runner.forward(model, feeds, blas_threads=1)
    times.append(time.thread_time() - t0)
    peaks.append(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)
print(json.dumps([times[0] / statistics.median(times[1:]), (peaks[1] - peaks[0]) / 1024]))
"""


def test_the_first_forward_of_a_fresh_process_costs_at_most_1_5x_a_steady_one(om):
    """Issue 14: the first forward within 1.5x of the steady state, because load_model
    prepares what a first forward would otherwise pay for (constants converted, the
    allocator set, the BLAS found).  A fresh interpreter each time (the first forward of a
    process is the one users see); CPU time of the thread, not wall, so a busy neighbour
    does not decide it; the median of five processes: a forward of this small model takes
    ~4 ms, and on a loaded machine one process's first forward measured 1.55 while idle runs
    give 1.17-1.29.  Without the preparation at load the ratio is ~2.3 on this model."""
    import statistics

    ratios = [ratio for ratio, _ in _first_forwards(om, 5)]
    assert statistics.median(ratios) <= 1.5, ratios


@pytest.fixture(scope="module")
def readme_om(tmp_path_factory):
    """The README's example model, built and compiled as its first command does."""
    return _compiled(tmp_path_factory, "seed_testmodel", "Ascend910", small=False)


def _first_forwards(om: str, processes: int) -> list:
    """[first forward / median of the next five (CPU time of the thread), MB by which the
    first forward raised the process's peak resident memory], one fresh interpreter each."""
    import json
    import os
    import subprocess
    import sys

    repo = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env = {**os.environ, "PYTHONPATH": repo + os.pathsep + os.environ.get("PYTHONPATH", "")}
    return [json.loads(subprocess.run([sys.executable, "-c", _FIRST_FORWARD, om], env=env, check=True,
                                      capture_output=True, text=True).stdout) for _ in range(processes)]


def test_the_first_forward_of_the_readme_model_costs_at_most_1_5x_a_steady_one(readme_om):
    """Issue 14 on the README's example (three 3x3 convs on 224x224 maps, ~0.3 s a forward):
    its forwards take ~300 MB of Winograd tiles and activations (~600 MB on the numpy
    kernels), which fresh from the OS cost the first forward up to ~1 s of page faults and
    huge-page compaction (median 1.9-2.1x a steady forward before the workspace).  load_model maps and touches that memory
    (ge/workspace.py) and the forwards take it from there.  CPU time of the thread (page
    faults are charged to it), the median of five fresh processes.  How much compaction
    costs depends on how fragmented the machine's memory is (processes run back to back
    reuse each other's freed huge pages), so the test also pins its cause: before the
    workspace the first forward raised the peak resident memory by 260-475 MB of new pages."""
    import statistics

    runs = _first_forwards(readme_om, 5)
    assert statistics.median(ratio for ratio, _ in runs) <= 1.5, runs
    assert max(grown for _, grown in runs) <= 16, runs


@pytest.fixture(scope="module")
def vit_om(tmp_path_factory):
    """A small ViT: its patch embedding is an autofused group (a conv block + the position Add)."""
    return _compiled(tmp_path_factory, "vit_base", "Ascend910")


def test_the_workspace_planned_at_load_is_all_a_forward_takes(readme_om, om, vit_om):
    """The sizes planned from the kernels' declarations (OpDef.workspace, an autofused
    group's from its members') are the buffers the forwards ask for: none is mapped after
    load, the outputs are the same bytes as without a workspace and are not overwritten by
    the next forward."""
    for path in (readme_om, om, vit_om):
        model = runner.load_model(path)
        ws = model.plan.workspace
        assert ws is not None and len(ws) > 0 and ws.grown == 0
        feeds = runner.random_inputs(model.graph, 0)
        first = runner.forward(model, feeds, blas_threads=1)
        kept = {k: v.copy() for k, v in first.items()}
        runner.forward(model, runner.random_inputs(model.graph, 1), blas_threads=1)
        assert ws.grown == 0
        ref = run_graph(model.graph, feeds, model.dtype_of)        # no workspace: plain numpy arrays
        for name in ref:
            np.testing.assert_array_equal(first[name], ref[name])
            np.testing.assert_array_equal(first[name], kept[name])


def test_cli_prints_min_median_max_and_the_first_forward(om, tmp_path, capsys):
    rc = sim_cli.main(["--model", om, "--loop", "3", "--warmup_count", "0", "--output", str(tmp_path / "o")])
    text = capsys.readouterr().out
    assert rc == 0
    assert "3 timed forward(s): min = " in text and "median = " in text and "first forward" in text
    assert "BLAS:" in text
    import json
    summary = json.loads((tmp_path / "o" / "summary.json").read_text())
    assert summary["host_first_forward_ms"] > 0 and summary["host_wall_time"]["count"] == 3


def test_run_many_spreads_inputs_over_processes_and_keeps_their_order(om):
    model = runner.load_model(om)
    sets = [runner.random_inputs(model.graph, seed) for seed in range(5)]
    parallel = runner.run_many(om, sets, workers=2)
    serial = runner.run_many(om, sets, workers=1)
    assert parallel.workers == 2 and serial.workers == 1
    assert len(parallel.outputs) == len(serial.outputs) == 5
    for got, want, feeds in zip(parallel.outputs, serial.outputs, sets):
        ref = run_graph(model.graph, feeds, model.dtype_of)
        for name in ref:
            np.testing.assert_array_equal(got[name], ref[name])
            np.testing.assert_array_equal(want[name], ref[name])
    assert parallel.host_time_ms["count"] == 5


def test_run_many_reports_a_bad_input_with_its_code(om):
    model = runner.load_model(om)
    good = runner.random_inputs(model.graph)
    bad = {k: v[..., :1] for k, v in good.items()}
    with pytest.raises(AtcError) as err:
        runner.run_many(om, [good, bad], workers=1)
    assert err.value.code == "E10001"


def test_atc_errors_survive_pickling():
    """An AtcError (a subclass too) copies and pickles by its state."""
    err = pickle.loads(pickle.dumps(AtcError("E10001", "msg", "fix")))
    assert (err.code, err.message, err.solution) == ("E10001", "msg", "fix")


def test_dataset_mode_runs_on_run_many_through_the_session(om, monkeypatch, tmp_path, capsys):
    """InferSession.infer_many is what atc-sim's dataset mode (--input folders) uses once
    more than one core is free; its outputs and summary match one inference at a time."""
    from simulator.session import InferSession

    session = InferSession(om)
    sets = [runner.random_inputs(session.model.graph, seed) for seed in range(3)]
    many = session.infer_many(sets, workers=2)
    assert session.last_many.workers == 2 and session.summary()["NPU_compute_time"]["count"] == 3
    for feeds, got in zip(sets, many):
        for a, b in zip(got, InferSession(om).infer(feeds)):
            np.testing.assert_array_equal(a, b)
    # the CLI takes that path when cores are free (forced here: the test machine may be busy)
    folder = tmp_path / "in"
    folder.mkdir()
    name = session.model.graph.inputs[0].name
    for k, feeds in enumerate(sets):
        np.save(folder / f"{k}.npy", feeds[name])
    monkeypatch.setattr(blas, "free_cores", lambda: 2)
    rc = sim_cli.main(["--model", om, "--input", str(folder), "--output", str(tmp_path / "o")])
    assert rc == 0 and "spread over 2 processes" in capsys.readouterr().out
    assert len(list((tmp_path / "o").glob("*.npy"))) == 3


def test_maxpool_without_its_indices_output_computes_the_same_maxima():
    """The executor tells MaxPool how many outputs its node has; without Indices it skips
    them and must still give the same Y (ties, padding and NaN as with them)."""
    from ge.ops.registry import get_op

    x = np.random.default_rng(0).standard_normal((2, 3, 9, 9)).astype(np.float32)
    x[0, 0, 2, 2] = np.nan
    x[1, 1, :3, :3] = 1.0
    for attrs in ({"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1]},
                  {"kernel_shape": [2, 2], "dilations": [2, 2]},
                  {"kernel_shape": [3, 3], "ceil_mode": 1, "strides": [2, 2]}):
        full = get_op("MaxPool").compute([x], attrs)
        only = get_op("MaxPool").compute([x], {**attrs, "_outputs": 1})
        assert len(full) == 2 and len(only) == 1
        np.testing.assert_array_equal(full[0], only[0])




def _conv_om(tmp_path, second_conv: bool) -> str:
    """A 3x3 conv (pad 1, 4 -> 8 channels, 16x16: 64 Winograd tiles) and a Relu, compiled in
    fp32; with `second_conv` a 1x1 conv after them (the three fuse into a ConvChainFusionOp)."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    weights = [numpy_helper.from_array(rng.standard_normal((8, 4, 3, 3)).astype(np.float32), "w3"),
               numpy_helper.from_array(rng.standard_normal((8, 8, 1, 1)).astype(np.float32), "w1")]
    nodes = [helper.make_node("Conv", ["x", "w3"], ["c"], pads=[1, 1, 1, 1]), helper.make_node("Relu", ["c"], ["r"])]
    if second_conv:
        nodes.append(helper.make_node("Conv", ["r", "w1"], ["y"]))
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4, 16, 16])],
                              [helper.make_tensor_value_info(nodes[-1].output[0], TensorProto.FLOAT, [1, 8, 16, 16])],
                              weights[:1 + second_conv])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(tmp_path / "c.onnx"))
    assert atc_cli.main([f"--model={tmp_path / 'c.onnx'}", "--framework=5", f"--output={tmp_path / 'c'}",
                         "--soc_version=Ascend910", "--precision_mode=force_fp32", "--log=error"]) == 0
    return str(tmp_path / "c.om")


@pytest.mark.parametrize("second_conv,kernel", [(False, "ConvBNReluFusionOp"), (True, "ConvChainFusionOp")])
def test_winograd_weights_are_ready_when_the_model_is_loaded(tmp_path, second_conv, kernel):
    """A conv that takes the Winograd path (ge/ops/winograd.py: 3x3, stride 1, enough output
    tiles) has its transformed weights computed at load (OpDef.prepare), so the first forward
    does not pay for them -- in a conv block and as the first part of a conv chain; a 1x1
    conv gets none.  Where the compiled kernels' own GEMM runs (ge/ops/native.py `packing`),
    they are kept packed for it instead, and so are the 1x1 conv's weights."""
    from ge.ops import native, winograd

    model = runner.load_model(_conv_om(tmp_path, second_conv))
    (step,) = model.plan.steps
    weights = {arg[1].shape[2:]: arg[1] for arg in step.args if arg and arg[0] and arg[1].ndim == 4}
    assert step.node.op_type == kernel and len(weights) == 1 + second_conv
    kept = native._packed if native.packing() else winograd._weights
    prepared = kept.keys()                                # (id of the weight array, Winograd m or 0)
    assert (id(weights[(3, 3)]), winograd.tiling_for((16, 16)).m) in prepared
    if second_conv:
        assert ((id(weights[(1, 1)]), 0) in prepared) == native.packing()
    if native.packing():
        assert not any(key[0] == id(weights[(3, 3)]) for key in winograd._weights.keys())    # not also as U
    before = kept.keys()
    runner.forward(model, runner.random_inputs(model.graph))
    assert kept.keys() == before                 # nothing more computed by the forward
