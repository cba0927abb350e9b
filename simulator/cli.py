"""`atc-sim` / `python -m simulator`: run an .om like ais_bench runs it on an NPU.

Why ais_bench's flags and output: users already script against them.  Differences, all
deliberate: NPU_compute_time is the cost model's simulated chip time (said on its own
line); the numpy run's host wall time is reported apart; outputs go straight into
--output DIR (no timestamped subfolder) so runs are reproducible.

Exit codes: 0 ok, 1 a user or internal error (ATC-style code and message, no traceback;
ATC_PY_TRACEBACK=1 shows one for internal errors), 2 --compare found an output out of
tolerance.
"""
from __future__ import annotations

import argparse
import os
import re
import signal
import sys
import traceback

import numpy as np

from ge.errors import AtcError, AtcWarning
from ge.limits import host_memory_exhausted
from ge.files import Outputs, Terminated, cleanup_on_signals

EXIT_OK, EXIT_ERROR, EXIT_COMPARE_FAIL = 0, 1, 2


class _Parser(argparse.ArgumentParser):
    """argparse that raises AtcError instead of printing usage and exiting."""

    def error(self, message):
        raise AtcError("E10001", f"Invalid command line: {message}.", "Try 'atc-sim --help' for the parameters.")


class _Once(argparse.Action):
    """Stores a flag's value, refusing a second one: `--loop 5 --loop 7` is a mistake, not 7."""

    def __call__(self, parser, namespace, values, option_string=None):
        given = getattr(namespace, "_given", set())
        if self.dest in given:
            raise AtcError("E10001", f"Parameter [{option_string}] is given more than once.",
                           f"Give {option_string} once.")
        namespace._given = given | {self.dest}
        setattr(namespace, self.dest, values)


def _positive_int(name):
    def parse(text):
        from simulator.runner import MAX_LOOP
        low = 0 if name == "--warmup_count" else 1
        try:
            value = int(text)
        except ValueError:
            raise AtcError("E10001", f"Value [{text}] for parameter [{name}] is invalid. Reason: it must be an "
                           f"integer >= {low}.", f"For example {name}=1.") from None
        if not low <= value <= MAX_LOOP:
            raise AtcError("E10013", f"Value [{text}] for --{name.lstrip('-')} is out of range [{low}, {MAX_LOOP}].",
                           f"For example {name}=1.")
        return value
    return parse


