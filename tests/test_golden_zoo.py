"""Golden fingerprints of the zoo: what `atc` produces for every zoo model at --small size.

Why: a refactor must not change behaviour, and a deliberate behaviour change must show
exactly what it changed.  For every model of `python -m atc_py.zoo --list` (small config),
compiled for Ascend910 in force_fp16 and in force_fp32 through the real command line
(`cli.main`, in-process), this pins:
- kernels: the number of launched kernels per op type (the .om task list),
- report: the Graph Fusion Report lines `--log=info` prints,
- fusion_result: the fusion_result.json written next to the run,
- om_sha256: the sha256 of the .om bytes.
The expected values live in tests/golden/zoo_small.json.

A change that alters any of these on purpose regenerates the file in the same commit and
says in its message what changed and why:

    python tests/test_golden_zoo.py --update

The update computes every fingerprint twice, in two processes with different
PYTHONHASHSEED values, and refuses to write if they differ (builds are deterministic);
`git diff tests/golden/zoo_small.json` then shows the change to review.
"""
from __future__ import annotations

import contextlib
import hashlib
import io
import json
import os
import subprocess
import sys
import tempfile
from collections import Counter

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if REPO not in sys.path:
    sys.path.insert(0, REPO)

GOLDEN = os.path.join(REPO, "tests", "golden", "zoo_small.json")
PRECISIONS = ("force_fp16", "force_fp32")
SOC = "Ascend910"
# Variables that steer a build: the fingerprints are of the default configuration.
_STEERING_ENV = ("GE_FUSION_DISABLE_LIST", "AUTOFUSE_FLAGS", "AUTOFUSE_DFX_FLAGS",
                 "ASCEND_GLOBAL_LOG_LEVEL", "GE_GRAPH_FUSION_LOG")


def _models() -> list:
    from atc_py import zoo
    return list(zoo.MODELS)


@contextlib.contextmanager
def _clean_env_and_cwd(directory: str):
    saved_env = {k: os.environ.pop(k) for k in _STEERING_ENV if k in os.environ}
    saved_cwd = os.getcwd()
    os.chdir(directory)
    try:
        yield
    finally:
        os.chdir(saved_cwd)
        os.environ.update(saved_env)


def fingerprint(name: str, precision_mode: str) -> dict:
    """Compile zoo model `name` (small) with `atc` in-process and fingerprint the outputs."""
    import cli
    from atc_py import zoo
    from om_format.container import load_task_def, read_om

    with tempfile.TemporaryDirectory() as tmp:
        model = zoo.save(name, tmp, small=True)
        out = os.path.join(tmp, "out", name)
        text = io.StringIO()
        with _clean_env_and_cwd(tmp), contextlib.redirect_stdout(text):
            rc = cli.main([f"--model={model}", "--framework=5", f"--output={out}", f"--soc_version={SOC}",
                           f"--precision_mode={precision_mode}", "--log=info"])
        assert rc == 0, text.getvalue()
        data = open(out + ".om", "rb").read()
        tasks = load_task_def(read_om(data))
        with open(os.path.join(tmp, "fusion_result.json"), encoding="utf-8") as f:
            fusion_result = json.load(f)
    report = [line[len("[GE] "):] for line in text.getvalue().splitlines() if line.startswith("[GE]")]
    return {"kernels": dict(sorted(Counter(t.op_type for t in tasks.task).items())),
            "report": report, "fusion_result": fusion_result,
            "om_sha256": hashlib.sha256(data).hexdigest()}


def all_fingerprints() -> dict:
    return {f"{name}/{mode}": fingerprint(name, mode) for name in _models() for mode in PRECISIONS}


def _load_golden() -> dict:
    with open(GOLDEN, encoding="utf-8") as f:
        return json.load(f)


def _case_ids() -> list:
    return [f"{name}/{mode}" for name in _models() for mode in PRECISIONS]


@pytest.mark.parametrize("case", _case_ids())
def test_zoo_fingerprint_is_unchanged(case):
    golden = _load_golden()
    assert case in golden, f"{case} has no golden fingerprint: run python tests/test_golden_zoo.py --update"
    name, mode = case.split("/")
    got = fingerprint(name, mode)
    want = golden[case]
    for key in ("kernels", "report", "fusion_result", "om_sha256"):
        assert got[key] == want[key], (f"{case}: {key} changed; if on purpose, run "
                                       f"python tests/test_golden_zoo.py --update and explain it in the commit")


def test_golden_covers_exactly_the_zoo():
    assert sorted(_load_golden()) == sorted(_case_ids())


def _fingerprints_in_subprocess(hash_seed: str) -> dict:
    env = dict(os.environ, PYTHONHASHSEED=hash_seed, PYTHONPATH=REPO)
    proc = subprocess.run([sys.executable, os.path.abspath(__file__), "--print"], cwd=REPO, env=env,
                          capture_output=True, text=True)
    if proc.returncode != 0:
        raise SystemExit(proc.stdout + proc.stderr)
    return json.loads(proc.stdout)


def main(argv: list) -> int:
    if argv == ["--print"]:
        json.dump(all_fingerprints(), sys.stdout)
        return 0
    if argv != ["--update"]:
        print(__doc__)
        return 2
    first, second = _fingerprints_in_subprocess("1"), _fingerprints_in_subprocess("2")
    if first != second:
        differ = sorted(k for k in first if first[k] != second.get(k))
        print(f"not deterministic across hash seeds: {differ}", file=sys.stderr)
        return 1
    os.makedirs(os.path.dirname(GOLDEN), exist_ok=True)
    with open(GOLDEN, "w", encoding="utf-8") as f:
        json.dump(first, f, indent=1, sort_keys=True)
        f.write("\n")
    print(f"wrote {len(first)} fingerprints to {os.path.relpath(GOLDEN, REPO)}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
