"""Compile every full-size zoo model with `atc`, open each .om with Netron's own parser, and
print per model: ONNX nodes, kernels unfused/fused, matches per pattern, simulated latency
unfused/fused and the speedup -- all measured in this one run.

With --compare, each .om also runs in the simulator on seeded inputs and is compared with
onnxruntime on the original ONNX (the tolerance of simulator/COMPARE.md).

usage: python bench/compile_zoo.py [--soc Ascend910] [--models a,b] [--workdir DIR] [--no-netron]
                                   [--compare] [--precision_mode force_fp16]
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from atc_py import zoo  # noqa: E402
from atc_py.compiler import compile_model  # noqa: E402
from atc_py.options import AtcOptions  # noqa: E402
from atc_py.report import build_report  # noqa: E402
from om_format.container import write_om  # noqa: E402


def netron_ops(path: str):
    """Number of ops Netron's om.js draws, or None when Netron or Node.js is missing."""
    try:
        import netron
    except ImportError:
        return None
    node = shutil.which("node")
    if node is None:
        return None
    harness = os.path.join(ROOT, "tests", "netron", "harness.mjs")
    proc = subprocess.run([node, "--max-old-space-size=8192", harness, os.path.dirname(netron.__file__), path, "--sizes"],
                          capture_output=True, text=True, timeout=1800)
    if proc.returncode != 0:
        raise RuntimeError(f"Netron failed on {path}: {proc.stderr[-2000:]}")
    return sum(len(g["nodes"]) for g in json.loads(proc.stdout)["graphs"])


def compare(om_path: str, onnx_path: str) -> str:
    """Simulator outputs vs onnxruntime on the ONNX, one summary line."""
    from simulator import runner
    from simulator.compare import compare_with_onnx
    model = runner.load_model(om_path)
    feeds = runner.random_inputs(model.graph)
    result = runner.run(model, feeds, loop=1, warmup_count=0)
    checks = compare_with_onnx(onnx_path, model.graph, feeds, result.outputs, model.loaded.compute_dtypes)
    return "; ".join(f"{c.name}: {c.describe()}" for c in checks)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--soc", default="Ascend910")
    parser.add_argument("--models", default=",".join(zoo.MODELS))
    parser.add_argument("--workdir", default="")
    parser.add_argument("--no-netron", action="store_true")
    parser.add_argument("--compare", action="store_true")
    parser.add_argument("--precision_mode", default="force_fp16")
    args = parser.parse_args()
    workdir = args.workdir or tempfile.mkdtemp(prefix="atc_zoo_")
    print(f"soc {args.soc}, precision {args.precision_mode}, workdir {workdir}")
    header = (f"{'model':<18}{'onnx':>6}{'k.unfused':>10}{'k.fused':>9}{'t.unfused(us)':>15}"
              f"{'t.fused(us)':>13}{'speedup':>9}{'netron ops':>11}{'compile s':>10}  matches")
    print(header)
    for name in args.models.split(","):
        path = zoo.save(name, workdir)
        options = AtcOptions(model=path, framework="5", output=os.path.join(workdir, name),
                             soc_version=args.soc, precision_mode=args.precision_mode)
        options.validate()
        start = time.perf_counter()
        result = compile_model(options)
        write_om(options.om_path, result.partitions.as_dict(), name=name, ops=len(result.graph.nodes),
                 platform_version=args.soc)
        seconds = time.perf_counter() - start
        report = build_report(result, args.soc, options.precision_mode)
        drawn = None if args.no_netron else netron_ops(options.om_path)
        matches = ", ".join(f"{p['pattern']} {p['effect']}/{p['matched']}" for p in report.patterns)
        print(f"{name:<18}{result.onnx_node_count:>6}{report.kernels_before:>10}{report.kernels_after:>9}"
              f"{report.time_before_us:>15.1f}{report.time_after_us:>13.1f}{report.overall_speedup:>8.2f}x"
              f"{str(drawn):>11}{seconds:>10.1f}  {matches}", flush=True)
        if args.compare:
            print(f"    compare: {compare(options.om_path, path)}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