def _switch(name):
    """ais_bench's switches: 1/true or 0/false."""
    def parse(text):
        value = str(text).strip().lower()
        if value in ("1", "true"):
            return True
        if value in ("0", "false"):
            return False
        raise AtcError("E10001", f"Value [{text}] for parameter [{name}] is invalid. Reason: it must be 1/true or "
                       "0/false.", f"For example {name}=1.")
    return parse


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(prog="atc-sim", allow_abbrev=False, description="Run an Ascend .om on the bundled numpy NPU simulator "
                "(ais_bench flags). NPU times are simulated by the cost model of --soc_version.")
    p.register("action", None, _Once)      # the default action: every flag once
    p.add_argument("--model", required=True, help="the .om file")
    p.add_argument("--input", default="", help="comma-separated .npy/.bin files in model input order, a folder of "
                   "files named <input name>.npy, or ais_bench's dataset form: one folder per model input (the "
                   "k-th files of the folders are inference k; for a one-input model, several files are several "
                   "inferences); default: --pure_data_type inputs")
    p.add_argument("--pure_data_type", default=None, choices=("random", "zero"),
                   help="inputs when --input is not given: zero (the default, as ais_bench) or random (seeded; "
                   "floats N(0,1), ints in [0, min(10, embedding rows)), inputs named *mask* ones; the default "
                   "with --compare, where zeros would prove little)")
    p.add_argument("--output", default="", help="folder for the outputs and summary.json (written directly, "
                   "no timestamped subfolder)")
    p.add_argument("--output_dirname", default="", help="with --output: write into OUTPUT/OUTPUT_DIRNAME, files "
                   "named as ais_bench does (<input file name>_<k>, pure_infer_data_<k>), summary in "
                   "OUTPUT/<OUTPUT_DIRNAME>_summary.json")
    p.add_argument("--outfmt", default="NPY", help="NPY (default), BIN (raw bytes) or TXT")
    p.add_argument("--loop", default=1, type=_positive_int("--loop"), help="timed forwards (default 1)")
    p.add_argument("--warmup_count", default=1, type=_positive_int("--warmup_count"),
                   help="untimed forwards first (default 1)")
    p.add_argument("--batchsize", default=None, type=_positive_int("--batchsize"),
                   help="batch size for the throughput (default: first dim of the first input)")
    p.add_argument("--device", default="0", help="device id(s), e.g. 0 or 0,1,2,3: the simulator has one device "
                   "(a warning for anything else; the run happens once)")
    p.add_argument("--debug", default=False, type=_switch("--debug"), help="1: print the model's I/O table and "
                   "each inference's simulated time, as ais_bench --debug does")
    p.add_argument("--display_all_summary", default=False, type=_switch("--display_all_summary"),
                   help="1: also print H2D_latency and D2H_latency (simulated host-link copies)")
    p.add_argument("--profiler", default=False, type=_switch("--profiler"),
                   help="1: with --output, write the profile into OUTPUT/profiler")
    p.add_argument("--soc_version", default="", help="chip to price on (default: the one recorded in the .om)")
    p.add_argument("--compare", default="", help="the .onnx the .om came from: compare every output with "
                   "onnxruntime (no graph optimizations, 1 thread); exit 2 on FAIL")
    p.add_argument("--accuracy", default="", help="the float .onnx an int8 .om was quantized from: every "
                   "inference's outputs against onnxruntime on it (cosine similarity, top-1 agreement of "
                   "[batch, classes] outputs; simulator/accuracy.py)")
    p.add_argument("--profile", default="", help="folder for op_summary_0.csv, op_statistic_0.csv and "
                   "msprof_0.json (Perfetto)")
    p.add_argument("--seed", default=0, type=int, help="seed of the random inputs (default 0)")
    gears = p.add_argument_group("gear models (atc --dynamic_batch_size / --dynamic_image_size / --dynamic_dims); "
                                 "without a choice, every gear runs in turn")
    gears.add_argument("--dymBatch", default=None, type=_positive_int("--dymBatch"),
                       help="the batch-size gear of a --dynamic_batch_size model")
    gears.add_argument("--dymHW", default="", help='the image-size gear of a --dynamic_image_size model: "h,w"')
    gears.add_argument("--dymDims", default="", help='the gear of its input shapes: "name:d1,d2;name2:d1,d2"')
    gears.add_argument("--dymShape", default="", help='input shapes, "name:d1,d2;name2:d1,d2": for a gear model '
                       "they name the gear; for a dynamic-shape model (-1 or ranges) they are its input sizes "
                       "(needed for pure data and .bin inputs; .npy files carry their shape)")
    gears.add_argument("--auto_set_dymdims_mode", default=False, type=_switch("--auto_set_dymdims_mode"),
                       help="1: the gear of the --input .npy files' shapes")
    gears.add_argument("--outputSize", default="", help="bytes of each output's buffer, comma-separated in output "
                       "order: an output that needs more fails as ACL does")
    p.add_argument("--decode_steps", default=0, type=_positive_int("--decode_steps"),
                   help="a decoder with past_key_values inputs and present outputs: run the prompt (prefill), then "
                   "N decode steps feeding each step's present back as the next past (simulator/decode.py)")
    return p


