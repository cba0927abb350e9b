"""The Python API: `compile()` an ONNX model to an .om and get the report as data.

    import atc_py
    report = atc_py.compile("resnet50.onnx", output="out/resnet50", soc_version="Ascend910",
                            precision_mode="force_fp16", output_type="FP32")
    report["kernels_after"], report["overall_speedup"], report["precision_overrides"]

    session = atc_py.InferSession("out/resnet50.om")        # simulator/session.py
    logits, = session.infer([image])

Why: scripts that compile many models want the numbers the Graph Fusion Report prints, not
text to scrape.  Options are ATC's, by their flag names without dashes (`out_nodes`,
`insert_op_conf`, ...), with Python values where they read naturally (lists for node lists,
bools for switches).  A mistake raises `ge.errors.AtcError` with the code `atc` prints.
`atc` itself (cli.py) is a thin layer: it parses text into the same AtcOptions and calls
`run()`.
"""
from __future__ import annotations

import dataclasses
import os
import tempfile
from typing import Any, Optional

from atc_py.options import NO_EFFECT_OPTIONS, AtcOptions
from ge.errors import AtcError

# Options whose list values join with "," (the rest of the node lists join with ";").
_COMMA_LISTS = ("optypelist_for_implmode", "super_kernel_scope", "dynamic_batch_size")
# Gear lists: [(224, 224), (448, 448)] -> "224,224;448,448"
_GEAR_LISTS = ("dynamic_image_size", "dynamic_dims")
_FIELDS = {f.name for f in dataclasses.fields(AtcOptions)} - {"no_effect", "warnings", "parsed"}


def _text(name: str, value: Any) -> str:
    """A Python value as the text ATC's flag takes."""
    if isinstance(value, bool):
        allowed = NO_EFFECT_OPTIONS.get(name) or ()
        if "true" in allowed:
            return "true" if value else "false"
        return "1" if value else "0"
    if isinstance(value, (list, tuple)) and name in _GEAR_LISTS:
        return ";".join(",".join(str(d) for d in gear) if isinstance(gear, (list, tuple)) else str(gear)
                        for gear in value)
    if isinstance(value, (list, tuple)):
        return ("," if name in _COMMA_LISTS else ";").join(str(v) for v in value)
    if isinstance(value, dict) and name == "input_shape":
        return ";".join(f"{k}:{','.join(str(d) for d in dims)}" for k, dims in value.items())
    if isinstance(value, os.PathLike):
        return os.fspath(value)
    return str(value)


def make_options(**kwargs) -> AtcOptions:
    """AtcOptions from keyword arguments named like the flags; unknown names are E10001."""
    given, no_effect = {}, {}
    for name, value in kwargs.items():
        if value is None:
            continue
        if name in NO_EFFECT_OPTIONS:
            no_effect[name] = _text(name, value)
        elif name in _FIELDS:
            given[name] = _text(name, value)
        else:
            raise AtcError("E10001", f"Parameter [--{name}] is not supported.",
                           "Use ATC's option names without the dashes, e.g. soc_version=, output_type=.")
    return AtcOptions(**given, no_effect=no_effect)


def run(options: AtcOptions, log=None, progress=None):
    """Validate and do what `options.mode` asks (cli.py's whole job after parsing).  For
    --mode=0 returns the report as data (see `report_data`); else None.  `progress` (a
    ge.progress.Progress) is told the stages of a compile."""
    from atc_py import driver
    options.validate()
    if options.mode != "0":
        driver.run(options)
        return None
    result, fusion_report = driver.generate_om(options, log, progress)
    if options.gears is not None:
        return gear_report_data(options, result, fusion_report)
    return report_data(options, result, fusion_report)


def compile(model, output: str, soc_version: str, framework: str = "5", log: Optional[str] = None,
            **options) -> dict:
    """Compile `model` (an .onnx path or an onnx.ModelProto) into `output`.om for
    `soc_version`; returns the report as data.  Prints nothing unless `log` is given
    ("info" prints the Graph Fusion Report, as `atc --log=info`)."""
    from atc_py.log import Logger
    if hasattr(model, "SerializeToString"):           # an onnx.ModelProto: through a temp file
        with tempfile.TemporaryDirectory(prefix="atc_py_") as tmp:
            path = os.path.join(tmp, "model.onnx")
            import onnx
            onnx.save(model, path)
            return compile(path, output, soc_version, framework, log, **options)
    opts = make_options(model=os.fspath(model), output=os.fspath(output), soc_version=soc_version,
                        framework=framework, log=log or "null", mode="0", **options)
    logger = None if log else Logger(level=4, quiet=True)
    return run(opts, logger)


def gear_report_data(options: AtcOptions, geared, reports: list) -> dict:
    """A gear model's report: every gear's report data under "gears" (with its values and
    input shapes), and at the top level what the gears share (inputs and outputs with -1 for
    the dims the gears change) plus the summed kernel counts."""
    spec = geared.spec
    gears = []
    for index, (result, fusion_report) in enumerate(zip(geared.gears, reports)):
        data = report_data(options, result, fusion_report)
        data.update({"gear": list(spec.gears[index]),
                     "input_shape": {n: list(d) for n, d in spec.shapes(index).items()}})
        gears.append(data)

    def merged(key: str) -> list:
        entries = []
        for k, entry in enumerate(gears[0][key]):
            dims = [g[key][k]["shape"] for g in gears]
            shape = [d[0] if len(set(d)) == 1 else -1 for d in zip(*dims)]
            entries.append({**entry, "shape": shape})
        return entries

    first = gears[0]
    return {"om": options.om_path, "soc_version": options.soc_version, "precision_mode": options.precision_mode,
            "dynamic": {"flag": spec.flag, "gears": [list(g) for g in spec.gears], "input_shape": options.input_shape},
            "inputs": merged("inputs"), "outputs": merged("outputs"),
            "kernels_after": sum(g["kernels_after"] for g in gears),
            "warnings": first["warnings"], "fusion_switch_mapped": first["fusion_switch_mapped"], "gears": gears}


def _dims(shape) -> list:
    """A shape as plain data: symbolic dims (dynamic shapes) as their expressions."""
    return [d if isinstance(d, int) else str(d) for d in shape]


def report_data(options: AtcOptions, result, fusion_report) -> dict:
    """Everything the Graph Fusion Report and the warnings say, as plain data."""
    r = fusion_report
    return {
        "om": options.om_path, "soc_version": options.soc_version, "precision_mode": options.precision_mode,
        "ops_before": r.ops_before, "ops_after": r.ops_after,
        "kernels_before": r.kernels_before, "kernels_after": r.kernels_after,
        "time_before_us": r.time_before_us, "time_after_us": r.time_after_us,
        "overall_speedup": r.overall_speedup,
        "patterns": [dict(p) for p in r.patterns],
        "misses": [m.to_json() for m in r.misses],
        "super_kernels": [list(g) for g in r.super_kernels], "launches_after": r.launches_after,
        "precision_overrides": [dict(row) for row in r.precision_overrides],
        "io": {k: v for k, v in result.io.items()},
        "inputs": [{"name": v.name, "shape": _dims(v.desc.shape), "dtype": str(v.desc.dtype)}
                   for v in result.graph.inputs],
        "outputs": [{"name": v.name, "shape": _dims(v.desc.shape), "dtype": str(v.desc.dtype)}
                    for v in result.graph.outputs],
        "dynamic": dict(r.dynamic),
        "warnings": [str(w) for w in result.warnings],
        "fusion_switch_mapped": dict(result.switches.mapped),
    }
