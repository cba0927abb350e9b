"""`atc`: argument parsing only.  Options become an `AtcOptions`; `atc_py.driver` does the work.

gflags style as ATC: `--key=value`, `--key value`, and the single-dash forms `-key=value`
and `-key value` all work; `--help`/`--h` print usage.  Every failure prints ATC's failure
line and the error code, and exits non-zero -- never a traceback for a user mistake (set
ATC_PY_TRACEBACK=1 to see one for an internal error).  Warnings carry W-codes.
"""
from __future__ import annotations

import os
import signal
import sys
import traceback

import click

from atc_py.options import NO_EFFECT_OPTIONS, AtcOptions
from ge.errors import AtcError
from ge.limits import host_memory_exhausted
from ge.files import Terminated, cleanup_on_signals

START_LINE = "ATC start working now, please wait for a moment."
SUCCESS_LINE = "ATC run success, welcome to the next use."
FAIL_LINE = "ATC run failed, Please check the detail log, Try 'atc --help' for more information"

_OPTIONS = [
    ("model", "Model file (.onnx)."),
    ("framework", "Framework type: 0:Caffe; 1:MindSpore; 3:Tensorflow; 5:Onnx (only 5 is supported)."),
    ("output", "Output file path and name, without the .om suffix (.om is appended)."),
    ("soc_version", "Target chip, e.g. Ascend910, Ascend910B2, Ascend310P3."),
    ("mode", "0: generate offline model (default); 1: model to JSON (--om, --json); "
             "3: pre-check only (--check_report); 6: display model info (--om)."),
    ("input_shape", 'Input shapes, e.g. "input_name1:n1,c1,h1,w1;input_name2:n2,c2"; -1 or lo~hi for a '
                    "dim known only at run time."),
    ("input_shape_range", 'Deprecated (GE): dim ranges, e.g. "input_name1:[1~8,3,224~448,224~448]" (exclusive '
                          "with the gear flags)."),
    ("input_hint_shape", 'Shapes a dynamic model is priced at in the report, by input index: "0:[1,128];1:[1,128]".'),
    ("input_format", "Input format: NCHW (default), NHWC, ND, NCDHW or NDHWC."),
    ("dynamic_batch_size", 'Batch-size gears, e.g. "1,2,4,8" (the batch axis is -1 in --input_shape).'),
    ("dynamic_image_size", 'Image-size gears, e.g. "224,224;448,448" (H and W are -1 in --input_shape).'),
    ("dynamic_dims", 'Gears of the -1 dims of --input_shape, in order, e.g. "1,128;8,128" (--input_format=ND).'),
    ("out_nodes", 'Output nodes, e.g. "node_name1:0;node_name2:1".'),
    ("log", "Log level: debug, info, warning, error, null (default)."),
    ("om", "The .om file for --mode=1 or --mode=6."),
    ("json", "The JSON file written by --mode=1."),
    ("check_report", "The pre-check report written by --mode=3 (default check_result.json)."),
    ("precision_mode", "force_fp16 (default), force_fp32, allow_fp32_to_fp16, must_keep_origin_dtype, "
                       "allow_mix_precision (also allow_mix_precision_fp16, cube_fp16in_fp32out)."),
    ("precision_mode_v2", "fp16, origin, mixed_float16 or cube_fp16in_fp32out (instead of --precision_mode)."),
    ("fusion_switch_file", "File that switches fusion passes on and off: JSON, or PassName:off one a line."),
    ("insert_op_conf", "AIPP config file (aipp_op { aipp_mode : static ... }): preprocessing on the chip."),
    ("enable_small_channel", "1: small-channel (C0=4) layout for the first conv after AIPP; 0 (default)."),
    ("output_type", 'Output data type: FP32, FP16, UINT8, INT8, ... or per output "node:0:FP16;node2:1:FP32".'),
    ("input_fp16_nodes", 'Inputs fed as float16, e.g. "input1;input2".'),
    ("keep_dtype", "File of ONNX node names or OpType::<type>, one a line, that keep the model's dtype."),
    ("modify_mixlist", 'JSON file changing the mixed-precision lists: {"black-list": {"to-add": [...]}, ...}.'),
    ("customize_dtypes", "File of <node>::InputDtype:..,OutputDtype:.. or OpType::<type>:InputDtype:.. lines."),
    ("op_precision_mode", "ini file: [ByOpType] / [ByNodeName] sections of key=high_precision|high_performance."),
    ("op_select_implmode", "high_performance, high_precision, high_performance_for_all, high_precision_for_all."),
    ("optypelist_for_implmode", "Op types that take --op_select_implmode, e.g. Gelu,Sigmoid."),
    ("super_kernel_scope", "Group consecutive kernels into super kernels: 'all', or name prefixes "
                           "separated by ',' or a regex 're:<pattern>'."),
]


