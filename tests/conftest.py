"""Shared test setup: make the checkout importable when running pytest without installing,
and the fuzzing tools in tests/fuzz (mutators, the sandboxed runner) importable by tests."""
import os
import sys

_TESTS = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(_TESTS))
sys.path.insert(1, os.path.join(_TESTS, "fuzz"))
