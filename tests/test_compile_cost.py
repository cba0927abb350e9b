"""What a compile costs beyond reading and writing the weight bytes once (issue 13, the I/O
floor in bench/bench_memory.py): no module a plain compile never uses is imported, and the
.om's SHA-256 reads every byte exactly once, from the caller's buffers (views, never copies)."""
from __future__ import annotations

import hashlib
import io
import json
import os
import subprocess
import sys

import numpy as np
import pytest

from helpers import record_sha_updates
from om_format import container
from om_format.container import HEADER_SIZE, PartitionType, stream_om
from om_format.weights import WeightsBuilder

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# Modules a plain `atc --mode=0` compile has no use for: the reference runtimes, the simulator's
# executor and session, the model zoo and the exporters.
NEVER_IN_A_COMPILE = ("onnxruntime", "onnx.reference", "simulator.executor", "simulator.runner",
                      "simulator.session", "atc_py.zoo", "torch", "scipy", "networkx")
# What the CLI imports before it knows what it is asked to do (`atc --help`, a bad flag).
NOT_AT_CLI_START = ("onnx", "codegen", "fusion_passes", "simulator", "atc_py.compiler", "google.protobuf")


def _modules_after(code: str, cwd: str) -> set:
    script = code + "\nimport json, sys\nsys.stdout.write('\\n@@' + json.dumps(sorted(sys.modules)))\n"
    proc = subprocess.run([sys.executable, "-c", script], cwd=cwd, capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": REPO})
    assert proc.returncode == 0, proc.stderr[-2000:]
    return set(json.loads(proc.stdout.rsplit("\n@@", 1)[1]))


def _loaded(modules: set, names) -> list:
    return sorted(m for m in modules for name in names if m == name or m.startswith(name + "."))


def test_the_cli_starts_without_the_compiler():
    modules = _modules_after("import cli", REPO)
    assert "cli" in modules and "click" in modules
    assert _loaded(modules, NOT_AT_CLI_START) == []


def test_a_compile_imports_no_runtime_it_does_not_use(tmp_path):
    from atc_py import zoo
    zoo.save("bert_base", str(tmp_path), small=True)
    code = ("import cli\n"
            "rc = cli.main(['--model=bert_base.onnx', '--framework=5', '--output=out', '--soc_version=Ascend910',"
            " '--log=error'])\n"
            "assert rc == 0, rc")
    modules = _modules_after(code, str(tmp_path))
    assert os.path.getsize(tmp_path / "out.om") > HEADER_SIZE
    assert "atc_py.compiler" in modules and "simulator.cost_model" in modules   # it did compile and price
    assert _loaded(modules, NEVER_IN_A_COMPILE) == []


@pytest.mark.parametrize("threaded", [True, False])
def test_every_om_byte_is_hashed_once_from_the_callers_buffers(monkeypatch, threaded):
    """The weights reach SHA-256 as views of the arrays they live in, and the bytes hashed are
    exactly the bytes after the header, in file order (the checksum then matches)."""
    monkeypatch.setattr(container._HashingWriter, "_OVERLAP", 1 << 16)
    monkeypatch.setattr(container, "_spare_core", lambda: threaded)
    rng = np.random.default_rng(0)
    arrays = [rng.standard_normal(n).astype(np.float32) for n in (70_001, 300_000, 5)]
    weights = WeightsBuilder()
    for array in arrays:
        weights.add(array)
    fed = []
    record_sha_updates(monkeypatch, fed.append)
    out = io.BytesIO()
    size = stream_om(out, {PartitionType.MODEL_DEF: b"model-def", PartitionType.WEIGHTS_DATA: weights},
                     name="m", ops=1, platform_version="Ascend910")
    data = out.getvalue()
    assert size == len(data)
    assert b"".join(bytes(piece) for piece in fed) == data[HEADER_SIZE:]          # each byte once, in order
    big = [piece for piece in fed if len(piece) >= 1 << 16]
    assert big and all(isinstance(piece, memoryview) for piece in big)
    assert all(any(np.shares_memory(np.frombuffer(piece, np.uint8), a) for a in arrays) for piece in big)
    assert container.read_om(data).header.checksum[:32] == hashlib.sha256(data[HEADER_SIZE:]).digest()


def test_the_bench_clocks_each_stage_of_a_compile(tmp_path):
    """bench/bench_memory.py's breakdown of one compile: the stages cover the run from the
    first import to the end, the hash and the writes are inside the writing stage (on two threads
they overlap, so each is at most that stage, not their sum)."""
    sys.path.insert(0, REPO)
    from bench import bench_memory
    from atc_py import zoo
    path = zoo.save("bert_base", str(tmp_path), small=True)
    found = bench_memory.stages(path, str(tmp_path / "m"))
    names = [name for name, _ in found["stages"]]
    assert names[0] == "start-up" and names[-1] == "writing the .om" and "fusion passes" in names
    assert abs(sum(t for _, t in found["stages"]) - found["total_s"]) <= 0.01
    assert [n for n, _ in found["stages_cpu"]] == names and all(c >= 0 for _, c in found["stages_cpu"])
    writing = dict(found["stages"])["writing the .om"]
    assert 0 < found["hash_s"] <= writing + 0.01 and 0 < found["write_s"] <= writing + 0.01
    assert 0 <= found["wait_s"] <= writing + 0.01 and 0 <= found["pack_s"] <= writing + 0.01
    assert found["hash_thread_bytes"] >= 0 and found["minor_faults"] > 0
    inline = bench_memory.stages(path, str(tmp_path / "m"), hash_thread="off")
    assert inline["hash_thread_bytes"] == 0 and inline["wait_s"] == 0
    assert not os.path.exists(tmp_path / "m.om")
