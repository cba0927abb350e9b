"""Does dataset mode give N x the inferences per second on N cores?

Why: issue 14 asks that dataset mode (many inputs, `atc-sim --input <folder>`) spreads its
inferences over processes so that N cores give close to N times the throughput of one.  This
compiles a zoo model in-process (--precision_mode=force_fp32), writes the .om, makes
`--inputs` random input sets and runs them through `simulator.runner.run_many` -- the code
dataset mode runs on -- with 1 worker process and with each larger worker count up to
`--workers`, alternating the counts for `--rounds` rounds so a change in the machine's load
hits every count alike.  It prints per count the median inferences per second over the rounds
(wall clock, worker start-up and model load included, as a user sees it) and the forward-only
rate (workers x 1000 / median ms per forward), each as a multiple of one worker's, with the
load average before and after: on a shared machine the figure says what the other processes
left free, so read it with the load.

    python3 bench/bench_dataset_scaling.py [--model resnet50] [--inputs 24] [--workers 2] [--rounds 3]
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)


def compile_om(name: str, workdir: str, small: bool) -> str:
    import atc_py
    from atc_py import zoo

    onnx_path = zoo.save(name, workdir, small=small)
    atc_py.compile(onnx_path, output=os.path.join(workdir, name), soc_version="Ascend310P3",
                   precision_mode="force_fp32")
    return os.path.join(workdir, name + ".om")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="resnet50", help="a zoo model with static input shapes")
    parser.add_argument("--small", action="store_true", help="the zoo's small config (a quick check)")
    parser.add_argument("--inputs", type=int, default=24, help="input sets per run (one inference each)")
    parser.add_argument("--workers", type=int, default=2, help="the largest worker count to time")
    parser.add_argument("--rounds", type=int, default=3, help="runs per worker count, alternated")
    args = parser.parse_args(argv)

    from simulator import blas, runner

    print(f"{os.cpu_count()} CPUs, {blas.usable_cores()} usable, {blas.free_cores()} free now; "
          f"load average before: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    counts = list(range(1, args.workers + 1))
    walls = {n: [] for n in counts}
    forwards = {n: [] for n in counts}
    with tempfile.TemporaryDirectory() as tmp:
        om = compile_om(args.model, tmp, args.small)
        graph = runner.load_model(om, prepare_kernels=False).graph
        sets = [runner.random_inputs(graph, seed) for seed in range(args.inputs)]
        for _ in range(args.rounds):
            for n in counts:
                result = runner.run_many(om, sets, workers=n)
                assert result.workers == n, result.workers
                walls[n].append(args.inputs / result.wall_s)
                forwards[n].append(n * 1000.0 / result.host_time_ms["median"])
    print(f"load average after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    print(f"{args.model}{' (small)' if args.small else ''}: {args.inputs} inferences per run, "
          f"{args.rounds} rounds, median over the rounds")
    print(f"{'workers':>7} {'inferences/s':>12} {'scaling':>8} {'forward-only/s':>14} {'scaling':>8}  rounds (inferences/s)")
    base_wall, base_fwd = statistics.median(walls[1]), statistics.median(forwards[1])
    for n in counts:
        wall, fwd = statistics.median(walls[n]), statistics.median(forwards[n])
        print(f"{n:>7} {wall:>12.2f} {wall / base_wall:>7.2f}x {fwd:>14.2f} {fwd / base_fwd:>7.2f}x  "
              + " ".join(f"{x:.2f}" for x in walls[n]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
