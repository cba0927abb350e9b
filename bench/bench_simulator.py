"""How fast is the simulator's numeric forward next to onnxruntime on one thread, on an idle
machine and on a busy one?

Why: users run whole models through atc-sim --compare and dataset runs; the numpy executor
must keep up with onnxruntime and must not collapse when another process is busy.  For the
full-size zoo models (static input shapes) this builds the ONNX, compiles it with atc
in-process (--precision_mode=force_fp32, fusion as the pipeline has it), loads the .om as
atc-sim does (kernels prepared at load) and times, interleaved in the same run on the same
inputs:
  sim      our executor on the .om graph, BLAS threads as atc-sim sets them (one per free
           core, re-read before each forward; --blas_threads N fixes them instead)
  ort      onnxruntime with its default optimizations (ORT_ENABLE_ALL), 1 intra-op thread
  ort_off  onnxruntime, ORT_DISABLE_ALL, 1 thread (the --compare reference)
It prints the median of --repeat timed runs, min and max, the ratios, the first forward
after load against the median, and where the simulator's time goes (per op type).
`--compete N` keeps N CPU-bound processes busy for the whole measurement (they are stopped
at the end); `--many K` also times runner.run_many on K input sets with 1 and with all
free cores.  The load average before and after is printed with the figures.

    python3 bench/bench_simulator.py [--models resnet50] [--repeat 9] [--compete 1] [--many 16]
"""
from __future__ import annotations

import argparse
import multiprocessing
import os
import sys
import tempfile
import time
from collections import defaultdict

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)

import numpy as np  # noqa: E402

INPUT_SHAPES = {"resnet50": "input:1,3,224,224", "bert_base": "input_ids:1,128;attention_mask:1,128"}


def _spin() -> None:        # a CPU-bound competitor
    while True:
        pass


def compile_om(name: str, workdir: str) -> tuple:
    import cli as atc_cli
    from atc_py import zoo

    onnx_path = zoo.save(name, workdir, small=False)
    stem = os.path.join(workdir, f"{name}_fp32")
    rc = atc_cli.main([f"--model={onnx_path}", "--framework=5", f"--output={stem}", "--soc_version=Ascend910",
                       "--precision_mode=force_fp32", f"--input_shape={INPUT_SHAPES[name]}", "--log=error"])
    if rc != 0:
        raise SystemExit(f"atc failed for {name}")
    return onnx_path, stem + ".om"


def ort_session(path: str, enable_all: bool):
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.graph_optimization_level = (ort.GraphOptimizationLevel.ORT_ENABLE_ALL if enable_all
                                        else ort.GraphOptimizationLevel.ORT_DISABLE_ALL)
    options.intra_op_num_threads = 1
    options.inter_op_num_threads = 1
    return ort.InferenceSession(path, options, providers=["CPUExecutionProvider"])


def kernel_breakdown(model, feeds) -> list:
    """(op type, ms, kernels) of one forward, largest first: time between kernel callbacks."""
    from simulator.executor import execute

    per_type, count = defaultdict(float), defaultdict(int)
    last = [time.perf_counter()]

    def tick(node):
        now = time.perf_counter()
        per_type[node.op_type] += (now - last[0]) * 1e3
        count[node.op_type] += 1
        last[0] = now

    last[0] = time.perf_counter()
    execute(model.plan, feeds, on_kernel=tick)
    return sorted(((t, ms, count[t]) for t, ms in per_type.items()), key=lambda r: -r[1])


def _ms(fn, cpu: list = None) -> float:
    """Wall ms of fn(); its CPU ms (this process, all threads) appended to `cpu`."""
    c0, t0 = time.process_time(), time.perf_counter()
    fn()
    wall = (time.perf_counter() - t0) * 1e3
    if cpu is not None:
        cpu.append((time.process_time() - c0) * 1e3)
    return wall


