"""ONNX's own backend node test cases through atc and the simulator (tests/test_onnx_conformance.py).

The cases come from the onnx package itself (`onnx.backend.test.case.node`: each a model and
its input/expected-output sets, built by ONNX's reference code).  We take every case whose
nodes are all ops of our registry, compile it as `atc` would (atc_py.compiler, then the .om
bytes) with `--precision_mode=must_keep_origin_dtype` (each tensor in the model's own dtype,
as ONNX's expected outputs are), load the .om back and run it on the simulator, and compare
with the expected outputs as ONNX's backend runner does (rtol 1e-3, atol 1e-7; NaN equal).

Opsets: a case written at an opset we accept (13-21) runs as is; an older one is converted
by our importer as any model would be; a newer one runs at 21 -- the highest we accept --
when ONNX's opset-21 schema takes the node as written (types and attributes) and ONNX's
reference implementation of the opset-21 op reproduces the case's expected outputs (the op
meant the same then); otherwise the case exists only at an opset we do not accept.

`tests/conformance_expected.json` lists every case that does not pass, each with its reason:
"runtime_shapes" (a config input or output shape known only at run time: issue 12's other
half turns them on -- the test marks them xfail(strict), so one that starts passing says so)
and "not_supported" (everything else, with why).
"""
from __future__ import annotations

import json
import os
import warnings
from dataclasses import dataclass
from functools import lru_cache
from typing import Optional

import numpy as np
import onnx

EXPECTED_FILE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "conformance_expected.json")
MAX_OPSET, MIN_OPSET = 21, 13
RTOL, ATOL = 1e-3, 1e-7          # onnx.backend.test.runner's defaults


@dataclass(frozen=True)
class Case:
    name: str
    model: onnx.ModelProto
    data_sets: tuple             # ((inputs, outputs), ...) lists of arrays in graph order
    opset: int


@lru_cache(maxsize=1)
def cases() -> dict:
    """{name: Case} of every ONNX node test case whose ops are all ours (ai.onnx domain)."""
    from onnx.backend.test.case import node as node_cases
    from ge.ops.registry import all_ops
    ours = set(all_ops())
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with np.errstate(all="ignore"):
            collected = node_cases.collect_testcases(None)
    out = {}
    for case in collected:
        nodes = case.model.graph.node
        if any(n.domain not in ("", "ai.onnx") or n.op_type not in ours for n in nodes):
            continue
        opset = max(o.version for o in case.model.opset_import if o.domain in ("", "ai.onnx"))
        sets = tuple((tuple(_array(a) for a in inputs), tuple(_array(a) for a in outputs))
                     for inputs, outputs in case.data_sets)
        out[case.name] = Case(case.name, case.model, sets, opset)
    return out


def _array(value) -> np.ndarray:
    """A data-set entry as an array (ONNX stores the exotic types' sets as TensorProtos)."""
    if isinstance(value, onnx.TensorProto):
        return onnx.numpy_helper.to_array(value)
    return np.asarray(value)


def expected() -> dict:
    with open(EXPECTED_FILE) as f:
        return json.load(f)


def _at_opset(model: onnx.ModelProto, opset: int) -> onnx.ModelProto:
    copy = onnx.ModelProto()
    copy.CopyFrom(model)
    for entry in copy.opset_import:
        if entry.domain in ("", "ai.onnx"):
            entry.version = opset
    copy.ir_version = min(copy.ir_version, 10)
    return copy


def accepted_model(case: Case) -> tuple:
    """(model at an opset we accept, None) or (None, why not)."""
    if case.opset <= MAX_OPSET:
        return case.model, None
    model = _at_opset(case.model, MAX_OPSET)
    try:
        onnx.checker.check_model(model, full_check=True)
    except Exception as exc:
        return None, f"opset {case.opset} only: ONNX's opset-{MAX_OPSET} schema refuses the node ({_first(exc)})"
    try:
        from onnx.reference import ReferenceEvaluator
        reference = ReferenceEvaluator(model)
        for inputs, outputs in case.data_sets:
            with np.errstate(all="ignore"):
                got = reference.run(None, {i.name: a for i, a in zip(model.graph.input, inputs)})
            if len(got) != len(outputs) or not all(close(np.asarray(g), r) for g, r in zip(got, outputs)):
                return None, (f"opset {case.opset} only: at opset {MAX_OPSET} ONNX's reference gives other "
                              "outputs (the op changed meaning)")
    except Exception as exc:
        return None, f"opset {case.opset} only: ONNX's reference cannot run it at opset {MAX_OPSET} ({_first(exc)})"
    return model, None


