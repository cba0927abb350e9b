"""ONNX's own backend node test cases for every op of our registry, through atc and the
simulator (tests/conformance.py says how), compared with ONNX's expected outputs.

Every case runs.  Those that do not pass are listed, with their reason, in
tests/conformance_expected.json: `not_at_accepted_opset` (the case exists only at an opset
above 21), `training_only` (skipped: Dropout in training mode draws random numbers),
`runtime_shapes` (a config input or an output shape known only at run time --
xfail(strict), so a case that starts passing must leave the list; empty since run-time
config inputs landed) and `not_supported` (e.g. float8 FNUZ and uint4 tensors, which have
no ge DataType, Resize's cubic mode).  Any other case must pass.

    python tests/test_onnx_conformance.py --survey    # rewrites the lists from a fresh run
"""
from __future__ import annotations

import json
import sys

import pytest

import conformance

CASES = conformance.cases()
EXPECTED = conformance.expected()
LISTS = ("not_at_accepted_opset", "training_only", "runtime_shapes", "not_supported")
_OUTCOMES: dict = {}


def _outcome(name: str):
    if name not in _OUTCOMES:
        _OUTCOMES[name] = conformance.run_case(CASES[name])
    return _OUTCOMES[name]


def _listed(name: str):
    return next(((kind, EXPECTED[kind][name]) for kind in LISTS if name in EXPECTED[kind]), (None, None))


@pytest.mark.parametrize("name", sorted(CASES))
def test_onnx_backend_node_case(name):
    outcome = _outcome(name)
    kind, reason = _listed(name)
    if kind is None:
        assert outcome.passed, (f"{outcome.stage}: {outcome.detail} -- fix it, or (a new op's case that cannot "
                                "pass here) list it with its reason: python tests/test_onnx_conformance.py --survey")
        return
    assert not outcome.passed, f"{name} passes now: remove it from {kind} in tests/conformance_expected.json"
    if kind in ("not_at_accepted_opset", "training_only"):
        pytest.skip(reason)
    pytest.xfail(f"{kind}: {reason}")


def test_every_listed_case_exists_once():
    listed = [name for kind in LISTS for name in EXPECTED[kind]]
    assert len(listed) == len(set(listed))
    assert set(listed) <= set(CASES), sorted(set(listed) - set(CASES))[:5]


def test_conformance_rate():
    """Of the inference cases at opsets we accept whose tensors an .om can hold, at least 95%
    pass apart from the run-time-shape cases (issue 12's other half); printed: every figure."""
    total = len(CASES)
    accepted = total - len(EXPECTED["not_at_accepted_opset"]) - len(EXPECTED["training_only"])
    no_ge_type = sum(1 for r in EXPECTED["not_supported"].values() if "no ge DataType" in r)
    runtime = len(EXPECTED["runtime_shapes"])
    passing = total - sum(len(EXPECTED[kind]) for kind in LISTS)
    print(f"\nONNX backend node cases for our ops: {total}; inference cases at accepted opsets {accepted} "
          f"(training only {len(EXPECTED['training_only'])}); passing {passing} "
          f"({passing / accepted:.1%}); run-time shapes {runtime}; not supported {len(EXPECTED['not_supported'])} "
          f"({no_ge_type} with a type no ge DataType holds)")
    assert passing / (accepted - no_ge_type - runtime) >= 0.95


def survey() -> dict:
    """Run every case and rewrite tests/conformance_expected.json's lists from the outcomes."""
    doc = {"about": EXPECTED.get("about", ""), **{kind: {} for kind in LISTS}}
    for name in sorted(CASES):
        outcome = conformance.run_case(CASES[name])
        if outcome.passed:
            continue
        if outcome.stage == "opset":
            kind = "not_at_accepted_opset"
        elif "training mode" in outcome.detail:
            kind = "training_only"
        elif "computed at run time" in outcome.detail or "depends on input values" in outcome.detail:
            kind = "runtime_shapes"
        elif name in EXPECTED["not_at_accepted_opset"]:       # hand-classified (Mod fmod=0 before opset 28)
            kind = "not_at_accepted_opset"
        else:
            kind = "not_supported"
        doc[kind][name] = EXPECTED.get(kind, {}).get(name) or outcome.detail
    with open(conformance.EXPECTED_FILE, "w") as f:
        json.dump(doc, f, indent=1)
        f.write("\n")
    return doc


if __name__ == "__main__":
    if "--survey" in sys.argv:
        result = survey()
        print({kind: len(result[kind]) for kind in LISTS})
