"""ONNX's own backend node test cases for every op of our registry, through atc and the
simulator (tests/conformance.py says how), compared with ONNX's expected outputs.

Every case runs.  Those that do not pass are listed, with their reason, in
tests/conformance_expected.json: `not_at_accepted_opset` (the case exists only at an opset
above 21), `training_only` (skipped: Dropout in training mode draws random numbers),
`runtime_shapes` (a config input or an output shape known only at run time --
xfail(strict), so a case that starts passing must leave the list; empty since run-time
config inputs landed) and `not_supported` (sequences/optionals, Resize align_corners where
ONNX's reference and onnxruntime differ).  Any other case must pass, and a listed one must
still fail, so the lists are the outcomes.

The figures (test_conformance_rate prints them, `--counts` below too):
- all cases: every node test case of the onnx package whose ops are all ours, at every opset
  it was written for (1 to 28, the opset-22+ ones included); passing / all.
- counted cases: all, minus `not_at_accepted_opset` (we accept opsets 13-21; a newer case is
  counted when it means the same at 21, see conformance.py) and `training_only` (no runtime
  can reproduce random numbers); passing / counted must be >= 95% (issue 12).  Nothing else
  leaves the denominator.

    python tests/test_onnx_conformance.py --survey    # rewrites the lists from a fresh run
    python tests/test_onnx_conformance.py --counts    # prints the figures from the lists
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


def figures() -> dict:
    """The counts behind the figures (module docstring), from the lists: each case's test
    holds its outcome to them."""
    total = len(CASES)
    later, training = len(EXPECTED["not_at_accepted_opset"]), len(EXPECTED["training_only"])
    failing = len(EXPECTED["runtime_shapes"]) + len(EXPECTED["not_supported"])
    counted = total - later - training
    return {"all": total, "later_opset_only": later, "training_only": training, "counted": counted,
            "failing_counted": failing, "passing": counted - failing}


def describe(f: dict) -> str:
    return (f"ONNX backend node cases for our ops, every opset (1-28): {f['all']}, passing {f['passing']} "
            f"({f['passing'] / f['all']:.1%}). Counted (inference at opsets 13-21): {f['counted']} = {f['all']} - "
            f"{f['later_opset_only']} only at opset 22+ - {f['training_only']} training-mode; passing "
            f"{f['passing']} ({f['passing'] / f['counted']:.1%}), failing {f['failing_counted']} "
            "(tests/conformance_expected.json says why).")


def test_conformance_rate():
    """At least 95% of the counted cases pass; printed: both figures and what is counted."""
    f = figures()
    print("\n" + describe(f))
    assert f["passing"] / f["counted"] >= 0.95


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
        EXPECTED = result
    if "--counts" in sys.argv or "--survey" in sys.argv:
        print(describe(figures()))
