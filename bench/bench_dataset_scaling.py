"""Does dataset mode give N x the inferences per second on N cores -- and does onnxruntime?

Why: issue 14 asks that dataset mode (many inputs, `atc-sim --input <folder>`) spreads its
inferences over processes so that N cores give close to N times the throughput of one.  What
"close to N x" can mean on this machine is measured in the same run: onnxruntime, one
intra-op thread per process, spread over the same number of processes by the same forking
runner (simulator/workers.py; each onnxruntime process builds its own session).  When both
stay below N x by the same amount, the limit is the machine's (shared L3 and memory
bandwidth), not ours.

This compiles a zoo model in-process (--precision_mode=force_fp32), writes the .om, makes
`--inputs` random input sets and times, alternated for `--rounds` rounds so a change in the
machine's load hits every row alike:
  sim 1 thread    runner.run_many, 1 worker, BLAS fixed at 1 thread: one core, the base
  sim 1 proc      runner.run_many, 1 worker, BLAS on the free cores (one process alone)
  sim N workers   runner.run_many, N worker processes of one BLAS thread each (dataset mode)
  ort 1 / ort N   onnxruntime on the .onnx, 1 and N processes of one thread each
Per row: the median over the rounds of the inferences per second on the wall clock (model
load and worker start-up included, as a user sees it) and of the forward-only rate (the sum
over the workers of 1000 / their median ms per forward), each as a multiple of its own
1-thread row; the median CPU ms per forward (a worker's thread; one process's all threads
for the 1-process rows), which grows with N only through what the processes share -- caches
and memory bandwidth -- and which other processes' time slices do not inflate; the workers'
start-up (ms from the call to each worker's first forward) and the load average before and
after: on a shared machine the figure says what the other
processes left free, so read it with the load.

    python3 bench/bench_dataset_scaling.py [--model resnet50] [--inputs 24] [--workers 2] [--rounds 3]
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)


def compile_om(name: str, workdir: str, small: bool) -> tuple:
    import atc_py
    from atc_py import zoo

    onnx_path = zoo.save(name, workdir, small=small)
    atc_py.compile(onnx_path, output=os.path.join(workdir, name), soc_version="Ascend310P3",
                   precision_mode="force_fp32")
    return onnx_path, os.path.join(workdir, name + ".om")


def forward_rate(per_worker) -> float:
    """Inferences per second the workers' forwards alone allow: sum of 1000 / median ms."""
    return sum(1000.0 / statistics.median(w.forward_ms) for w in per_worker if w.forward_ms)


def cpu_ms(per_worker) -> float:
    """Median CPU ms per forward over all workers (all of a process's threads for one worker)."""
    return statistics.median(t for w in per_worker for t in w.cpu_ms)


def run_sim(om: str, sets: list, workers: int, blas_threads=None) -> tuple:
    from simulator import runner

    result = runner.run_many(om, sets, workers=workers, blas_threads=blas_threads)
    assert result.workers == workers, result.workers
    return len(sets) / result.wall_s, forward_rate(result.per_worker), result.per_worker


def run_ort(onnx_path: str, sets: list, workers: int) -> tuple:
    """onnxruntime, one thread per process, over `workers` processes; each process makes its
    own session on its first input (onnxruntime sessions are not shared over fork)."""
    import onnxruntime as ort
    from simulator import workers as forked

    sessions = {}

    def forward(feeds):
        session = sessions.get(os.getpid())
        if session is None:
            options = ort.SessionOptions()
            options.intra_op_num_threads = options.inter_op_num_threads = 1
            session = sessions[os.getpid()] = ort.InferenceSession(onnx_path, options,
                                                                   providers=["CPUExecutionProvider"])
            session.run(None, feeds)            # its first run, as our load prepares kernels
        return dict(zip([o.name for o in session.get_outputs()], session.run(None, feeds)))

    t0 = time.perf_counter()
    _, per_worker = forked.run_forked(forward, sets, workers)
    return len(sets) / (time.perf_counter() - t0), forward_rate(per_worker), per_worker


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="resnet50", help="a zoo model with static input shapes")
    parser.add_argument("--small", action="store_true", help="the zoo's small config (a quick check)")
    parser.add_argument("--inputs", type=int, default=24, help="input sets per run (one inference each)")
    parser.add_argument("--workers", type=int, default=2, help="the largest worker count to time")
    parser.add_argument("--rounds", type=int, default=3, help="runs per row, alternated")
    parser.add_argument("--no_ort", action="store_true", help="skip the onnxruntime rows")
    args = parser.parse_args(argv)

    from simulator import blas, runner

    print(f"{os.cpu_count()} CPUs, {blas.usable_cores()} usable, {blas.free_cores()} free now; "
          f"load average before: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    counts = list(range(2, args.workers + 1))
    rows = {"sim 1 thread": lambda: run_sim(om, sets, 1, blas_threads=1),
            "sim 1 proc": lambda: run_sim(om, sets, 1)}
    rows.update({f"sim {n} workers": (lambda n=n: run_sim(om, sets, n)) for n in counts})
    if not args.no_ort:
        rows["ort 1 thread"] = lambda: run_ort(onnx_path, sets, 1)
        rows.update({f"ort {n} procs": (lambda n=n: run_ort(onnx_path, sets, n)) for n in counts})
    walls = {k: [] for k in rows}
    forwards = {k: [] for k in rows}
    cpus = {k: [] for k in rows}
    starts = {k: [] for k in rows}
    with tempfile.TemporaryDirectory() as tmp:
        onnx_path, om = compile_om(args.model, tmp, args.small)
        graph = runner.load_model(om, prepare_kernels=False).graph
        sets = [runner.random_inputs(graph, seed) for seed in range(args.inputs)]
        for _ in range(args.rounds):
            for key, timed in rows.items():
                wall, fwd, per_worker = timed()
                walls[key].append(wall)
                forwards[key].append(fwd)
                cpus[key].append(cpu_ms(per_worker))
                starts[key].append([round(w.start_ms) for w in per_worker])
    print(f"load average after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    print(f"{args.model}{' (small)' if args.small else ''}: {args.inputs} inferences per run, "
          f"{args.rounds} rounds, median over the rounds; scaling = the row / its own 1-thread row")
    print(f"{'':>14} {'inferences/s':>12} {'scaling':>8} {'forward-only/s':>14} {'scaling':>8} {'CPU ms/fwd':>10}  "
          f"rounds (inferences/s); workers' start-up ms (last round)")
    for key in rows:
        base = key.split()[0] + " 1 thread"
        wall, fwd = statistics.median(walls[key]), statistics.median(forwards[key])
        base_wall, base_fwd = statistics.median(walls[base]), statistics.median(forwards[base])
        print(f"{key:>14} {wall:>12.2f} {wall / base_wall:>7.2f}x {fwd:>14.2f} {fwd / base_fwd:>7.2f}x "
              f"{statistics.median(cpus[key]):>10.1f}  "
              + " ".join(f"{x:.2f}" for x in walls[key]) + f"; {starts[key][-1]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