def bench(name: str, workdir: str, repeat: int, blas_threads: int, many: int) -> dict:
    from simulator import blas, runner

    t0 = time.perf_counter()
    onnx_path, om = compile_om(name, workdir)
    compile_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    model = runner.load_model(om)                  # kernels prepared here, as atc-sim does
    load_s = time.perf_counter() - t0
    feeds = runner.random_inputs(model.graph)
    forward = lambda: runner.forward(model, feeds, blas_threads=blas_threads)   # noqa: E731
    first = _ms(forward)
    threads = blas.threads()
    sessions = {key: ort_session(onnx_path, enable) for key, enable in (("ort", True), ("ort_off", False))}
    feeds_of = {key: {i.name: feeds[i.name] for i in s.get_inputs()} for key, s in sessions.items()}
    for key, s in sessions.items():
        s.run(None, feeds_of[key])                 # warm-up
    times, cpu = defaultdict(list), defaultdict(list)
    for _ in range(repeat):                        # interleaved: load changes hit all three alike
        times["sim"].append(_ms(forward, cpu["sim"]))
        for key, s in sessions.items():
            times[key].append(_ms(lambda: s.run(None, feeds_of[key]), cpu[key]))
    result = {"model": name, "tasks": len(model.loaded.tasks), "compile_s": compile_s, "load_s": load_s,
              "first_ms": first, "threads_at_first": threads,
              **{f"{k}_ms": float(np.median(v)) for k, v in times.items()},
              **{f"{k}_min": float(np.min(v)) for k, v in times.items()},
              **{f"{k}_max": float(np.max(v)) for k, v in times.items()},
              **{f"{k}_cpu": float(np.median(v)) for k, v in cpu.items()}}
    result["breakdown"] = kernel_breakdown(model, feeds)
    if many:
        sets = [runner.random_inputs(model.graph, seed) for seed in range(many)]
        for workers in sorted({1, blas.usable_cores()}):    # the scaling, whatever is free now
            r = runner.run_many(om, sets, workers=workers)
            result[f"many_{workers}"] = (r.wall_s, many / r.wall_s, r.host_time_ms["median"])
    return result


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", default="resnet50")
    parser.add_argument("--repeat", type=int, default=9)
    parser.add_argument("--blas_threads", type=int, default=0,
                        help="fix numpy BLAS threads (default 0: one per free core before each forward, as atc-sim)")
    parser.add_argument("--compete", type=int, default=0, help="CPU-bound processes kept busy meanwhile")
    parser.add_argument("--many", type=int, default=0, help="also time runner.run_many on this many input sets")
    parser.add_argument("--workdir", default="", help="where the .onnx/.om go (default: a temp folder)")
    args = parser.parse_args(argv)
    from simulator import blas
    import onnxruntime as ort

    print(f"numpy {np.__version__}, onnxruntime {ort.__version__}, {os.cpu_count()} CPUs, "
          f"{blas.usable_cores()} usable; load average before: {os.getloadavg()}")
    print(blas.describe())
    competitors = [multiprocessing.get_context("spawn").Process(target=_spin, daemon=True)
                   for _ in range(args.compete)]
    for p in competitors:
        p.start()
    try:
        with tempfile.TemporaryDirectory() as tmp:
            workdir = args.workdir or tmp
            os.makedirs(workdir, exist_ok=True)
            rows = [bench(name, workdir, args.repeat, args.blas_threads, args.many)
                    for name in args.models.split(",")]
    finally:
        for p in competitors:
            p.terminate()
            p.join()
    print(f"competing CPU-bound processes: {args.compete}; load average after: {os.getloadavg()}")
    print()
    print("wall ms: median of the interleaved runs (min..max); CPU ms: median CPU time of this process per "
          "forward (all threads)")
    print(f"{'model':<10} {'sim ms':>8} {'ort ms':>8} {'ort_off ms':>10} {'sim/ort':>8} {'sim/ort_off':>11}"
          f" {'sim min..max':>16} {'ort min..max':>16} {'first/median':>12} {'CPU sim/ort':>11}")
    for r in rows:
        print(f"{r['model']:<10} {r['sim_ms']:>8.1f} {r['ort_ms']:>8.1f} {r['ort_off_ms']:>10.1f} "
              f"{r['sim_ms'] / r['ort_ms']:>8.2f} {r['sim_ms'] / r['ort_off_ms']:>11.2f} "
              f"{r['sim_min']:>7.1f}..{r['sim_max']:<7.1f} {r['ort_min']:>7.1f}..{r['ort_max']:<7.1f} "
              f"{r['first_ms'] / r['sim_ms']:>12.2f} {r['sim_cpu']:>5.0f}/{r['ort_cpu']:<5.0f}")
    for r in rows:
        print(f"{r['model']}: model load (kernels prepared) {r['load_s']:.2f} s; first forward {r['first_ms']:.1f} ms "
              f"with {r['threads_at_first']} BLAS thread(s)")
        total = sum(ms for _, ms, _ in r["breakdown"])
        top = ", ".join(f"{t} {ms:.1f} ms ({100 * ms / total:.0f}%, {n}x)" for t, ms, n in r["breakdown"][:5])
        print(f"{r['model']} simulator time by op type: {top}")
        for key in sorted(k for k in r if k.startswith("many_")):
            wall, rate, median = r[key]
            print(f"{r['model']} run_many, {key[5:]} worker(s): {rate:.2f} inferences/s "
                  f"({wall:.1f} s wall incl. start-up, median {median:.1f} ms each)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
