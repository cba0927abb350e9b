"""The cost model against published Ascend 310P3 throughput, end to end.

Why: simulated times are the product's promise, so they must track real hardware across
batch sizes, not only look plausible.  For every row of `bench/data/npu-throughput-
calibration.csv` (27 published rows: ResNet-50/101, DenseNet-121, BERT-base at sequence 128
and 384, batch 1-256, with the atc flags the guide used) this builds the model family with
seeded random weights at the published shape (`atc_py.zoo`), compiles it with the published
flags as far as atc accepts them, writes the .om, loads it as atc-sim does and prices every
task (`simulator.runner.simulate_tasks`).  It prints simulated vs published fps with the
error, each row's roofline bound (a published figure above it would be impossible), the
peak-throughput batch per model, the summary the issue judges (median and worst absolute
error), and draws fps vs batch per model into a PNG (matplotlib, a bench-only extra).

    python3 bench/calibrate.py [--workdir DIR] [--plot bench/calibration.png] [--fit]

`--fit` searches the chip parameters named in FIT_PARAMETERS (one set for every row; no
per-model factor exists) and prints the best values and their residuals; the values are
then written into the design file by hand, with the fit recorded in COST_MODEL.md.

Reference builds.  The published rows are ATC's graphs, so the chip is calibrated on the
graph closest to what ATC ran: BERT is compiled without atc_py's MultiHeadAttention and
LayerNormMatMul passes, because the published sequence scaling shows ATC 6.3 wrote the
attention scores to memory (simulator/COST_MODEL.md section 7 has the arithmetic); atc_py's
own fused build is priced too and shown in the last column.  The published flags are
passed as written -- `--insert_op_conf` with the standard ImageNet AIPP config (AIPP_CONFIG:
the guides do not publish theirs), `--enable_small_channel`, `--op_select_implmode` -- and
a flag atc does not implement would be listed, not faked.
"""
from __future__ import annotations

import argparse
import csv
import math
import os
import shlex
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass, field, replace

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)

CSV_PATH = os.path.join(REPO, "bench", "data", "npu-throughput-calibration.csv")
SOC = "Ascend310P3"
# atc_py passes with no counterpart in the ATC (CANN 6.3) build the BERT rows were measured on
# (COST_MODEL.md section 7): attention ran as BatchMatMul / Softmax / BatchMatMul, and
# LayerNorm stayed its own op instead of a GEMM prologue.
ATC_BERT = ("MultiHeadAttentionFusionPass", "LayerNormMatMulFusionPass")
# ... and DenseNet's dense layers each copy every earlier feature map into a new Concat: a map
# read by several concats can sit at one address only, so GE cannot make them all zero-copy
# (about 240 kernels per DenseNet-121, COST_MODEL.md section 7); atc_py's ConcatPrefix rewrite
# nests them into one growing buffer the convs write into (123 kernels).
ATC_DENSENET = ("ConcatPrefix",)


@dataclass(frozen=True)
class Family:
    zoo: str
    options: tuple = ()              # zoo builder options, e.g. (("seq", 128),)
    skip_passes: tuple = ()          # passes ATC did not run on this family (reference build)
    inputs: tuple = ("input",)       # our input names, in the published --input_shape order


FAMILIES = {
    "ResNet-50": Family("resnet50"),
    "ResNet-101": Family("resnet101"),
    "DenseNet-121": Family("densenet121", (), ATC_DENSENET),
    "BERT-base (Sequence Length=128)": Family("bert_base", (("seq", 128), ("pooler", False)), ATC_BERT,
                                              ("input_ids", "attention_mask")),
    "BERT-base (Sequence Length=384)": Family("bert_base", (("seq", 384), ("pooler", False)), ATC_BERT,
                                              ("input_ids", "attention_mask")),
}
SHORT = {"ResNet-50": "resnet50", "ResNet-101": "resnet101", "DenseNet-121": "densenet121",
         "BERT-base (Sequence Length=128)": "bert128", "BERT-base (Sequence Length=384)": "bert384"}

# The parameters --fit may move, each over a grid; everything else stays as the data files say.
FIT_PARAMETERS = {
    "task_launch_overhead_us": [0.5, 1.0, 1.5, 2.0, 2.5, 3.0, 4.0],
    "ddr_efficiency": [0.5, 0.6, 0.65, 0.7, 0.75, 0.8, 0.85, 0.9],        # DRAM rarely sustains more
    "l2_usable_fraction": [0.25, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0],
    "tile_overhead_cycles": [10, 25, 50, 100, 200, 400],          # > 0: a step costs a DMA issue + sync
    "vector_cycles_transcendental": [4, 8, 12, 16, 20, 24, 32, 40, 48, 64],   # fp32 polynomial sequences
}


