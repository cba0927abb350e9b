"""atc_py on one ONNX file through its stable interfaces only: the `atc` and `atc-sim` command
lines, `--log=debug` output, the `AUTOFUSE_DFX_FLAGS` miss dumps, fusion_result.json and the
`atc --mode=1` JSON of the .om (its task list: one task per launched kernel, with the ONNX
nodes it covers in origin_op_names).  No in-process imports of atc_py internals, so the
sweep survives refactors of the package."""
from __future__ import annotations

import base64
import glob
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time

ERROR_CODE = re.compile(r"\b(E\d{5})\b")
FP16_MAX = 65504.0
CHECKOUT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def tool(name: str) -> str:
    beside = os.path.join(os.path.dirname(sys.executable), name)
    return beside if os.path.exists(beside) else (shutil.which(name) or name)


def checkout_env(env=None) -> dict:
    """`env` (default: ours) with this checkout first on PYTHONPATH.  The `atc` and `atc-sim`
    scripts beside the venv's python import whatever atc_py the venv installed -- an editable
    install may point at another, older checkout -- and the sweep must measure the code it
    runs from (a snapshot of main, say)."""
    env = dict(os.environ if env is None else env)
    rest = [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
    env["PYTHONPATH"] = os.pathsep.join([CHECKOUT] + rest)
    return env


def run(cmd, timeout: float, env=None, cwd=None) -> dict:
    """Run a command in its own process group, importing this checkout (checkout_env); on
    timeout kill the group (atc may fork)."""
    start = time.time()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            env=checkout_env(env), cwd=cwd, start_new_session=True)
    try:
        out, _ = proc.communicate(timeout=timeout)
        rc = proc.returncode
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, _ = proc.communicate()
        rc = "timeout"
    return {"rc": rc, "out": out or "", "seconds": round(time.time() - start, 2)}


def atc_compile(onnx_path: str, out_base: str, precision: str, timeout: float, debug_dir: str = "") -> dict:
    env = dict(os.environ)
    if debug_dir:
        shutil.rmtree(debug_dir, ignore_errors=True)
        env["AUTOFUSE_DFX_FLAGS"] = f"--debug_dir={debug_dir}"
    cmd = [tool("atc"), f"--model={onnx_path}", "--framework=5", f"--output={out_base}",
           "--soc_version=Ascend910", f"--precision_mode={precision}", "--log=debug"]
    result = run(cmd, timeout, env=env, cwd=os.path.dirname(out_base))
    ok = result["rc"] == 0 and os.path.exists(out_base + ".om")
    codes = ERROR_CODE.findall(result["out"])
    return {"ok": ok, "rc": result["rc"], "seconds": result["seconds"], "log": result["out"],
            "error": "" if ok else (codes[0] if codes else f"rc={result['rc']}"),
            "error_text": "" if ok else _error_text(result["out"])}


def _error_text(out: str) -> str:
    lines = [line for line in out.splitlines() if ERROR_CODE.search(line) or "Error" in line or "error" in line]
    return (lines[0] if lines else out.strip().splitlines()[-1] if out.strip() else "")[:300]


def om_tasks(om_path: str, timeout: float) -> list:
    json_path = om_path[:-3] + ".om.json"
    result = run([tool("atc"), "--mode=1", f"--om={om_path}", f"--json={json_path}"], timeout)
    if result["rc"] != 0:
        raise RuntimeError(f"atc --mode=1 failed: {result['out'][-300:]}")
    with open(json_path) as f:
        content = json.load(f)
    os.remove(json_path)
    anchors = {}      # an autofused kernel's anchor: the fused kernel whose tail it took in
    for graph in content["model_def"].get("graph", []):
        for op in graph.get("op", []):
            encoded = op.get("attr", {}).get("anchor", {}).get("s")
            if encoded:
                anchors[op["name"]] = base64.b64decode(encoded).decode("utf-8", "replace")
    return [dict({k: t.get(k) for k in ("op_name", "op_type", "origin_op_names", "fusion_pass")},
                 anchor=anchors.get(t.get("op_name"), "")) for t in content["task_info"]["task"]]


def dfx_misses(debug_dir: str) -> list:
    """The per-miss JSON files AUTOFUSE_DFX_FLAGS=--debug_dir writes (op names of each miss)."""
    out = []
    for path in sorted(glob.glob(os.path.join(debug_dir, "fusion_failure_*.json"))):
        with open(path) as f:
            out.append(json.load(f))
    return out


def compare(om_path: str, onnx_path: str, out_dir: str, timeout: float) -> dict:
    cmd = [tool("atc-sim"), "--model", om_path, "--compare", onnx_path, "--output", out_dir,
           "--loop", "1", "--warmup_count", "0"]
    result = run(cmd, timeout)
    lines = [line.strip() for line in result["out"].splitlines() if "PASS" in line or "FAIL" in line]
    verdict = "PASS" if result["rc"] == 0 and lines else "FAIL" if result["rc"] == 2 else \
        "TIMEOUT" if result["rc"] == "timeout" else "ERROR"
    detail = "; ".join(lines)[:600] if lines else result["out"].strip()[-300:]
    return {"verdict": verdict, "detail": detail, "seconds": result["seconds"]}


def outputs_fit_fp16(out_dir: str) -> bool:
    import numpy as np
    arrays = [np.load(p) for p in glob.glob(os.path.join(out_dir, "*.npy"))]
    floats = [a for a in arrays if a.dtype.kind == "f"]
    return bool(floats) and all(np.isfinite(a).all() and float(np.abs(a).max(initial=0)) < FP16_MAX for a in floats)