def _validate(args) -> list:
    """Check the flags; returns the W-code warnings they call for."""
    warnings = []
    if not 0 <= args.seed < 1 << 63:
        raise AtcError("E10013", f"Value [{args.seed}] for --seed is out of range [0, 2^63).", "Pass --seed=0 or more.")
    devices = [d.strip() for d in str(args.device).split(",")]
    if not all(re.fullmatch(r"[0-9]{1,4}", d) for d in devices):
        raise AtcError("E10001", f"Value [{args.device}] for parameter [--device] is invalid. Reason: it must be a "
                       "device id or a comma-separated list of them.", "Pass --device=0.")
    if devices != ["0"]:
        warnings.append(AtcWarning("W10110", f"--device {args.device}: the simulator has one device; the model runs "
                                   "once, on simulated device 0, and the summary is that one device's."))
    args.outfmt = args.outfmt.upper()
    from simulator.runner import OUTFMTS
    if args.outfmt not in OUTFMTS:
        raise AtcError("E10001", f"Value [{args.outfmt}] for parameter [--outfmt] is invalid. Reason: it must "
                       f"be one of {', '.join(OUTFMTS)}.", "Pass --outfmt=NPY.")
    if args.output_dirname:
        if not args.output:
            warnings.append(AtcWarning("W10112", "--output_dirname works with --output only (as in ais_bench); "
                                       "ignored."))
        elif not re.fullmatch(r"[A-Za-z0-9_.-]+", args.output_dirname) or args.output_dirname in (".", ".."):
            raise AtcError("E10001", f"Value [{args.output_dirname}] for parameter [--output_dirname] is invalid. "
                           "Reason: it must be one folder name ([A-Za-z0-9_.-]).", "Pass e.g. --output_dirname=result.")
    if args.profiler and not args.output:
        warnings.append(AtcWarning("W10112", "--profiler works with --output only (the profile goes to "
                                   "OUTPUT/profiler, as in ais_bench); ignored."))
    chosen = [f for f in ("dymBatch", "dymHW", "dymDims", "dymShape") if getattr(args, f)]
    if len(chosen) > 1 or (chosen and args.auto_set_dymdims_mode):
        names = [f"--{f}" for f in chosen] + (["--auto_set_dymdims_mode"] if args.auto_set_dymdims_mode else [])
        raise AtcError("E10001", f"Parameters {', '.join(names)} cannot be used together: each chooses the gear.",
                       "Choose the gear once.")
    if args.auto_set_dymdims_mode and not args.input:
        raise AtcError("E10001", "--auto_set_dymdims_mode 1 takes the gear from the --input files, and no --input "
                       "is given.", "Add --input with .npy files of one gear's shapes.")
    args.output_sizes = _output_sizes(args.outputSize)
    for flag in ("output", "profile"):
        path = getattr(args, flag)
        if path and os.path.exists(path) and not os.path.isdir(path):
            raise AtcError("E10001", f"Value [{path}] for parameter [--{flag}] is invalid. Reason: it is a file, "
                           "not a folder.", f"Give a folder for --{flag}.")
    return warnings


def _output_sizes(text: str) -> list:
    if not text:
        return []
    values = [v.strip() for v in text.split(",")]
    if not all(v.isascii() and v.isdigit() and int(v) > 0 for v in values):
        raise AtcError("E10001", f"Value [{text}] for parameter [--outputSize] is invalid. Reason: it must be "
                       "positive byte counts separated by commas, one per model output.", "For example "
                       "--outputSize=10000,10000.")
    return [int(v) for v in values]


def _fmt_stats(s: dict) -> str:
    return (f"min = {s['min']}, max = {s['max']}, mean = {s['mean']}, median = {s['median']}, "
            f"percentile(99%) = {s['percentile(99%)']}")


def _io_table(session) -> list:
    """ais_bench --debug's table: index, name, shape, dtype, size and realsize in bytes."""
    lines = ["[DEBUG] input:"]
    lines += [f"  #{i}    {t.name}  {t.shape}  {t.datatype}  {t.size}  {t.realsize}"
              for i, t in enumerate(session.get_inputs())]
    lines.append("[DEBUG] output:")
    lines += [f"  #{i}    {t.name}  {t.shape}  {t.datatype}  {t.size}  {t.realsize}"
              for i, t in enumerate(session.get_outputs())]
    return lines


class _Progress:
    """A text progress bar on stderr for dataset runs (ais_bench shows tqdm's)."""

    def __init__(self, total: int, label: str = "Inference array Processing"):
        self.total, self.label, self.done = total, label, 0
        self.active = total > 1

    def step(self) -> None:
        if not self.active:
            return
        self.done += 1
        width = 30
        filled = width * self.done // self.total
        bar = "#" * filled + "." * (width - filled)
        end = "\n" if self.done == self.total else ""
        print(f"\r{self.label}: {100 * self.done // self.total:3d}%|{bar}| {self.done}/{self.total}",
              end=end, file=sys.stderr, flush=True)