@dataclass
class Row:
    model: str
    batch: int
    published: float
    flags: str
    notes_csv: str
    family: Family = None
    argv: dict = field(default_factory=dict)
    dropped: list = field(default_factory=list)
    flops: float = 0.0               # useful FLOPs per sample (2 x MACs)
    schedule_bound: float = 0.0      # fps of kernel-by-kernel execution on the ideal chip
    bytes_min: float = 0.0           # DDR bytes per sample no schedule can avoid (see roofline)
    simulated: float = 0.0
    ours: float = 0.0

    @property
    def error(self) -> float:
        return self.simulated / self.published - 1.0

    @property
    def tag(self) -> str:
        return f"{SHORT[self.model]}_bs{self.batch}"


def read_rows(path: str = CSV_PATH) -> list:
    with open(path, newline="", encoding="utf-8") as f:
        rows = [Row(r["model"], int(r["batch"]), float(r["fps"]), r["atc_flags"], r["notes"])
                for r in csv.DictReader(f)]
    for row in rows:
        row.family = FAMILIES[row.model]
    return rows


def _pairs(tokens: list) -> list:
    """gflags-style `--k=v` and `--k v` into (k, v); ATC also accepts `--input-shape`."""
    out, i = [], 0
    while i < len(tokens):
        token = tokens[i]
        if not token.startswith("--"):
            raise ValueError(f"unexpected token {token!r}")
        key, eq, value = token[2:].partition("=")
        if not eq:
            value = tokens[i + 1] if i + 1 < len(tokens) and not tokens[i + 1].startswith("--") else ""
            i += 1 if value else 0
        out.append((key.replace("-", "_"), value))
        i += 1
    return out


def translate(row: Row, onnx_path: str, stem: str, workdir: str = "") -> None:
    """The published atc line with our files and input names (an AIPP config written into
    `workdir`); flags atc lacks are dropped and listed (never emulated)."""
    import cli as atc_cli

    supported = {name for name, _ in atc_cli._OPTIONS}
    seq = dict(row.family.options).get("seq", "")
    text = (row.flags.replace("${bs}", str(row.batch)).replace("${chip_name}", "310P3")
            .replace("${model_size}", "base").replace("${seq}", str(seq)).replace("${onnx_file}", onnx_path))
    argv, dropped = {}, []
    for key, value in _pairs(shlex.split(text)):
        if key == "model":
            value = onnx_path
        elif key == "output":
            value = stem
        elif key == "soc_version":
            value = SOC
        elif key == "log":
            value = "error"
        elif key == "input_shape":
            dims = [part.split(":", 1)[1] for part in value.split(";") if part.strip()]
            value = ";".join(f"{name}:{d}" for name, d in zip(row.family.inputs, dims))
        elif key == "insert_op_conf":
            value = os.path.join(workdir or ".", "aipp.cfg")
            if workdir:
                with open(value, "w") as f:
                    f.write(AIPP_CONFIG)
        if key not in supported:
            dropped.append(f"--{key}={value}" if value else f"--{key}")
            continue
        argv[key] = value
    argv.setdefault("framework", "5")
    row.argv, row.dropped = argv, dropped


# The guides' AIPP configs are not published with the rows; this is the standard ImageNet one
# their input tables describe (a 256 x 256 RGB image, centre-cropped to 224, normalised).
AIPP_CONFIG = """aipp_op {
    aipp_mode : static
    input_format : RGB888_U8
    src_image_size_w : 256
    src_image_size_h : 256
    crop : true
    load_start_pos_h : 16
    load_start_pos_w : 16
    crop_size_w : 224
    crop_size_h : 224
    min_chn_0 : 123.675
    min_chn_1 : 116.28
    min_chn_2 : 103.53
    var_reci_chn_0 : 0.0171247538316637
    var_reci_chn_1 : 0.0175070028011204
    var_reci_chn_2 : 0.0174291938997821
}
"""


