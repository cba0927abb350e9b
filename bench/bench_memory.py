"""Memory and time of a compile against the I/O floor: BERT-base and a >= 1B-parameter decoder.

For each model: the weight bytes (every initializer, inline or external), then, in each
round, both of: the I/O floor -- the model's files read once and as many bytes written once
to a new file in the same folder, no fsync (an `atc` run does not fsync either), the file
removed after its timing; measured with two buffers each round, 256 KiB and 16 MiB (the
small one costs 35% less CPU here, it fits the core's cache, but under the neighbours'
writeback the large one was as often faster in wall time), and the floor is the faster of
their two medians -- and `atc` compiling the
model in a fresh process: wall time and peak RSS (ru_maxrss of that process alone,
bench/peak_rss.py: file pages mapped and touched count), its .om removed after its timing
but in the last round.  Which of the two goes first alternates between rounds (the last
round ends with the compile), so neither always follows the other's writes.  The page cache
is warmed once before the rounds by the same read of the model's files.
Medians over the rounds; the load average is printed next to every figure (the machine is
shared).  Then the .om is opened without compiling: `atc --mode=6` and an `InferSession`
(its constructor only) report their peak RSS, which stays far below the .om's size when the
weights are not copied.  The start-up of the interpreter with the compiler imported is
measured too: it is a fixed part of every compile (with the project's bytecode compiled
first, as an installed package has it).  After the rounds one more compile runs with a clock
on its stages (start-up, each progress stage, and the time inside SHA-256 and inside the file
writes), to say where the time above the floor goes.

The decoder is a transformers LlamaForCausalLM (TinyLlama-1.1B's config: hidden 2048, 22
layers, 32 heads, 4 KV heads, MLP 5632, vocabulary 32000; 1.10 B parameters) with seeded
random weights, exported by torch.onnx.export (TorchScript, opset 17, fp32, 16 tokens and
an attention mask):
4.4 GB of weights, so the exporter writes them as external data.  The export runs once, in
its own process, and is kept in the work folder (delete it when done: it is big).

usage: nice -n 10 python bench/bench_memory.py [--models bert_base,decoder_1b] [--rounds 5]
                                               [--workdir DIR] [--keep] [--hash-thread auto|on|off]
       python bench/bench_memory.py export-decoder OUT_DIR
"""
from __future__ import annotations

import argparse
import json
import math
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from bench import peak_rss  # noqa: E402

SOC = "Ascend910"
FLOOR_BUFFERS = (256 << 10, 16 << 20)    # the floor's read/write buffers (see the module docstring)
DECODER_CONFIG = dict(hidden_size=2048, intermediate_size=5632, num_hidden_layers=22, num_attention_heads=32,
                      num_key_value_heads=4, vocab_size=32000, max_position_embeddings=2048,
                      tie_word_embeddings=False, use_cache=False)
DECODER_TOKENS = 16


# --------------------------------------------------------------------------- models

def export_decoder(out_dir: str) -> dict:
    """LlamaForCausalLM of DECODER_CONFIG, seeded random weights, exported with external data."""
    import torch
    import transformers
    torch.manual_seed(0)
    os.makedirs(out_dir, exist_ok=True)
    config = transformers.LlamaConfig(**DECODER_CONFIG)
    start = time.time()
    model = transformers.LlamaForCausalLM(config).eval()
    built = time.time() - start
    ids = torch.randint(0, config.vocab_size, (1, DECODER_TOKENS), generator=torch.Generator().manual_seed(1))
    path = os.path.join(out_dir, "decoder.onnx")
    start = time.time()
    # With an attention mask given, transformers 5 builds the causal mask without aten::diff
    # (which the TorchScript exporter cannot export); users pass one anyway.
    with torch.no_grad():
        torch.onnx.export(model, (ids, torch.ones_like(ids)), path, input_names=["input_ids", "attention_mask"],
                          output_names=["logits"], opset_version=17, dynamo=False)
    return {"params": int(sum(p.numel() for p in model.parameters())), "build_s": round(built, 1),
            "export_s": round(time.time() - start, 1), "torch": torch.__version__,
            "transformers": transformers.__version__}


