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
import signal
import sys
import traceback

from ge.errors import AtcError
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


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(prog="atc-sim", allow_abbrev=False, description="Run an Ascend .om on the bundled numpy NPU simulator "
                "(ais_bench flags). NPU times are simulated by the cost model of --soc_version.")
    p.register("action", "store", _Once)   # every flag once
    p.add_argument("--model", required=True, help="the .om file")
    p.add_argument("--input", default="", help="comma-separated .npy files in model input order, or a folder of "
                   ".npy files named <input name>.npy (else taken sorted); default: seeded random inputs "
                   "(floats N(0,1); ints in [0, min(10, embedding rows)); inputs named *mask*: ones)")
    p.add_argument("--output", default="", help="folder for the outputs and summary.json (written directly, "
                   "no timestamped subfolder)")
    p.add_argument("--outfmt", default="NPY", help="NPY (default), BIN (raw bytes) or TXT")
    p.add_argument("--loop", default=1, type=_positive_int("--loop"), help="timed forwards (default 1)")
    p.add_argument("--warmup_count", default=1, type=_positive_int("--warmup_count"),
                   help="untimed forwards first (default 1)")
    p.add_argument("--batchsize", default=None, type=_positive_int("--batchsize"),
                   help="batch size for the throughput (default: first dim of the first input)")
    p.add_argument("--device", default="0", help="device id; the simulator has only device 0")
    p.add_argument("--soc_version", default="", help="chip to price on (default: the one recorded in the .om)")
    p.add_argument("--compare", default="", help="the .onnx the .om came from: compare every output with "
                   "onnxruntime (no graph optimizations, 1 thread); exit 2 on FAIL")
    p.add_argument("--profile", default="", help="folder for op_summary_0.csv and msprof_0.json (Perfetto)")
    p.add_argument("--seed", default=0, type=int, help="seed of the random inputs (default 0)")
    return p


def _validate(args) -> None:
    if not 0 <= args.seed < 1 << 63:
        raise AtcError("E10013", f"Value [{args.seed}] for --seed is out of range [0, 2^63).", "Pass --seed=0 or more.")
    if args.device != "0":
        raise AtcError("E10001", f"Value [{args.device}] for parameter [--device] is invalid. Reason: the "
                       "simulator has one device, 0.", "Pass --device=0 or leave it out.")
    args.outfmt = args.outfmt.upper()
    from simulator.runner import OUTFMTS
    if args.outfmt not in OUTFMTS:
        raise AtcError("E10001", f"Value [{args.outfmt}] for parameter [--outfmt] is invalid. Reason: it must "
                       f"be one of {', '.join(OUTFMTS)}.", "Pass --outfmt=NPY.")
    for flag in ("output", "profile"):
        path = getattr(args, flag)
        if path and os.path.exists(path) and not os.path.isdir(path):
            raise AtcError("E10001", f"Value [{path}] for parameter [--{flag}] is invalid. Reason: it is a file, "
                           "not a folder.", f"Give a folder for --{flag}.")


def _fmt_stats(s: dict) -> str:
    return (f"min = {s['min']}, max = {s['max']}, mean = {s['mean']}, median = {s['median']}, "
            f"percentile(99%) = {s['percentile(99%)']}")


def _run(args) -> int:
    with Outputs() as out:   # outputs, summary and profile: all of them, or none
        return _run_into(args, out)


def _run_into(args, out: Outputs) -> int:
    from simulator import runner

    model = runner.load_model(args.model, args.soc_version)
    loaded = model.loaded
    print(f"[INFO] load model {args.model} success: {len(loaded.tasks)} tasks, precision_mode "
          f"{loaded.precision_mode or 'N/A'}, priced on {model.chip.soc_version}")
    if args.input:
        feeds, source = runner.load_inputs(args.input, model.graph), args.input
    else:
        feeds, source = runner.random_inputs(model.graph, args.seed), f"random (seed {args.seed})"
    print(f"[INFO] inputs: {source}")
    result = runner.run(model, feeds, args.loop, args.warmup_count, args.batchsize)
    if args.warmup_count:
        print(f"[INFO] warm up {args.warmup_count} done")

    compares = []
    if args.compare:
        from simulator.compare import compare_with_onnx
        compares = compare_with_onnx(args.compare, model.graph, feeds, result.outputs, loaded.compute_dtypes)

    summary = {
        "model": args.model, "soc_version": model.chip.soc_version, "precision_mode": loaded.precision_mode,
        "simulated": True, "tasks": len(result.timings), "loop": args.loop, "warmup_count": args.warmup_count,
        "batchsize": result.batchsize, "NPU_compute_time": result.npu_time_ms, "throughput": result.throughput,
        "host_wall_time": result.host_time_ms,
        "inputs": [{"name": v.name, "shape": list(v.desc.shape), "dtype": str(v.desc.dtype)}
                   for v in model.graph.inputs],
        "input_source": source,
        "outputs": [{"name": n, "shape": list(a.shape), "dtype": str(a.dtype)} for n, a in result.outputs.items()],
    }
    if args.compare:
        summary["compare"] = {"onnx": args.compare, "reference": "onnxruntime ORT_DISABLE_ALL, 1 thread",
                              "passed": all(c.passed for c in compares),
                              "outputs": [c.as_dict() for c in compares]}
    if args.profile:
        from simulator.profile import write_profile
        summary["profile"] = write_profile(model, result.timings, args.profile, out)
        print(f"[INFO] profile written: {summary['profile']['op_summary']}, {summary['profile']['timeline']}")
    if args.output:
        paths = runner.write_outputs(result.outputs, args.output, args.outfmt, out)
        for entry in summary["outputs"]:
            entry["file"] = paths[entry["name"]]
        out.write_json(os.path.join(args.output, "summary.json"), summary, "--output")
        print(f"[INFO] outputs and summary.json written to {args.output}")

    npu = result.npu_time_ms
    print(f"[INFO] NPU_compute_time is SIMULATED by the {model.chip.soc_version} cost model "
          f"({len(result.timings)} tasks in stream order; no NPU used, deterministic so min = max)")
    print("[INFO] -----------------Performance Summary------------------")
    print(f"[INFO] NPU_compute_time (ms): {_fmt_stats(npu)}")
    print(f"[INFO] throughput 1000*batchsize.mean({result.batchsize})/NPU_compute_time.mean({npu['mean']}): "
          f"{result.throughput}")
    print("[INFO] ------------------------------------------------------")
    print(f"[INFO] host wall time of the numpy run (ms): {_fmt_stats(result.host_time_ms)}")

    if not compares:
        return EXIT_OK
    for c in compares:
        print(f"[INFO] compare output [{c.name}] with onnxruntime [{c.reference_name}]: {c.describe()}")
    failed = [c.name for c in compares if not c.passed]
    if failed:
        print(f"[ERROR] compare FAIL: output(s) {failed} differ from onnxruntime beyond tolerance "
              "(see simulator/COMPARE.md)")
        return EXIT_COMPARE_FAIL
    print("[INFO] compare PASS")
    return EXIT_OK


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    try:
        parser = build_parser()
        if any(a in ("-h", "--help") for a in argv):
            parser.print_help()
            return EXIT_OK
        with cleanup_on_signals():   # SIGTERM/SIGINT: no temp file is left behind
            args = parser.parse_args(argv)
            _validate(args)
            return _run(args)
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