def compile_om(row: Row, onnx_path: str, workdir: str, passes_skipped: tuple) -> str:
    """Compile with the translated flags (`passes_skipped` left out of the pipeline) and
    write the .om, as atc does."""
    from atc_py.compiler import compile_model
    from atc_py.options import AtcOptions
    from om_format.container import build_om

    name = f"{row.tag}_{'ref' if passes_skipped else 'all'}"
    om = os.path.join(workdir, name + ".om")
    translate(row, onnx_path, os.path.join(workdir, name), workdir)
    options = AtcOptions(**row.argv)
    options.validate()
    result = compile_model(options, skip_passes=passes_skipped)
    with open(om, "wb") as f:
        f.write(build_om(result.partitions.as_dict(), name=name, ops=len(result.graph.nodes), platform_version=SOC))
    return om


def load_priceable(om: str):
    """atc-sim's loader; then the weights become one-element placeholders (pricing reads the
    shapes the graph records, never the values) and the file bytes are dropped, so all rows
    fit in memory for the fit.  Nothing is cached on disk between runs: a cache of compiled
    graphs would have to be unpickled, which the brief forbids."""
    import numpy as np
    from simulator import runner

    model = runner.load_model(om, SOC, prepare_kernels=False)
    for node in model.graph.nodes:
        for value in node.inputs:
            if value is not None and value.is_const and value.const.size > 1:
                value.const = np.zeros((), value.const.dtype)
    model.loaded.om = None
    return model


def build_row(row: Row, workdir: str) -> tuple:
    """(reference model, atc_py-fused model or None) for one row; files are deleted after
    loading (a BERT .om is 0.4 GB)."""
    from atc_py import zoo

    onnx_dir = os.path.join(workdir, f"{row.tag}_onnx")
    onnx_path = zoo.save(row.family.zoo, onnx_dir, batch=row.batch, **dict(row.family.options))
    builds = [row.family.skip_passes] + ([()] if row.family.skip_passes else [])
    models = []
    for skipped in builds:
        om = compile_om(row, onnx_path, workdir, skipped)
        models.append(load_priceable(om))
        os.unlink(om)
    for f in os.listdir(onnx_dir):
        os.unlink(os.path.join(onnx_dir, f))
    os.rmdir(onnx_dir)
    return models[0], (models[1] if len(models) > 1 else None)


def fps_of(model, chip, batch: int) -> float:
    from simulator.runner import simulate_tasks

    ms = sum(t.duration_us for t in simulate_tasks(model, chip=chip)) / 1e3
    return 1000.0 * batch / ms


def ideal_chip(chip):
    """The chip with nothing lost: DDR at its pin rate, all of L2 kept, no launch, prologue,
    latency or per-tile cost, one cycle per vector op.  Summing each kernel's slowest pipe on
    it bounds what kernel-by-kernel execution (as ATC's static graphs run) can reach."""
    return replace(chip, ddr_efficiency=1.0, l2_usable_fraction=1.0, task_launch_overhead_us=0.0,
                   kernel_scalar_overhead_us=0.0, gm_latency_us=0.0, tile_overhead_cycles=0.0,
                   vector_cycles_div=1.0, vector_cycles_transcendental=1.0)


def schedule_bound_fps(row: Row, model, chip) -> float:
    from simulator.runner import simulate_tasks

    steady = sum(t.cost.steady_us for t in simulate_tasks(model, chip=ideal_chip(chip)))
    return 1e6 * row.batch / steady


def roofline(row: Row, model, chip) -> None:
    """What physics allows, whatever the schedule: the cube at its peak on the useful FLOPs,
    and DDR at its pin rate on the bytes no kernel-by-kernel execution can avoid -- the
    weights once, the input once, and of every tensor the part that cannot stay in L2
    (size - L2) written once and read once per consumer.  Time >= the larger of the two."""
    from simulator.pricing import _as_compute, kernel_spec

    macs = weights = spill = 0
    for node in model.graph.nodes:
        spec = kernel_spec(node, model.dtype_of(node))
        if spec.no_task:
            continue
        macs += spec.work.cube_macs
        weights += spec.weight_bytes
        for value in node.outputs:
            size = _as_compute(value, spec.compute_dtype).nbytes
            spill += max(0.0, size - chip.l2_size) * (1 + len(value.uses))
    inputs = sum(math.prod(v.desc.shape) for v in model.graph.inputs)   # at least one byte each
    row.flops = 2.0 * macs / row.batch
    row.bytes_min = (weights + inputs + spill) / row.batch


def roofline_fps(row: Row, chip) -> float:
    return min(chip.cube_peak_flops() / row.flops, chip.hbm_bytes_per_us * 1e6 / row.bytes_min)