def _build_command() -> click.Command:
    params = [click.Option([f"--{name}"], type=str, default=None, help=text) for name, text in _OPTIONS]
    params += [click.Option([f"--{name}"], type=str, default=None,
                            help="Accepted for ATC compatibility; no effect in atc_py (warning W10100).")
               for name in sorted(NO_EFFECT_OPTIONS)]
    return click.Command("atc", params=params, callback=lambda **kw: kw,
                         context_settings={"help_option_names": ["--help", "--h", "-h"]},
                         help="atc_py: convert an ONNX model to an Ascend offline model (.om).")


def gflags_argv(argv: list) -> list:
    """gflags also takes `-key=value` and `-key value`: rewrite them to `--key...`.  Only a
    dash followed by a letter and at least one more name character is an option, so values
    such as `-1,3,224,224` stay values."""
    out = []
    for arg in argv:
        if len(arg) > 2 and arg[0] == "-" and arg[1].isalpha() and arg[1] != "-" and arg not in ("-h",):
            out.append("-" + arg)
        else:
            out.append(arg)
    return out


def _refuse_repeated(argv: list) -> None:
    """`--model=a --model=b` is a mistake, not "the last one wins": refuse it, as ATC does."""
    names = [arg[2:].split("=", 1)[0] for arg in argv if arg.startswith("--") and len(arg) > 2]
    repeated = sorted({name for name in names if names.count(name) > 1})
    if repeated:
        raise AtcError("E10001", f"Parameter [--{repeated[0]}] is given {names.count(repeated[0])} times.",
                       "Give each parameter once.")


def parse_args(argv: list) -> AtcOptions:
    argv = gflags_argv(list(argv))
    _refuse_repeated(argv)
    try:
        values = _build_command().main(args=argv, prog_name="atc", standalone_mode=False)
    except click.exceptions.NoSuchOption as exc:
        raise AtcError("E10001", f"Parameter [{exc.option_name}] is not supported.",
                       "Try 'atc --help' for the supported parameters.")
    except click.exceptions.BadOptionUsage as exc:
        raise AtcError("E10001", f"Parameter [{exc.option_name}] needs a value.", "Write --key=value.")
    except click.exceptions.UsageError as exc:
        raise AtcError("E10001", f"Invalid command line: {exc.format_message()}",
                       "Try 'atc --help' for the supported parameters.")
    if not isinstance(values, dict):  # --help was printed
        raise SystemExit(0)
    given = {k: v for k, v in values.items() if v is not None}
    no_effect = {k: given.pop(k) for k in list(given) if k in NO_EFFECT_OPTIONS}
    return AtcOptions(**given, no_effect=no_effect)


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if any(a in ("--help", "--h", "-h", "-help") for a in argv):
        _build_command().main(args=["--help"], prog_name="atc", standalone_mode=False)
        return 0
    print(START_LINE, flush=True)
    try:
        with cleanup_on_signals():   # SIGTERM/SIGINT: no temp file is left behind
            options = parse_args(argv)
            from atc_py.api import run
            from atc_py.progress_display import TerminalProgress
            run(options, progress=TerminalProgress.for_stderr())
    except AtcError as err:
        print(FAIL_LINE)
        print(err.render())
        return 1
    except MemoryError:   # the budget let through what the host could not hold after all
        print(FAIL_LINE)
        print(host_memory_exhausted().render())
        return 1
    except KeyboardInterrupt:
        print(FAIL_LINE)
        return 130
    except Terminated:
        print(FAIL_LINE)
        return 128 + signal.SIGTERM
    except Exception as exc:  # an internal error is still reported ATC-style
        print(FAIL_LINE)
        print(f"E19999: Inner Error! {type(exc).__name__}: {exc}")
        if os.environ.get("ATC_PY_TRACEBACK"):
            traceback.print_exc()
        return 1
    print(SUCCESS_LINE)
    return 0


if __name__ == "__main__":
    sys.exit(main())
