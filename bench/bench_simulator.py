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
`--split` splits the simulator's CPU time per conv kind (kernel size, stride, map, path,
epilogue) into BLAS GEMMs and the rest (im2col, Winograd transforms, epilogues, Python).
The compiled conv kernels (ge/ops/native.py) run unless ATC_PY_NATIVE=0 is set, their GEMMs
on weights packed at load unless ATC_PY_PACKED_GEMM=0 (then OpenBLAS's); the third line says
which path ran.
`--compete N` keeps N CPU-bound processes busy for the whole measurement (they are stopped
at the end); `--many K` also times runner.run_many on K input sets with 1 and with all
free cores; `--floor` times the model's conv GEMMs alone, one by one, in numpy (OpenBLAS)
and in onnxruntime's MLAS (a MatMul of each size), the least the simulator's forward can
take with numpy's GEMM.  The load average before and after is printed with the figures.

    python3 bench/bench_simulator.py [--models resnet50] [--repeat 9] [--blas_threads 1] [--compete 1]
                                     [--many 16] [--floor] [--split]
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


def _kernel_kind(node) -> str:
    """A conv kernel's kind for the GEMM/other split: kernel size, stride, input channels and
    map size, the path it takes (ge/ops/nn.py, ge/ops/winograd.py) and its epilogue."""
    from ge.ops import winograd

    if not node.op_type.startswith(("Conv", "DepthwiseConv", "GroupConv", "DilatedConv")):
        return node.op_type
    a, x = node.attrs, node.inputs[0].desc.shape
    k, st = list(a.get("kernel_shape") or []), list(a.get("strides") or [1] * (len(x) - 2))
    kind = f"{'x'.join(map(str, k))} s{st[0]} C{x[1]} {x[2]}x{x[3]}" if len(x) == 4 else node.op_type
    if len(x) == 4 and k == [3, 3] and st == [1, 1] and int(a.get("group", 1)) == 1:
        from ge.ops.nn import _window_geometry
        out = _window_geometry(tuple(x[2:]), k, a).out
        if winograd.applies(np.float32, (1, 1, 3, 3), 1, st, [1, 1], out):
            kind += f" Winograd F{winograd.tiling_for(out).m}"
    if a.get("residual_conv"):
        kind += " + downsample conv"
    elif len(node.inputs) > 3 and node.inputs[3] is not None:
        kind += " + residual"
    return kind


def gemm_split(model, feeds, repeat: int) -> list:
    """(kernel kind, kernels, CPU ms per forward, of which in BLAS GEMMs) by kind, largest
    first: medians over `repeat` forwards, each kernel timed between executor callbacks and
    its GEMMs (np.matmul in ge/ops/nn.py and ge/ops/winograd.py, ge.ops.openblas.gemm_into,
    and the GEMM calls of the compiled kernels -- OpenBLAS's sgemm or their own GEMM on
    prepacked weights, with its packing of the activations and, for im2col convs, the bias,
    residual and ReLU it applies in its stores -- which time themselves: ge/ops/native.py)
    timed inside it.  What is not GEMM is the kernel's own work (im2col, Winograd
    transforms, epilogues, in numpy or in C) and the executor's Python."""
    from ge.ops import native, nn, openblas, winograd
    from simulator.executor import execute

    spent = [0.0]
    native_gemm = [native.gemm_cpu_seconds(True)]        # the compiled kernels time their own sgemm calls

    def in_gemms() -> float:
        now = native.gemm_cpu_seconds(True)
        spent[0] += now - native_gemm[0]
        native_gemm[0] = now
        return spent[0]

    def timed(fn):
        def call(*args, **kwargs):
            c0 = time.process_time()
            try:
                return fn(*args, **kwargs)
            finally:
                spent[0] += time.process_time() - c0
        return call

    class _Numpy:              # numpy as ge/ops/nn.py and winograd.py see it, matmul timed
        matmul = staticmethod(timed(np.matmul))

        def __getattr__(self, name):
            return getattr(np, name)

    saved = (nn.np, winograd.np, openblas.gemm_into)
    nn.np, winograd.np, openblas.gemm_into = _Numpy(), _Numpy(), timed(saved[2])
    per = defaultdict(lambda: defaultdict(list))
    try:
        for _ in range(repeat):
            rec, last = {}, [time.process_time(), 0.0]

            def tick(node):
                now, gemms = time.process_time(), in_gemms()
                rec[node.name] = (node, (now - last[0]) * 1e3, (gemms - last[1]) * 1e3)
                last[0], last[1] = now, gemms

            last[0], last[1] = time.process_time(), in_gemms()
            execute(model.plan, feeds, on_kernel=tick)
            for name, (node, ms, gemm) in rec.items():
                per[name]["ms"].append(ms)
                per[name]["gemm"].append(gemm)
                per[name]["node"] = node
    finally:
        nn.np, winograd.np, openblas.gemm_into = saved
        native.gemm_cpu_seconds(False)
    kinds = defaultdict(lambda: [0, 0.0, 0.0])
    for entry in per.values():
        row = kinds[_kernel_kind(entry["node"])]
        row[0] += 1
        row[1] += float(np.median(entry["ms"]))
        row[2] += float(np.median(entry["gemm"]))
    return sorted(((k, n, ms, g) for k, (n, ms, g) in kinds.items()), key=lambda r: -r[2])


def conv_gemms(model) -> list:
    """(M, K, P) of the GEMM each conv kernel of the loaded graph runs (im2col form: M output
    channels, K = C_in/group x kernel taps, plus the residual conv's K, P output pixels)."""
    from codegen.fused.conv import BLOCK_SLOTS, CONV_BLOCK_OPS, HEAD_SLOTS
    from ge.ops.registry import get_op

    shapes = []
    for node in model.graph.nodes:
        if node.op_type not in CONV_BLOCK_OPS + ("ConvPoolFCFusionOp",):
            continue
        s = (HEAD_SLOTS if node.op_type == "ConvPoolFCFusionOp" else BLOCK_SLOTS).read(node.inputs)
        x, w = s["x"].desc, s["w"].desc
        group = int(node.attrs.get("group", 1))
        out = get_op("Conv").infer([x, w], node.attrs)[0]
        k = int(np.prod(w.shape[1:]))
        if node.attrs.get("residual_conv"):
            k += int(np.prod(s["res_w"].desc.shape[1:]))
        for _ in range(int(x.shape[0]) * group):
            shapes.append((int(w.shape[0]) // group, k, int(np.prod(out.shape[2:]))))
    return shapes


def _mlas_matmul(m: int, k: int, p: int):
    """onnxruntime (1 thread) running one MatMul of the same size, weight constant: MLAS."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    weight = numpy_helper.from_array(np.random.default_rng(0).standard_normal((k, m)).astype(np.float32), "w")
    graph = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["y"])], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [p, k])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [p, m])], [weight])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    with tempfile.NamedTemporaryFile(suffix=".onnx", delete=False) as f:
        f.write(model.SerializeToString())
    try:
        session = ort_session(f.name, True)
    finally:
        os.unlink(f.name)
    x = np.random.default_rng(1).standard_normal((p, k)).astype(np.float32)
    return lambda: session.run(None, {"x": x})


def gemm_floor(model, repeat: int) -> dict:
    """CPU ms of the model's conv GEMMs alone, one by one, in numpy (OpenBLAS, 1 thread) and
    in onnxruntime's MLAS (a MatMul of each size, 1 thread), interleaved: what the simulator
    cannot go below with numpy's GEMM, next to what the same multiplies cost onnxruntime."""
    from simulator import blas

    blas.set_threads(1)
    shapes = conv_gemms(model)
    sums = {"numpy": 0.0, "mlas": 0.0}
    for (m, k, p), count in sorted(((sh, shapes.count(sh)) for sh in set(shapes)), reverse=True):
        rng = np.random.default_rng(0)
        a, b = rng.standard_normal((m, k)).astype(np.float32), rng.standard_normal((k, p)).astype(np.float32)
        out = np.empty((m, p), np.float32)
        fns = {"numpy": lambda: np.matmul(a, b, out=out), "mlas": _mlas_matmul(m, k, p)}
        cpu = defaultdict(list)
        for fn in fns.values():
            fn()
        for _ in range(repeat):
            for key, fn in fns.items():
                _ms(fn, cpu[key])
        for key in sums:
            sums[key] += count * float(np.median(cpu[key]))
    flops = sum(2 * m * k * p for m, k, p in shapes)
    return {"gemms": len(shapes), "gflop": flops / 1e9, **{f"{k}_ms": v for k, v in sums.items()}}


def _ms(fn, cpu: list = None) -> float:
    """Wall ms of fn(); its CPU ms (this process, all threads) appended to `cpu`."""
    c0, t0 = time.process_time(), time.perf_counter()
    fn()
    wall = (time.perf_counter() - t0) * 1e3
    if cpu is not None:
        cpu.append((time.process_time() - c0) * 1e3)
    return wall


def bench(name: str, workdir: str, repeat: int, blas_threads: int, many: int, floor: bool = False,
          split: bool = False) -> dict:
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
    if split:
        result["split"] = gemm_split(model, feeds, repeat)
    if floor:
        result["floor"] = gemm_floor(model, repeat)
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
    parser.add_argument("--split", action="store_true",
                        help="also split the simulator's CPU time per conv kind into BLAS GEMMs and the rest")
    parser.add_argument("--floor", action="store_true",
                        help="also time the model's conv GEMMs alone: numpy (OpenBLAS) vs onnxruntime's MLAS")
    args = parser.parse_args(argv)
    from simulator import blas
    import onnxruntime as ort

    print(f"numpy {np.__version__}, onnxruntime {ort.__version__}, {os.cpu_count()} CPUs, "
          f"{blas.usable_cores()} usable; load average before: {os.getloadavg()}")
    print(blas.describe())
    from ge.ops import native
    gemm = "; conv GEMMs: " + ("ours, weights packed at load" if native.packing() else "OpenBLAS")
    print(f"conv kernels: {'compiled (ge/ops/csrc)' + gemm if native.enabled() else 'numpy'}"
          f"{'' if native.built() else ' (extension not built)'}")
    competitors = [multiprocessing.get_context("spawn").Process(target=_spin, daemon=True)
                   for _ in range(args.compete)]
    for p in competitors:
        p.start()
    try:
        with tempfile.TemporaryDirectory() as tmp:
            workdir = args.workdir or tmp
            os.makedirs(workdir, exist_ok=True)
            rows = [bench(name, workdir, args.repeat, args.blas_threads, args.many, args.floor, args.split)
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
          f" {'sim min..max':>16} {'ort min..max':>16} {'first/median':>12} {'CPU sim/ort':>11} {'CPU ratio':>9}")
    for r in rows:
        print(f"{r['model']:<10} {r['sim_ms']:>8.1f} {r['ort_ms']:>8.1f} {r['ort_off_ms']:>10.1f} "
              f"{r['sim_ms'] / r['ort_ms']:>8.2f} {r['sim_ms'] / r['ort_off_ms']:>11.2f} "
              f"{r['sim_min']:>7.1f}..{r['sim_max']:<7.1f} {r['ort_min']:>7.1f}..{r['ort_max']:<7.1f} "
              f"{r['first_ms'] / r['sim_ms']:>12.2f} {r['sim_cpu']:>5.0f}/{r['ort_cpu']:<5.0f} "
              f"{r['sim_cpu'] / r['ort_cpu']:>9.2f}")
    for r in rows:
        print(f"{r['model']}: model load (kernels prepared) {r['load_s']:.2f} s; first forward {r['first_ms']:.1f} ms "
              f"with {r['threads_at_first']} BLAS thread(s)")
        total = sum(ms for _, ms, _ in r["breakdown"])
        top = ", ".join(f"{t} {ms:.1f} ms ({100 * ms / total:.0f}%, {n}x)" for t, ms, n in r["breakdown"][:5])
        print(f"{r['model']} simulator time by op type: {top}")
        if "split" in r:
            print(f"{r['model']} CPU ms per forward by kernel kind (median of {args.repeat}; GEMM = time in GEMMs):")
            for kind, n, ms, gemm in r["split"]:
                print(f"  {kind:<40} {n:>3}x  {ms:7.2f} ms  GEMM {gemm:7.2f}  other {ms - gemm:6.2f}")
            total, gemm = sum(row[2] for row in r["split"]), sum(row[3] for row in r["split"])
            print(f"  {'all kernels':<40}       {total:7.2f} ms  GEMM {gemm:7.2f}  other {total - gemm:6.2f}")
        if "floor" in r:
            f = r["floor"]
            print(f"{r['model']} conv GEMMs alone ({f['gemms']} GEMMs, {f['gflop']:.2f} GFLOP, CPU ms, 1 thread): "
                  f"numpy/OpenBLAS {f['numpy_ms']:.1f} ms ({f['gflop'] / f['numpy_ms'] * 1e3:.0f} GFLOP/s), "
                  f"onnxruntime MLAS MatMul {f['mlas_ms']:.1f} ms ({f['gflop'] / f['mlas_ms'] * 1e3:.0f} GFLOP/s); "
                  f"OpenBLAS GEMMs / onnxruntime's whole forward (CPU): {f['numpy_ms'] / r['ort_cpu']:.2f}")
        for key in sorted(k for k in r if k.startswith("many_")):
            wall, rate, median = r[key]
            print(f"{r['model']} run_many, {key[5:]} worker(s): {rate:.2f} inferences/s "
                  f"({wall:.1f} s wall incl. start-up, median {median:.1f} ms each)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
