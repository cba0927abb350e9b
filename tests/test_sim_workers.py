"""Dataset mode's worker processes (simulator/workers.py): forked after the model is prepared,
one BLAS thread each, inputs handed out one at a time, results back through files (never a
pickle), errors and dying workers reported with their codes."""
import os
import signal
import time

import numpy as np
import pytest

from ge.errors import AtcError, InternalError, InvalidNode
from om_format.attrs import STRING
from simulator import blas, runner, workers
from test_atc_flags import atc, base, run_sim, work  # noqa: F401  (fixtures)

pytestmark = pytest.mark.skipif(not workers.can_fork(), reason="no fork on this platform")


def _sets(n):
    return [{"x": np.full((2, 3), k, np.float32)} for k in range(n)]


def test_inputs_spread_over_this_process_and_forks_in_input_order():
    parent = os.getpid()

    def forward(feeds):           # long enough that every worker has started before the inputs run out
        time.sleep(0.1)
        return {"y": feeds["x"] * 2, "pid": np.array(os.getpid())}

    outputs, stats = workers.run_forked(forward, _sets(9), 3)
    assert [float(o["y"][0, 0]) for o in outputs] == [2.0 * k for k in range(9)]
    pids = {int(o["pid"]) for o in outputs}
    assert parent in pids and len(pids) == 3 and len(stats) == 3 and stats[0].inputs >= 1
    assert sum(s.inputs for s in stats) == 9
    assert sorted(k for s in stats for k in s.indices) == list(range(9))
    for s in stats:
        assert len(s.forward_ms) == len(s.cpu_ms) == s.inputs
        assert all(c < w for c, w in zip(s.cpu_ms, s.forward_ms))       # asleep, not computing


def test_each_worker_runs_one_blas_thread_and_this_process_gets_its_threads_back():
    if blas.threads() is None:
        pytest.skip("no OpenBLAS reachable in this numpy build")
    before = blas.set_threads(2)
    try:
        outputs, _ = workers.run_forked(lambda f: {"threads": np.array(blas.threads())}, _sets(6), 2)
        assert {int(o["threads"]) for o in outputs} == {1}
        assert blas.threads() == 2
    finally:
        blas.set_threads(before)


def test_every_dtype_comes_back_exactly_without_pickle():
    import ml_dtypes

    def forward(feeds):
        k = int(feeds["x"][0, 0])
        return {"f16": np.arange(6, dtype=np.float16).reshape(2, 3) + k,
                "bf16": np.array([1.5, -2.0, np.nan], dtype=ml_dtypes.bfloat16),
                "b": np.array([True, False]), "i64": np.array(2**40 + k, dtype=np.int64),
                "empty": np.zeros((0, 4), np.float32), "c64": np.array([1 + 2j], np.complex64),
                "s": np.array([["a", "ü" * k], ["", "x\x00y"]], dtype=STRING)}

    got, _ = workers.run_forked(forward, _sets(4), 2)
    for k, outputs in enumerate(got):
        want = forward({"x": np.full((2, 3), k)})
        for name, array in want.items():
            assert outputs[name].dtype == array.dtype and outputs[name].shape == array.shape, name
            if array.dtype == STRING:
                assert outputs[name].tolist() == array.tolist()
            else:
                assert outputs[name].tobytes() == np.ascontiguousarray(array).tobytes(), name


def test_the_first_failing_input_raises_its_own_error_code():
    def forward(feeds):
        k = int(feeds["x"][0, 0])
        if k in (3, 5):
            raise AtcError("E10001", f"input {k} is bad", "fix it")
        return {"y": feeds["x"]}

    with pytest.raises(AtcError) as err:
        workers.run_forked(forward, _sets(8), 2)
    assert err.value.code == "E10001" and "input 3" in err.value.message