def _chosen_gear(args, session):
    """The gear the flags choose (an index), None when they choose none; for a model
    without gears, the flags must not ask for one."""
    if session.gears is None:
        for flag in ("dymBatch", "dymHW", "dymDims"):
            if getattr(args, flag):
                session._need_gears(f"--{flag}")          # raises: the model has no gears
        if args.dymShape and not session.model.graph.is_dynamic:   # a dynamic-shape model's sizes: _inputs
            from simulator.session import parse_shapes
            shapes = parse_shapes(args.dymShape, "--dymShape")
            static = {v.name: list(v.desc.shape) for v in session.model.graph.inputs}
            if any(static.get(name) != dims for name, dims in shapes.items()):
                raise AtcError("E10001", f"--dymShape {args.dymShape}: the model's inputs have static shapes "
                               f"{static}.", "Give the model's own shapes, or leave --dymShape out.")
        return None
    from simulator import runner
    from simulator.session import parse_shapes
    if args.dymBatch:
        session._need_kind("dynamic_batch_size", "--dymBatch")
        return runner.pick_gear(session._root, (args.dymBatch,))
    if args.dymHW:
        session._need_kind("dynamic_image_size", "--dymHW")
        values = [v.strip() for v in args.dymHW.split(",")]
        if len(values) != 2 or not all(v.isascii() and v.isdigit() for v in values):
            raise AtcError("E10001", f"Value [{args.dymHW}] for parameter [--dymHW] is invalid. Reason: it must be "
                           "height,width.", "For example --dymHW=224,224.")
        return runner.pick_gear(session._root, tuple(int(v) for v in values))
    for flag in ("dymDims", "dymShape"):
        if getattr(args, flag):
            return runner.gear_of_shapes(session._root, parse_shapes(getattr(args, flag), f"--{flag}"))
    if args.auto_set_dymdims_mode:
        return runner.gear_of_shapes(session._root, runner.npy_shapes(args.input, session.model.graph))
    if args.input:
        raise AtcError("E10001", f"The model has gears ({runner.gear_list(session.gears)}); with --input, say which "
                       "one the files are.", "Add --dymBatch, --dymHW, --dymDims or --auto_set_dymdims_mode=1 "
                       "(as ais_bench needs).")
    return None


def _inputs(args, session):
    from simulator import runner
    from simulator.session import parse_shapes
    graph = session.model.graph
    shapes = parse_shapes(args.dymShape, "--dymShape") if args.dymShape and graph.is_dynamic else None
    if args.input:
        return runner.load_dataset(args.input, graph, shapes)
    kind = args.pure_data_type or ("random" if args.compare or args.accuracy else "zero")
    if kind == "zero":
        return runner.Dataset([runner.zero_inputs(graph, shapes)], ["pure_infer_data"], "zero")
    return runner.Dataset([runner.random_inputs(graph, args.seed, shapes)], ["pure_infer_data"],
                          f"random (seed {args.seed})")


def _run(args, warnings: list) -> int:
    with Outputs() as out:   # outputs, summary and profile: all of them, or none
        if args.decode_steps:
            return _decode_into(args, warnings, out)
        return _run_into(args, warnings, out)


def _decode_into(args, warnings: list, out: Outputs) -> int:
    """--decode_steps N: prefill the prompt, then N decode steps (simulator/decode.py); one
    line, one summary entry and (with --profile) one profile per step."""
    import numpy as np
    from simulator import decode, runner
    from simulator.session import InferSession

    session = InferSession(args.model, args.soc_version or None)
    graph = session.model.graph
    for warning in warnings + session.warnings:
        print(f"[WARNING] {warning.render()}")
    layout = decode.layout_of(graph)
    if args.input:
        prompt = runner._read_file(args.input.split(",")[0], next(v for v in graph.inputs
                                                                  if v.name == layout.tokens[0]))
    else:
        from simulator.session import parse_shapes
        shapes = parse_shapes(args.dymShape, "--dymShape") if args.dymShape else {}
        batch, length = shapes.get(layout.tokens[0], [1, 8])[:2] if shapes.get(layout.tokens[0]) else (1, 8)
        prompt = decode.prompt_tokens(graph, batch, length, args.seed)
    steps = decode.generate(session, np.asarray(prompt), args.decode_steps, args.compare)
    print(f"[INFO] load model {args.model} success: decoder with {len(layout.past)} cache tensors, priced on "
          f"{session.model.chip.soc_version}")
    for step in steps:
        what = (f"prefill of {step.new_tokens} tokens" if step.kind == "prefill"
                else f"decode step {step.index} (cache {step.cache_length})")
        check = "" if not step.compares else (" compare PASS" if step.passed else " compare FAIL")
        print(f"[INFO] {what}: NPU_compute_time {step.npu_time_ms:.6f} ms (simulated){check}")
    decode_ms = [s.npu_time_ms for s in steps[1:]]
    if decode_ms:
        print(f"[INFO] per-token (decode) NPU_compute_time mean {float(np.mean(decode_ms)):.6f} ms, prefill "
              f"{steps[0].npu_time_ms:.6f} ms (simulated)")
    summary = {"model": args.model, "soc_version": session.model.chip.soc_version, "simulated": True,
               "decode": [s.as_dict() for s in steps],
               "prefill_ms": steps[0].npu_time_ms,
               "decode_mean_ms": float(np.mean(decode_ms)) if decode_ms else 0.0}
    for directory in [args.profile] if args.profile else []:
        from simulator.profile import write_profile
        profiles = []
        for step in steps:
            profiles.append(write_profile(session.model, step.timings, directory, out, suffix=f"0_step{step.index}",
                                          graph=step.priced))
        summary["profile"] = profiles
        print(f"[INFO] profile of every step written to {directory} (op_summary_0_step<k>.csv, k = 0 the prefill)")
    if args.output:
        out.make_folder(args.output, "--output")
        out.write_json(os.path.join(args.output, "summary.json"), summary, "--output")
    failed = [s.index for s in steps if s.compares and not s.passed]
    if failed:
        print(f"[ERROR] compare FAIL at step(s) {failed}")
        return EXIT_COMPARE_FAIL
    if args.compare:
        print("[INFO] compare PASS at every step")
    return EXIT_OK


