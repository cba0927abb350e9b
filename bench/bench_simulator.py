"""How fast is the simulator's numeric forward next to onnxruntime on one thread?

Why: users run whole models through atc-sim --compare; the numpy executor should stay
within 2x of onnxruntime's single-thread time.  For full-size zoo resnet50 and bert_base
(static input shapes) this builds the ONNX, compiles it with atc in-process
(--precision_mode=force_fp32, fusion as the pipeline has it), loads the .om as atc-sim
does, and times in the same run, on the same inputs:
  sim      our executor on the .om graph (numpy BLAS limited to 1 thread)
  ort_off  onnxruntime, ORT_DISABLE_ALL, 1 thread
  ort_on   onnxruntime, ORT_ENABLE_ALL, 1 thread
It prints the median of --repeat timed runs (after one warm-up), the ratios, and where
the simulator's time goes (per op type).

    python3 bench/bench_simulator.py [--models resnet50,bert_base] [--repeat 5] [--workdir DIR]
"""
from __future__ import annotations

import argparse
import ctypes
import glob
import os
import sys
import tempfile
import time
from collections import defaultdict

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)

import numpy as np  # noqa: E402

INPUT_SHAPES = {"resnet50": "input:1,3,224,224", "bert_base": "input_ids:1,128;attention_mask:1,128"}


def _openblas():
    """numpy's bundled OpenBLAS through ctypes (threadpoolctl is not a dependency)."""
    libs = glob.glob(os.path.join(os.path.dirname(np.__file__), "..", "numpy.libs", "*openblas*"))
    if not libs:
        return None
    lib = ctypes.CDLL(libs[0])
    for name in ("scipy_openblas_get_corename64_", "scipy_openblas_get_config64_"):
        if hasattr(lib, name):
            getattr(lib, name).restype = ctypes.c_char_p
    return lib


def blas_setup(threads: int) -> str:
    lib = _openblas()
    if lib is None or not hasattr(lib, "scipy_openblas_set_num_threads64_"):
        return "numpy BLAS: unknown build (threads not limited)"
    lib.scipy_openblas_set_num_threads64_(ctypes.c_int(threads))
    core = lib.scipy_openblas_get_corename64_().decode()
    return (f"numpy BLAS: {lib.scipy_openblas_get_config64_().decode()}; kernel {core}; "
            f"threads {lib.scipy_openblas_get_num_threads64_()}; OPENBLAS_CORETYPE="
            f"{os.environ.get('OPENBLAS_CORETYPE', '(unset)')}")


def compile_om(name: str, workdir: str) -> tuple:
    import cli as atc_cli
    from atc_py import zoo

    onnx_path = zoo.save(name, workdir, small=False)
    stem = os.path.join(workdir, f"{name}_fp32")
    rc = atc_cli.main([f"--model={onnx_path}", "--framework=5", f"--output={stem}", "--soc_version=Ascend910",
                       "--precision_mode=force_fp32", f"--input_shape={INPUT_SHAPES[name]}"])
    if rc != 0:
        raise SystemExit(f"atc failed for {name}")
    return onnx_path, stem + ".om"


def median_time(fn, repeat: int) -> float:
    fn()   # warm-up
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return float(np.median(times)) * 1e3


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
    from simulator.executor import run_graph

    per_type, count = defaultdict(float), defaultdict(int)
    last = [time.perf_counter()]

    def tick(node):
        now = time.perf_counter()
        per_type[node.op_type] += (now - last[0]) * 1e3
        count[node.op_type] += 1
        last[0] = now

    last[0] = time.perf_counter()
    run_graph(model.graph, feeds, model.dtype_of, on_kernel=tick)
    return sorted(((t, ms, count[t]) for t, ms in per_type.items()), key=lambda r: -r[1])


def bench(name: str, workdir: str, repeat: int) -> dict:
    from simulator import runner
    from simulator.executor import run_graph

    t0 = time.perf_counter()
    onnx_path, om = compile_om(name, workdir)
    compile_s = time.perf_counter() - t0
    model = runner.load_model(om)
    feeds = runner.random_inputs(model.graph)
    sim_ms = median_time(lambda: run_graph(model.graph, feeds, model.dtype_of), repeat)
    result = {"model": name, "tasks": len(model.loaded.tasks), "compile_s": compile_s, "sim_ms": sim_ms}
    for key, enable in (("ort_off_ms", False), ("ort_on_ms", True)):
        session = ort_session(onnx_path, enable)
        names = [i.name for i in session.get_inputs()]
        result[key] = median_time(lambda: session.run(None, {n: feeds[n] for n in names}), repeat)
    result["breakdown"] = kernel_breakdown(model, feeds)
    return result


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", default="resnet50,bert_base")
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--blas_threads", type=int, default=1, help="numpy BLAS threads (default 1, like ORT)")
    parser.add_argument("--workdir", default="", help="where the .onnx/.om go (default: a temp folder)")
    args = parser.parse_args(argv)
    print(blas_setup(args.blas_threads))
    import onnxruntime as ort
    print(f"numpy {np.__version__}, onnxruntime {ort.__version__}, {os.cpu_count()} CPUs")
    with tempfile.TemporaryDirectory() as tmp:
        workdir = args.workdir or tmp
        os.makedirs(workdir, exist_ok=True)
        rows = [bench(name, workdir, args.repeat) for name in args.models.split(",")]
    print()
    print(f"{'model':<10} {'tasks':>5} {'sim ms':>9} {'ort_off ms':>10} {'ort_on ms':>10} "
          f"{'sim/ort_off':>11} {'sim/ort_on':>10}")
    for r in rows:
        print(f"{r['model']:<10} {r['tasks']:>5} {r['sim_ms']:>9.1f} {r['ort_off_ms']:>10.1f} {r['ort_on_ms']:>10.1f} "
              f"{r['sim_ms'] / r['ort_off_ms']:>11.2f} {r['sim_ms'] / r['ort_on_ms']:>10.2f}")
    for r in rows:
        total = sum(ms for _, ms, _ in r["breakdown"])
        top = ", ".join(f"{t} {ms:.1f} ms ({100 * ms / total:.0f}%, {n}x)" for t, ms, n in r["breakdown"][:6])
        print(f"{r['model']} simulator time by op type: {top}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