def _in_a_fork_only(exc: BaseException):
    """A forward that raises `exc` in a forked worker only; this process waits meanwhile, so
    the fork takes the inputs (this process's own share would raise `exc` as it is)."""
    parent = os.getpid()

    def forward(feeds):
        if os.getpid() != parent:
            raise exc
        time.sleep(0.2)
        return {"y": feeds["x"]}
    return forward


@pytest.mark.parametrize("exc", [InvalidNode("Node [g] (Gather): indices out of range", "Check the indices."),
                                 InternalError("Kernel [m] (MatMul) failed: ValueError: x", "m"),
                                 AtcError("E10001", "input 3 is bad", "fix it")])
def test_a_workers_error_is_raised_here_as_it_was_raised_there(exc):
    """Same class, code, message, solution and attributes (InternalError's node): the parent
    raises what a single-process run would, rebuilt from a result file, not unpickled."""
    with pytest.raises(AtcError) as err:
        workers.run_forked(_in_a_fork_only(exc), _sets(4), 2)
    assert type(err.value) is type(exc)
    assert vars(err.value) == vars(exc) and err.value.args == exc.args
    assert err.value.render() == exc.render()


def test_a_worker_out_of_memory_is_a_memory_error_here_too():
    """atc-sim turns a MemoryError into E13023 whichever process ran out; not an E19999."""
    with pytest.raises(MemoryError, match="no room"):
        workers.run_forked(_in_a_fork_only(MemoryError("no room")), _sets(4), 2)


def test_a_workers_error_record_names_no_class_that_is_not_an_atc_error(tmp_path):
    """The class name is looked up among the loaded AtcError subclasses, never imported: any
    other name gives a plain AtcError with the record's code and message."""
    path = tmp_path / "w.bin"
    record = workers._error_record(2, InvalidNode("bad"))
    for name in ("os.system", "builtins.SystemExit", "ge.errors.NoSuchError"):
        with open(path, "wb") as f:
            workers._write_record(f, {"error": dict(record, **{"class": name})}, b"")
        error = workers._read_results(str(path), 4)[1][0]
        rebuilt = workers._error_from_record(error)
        assert type(rebuilt) is AtcError and rebuilt.code == "E16004" and rebuilt.message == "bad"
    for bad in ({"state": {"node": [1]}}, {"state": []}, {"class": 3}):
        with open(path, "wb") as f:
            workers._write_record(f, {"error": dict(record, **bad)}, b"")
        with pytest.raises(ValueError):
            workers._read_results(str(path), 4)


def test_a_worker_that_dies_is_reported_not_waited_for():
    parent = os.getpid()

    def forward(feeds):
        if os.getpid() != parent:
            os.kill(os.getpid(), signal.SIGKILL)
        time.sleep(0.1)            # the fork takes an input before this process has done them all
        return {"y": feeds["x"]}

    with pytest.raises(AtcError) as err:
        workers.run_forked(forward, _sets(6), 2)
    assert err.value.code == "E19999" and "signal 9" in err.value.message

    def exits(feeds):              # a library calling exit() in a worker
        if os.getpid() != parent:
            os._exit(3)
        time.sleep(0.1)
        return {"y": feeds["x"]}

    with pytest.raises(AtcError) as err:
        workers.run_forked(exits, _sets(6), 2)
    assert err.value.code == "E19999" and "exit status 3" in err.value.message


def test_a_damaged_result_file_is_refused_before_its_sizes_are_used(tmp_path):
    path = tmp_path / "w.bin"
    with open(path, "wb") as f:
        workers._write_outputs(f, 0, {"y": np.ones((2, 2), np.float32)})
    good = path.read_bytes()
    assert workers._read_results(str(path), 1)[0][0]["y"].shape == (2, 2)
    path.write_bytes(good[:-40])                        # truncated inside the array
    with pytest.raises(ValueError):
        workers._read_results(str(path), 1)
    path.write_bytes(good.replace(b"[2, 2]", b"[9, 9]"))   # a shape the bytes do not hold
    with pytest.raises(ValueError):
        workers._read_results(str(path), 1)
    path.write_bytes(good)
    with pytest.raises(ValueError):                      # an index beyond the inputs
        workers._read_results(str(path), 0)
    path.write_bytes((1 << 30).to_bytes(4, "little") + b"{}")
    with pytest.raises(ValueError):
        workers._read_results(str(path), 1)