def peak_batches(rows: list, attr: str) -> dict:
    """model -> (batch of the highest fps, published batches in order)."""
    out = {}
    for model in dict.fromkeys(r.model for r in rows):
        mine = sorted((r for r in rows if r.model == model), key=lambda r: r.batch)
        best = max(mine, key=lambda r: getattr(r, attr))
        out[model] = (best.batch, [r.batch for r in mine])
    return out


def summary(rows: list) -> dict:
    errors = [abs(r.error) for r in rows]
    pub, sim = peak_batches(rows, "published"), peak_batches(rows, "simulated")
    steps = {m: abs(b.index(pub[m][0]) - b.index(sim[m][0])) for m, (_, b) in pub.items() if len(b) >= 3}
    return {"median": statistics.median(errors), "max": max(errors), "worst": max(rows, key=lambda r: abs(r.error)).tag,
            "peak_steps": steps, "peaks": {m: (pub[m][0], sim[m][0]) for m in pub}}


def objective(rows: list) -> float:
    logs = [abs(math.log(r.simulated / r.published)) for r in rows]
    return statistics.mean(logs) + 0.5 * max(logs)


def fit(rows: list, models: dict, chip) -> object:
    """Coordinate descent over FIT_PARAMETERS' grids (several sweeps until nothing improves)."""
    def score(candidate):
        for r in rows:
            r.simulated = fps_of(models[r.tag], candidate, r.batch)
        return objective(rows)

    best, best_score = chip, score(chip)
    for sweep in range(4):
        improved = False
        for name, grid in FIT_PARAMETERS.items():
            for value in grid:
                candidate = replace(best, **{name: float(value)})
                s = score(candidate)
                if s < best_score - 1e-9:
                    best, best_score, improved = candidate, s, True
            print(f"  sweep {sweep + 1} {name:30s} -> {getattr(best, name):g}  (objective {best_score:.4f})", flush=True)
        if not improved:
            break
    score(best)
    return best


def sensitivity(rows: list, models: dict, chip) -> None:
    """How firmly the data pin each fitted parameter: the objective, median and worst error
    with the parameter 25% lower and higher, the others held."""
    def stats(candidate):
        for r in rows:
            r.simulated = fps_of(models[r.tag], candidate, r.batch)
        s = summary(rows)
        return objective(rows), s["median"], s["max"]

    base = stats(chip)
    print(f"sensitivity (objective / median / worst), at the fit: {base[0]:.3f} / {100 * base[1]:.1f}% / "
          f"{100 * base[2]:.1f}%")
    for name in FIT_PARAMETERS:
        value = getattr(chip, name)
        cells = []
        for factor in (0.75, 1.25):
            candidate = replace(chip, **{name: value * factor})
            o, med, worst = stats(candidate)
            cells.append(f"x{factor:g}: {o:.3f} / {100 * med:.1f}% / {100 * worst:.1f}%")
        print(f"  {name:30s} {value:<6g} " + "   ".join(cells))
    stats(chip)