def _first(exc: Exception) -> str:
    text = str(exc).strip().splitlines()
    return (text[0] if text else type(exc).__name__)[:160]


def close(got: np.ndarray, ref: np.ndarray) -> bool:
    """ONNX's backend comparison: floats within rtol/atol (NaN equal), the rest exact.  The
    ml_dtypes types (bfloat16, float8, int4) compare by value."""
    if got.shape != ref.shape:
        return False
    if ref.dtype.kind == "V" or got.dtype.kind == "V":           # an ml_dtypes type
        as_float = "float" in ref.dtype.name or "float" in got.dtype.name
        wide = np.float64 if as_float else np.int64
        return close(got.astype(wide), ref.astype(wide))
    if ref.dtype.kind in "fc":
        return bool(np.allclose(got.astype(ref.dtype), ref, rtol=RTOL, atol=ATOL, equal_nan=True))
    if ref.dtype.kind in "OSU":
        return bool(np.array_equal(got.astype(ref.dtype), ref))
    return bool(np.array_equal(got, ref))


@dataclass
class Outcome:
    passed: bool
    stage: str                   # "opset", "atc", "simulator", "compare", "ok"
    detail: str = ""


def run_case(case: Case, soc_version: str = "Ascend910") -> Outcome:
    """Compile with atc's pipeline, write and read back the .om, run every data set on the
    simulator, compare with ONNX's expected outputs."""
    from atc_py.compiler import compile_model
    from atc_py.options import AtcOptions
    from codegen.gear_import import load_om_model
    from ge.errors import AtcError
    from om_format.container import build_om
    from simulator import runner
    from simulator.cost_model import load_chip

    model, why = accepted_model(case)
    if model is None:
        return Outcome(False, "opset", why)
    import tempfile
    with tempfile.TemporaryDirectory(prefix="atc_conformance_") as tmp:
        path = os.path.join(tmp, "model.onnx")
        onnx.save(model, path)
        options = AtcOptions(model=path, framework="5", output=os.path.join(tmp, "m"), soc_version=soc_version,
                             precision_mode="must_keep_origin_dtype")
        try:
            options.validate()
            result = compile_model(options)
            data = build_om(result.partitions.as_dict(), name="m", ops=len(result.graph.nodes),
                            platform_version=soc_version)
        except AtcError as err:
            return Outcome(False, "atc", f"{err.code}: {err.message}")
    try:
        loaded = load_om_model(data)
        sim = runner.Model("conformance.om", loaded, load_chip(soc_version))
        names = [v.name for v in loaded.graph.inputs]
        for index, (inputs, outputs) in enumerate(case.data_sets):
            onnx_inputs = [i.name for i in case.model.graph.input]
            feeds = dict(zip(onnx_inputs, inputs))
            got = runner.run(sim, {n: feeds[n] for n in names}, loop=1, warmup_count=0)
            produced = list(got.outputs.values())
            for k, (ref, out) in enumerate(zip(outputs, produced)):
                if not close(np.asarray(out), np.asarray(ref)):
                    return Outcome(False, "compare", _diff(case.model.graph.output[k].name, np.asarray(out),
                                                           np.asarray(ref), index))
            if len(produced) != len(outputs):
                return Outcome(False, "compare", f"{len(produced)} outputs, ONNX expects {len(outputs)}")
    except AtcError as err:
        return Outcome(False, "simulator", f"{err.code}: {err.message}")
    return Outcome(True, "ok")


def _diff(name: str, got: np.ndarray, ref: np.ndarray, index: int) -> str:
    if got.shape != ref.shape:
        return f"output {name} (data set {index}): shape {list(got.shape)}, ONNX expects {list(ref.shape)}"
    if ref.dtype.kind in "fc":
        err = np.abs(got.astype(np.float64) - ref.astype(np.float64))
        return f"output {name} (data set {index}): max abs error {float(np.nanmax(err)):.3g}"
    return f"output {name} (data set {index}): {int(np.sum(got != ref))} of {ref.size} values differ"


def survey(names: Optional[list] = None) -> dict:
    """{name: Outcome} of every case (or those named): the data behind conformance_expected.json."""
    table = cases()
    return {name: run_case(table[name]) for name in (names or sorted(table))}
