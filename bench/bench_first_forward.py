"""How much more than a steady forward does the first forward of a freshly loaded .om cost?

Why: issue 14 wants the first forward within 1.5x of the steady state, the model's memory
prepared at load as aclmdlLoad prepares it (ge/workspace.py).  The first forward is a
property of a fresh process, so each measurement is a fresh interpreter: it loads the .om as
atc-sim does (timed: load pays for the workspace now), runs --forwards forwards with one
BLAS thread and reports, per forward, wall time, CPU time of the thread (page faults are
charged to it) and its system part, and the peak resident memory after load and after the
forwards.  `--other DIR` runs another checkout of atc_py (e.g. `git archive main` unpacked)
in the same minutes, interleaved process by process, so both see the same load; `--ort`
adds onnxruntime (1 thread) on the same ONNX, its first run against its later ones.  The
default model is the README's example (seed_testmodel, compiled for Ascend910 as the
README's first command does).  Medians over --processes; `uptime` before and after.

    python3 bench/bench_first_forward.py [--processes 7] [--forwards 6] [--other DIR] [--ort]
                                         [--om PATH --onnx PATH]
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

_SIM = r"""
import json, resource, statistics, sys, time
t0 = time.perf_counter()
from simulator import runner
model = runner.load_model(sys.argv[1])
load = time.perf_counter() - t0
ws = getattr(model.plan, "workspace", None)
feeds = runner.random_inputs(model.graph, 0)
peak = lambda: resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
rows, after_load = [], peak()
for _ in range(int(sys.argv[2])):
    u0, w0 = resource.getrusage(resource.RUSAGE_THREAD), time.perf_counter()
    runner.forward(model, feeds, blas_threads=1)
    w1, u1 = time.perf_counter(), resource.getrusage(resource.RUSAGE_THREAD)
    rows.append([w1 - w0, (u1.ru_utime + u1.ru_stime) - (u0.ru_utime + u0.ru_stime), u1.ru_stime - u0.ru_stime, peak()])
print(json.dumps({"load": load, "workspace_mb": ws.nbytes / 2**20 if ws is not None else 0.0,
                  "rows": rows, "after_load_mb": after_load}))
"""

_ORT = r"""
import json, resource, sys, time
import numpy as np, onnxruntime as ort
opts = ort.SessionOptions(); opts.intra_op_num_threads = 1; opts.inter_op_num_threads = 1
t0 = time.perf_counter()
sess = ort.InferenceSession(sys.argv[1], opts, providers=["CPUExecutionProvider"])
load = time.perf_counter() - t0
feeds = {i.name: np.random.default_rng(0).standard_normal([d if isinstance(d, int) else 1 for d in i.shape],
                                                           dtype=np.float32) for i in sess.get_inputs()}
rows = []
for _ in range(int(sys.argv[2])):
    u0, w0 = resource.getrusage(resource.RUSAGE_THREAD), time.perf_counter()
    sess.run(None, feeds)
    w1, u1 = time.perf_counter(), resource.getrusage(resource.RUSAGE_THREAD)
    rows.append([w1 - w0, (u1.ru_utime + u1.ru_stime) - (u0.ru_utime + u0.ru_stime), u1.ru_stime - u0.ru_stime,
                 resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024])