def plot(rows: list, path: str) -> str:
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return "matplotlib not installed (pip install -e '.[bench]'): no plot"
    models = list(dict.fromkeys(r.model for r in rows))
    fig, axes = plt.subplots(1, len(models), figsize=(3.2 * len(models), 3.4))
    for ax, model in zip(axes, models):
        mine = sorted((r for r in rows if r.model == model), key=lambda r: r.batch)
        b = [r.batch for r in mine]
        ax.plot(b, [r.published for r in mine], "o-", color="black", label="published (310P3)")
        ax.plot(b, [r.simulated for r in mine], "s--", color="tab:red", label="simulated")
        if any(r.ours for r in mine) and mine[0].family.skip_passes:
            ax.plot(b, [r.ours for r in mine], "^:", color="tab:blue", label="simulated, atc_py's own fusion")
        ax.set_xscale("log", base=2)
        ax.set_title(model.replace("BERT-base (Sequence Length=", "BERT-base seq ").replace(")", ""), fontsize=9)
        ax.set_xlabel("batch")
        ax.set_ylim(bottom=0)
        ax.tick_params(labelsize=7)
        ax.grid(alpha=0.3)
    axes[0].set_ylabel("inferences / s")
    handles = {}
    for ax in axes:
        for h, label in zip(*ax.get_legend_handles_labels()):
            handles.setdefault(label, h)
    fig.legend(list(handles.values()), list(handles), loc="lower center", ncol=len(handles), fontsize=8,
               frameon=False)
    fig.tight_layout(rect=(0, 0.08, 1, 1))
    fig.savefig(path, dpi=80)
    return f"plot written: {path}"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workdir", default="", help="where the .onnx/.om of one row go while it is built "
                        "(default: a temp folder); they are deleted once priced")
    parser.add_argument("--plot", default=os.path.join(REPO, "bench", "calibration.png"))
    parser.add_argument("--fit", action="store_true", help="search FIT_PARAMETERS and print the best values")
    parser.add_argument("--only", default="", help="comma-separated row tags or model prefixes (e.g. densenet121,"
                        "bert128_bs1): price only those rows (a quick check; the summary is then of them)")
    args = parser.parse_args(argv)

    from simulator.cost_model import load_chip

    rows = read_rows()
    if args.only:
        wanted = [w.strip() for w in args.only.split(",") if w.strip()]
        rows = [r for r in rows if any(r.tag == w or r.tag.startswith(w + "_") for w in wanted)]
        if not rows:
            parser.error(f"--only {args.only!r} names no row")
    chip = load_chip(SOC)
    with tempfile.TemporaryDirectory() as tmp:
        workdir = args.workdir or tmp
        os.makedirs(workdir, exist_ok=True)
        t0 = time.perf_counter()
        models, ours = {}, {}
        for row in rows:
            models[row.tag], fused = build_row(row, workdir)
            if fused is not None:
                ours[row.tag] = fused
            roofline(row, models[row.tag], chip)
            row.schedule_bound = schedule_bound_fps(row, models[row.tag], chip)
        print(f"built and compiled {len(rows)} rows in {time.perf_counter() - t0:.0f} s (workdir {workdir})")
        if args.fit:
            print("fitting", ", ".join(FIT_PARAMETERS))
            chip = fit(rows, models, chip)
            print("best: " + ", ".join(f"{n} = {getattr(chip, n):g}" for n in FIT_PARAMETERS))
            sensitivity(rows, models, chip)
        for row in rows:
            row.simulated = fps_of(models[row.tag], chip, row.batch)
            row.ours = fps_of(ours[row.tag], chip, row.batch) if row.tag in ours else row.simulated

    print(f"\n{SOC}, design {chip.design}; simulated = atc_py compile of the published shape and flags, "
          "priced by simulator/cost_model.py")
    print("roofline: what physics allows (cube at peak; DDR at pin rate for the weights, the input and every "
          "tensor's part beyond L2) -- a published figure above it is impossible.  schedule: this model's kernels, "
          "each at its slowest pipe on an ideal chip (all of L2, DDR at pin rate, no overheads)")
    print(f"{'row':16s} {'published':>9s} {'simulated':>9s} {'error':>7s} {'roofline':>9s} {'schedule':>9s} "
          f"{'pub/sched':>9s}  {'atc_py fused':>12s}")
    for row in rows:
        bound = roofline_fps(row, chip)
        flag = "  IMPOSSIBLE" if row.published > bound else ""
        print(f"{row.tag:16s} {row.published:9.1f} {row.simulated:9.1f} {100 * row.error:+6.1f}% {bound:9.0f} "
              f"{row.schedule_bound:9.0f} {row.published / row.schedule_bound:9.2f}  {row.ours:12.1f}{flag}")
    dropped = sorted({(r.model, d) for r in rows for d in r.dropped})
    for model, flag in dropped:
        print(f"  {model}: published flag not implemented by atc yet, left out: {flag}")
    for model in dict.fromkeys(r.model for r in rows):
        skipped = FAMILIES[model].skip_passes
        if skipped:
            print(f"  {model}: reference build without {', '.join(skipped)} (what ATC did not do; "
                  "COST_MODEL.md section 7)")
    s = summary(rows)
    print(f"\nmedian |error| {100 * s['median']:.1f}%, worst {100 * s['max']:.1f}% ({s['worst']}); "
          f"peak batch published -> simulated: "
          + ", ".join(f"{SHORT[m]} {p} -> {q}" for m, (p, q) in s["peaks"].items())
          + "; steps apart: " + ", ".join(f"{SHORT[m]} {v}" for m, v in s["peak_steps"].items()))
    if args.plot:
        print(plot(rows, args.plot))
    return 0


if __name__ == "__main__":
    sys.exit(main())