def test_run_many_forks_after_preparing_and_never_reloads_the_model(tmp_path, monkeypatch):
    from atc_py import zoo
    import cli as atc_cli

    onnx_path = zoo.save("resnet50", str(tmp_path), small=True)
    assert atc_cli.main([f"--model={onnx_path}", "--framework=5", f"--output={tmp_path / 'r'}",
                         "--soc_version=Ascend310P3", "--log=error"]) == 0
    om = str(tmp_path / "r.om")
    model = runner.load_model(om)
    sets = [runner.random_inputs(model.graph, seed) for seed in range(5)]
    want = runner.run_many(om, sets, workers=1, model=model).outputs

    def no_reload(*args, **kwargs):
        raise AssertionError("a worker loaded or prepared the model again")

    monkeypatch.setattr(runner, "load_model", no_reload)
    monkeypatch.setattr(runner, "prepare", no_reload)
    many = runner.run_many(om, sets, workers=2, model=model)
    assert many.workers == 2 and len(many.per_worker) == 2 and many.host_time_ms["count"] == 5
    for got, ref in zip(many.outputs, want):
        for name in ref:
            np.testing.assert_array_equal(got[name], ref[name])


def test_the_scaling_bench_times_ours_next_to_onnxruntime(capsys):
    """bench/bench_dataset_scaling.py (bench/RESULTS.md's dataset-mode figures) on the small
    ResNet-50: every row is timed and printed with its scaling and CPU time."""
    import importlib.util

    path = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "bench",
                        "bench_dataset_scaling.py")
    spec = importlib.util.spec_from_file_location("bench_dataset_scaling", path)
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    before = blas.threads()
    try:
        assert bench.main(["--small", "--inputs", "4", "--rounds", "1"]) == 0
    finally:
        if before:
            blas.set_threads(before)
    rows = [line.split() for line in capsys.readouterr().out.splitlines()]
    timed = {" ".join(r[:3]): r for r in rows if r[:1] in (["sim"], ["ort"])}
    assert set(timed) == {"sim 1 thread", "sim 1 proc", "sim 2 workers", "ort 1 thread", "ort 2 procs"}
    assert timed["sim 1 thread"][4] == timed["ort 1 thread"][4] == "1.00x"
    assert all(float(r[3]) > 0 and float(r[7]) > 0 for r in timed.values())


def test_a_malformed_result_header_or_string_is_a_value_error_not_a_traceback(tmp_path):
    """Whatever a result file holds, reading it back raises ValueError (run_forked's E19999):
    a header that is not an object, lacks a field, or a string tensor whose heads point
    outside its bytes."""
    path = tmp_path / "w.bin"

    def record(header: bytes, payload: bytes = b"") -> bytes:
        return len(header).to_bytes(4, "little") + header + payload

    with open(path, "wb") as f:
        workers._write_outputs(f, 0, {"s": np.array(["ab", "c"], dtype=STRING)})
    good = path.read_bytes()
    damaged = [record(b"[]"), record(b'{"index": 0, "dtype": "float32", "shape": [1], "bytes": 4}', b"\0" * 4),
               record(b'{"index": 0, "name": "y", "dtype": "float32", "shape": [1], "bytes": 4.0}', b"\0" * 4),
               record(b'{"stats": {"bogus": 1}}'), record(b'{"error": {"index": 0}}'),
               good.replace((32).to_bytes(8, "little"), (1 << 40).to_bytes(8, "little"), 1)]
    for data in damaged:
        path.write_bytes(data)
        with pytest.raises(ValueError):
            workers._read_results(str(path), 1)