def _run_into(args, warnings: list, out: Outputs) -> int:
    from simulator.session import InferSession

    session = InferSession(args.model, args.soc_version or None)
    model = session.model
    loaded = model.loaded
    for warning in warnings + session.warnings:
        print(f"[WARNING] {warning.render()}")
    tasks = sum(len(b.loaded.tasks) + 1 for b in session.gears.branches) if session.gears else len(loaded.tasks)
    print(f"[INFO] load model {args.model} success: {tasks} tasks, precision_mode "
          f"{loaded.precision_mode or 'N/A'}, priced on {model.chip.soc_version}")
    if args.debug:
        print("\n".join(_io_table(session)))
    chosen = _chosen_gear(args, session)
    if session.gears is None:
        runs = [None]
    else:
        runs = [chosen] if chosen is not None else list(range(len(session.gears.branches)))
        print(f"[INFO] the model has {len(session.gears.branches)} --{session.gears.flag} gears; running "
              + (f"gear {chosen}" if chosen is not None else "every gear in turn"))
    out_dir = os.path.join(args.output, args.output_dirname) if args.output and args.output_dirname else args.output
    summaries, exit_code = [], EXIT_OK
    for gear in runs:
        if gear is not None:
            session.set_gear(gear)
            print(f"[INFO] ----- {session.gears.describe(gear)} -----")
        gear_dir = os.path.join(out_dir, f"gear_{gear}") if out_dir and len(runs) > 1 else out_dir
        summary, code = _run_gear(args, warnings, session, out, gear_dir)
        summaries.append(summary)
        exit_code = max(exit_code, code)
    summary = summaries[0]
    if len(runs) > 1:     # every gear: the run's summary lists them
        summary = {key: summary[key] for key in ("model", "soc_version", "precision_mode", "simulated", "loop",
                                                 "warmup_count", "warnings")}
        summary["gears"] = summaries
        if args.compare:
            summary["compare"] = {"onnx": args.compare, "passed": all(s["compare"]["passed"] for s in summaries)}
    if out_dir:
        if args.output_dirname:
            summary_path = os.path.join(args.output, f"{args.output_dirname}_summary.json")
        else:
            summary_path = os.path.join(out_dir, "summary.json")
        out.write_json(summary_path, summary, "--output")
        print(f"[INFO] outputs and {os.path.basename(summary_path)} written to {out_dir}")
    return exit_code


