"""Shared test setup: make the checkout importable when running pytest without installing,
and the fuzzing tools in tests/fuzz (mutators, the sandboxed runner) importable by tests.

Tests import shared test code one way, by module name from tests/ (pytest puts it on the
path): `from helpers import ...` (compile in-process, run, compare with onnxruntime) and
`from builder import Net` (the one way to build a small ONNX model op by op)."""
import os
import sys

_TESTS = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(_TESTS))
sys.path.insert(1, os.path.join(_TESTS, "fuzz"))