def prepare(name: str, workdir: str) -> str:
    """The model's .onnx path in `workdir` (built or exported if absent)."""
    folder = os.path.join(workdir, name)
    if name == "bert_base":
        path = os.path.join(folder, "bert_base.onnx")
        if not os.path.exists(path):
            from atc_py import zoo
            zoo.save("bert_base", folder)
        return path
    path = os.path.join(folder, "decoder.onnx")
    if not os.path.exists(path):
        proc = subprocess.run([sys.executable, os.path.abspath(__file__), "export-decoder", folder],
                              capture_output=True, text=True)
        if proc.returncode != 0:
            raise SystemExit(f"decoder export failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
        print(f"exported the decoder: {proc.stdout.strip().splitlines()[-1]}", flush=True)
    return path


def model_files(path: str) -> tuple:
    """(weight bytes, [files holding the model]): initializers' sizes from their dims and type,
    the .onnx and every external data file it names."""
    import onnx
    from onnx import helper
    model = onnx.load(path, load_external_data=False)
    weights, files = 0, {os.path.abspath(path)}
    for tensor in model.graph.initializer:
        weights += math.prod(tensor.dims) * helper.tensor_dtype_to_np_dtype(tensor.data_type).itemsize
        for entry in tensor.external_data:
            if entry.key == "location":
                files.add(os.path.abspath(os.path.join(os.path.dirname(path), entry.value)))
    return weights, sorted(files)


# --------------------------------------------------------------------------- measurements

def _load() -> str:
    return "%.1f" % os.getloadavg()[0]


def _cpu_self() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def io_floor(files: list, dest: str, chunk: int) -> tuple:
    """(seconds, CPU seconds) to read `files` once and write as many bytes once to `dest`
    (then removed), `chunk` bytes at a time."""
    buf = bytearray(chunk)
    view = memoryview(buf)
    cpu = _cpu_self()
    start = time.perf_counter()
    with open(dest, "wb") as out:
        for path in files:
            with open(path, "rb", buffering=0) as f:
                while True:
                    n = f.readinto(buf)
                    if not n:
                        break
                    out.write(view[:n])
    seconds, cpu = time.perf_counter() - start, _cpu_self() - cpu
    os.remove(dest)
    return seconds, cpu


PACKAGES = ("atc_py", "ge", "fusion_passes", "codegen", "om_format", "simulator", "cli.py")


def _child_env() -> dict:
    """The tools run with bytecode as an installed package has it (pip compiles it at
    install): PYTHONDONTWRITEBYTECODE, if this shell sets it, is not passed on, so the
    sources are not compiled again on every start (0.7 s of CPU per run here)."""
    env = {**os.environ, "PYTHONPATH": ROOT}
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    return env


def compile_bytecode() -> None:
    """Write the project's __pycache__ (git ignores it) before anything is timed."""
    subprocess.run([sys.executable, "-m", "compileall", "-q", *PACKAGES], cwd=ROOT, env=_child_env(), check=True,
                   stdout=subprocess.DEVNULL)


def run_process(args: list, cwd: str) -> tuple:
    """(seconds, peak RSS bytes, CPU seconds, output) of a fresh process (its own peak and
    CPU time: bench/peak_rss.py)."""
    rc, seconds, peak, cpu, out = peak_rss.run(args, cwd=cwd, env=_child_env())
    if rc != 0 or peak is None:
        raise SystemExit(f"{' '.join(map(str, args))} failed:\n{out.decode(errors='replace')[-3000:]}")
    return seconds, peak, cpu, out.decode(errors="replace")


def compile_once(path: str, out_stem: str) -> tuple:
    seconds, rss, cpu, _ = run_process([sys.executable, os.path.join(ROOT, "cli.py"), f"--model={path}", "--framework=5",
                                   f"--output={out_stem}", f"--soc_version={SOC}"], os.path.dirname(out_stem))
    return seconds, rss, cpu


def startup() -> tuple:
    """(seconds, CPU seconds) of a process that imports the compiler and exits: the fixed
    part of a compile."""
    code = "import cli, atc_py.api, atc_py.compiler, atc_py.driver, atc_py.report"
    seconds, _, cpu, _ = run_process([sys.executable, "-c", code], ROOT)
    return seconds, cpu


# Run in a fresh process by `stages`: where one compile's wall time goes.  Start-up is the
# import of the compiler; each stage runs from its progress.stage() call to the next
# (ge/progress.py: loading, importing, the pass lists, building, pricing, writing).  Inside the
# writing stage: `hash` is the time inside SHA-256's update (on whichever thread), `write`
# inside the file writes, `pack` making the packed weights' chunks (ge/deferred.py), `wait`
# the writing thread waiting for the hashing thread (om_format/container.py), and
# `hash_thread` how many of the payload's bytes the second thread hashed; each also as CPU
# time of the thread it ran on (on a loaded machine the wall times stretch, the CPU times
# much less); the process's minor page faults (the mapped weights are read through them).
_STAGES = """\
import sys, time, json, threading, resource
t0, c0 = time.perf_counter(), time.process_time()
import cli, atc_py.api, atc_py.compiler, atc_py.driver, atc_py.report
from atc_py.api import make_options, run
from atc_py.log import Logger
from ge.progress import Progress
from ge import deferred
from om_format import container
started = time.perf_counter()
marks = [("start-up", t0)]
cpu_marks = [c0]                            # the process's CPU time (all threads) at each mark
spent = {"hash": 0.0, "write": 0.0, "pack": 0.0, "wait": 0.0}
cpu = dict.fromkeys(spent, 0.0)
threaded_bytes = [0]


class Clock(Progress):
    def stage(self, name, total=0):
        marks.append(("writing the .om" if name.startswith("Writing ") else name.lower(), time.perf_counter()))
        cpu_marks.append(time.process_time())


def clocked(key, method):
    def timed(*args, **kwargs):
        t, c = time.perf_counter(), time.thread_time()
        try:
            return method(*args, **kwargs)
        finally:
            spent[key] += time.perf_counter() - t
            cpu[key] += time.thread_time() - c
    return timed


class Timed:
    def __init__(self, inner, key):
        self.inner, self.key = inner, key

    def __getattr__(self, name):
        return getattr(self.inner, name)

    def update(self, data):
        if threading.current_thread() is not threading.main_thread():
            threaded_bytes[0] += len(data)
        return clocked(self.key, self.inner.update)(data)

    def write(self, data):
        return clocked(self.key, self.inner.write)(data)

    def get(self, block=True):
        return (clocked(self.key, self.inner.get) if block else self.inner.get)(block=block)

    def put(self, item):
        return self.inner.put(item)


real_init = container._HashingWriter.__init__


def init(self, f, *args, **kwargs):
    real_init(self, Timed(f, "write"), *args, **kwargs)
    self.sha = Timed(self.sha, "hash")
    self._hashed_queue = Timed(self._hashed_queue, "wait")


container._HashingWriter.__init__ = init
if sys.argv[4] != "auto":                # the hashing thread forced on or off (--hash-thread)
    container._spare_core = lambda: sys.argv[4] == "on"
deferred.ColumnConcat._rows_into = clocked("pack", deferred.ColumnConcat._rows_into)
options = make_options(model=sys.argv[1], output=sys.argv[2], soc_version=sys.argv[3], framework="5", log="null",
                       mode="0")
marks.append(("options", started))
cpu_marks.append(time.process_time())
run(options, Logger(level=4, quiet=True), Clock())
marks.append(("end", time.perf_counter()))
cpu_marks.append(time.process_time())
stages = [(name, round(b - a, 3)) for (name, a), (_, b) in zip(marks, marks[1:])]
stages_cpu = [(name, round(b - a, 3)) for (name, _), a, b in zip(marks, cpu_marks, cpu_marks[1:])]
print(json.dumps({"total_s": round(marks[-1][1] - t0, 3), "stages": stages, "stages_cpu": stages_cpu,
                  **{f"{key}_s": round(value, 6) for key, value in spent.items()},
                  **{f"{key}_cpu": round(value, 6) for key, value in cpu.items()},
                  "hash_thread_bytes": threaded_bytes[0],
                  "minor_faults": resource.getrusage(resource.RUSAGE_SELF).ru_minflt}))
"""


def stages(path: str, out_stem: str, hash_thread: str = "auto") -> dict:
    """Where one compile's time goes (see _STAGES), in a fresh process; its .om removed."""
    seconds, _, cpu, out = run_process([sys.executable, "-c", _STAGES, path, out_stem, SOC, hash_thread], ROOT)
    os.remove(out_stem + ".om")
    found = json.loads(out.strip().splitlines()[-1])
    return {**found, "process_s": seconds, "process_cpu": cpu}


def _stage_list(stage_clock: dict) -> str:
    return ", ".join(f"{n} {t:.2f} s (CPU {c:.2f} s)"
                     for (n, t), (_, c) in zip(stage_clock["stages"], stage_clock["stages_cpu"]))


def _inside(stage_clock: dict) -> str:
    """What the writing stage spent its time in (see _STAGES)."""
    return (f"SHA-256 {stage_clock['hash_s']:.2f} s (CPU {stage_clock['hash_cpu']:.2f} s; "
            f"{stage_clock['hash_thread_bytes'] / 1e9:.2f} GB of it on the second thread), "
            f"file writes {stage_clock['write_s']:.2f} s (CPU {stage_clock['write_cpu']:.2f} s), "
            f"packing weights {stage_clock['pack_s']:.2f} s (CPU {stage_clock['pack_cpu']:.2f} s), "
            f"waiting for the hash {stage_clock['wait_s']:.2f} s, {stage_clock['minor_faults']} minor page faults")


def open_om_rss(om: str) -> dict:
    mode6 = run_process([sys.executable, os.path.join(ROOT, "cli.py"), "--mode=6", f"--om={om}"], ROOT)
    as_json = om[:-len(".om")] + ".json"
    mode1 = run_process([sys.executable, os.path.join(ROOT, "cli.py"), "--mode=1", f"--om={om}", f"--json={as_json}"],
                        ROOT)
    os.remove(as_json)
    code = ("import sys; from simulator.session import InferSession; s = InferSession(sys.argv[1]); "
            "print(len(s.get_inputs()))")
    session = run_process([sys.executable, "-c", code, om], ROOT)
    return {"mode6_s": mode6[0], "mode6_rss": mode6[1], "mode1_s": mode1[0], "mode1_rss": mode1[1],
            "session_s": session[0], "session_rss": session[1]}


def _median(rows: list, key: str) -> float:
    return statistics.median(r[key] for r in rows)


def bench(name: str, workdir: str, rounds: int, keep: bool, hash_thread: str = "auto") -> dict:
    path = prepare(name, workdir)
    weights, files = model_files(path)
    folder = os.path.dirname(path)
    out_stem = os.path.join(folder, "out", name)
    os.makedirs(os.path.dirname(out_stem), exist_ok=True)
    io_floor(files, os.path.join(folder, "warm.tmp"), FLOOR_BUFFERS[-1])   # the same page-cache state for every round
    if os.path.exists(out_stem + ".om"):        # an earlier run's: never unlinked inside a timing
        os.remove(out_stem + ".om")
    rows = []
    for i in range(rounds):
        row = {}

        def floor() -> None:
            row["load_floor"] = _load()
            for chunk in (FLOOR_BUFFERS if i % 2 == 0 else FLOOR_BUFFERS[::-1]):
                row[f"floor_s_{chunk}"], row[f"floor_cpu_{chunk}"] = io_floor(files, os.path.join(folder, "floor.tmp"),
                                                                              chunk)

        def compile_it() -> None:
            row["load_compile"] = _load()
            row["compile_s"], row["rss"], row["compile_cpu"] = compile_once(path, out_stem)
            if i < rounds - 1:    # like the floor's file: no written copy left to the next measurement
                os.remove(out_stem + ".om")

        # Alternate which goes first (F C, C F, F C, ...), so a drift of the machine's load
        # within a round hits both alike; the last round ends with the compile, whose .om is kept.
        for step in ((floor, compile_it) if (rounds - 1 - i) % 2 == 0 else (compile_it, floor)):
            step()
        floors = ", ".join(f"{row[f'floor_s_{c}']:.2f} s (CPU {row[f'floor_cpu_{c}']:.2f} s) by {c >> 10} KiB"
                           for c in FLOOR_BUFFERS)
        print(f"  {name} round {i + 1}: floor {floors} (load {row['load_floor']}); compile {row['compile_s']:.2f} s, CPU {row['compile_cpu']:.2f} s, peak RSS "
              f"{row['rss'] / 1e6:.0f} MB (load {row['load_compile']})", flush=True)
        rows.append(row)
    om_bytes = os.path.getsize(out_stem + ".om")
    opened = open_om_rss(out_stem + ".om")
    breakdown = stages(path, out_stem + "_stages", hash_thread)
    print(f"  {name} stages: " + _stage_list(breakdown)
          + f"; inside them {_inside(breakdown)}; total {breakdown['total_s']:.2f} s (load {_load()})", flush=True)
    by_buffer = {c: (_median(rows, f"floor_s_{c}"), _median(rows, f"floor_cpu_{c}")) for c in FLOOR_BUFFERS}
    best = min(FLOOR_BUFFERS, key=lambda c: by_buffer[c][0])
    result = {"model": name, "weights": weights, "files": len(files), "om_bytes": om_bytes,
              "floor_s": by_buffer[best][0], "floor_cpu": by_buffer[best][1], "floor_buffer": best,
              "floors": {f"{c >> 10} KiB": by_buffer[c] for c in FLOOR_BUFFERS},
              "compile_s": _median(rows, "compile_s"), "rss": _median(rows, "rss"),
              "compile_cpu": _median(rows, "compile_cpu"), "rounds": rows, "stages": breakdown, **opened}
    result["startup_s"], result["startup_cpu"] = startup()
    if not keep:
        os.remove(out_stem + ".om")
    return result


def report(results: list) -> str:
    lines = ["| model | weights | compile (median) | I/O floor (median, faster buffer) | compile / floor | peak RSS (median) | "
             "RSS / weights | RSS <= 1.5x + 200 MB | CPU: compile / floor | start-up (CPU) | load avg (compile runs) |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in results:
        w = r["weights"]
        loads = ", ".join(x["load_compile"] for x in r["rounds"])
        lines.append(f"| {r['model']} | {w / 1e9:.2f} GB | {r['compile_s']:.2f} s | {r['floor_s']:.2f} s "
                     f"({r['floor_buffer'] >> 10} KiB) | "
                     f"{r['compile_s'] / r['floor_s']:.2f}x | {r['rss'] / 1e9:.2f} GB | {r['rss'] / w:.2f}x | "
                     f"{'yes' if r['rss'] <= 1.5 * w + 200e6 else 'NO'} | {r['compile_cpu']:.2f} s / "
                     f"{r['floor_cpu']:.2f} s | {r['startup_s']:.2f} s ({r['startup_cpu']:.2f} s) | {loads} |")
    for r in results:
        lines.append(f"\n{r['model']}: floor medians by buffer: " + ", ".join(
            f"{k} {t:.2f} s (CPU {c:.2f} s)" for k, (t, c) in r["floors"].items()))
        st = r["stages"]
        lines.append(f"{r['model']}: one compile's stages (wall, CPU of all threads): " + _stage_list(st)
                     + f"; inside them {_inside(st)}; "
                     f"{st['total_s']:.2f} s from the first import, {st['process_s']:.2f} s for the process "
                     f"(CPU {st['process_cpu']:.2f} s)")
    lines += ["", "| model | .om size | atc --mode=6: time, peak RSS | atc --mode=1: time, peak RSS | "
              "InferSession(om): time, peak RSS |", "|---|---|---|---|---|"]
    for r in results:
        lines.append(f"| {r['model']} | {r['om_bytes'] / 1e9:.2f} GB | {r['mode6_s']:.2f} s, {r['mode6_rss'] / 1e6:.0f} MB"
                     f" | {r['mode1_s']:.2f} s, {r['mode1_rss'] / 1e6:.0f} MB"
                     f" | {r['session_s']:.2f} s, {r['session_rss'] / 1e6:.0f} MB |")
    return "\n".join(lines)


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["export-decoder"]:
        print(json.dumps(export_decoder(argv[1])), flush=True)
        return 0
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="bert_base,decoder_1b")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--workdir", default=os.path.join(tempfile.gettempdir(), "atc_py_bench_memory"))
    parser.add_argument("--keep", action="store_true", help="keep the .om files (the models are always kept)")
    parser.add_argument("--hash-thread", choices=("auto", "on", "off"), default="auto",
                        help="the clocked compile only: the .om writer decides whether to hash on a second thread "
                             "(auto, as every compile does), or is told to (on: what it does on two free cores)")
    args = parser.parse_args(argv)
    compile_bytecode()
    results = []
    for name in args.models.split(","):
        print(f"{name}:", flush=True)
        results.append(bench(name, args.workdir, args.rounds, args.keep, args.hash_thread))
    print(report(results))
    print(json.dumps([{k: v for k, v in r.items() if k != "rounds"} for r in results]))
    if not args.keep and os.path.isdir(args.workdir):
        for name in args.models.split(","):
            shutil.rmtree(os.path.join(args.workdir, name, "out"), ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