def _run_gear(args, warnings: list, session, out: Outputs, out_dir: str) -> tuple:
    """One model (or one gear of it): every inference, the compare, the profile and the
    performance summary; returns (summary dict, exit code)."""
    from simulator import blas, runner

    model = session.model
    loaded = model.loaded
    data = _inputs(args, session)
    print(f"[INFO] inputs: {data.source}" + (f" ({len(data.feeds)} inferences)" if len(data.feeds) > 1 else ""))
    ais_names = bool(args.output_dirname and args.output) or len(data.feeds) > 1
    progress = _Progress(len(data.feeds))
    results, written = [], []
    session.reset_summary()
    # Dataset mode: after the first inference (warm-up and timings), the rest spread over
    # one process per free core (runner.run_many); one loop each, as ais_bench runs a dataset.
    # (a dynamic-shape model prices each input's sizes on their own, so it runs them one by one)
    workers = blas.free_cores() if len(data.feeds) > 2 and args.loop == 1 and not model.graph.is_dynamic else 1
    names = session.get_output_names()

    every_output = []                 # --accuracy: each inference's outputs, in order

    def keep(k, outputs):
        _check_output_sizes(args.output_sizes, dict(zip(names, outputs)))
        if args.accuracy:
            every_output.append(dict(zip(names, outputs)))
        if out_dir:
            written.append(runner.write_outputs(dict(zip(names, outputs)), out_dir, args.outfmt, out,
                                                prefix=data.names[k] if ais_names else None))
        progress.step()

    for k, feeds in enumerate(data.feeds):
        if k == 1 and workers > 1:
            rest = session.infer_many(data.feeds[1:], workers)
            for j, outputs in enumerate(rest, start=1):
                keep(j, outputs)
            last_outputs = dict(zip(names, rest[-1]))
            print(f"[INFO] {len(rest)} inferences spread over {session.last_many.workers} processes "
                  f"({session.last_many.wall_s:.2f} s)")
            break
        outputs = session.infer(feeds, loop=args.loop, warmup_count=args.warmup_count if k == 0 else 0)
        result = session.last_result
        results.append(result)
        if args.debug:
            print(f"[DEBUG] model aclExec cost : {result.npu_time_ms['mean']:.6f} (simulated ms)")
        keep(k, outputs)
        last_outputs = result.outputs
    if args.warmup_count:
        print(f"[INFO] warm up {args.warmup_count} done")
    last = results[-1]

    compares = []
    if args.compare:
        from simulator.compare import compare_with_onnx
        compares = compare_with_onnx(args.compare, model.graph, data.feeds[-1], last_outputs, loaded.compute_dtypes)
    accuracy = []
    if args.accuracy:
        from simulator.accuracy import accuracy_against
        accuracy = accuracy_against(args.accuracy, model.graph, data.feeds, every_output)

    totals = session.summary()
    npu = totals["NPU_compute_time"]
    batch = args.batchsize or last.batchsize
    throughput = 1000.0 * batch / npu["mean"] if npu["mean"] > 0 else 0.0
    summary = {
        "model": args.model, "soc_version": model.chip.soc_version, "precision_mode": loaded.precision_mode,
        "simulated": True, "tasks": len(last.timings), "loop": args.loop, "warmup_count": args.warmup_count,
        "inferences": len(data.feeds), "batchsize": batch, "NPU_compute_time": npu, "throughput": throughput,
        "H2D_latency": totals["H2D_latency"], "D2H_latency": totals["D2H_latency"],
        "host_wall_time": totals["host_wall_time"], "host_first_forward_ms": results[0].first_forward_ms,
        "host_blas": blas.describe(),
        "inputs": [{"name": v.name, "shape": [d if isinstance(d, int) else str(d) for d in v.desc.shape],
                    "dtype": str(np.dtype(v.desc.dtype))} for v in model.graph.inputs],
        "input_source": data.source,
        "outputs": [{"name": n, "shape": list(a.shape), "dtype": str(a.dtype)} for n, a in last_outputs.items()],
        "warnings": [w.render() for w in warnings + session.warnings],
    }
    if model.gear is not None:
        summary["gear"] = {"index": model.gear, "flag": model.gears.flag,
                           "values": list(model.gears.branches[model.gear].values)}
    if model.graph.is_dynamic:        # each inference's sizes and simulated time
        summary["dynamic_shapes"] = [{"input_shapes": {k: list(v) for k, v in r.input_shapes.items()},
                                      "dims": r.dims, "NPU_compute_time_ms": r.npu_time_ms["mean"]}
                                     for r in results]
    if args.compare:
        summary["compare"] = {"onnx": args.compare, "reference": "onnxruntime ORT_DISABLE_ALL, 1 thread",
                              "passed": all(c.passed for c in compares),
                              "outputs": [c.as_dict() for c in compares]}
    if args.accuracy:
        summary["accuracy"] = {"onnx": args.accuracy, "outputs": [a.as_dict() for a in accuracy]}
    profile_dirs = [args.profile] if args.profile else []
    if args.profiler and args.output:
        profile_dirs.append(os.path.join(args.output, "profiler"))
    for directory in profile_dirs:
        from simulator.profile import write_profile
        if model.gear is not None and len(session.gears.branches) > 1:
            directory = os.path.join(directory, f"gear_{model.gear}")
        summary.setdefault("profile", write_profile(model, last.timings, directory, out, graph=last.priced))
        print(f"[INFO] profile written to {directory}")
    if out_dir and written:
        for entry in summary["outputs"]:
            entry["file"] = written[-1][entry["name"]]

    print(f"[INFO] NPU_compute_time is SIMULATED by the {model.chip.soc_version} cost model "
          f"({len(last.timings)} tasks in stream order; no NPU used, deterministic so min = max)")
    print("[INFO] -----------------Performance Summary------------------")
    if args.display_all_summary:
        print(f"[INFO] H2D_latency (ms): {_fmt_stats(totals['H2D_latency'])}")
    print(f"[INFO] NPU_compute_time (ms): {_fmt_stats(npu)}")
    if args.display_all_summary:
        print(f"[INFO] D2H_latency (ms): {_fmt_stats(totals['D2H_latency'])}")
    print(f"[INFO] throughput 1000*batchsize.mean({batch})/NPU_compute_time.mean({npu['mean']}): {throughput}")
    print("[INFO] ------------------------------------------------------")
    host = totals["host_wall_time"]
    print(f"[INFO] host wall time of the numpy run (ms), {host['count']} timed forward(s): min = {host['min']:.3f}, "
          f"median = {host['median']:.3f}, max = {host['max']:.3f}, mean = {host['mean']:.3f}; first forward "
          f"{results[0].first_forward_ms:.3f} ms{' (a warm-up, not in the stats)' if args.warmup_count else ''}")
    print(f"[INFO] {blas.describe()}")

    for a in accuracy:
        print(f"[INFO] accuracy of output [{a.name}] against the float model [{a.reference_name}]: {a.describe()}")
    if not compares:
        return summary, EXIT_OK
    for c in compares:
        print(f"[INFO] compare output [{c.name}] with onnxruntime [{c.reference_name}]: {c.describe()}")
    failed = [c.name for c in compares if not c.passed]
    if failed:
        print(f"[ERROR] compare FAIL: output(s) {failed} differ from onnxruntime beyond tolerance "
              "(see simulator/COMPARE.md)")
        return summary, EXIT_COMPARE_FAIL
    print("[INFO] compare PASS")
    return summary, EXIT_OK


