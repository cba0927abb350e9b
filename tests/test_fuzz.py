"""The standing fuzz test, brief: seeded .om mutations and hypothesis-drawn ONNX models must
never give a traceback, an E19999, a hang, a partial output or a leftover temp file; and
every past crasher kept in tests/fuzz/corpus/ must stay fixed.

The long run is tests/fuzz/run_fuzz.py (command and figures in RELIABILITY.md).
"""
from __future__ import annotations

import glob
import json
import os
import random

import pytest
from hypothesis import HealthCheck, Phase, given, settings

import harness
import om_mutator
import onnx_gen
import seeds

CORPUS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fuzz", "corpus")
OM_CASES = 120
ONNX_CASES = 60


@pytest.fixture(scope="module")
def seed_dir(tmp_path_factory):
    return str(tmp_path_factory.mktemp("seeds"))


@pytest.fixture(scope="module")
def seed_om(seed_dir):
    return seeds.om_seed("mixed", seed_dir)


def test_om_mutations_are_coded_and_clean(seed_om, tmp_path):
    bad = []
    for index in range(OM_CASES):
        edits = om_mutator.draw(random.Random(index), seed_om)
        verdict = harness.om_case(om_mutator.apply(seed_om, edits), str(tmp_path / "case"))
        if verdict.bad:
            bad.append((index, edits, verdict.detail))
    assert not bad, bad[:3]


@settings(max_examples=ONNX_CASES, derandomize=True, deadline=None, database=None,
          phases=[Phase.explicit, Phase.generate],   # no shrinking in the suite: it must stay fast
          suppress_health_check=list(HealthCheck))
@given(onnx_gen.specs())
def test_onnx_models_are_coded_and_clean(tmp_path_factory, spec):
    verdict = harness.onnx_case(onnx_gen.spec_to_model(spec), str(tmp_path_factory.mktemp("onnx")))
    assert not verdict.bad, (json.dumps(spec), verdict.detail)


def _corpus(kind):
    return sorted(glob.glob(os.path.join(CORPUS, kind, "*.json")))


@pytest.mark.parametrize("path", _corpus("om"), ids=os.path.basename)
def test_om_corpus_stays_fixed(path, tmp_path, seed_dir):
    with open(path) as f:
        case = json.load(f)
    seed = seeds.om_seed(case["seed"], seed_dir)
    verdict = harness.om_case(om_mutator.apply(seed, case["edits"]), str(tmp_path / "case"))
    assert not verdict.bad, verdict.detail


@pytest.mark.parametrize("path", _corpus("onnx"), ids=os.path.basename)
def test_onnx_corpus_stays_fixed(path, tmp_path):
    with open(path) as f:
        spec = json.load(f)
    # a fresh process: some past crashers crashed ONNX's C++ shape inference
    verdict = harness.onnx_case(onnx_gen.spec_to_model(spec), str(tmp_path / "case"), isolate=True, fresh_process=True)
    assert not verdict.bad, verdict.detail


def _segfault(argv):
    import ctypes
    ctypes.string_at(0)


def _hang(argv):
    import time
    time.sleep(60)


def _raise(argv):
    raise ValueError("escaped")


def _coded(argv):
    print("E16004: refused")
    return 1


@pytest.mark.parametrize("main,verdict,rc", [(_segfault, "crash", -11), (_hang, "hang", -9), (_raise, "traceback", 70),
                                             (_coded, "coded", 1)])
def test_forked_runs_contain_what_a_fresh_process_would(tmp_path, main, verdict, rc):
    """The long ONNX run isolates atc in a forked child (no interpreter start-up per case): a
    segfault, a hang or an escaping exception there must be counted, not kill the fuzzer."""
    outcome = harness.forked(main, [], str(tmp_path), seconds=2)
    assert (outcome.verdict, outcome.rc) == (verdict, rc), outcome.text