def test_a_fork_the_system_refuses_leaves_the_work_to_the_workers_already_running(monkeypatch):
    real_fork, forks = workers._fork, []

    def fork_once():
        if forks:
            raise BlockingIOError(11, "Resource temporarily unavailable")
        forks.append(1)
        return real_fork()

    monkeypatch.setattr(workers, "_fork", fork_once)
    outputs, stats = workers.run_forked(lambda feeds: {"y": feeds["x"] + 1}, _sets(5), 3)
    assert [float(o["y"][0, 0]) for o in outputs] == [k + 1.0 for k in range(5)] and len(stats) == 2


def test_where_fork_is_unsafe_every_input_runs_in_this_process(monkeypatch):
    """run_forked itself keeps the Linux-only rule (the bench calls it directly): elsewhere it
    runs everything here, and never asks for the fork context (Windows has none)."""
    import multiprocessing
    monkeypatch.setattr(workers, "can_fork", lambda: False)
    real = multiprocessing.get_context

    def no_fork(method=None):
        assert method != "fork", "forked where fork is unsafe"
        return real(method)

    monkeypatch.setattr(multiprocessing, "get_context", no_fork)
    parent = os.getpid()
    outputs, stats = workers.run_forked(lambda feeds: {"pid": np.array(os.getpid())}, _sets(4), 3)
    assert {int(o["pid"]) for o in outputs} == {parent} and len(stats) == 1 and stats[0].inputs == 4


def test_atc_sim_dataset_mode_reports_a_workers_failure_as_one_process_would(work, capsys, monkeypatch):
    """atc-sim on an input folder whose fourth file has an index out of range: with the
    inferences after the first run by a forked worker, the [ERROR] line, its E16004 and the
    exit code are those of a one-process run, and the error raised is the same class."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    table = numpy_helper.from_array(np.arange(40, dtype=np.float32).reshape(10, 4), "table")
    graph = helper.make_graph([helper.make_node("Gather", ["table", "idx"], ["y"], axis=0)], "gather",
                              [helper.make_tensor_value_info("idx", TensorProto.INT64, [3])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [3, 4])], [table])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(work / "g.onnx"))
    rc, text = atc(capsys, *base(work / "g.onnx", work / "g"))
    assert rc == 0, text
    (work / "idx").mkdir()
    for k in range(6):
        np.save(work / "idx" / f"sample_{k}.npy", np.array([0, 1, 50 if k == 3 else k], np.int64))

    raised = []
    real_run_forked, real_work, parent = workers.run_forked, workers._work, os.getpid()

    def spy(*args, **kwargs):
        try:
            return real_run_forked(*args, **kwargs)
        except BaseException as exc:
            raised.append(exc)
            raise

    def forks_only(forward, input_sets, counter, t0, sink):
        if os.getpid() != parent:
            return real_work(forward, input_sets, counter, t0, sink)
        deadline = time.monotonic() + 60          # this process leaves every input to the fork
        while counter.value < len(input_sets) and time.monotonic() < deadline:
            time.sleep(0.01)
        return workers.WorkerStats()

    monkeypatch.setattr(blas, "free_cores", lambda: 1)
    rc_one, text_one = run_sim(capsys, f"--model={work / 'g.om'}", f"--input={work / 'idx'}")
    monkeypatch.setattr(blas, "free_cores", lambda: 2)
    monkeypatch.setattr(workers, "run_forked", spy)
    monkeypatch.setattr(workers, "_work", forks_only)
    rc_forked, text_forked = run_sim(capsys, f"--model={work / 'g.om'}", f"--input={work / 'idx'}")

    def error_lines(text):
        return [line for line in text.splitlines() if "[ERROR]" in line or "Solution:" in line]

    assert rc_one == rc_forked == 1
    assert error_lines(text_one) == error_lines(text_forked) and "E16004" in error_lines(text_one)[0], text_forked
    assert "out of range" in error_lines(text_forked)[0]
    assert len(raised) == 1 and type(raised[0]) is InvalidNode and raised[0].code == "E16004"