def _check_output_sizes(sizes: list, outputs: dict) -> None:
    """--outputSize: the bytes the caller allocated for each output; ACL fails an inference
    whose output does not fit its buffer."""
    if not sizes:
        return
    if len(sizes) != len(outputs):
        raise AtcError("E10001", f"--outputSize gives {len(sizes)} size(s); the model has {len(outputs)} output(s) "
                       f"{list(outputs)}.", "Give one size per output, in output order.")
    for (name, array), size in zip(outputs.items(), sizes):
        if array.nbytes > size:
            raise AtcError("E10001", f"Output [{name}] needs {array.nbytes} bytes ({array.dtype} "
                           f"{list(array.shape)}); --outputSize gives its buffer {size}.",
                           "Give --outputSize at least the largest output size of the gears you run.")


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    try:
        parser = build_parser()
        if any(a in ("-h", "--help") for a in argv):
            parser.print_help()
            return EXIT_OK
        with cleanup_on_signals():   # SIGTERM/SIGINT: no temp file is left behind
            args = parser.parse_args(argv)
            warnings = _validate(args)
            return _run(args, warnings)
    except AtcError as err:
        print(f"[ERROR] {err.render()}")
        return EXIT_ERROR
    except MemoryError:   # the budget let through what the host could not hold after all
        print(f"[ERROR] {host_memory_exhausted().render()}")
        return EXIT_ERROR
    except KeyboardInterrupt:
        return 130
    except Terminated:
        return 128 + signal.SIGTERM
    except Exception as exc:   # internal errors are still reported ATC-style
        print(f"[ERROR] E19999: Inner Error! {type(exc).__name__}: {exc}")
        if os.environ.get("ATC_PY_TRACEBACK"):
            traceback.print_exc()
        return EXIT_ERROR