print(json.dumps({"load": load, "workspace_mb": 0.0, "rows": rows, "after_load_mb": rows[0][3]}))
"""


def build_readme_model(workdir: str) -> tuple:
    sys.path.insert(0, REPO)
    import cli as atc_cli
    from atc_py import zoo

    onnx_path = zoo.save("seed_testmodel", workdir)
    stem = os.path.join(workdir, "seed_testmodel")
    if atc_cli.main([f"--model={onnx_path}", "--framework=5", f"--output={stem}", "--soc_version=Ascend910",
                     "--log=error"]) != 0:
        raise SystemExit("atc failed")
    return onnx_path, stem + ".om"


def measure(code: str, tree: str, model: str, forwards: int) -> dict:
    env = {**os.environ, "PYTHONPATH": tree}
    done = subprocess.run([sys.executable, "-c", code, model, str(forwards)], env=env, cwd=tree, check=True,
                          capture_output=True, text=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def summary(runs: list) -> dict:
    med = statistics.median
    first = [r["rows"][0] for r in runs]
    steady = [med(row[0] for row in r["rows"][1:]) for r in runs]
    steady_cpu = [med(row[1] for row in r["rows"][1:]) for r in runs]
    steady_sys = [med(row[2] for row in r["rows"][1:]) for r in runs]
    return {"load_s": med(r["load"] for r in runs), "workspace_mb": med(r["workspace_mb"] for r in runs),
            "first_wall_ms": 1e3 * med(f[0] for f in first), "steady_wall_ms": 1e3 * med(steady),
            "first_cpu_ms": 1e3 * med(f[1] for f in first), "steady_cpu_ms": 1e3 * med(steady_cpu),
            "first_sys_ms": 1e3 * med(f[2] for f in first), "steady_sys_ms": 1e3 * med(steady_sys),
            "ratio_wall": med(r["rows"][0][0] / med(row[0] for row in r["rows"][1:]) for r in runs),
            "ratio_cpu": med(r["rows"][0][1] / med(row[1] for row in r["rows"][1:]) for r in runs),
            "rss_load_mb": med(r["after_load_mb"] for r in runs),
            "rss_first_growth_mb": med(r["rows"][0][3] - r["after_load_mb"] for r in runs),
            "rss_peak_mb": med(r["rows"][-1][3] for r in runs)}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--processes", type=int, default=7)
    ap.add_argument("--forwards", type=int, default=6)
    ap.add_argument("--other", help="another atc_py checkout to measure interleaved (e.g. main's)")
    ap.add_argument("--ort", action="store_true", help="also onnxruntime, 1 thread, on the same ONNX")
    ap.add_argument("--om")
    ap.add_argument("--onnx")
    args = ap.parse_args(argv)
    print("uptime before:", subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip())
    with tempfile.TemporaryDirectory() as workdir:
        onnx_path, om = (args.onnx, args.om) if args.om else build_readme_model(workdir)
        sides = [("this", _SIM, REPO, om)]
        if args.other:
            sides.append((os.path.basename(os.path.abspath(args.other)), _SIM, os.path.abspath(args.other), om))
        if args.ort and onnx_path:
            sides.append(("onnxruntime", _ORT, REPO, onnx_path))
        runs = {name: [] for name, *_ in sides}
        for _ in range(args.processes):                  # interleaved: every side sees the same minutes
            for name, code, tree, model in sides:
                runs[name].append(measure(code, tree, model, args.forwards))
    print("uptime after: ", subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip())
    print(f"medians of {args.processes} fresh processes, {args.forwards} forwards each, 1 BLAS thread")
    head = ("side", "load s", "ws MB", "first ms", "steady ms", "first/steady", "CPU first/steady",
            "CPU ratio", "sys first/steady ms", "RSS load/+first/peak MB")
    print(" | ".join(head))
    for name, _, _, _ in sides:
        s = summary(runs[name])
        print(f"{name} | {s['load_s']:.2f} | {s['workspace_mb']:.0f} | {s['first_wall_ms']:.0f} | "
              f"{s['steady_wall_ms']:.0f} | {s['ratio_wall']:.2f} | {s['first_cpu_ms']:.0f}/{s['steady_cpu_ms']:.0f} | "
              f"{s['ratio_cpu']:.2f} | {s['first_sys_ms']:.0f}/{s['steady_sys_ms']:.0f} | "
              f"{s['rss_load_mb']:.0f}/+{s['rss_first_growth_mb']:.0f}/{s['rss_peak_mb']:.0f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
