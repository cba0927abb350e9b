"""One answer to "is a core free?" (om_format/cores.py), asked by the .om writer's hashing
thread and by the simulator's BLAS threads alike."""
from __future__ import annotations

import hashlib
import subprocess
import sys
import threading
import time

import pytest

from om_format import container, cores
from simulator import blas

_SPIN = "import sys; sys.stdout.write('go\\n'); sys.stdout.flush()\nwhile True: pass"


def test_running_tasks_is_read_from_the_loadavg_line():
    assert cores.running_tasks("0.52 0.58 0.59 3/467 12345\n") == 3
    assert cores.running_tasks("10.00 9.00 8.00 17/1024 1") == 17
    with pytest.raises((ValueError, IndexError)):
        cores.running_tasks("0.52 0.58")


def test_free_cores_stay_within_the_usable_ones():
    assert cores.usable_cores() >= 1
    assert cores.own_running_threads() >= 1          # the thread asking is running
    assert cores.busy_elsewhere() >= 0
    assert 1 <= cores.free_cores() <= cores.usable_cores()


def test_processes_spinning_elsewhere_count_as_busy():
    """Two processes that never sleep are runnable at every instant, so they are counted at
    once -- a 1-minute load average would still trail them."""
    spinners = [subprocess.Popen([sys.executable, "-c", _SPIN], stdout=subprocess.PIPE) for _ in range(2)]
    try:
        for proc in spinners:
            assert proc.stdout.readline() == b"go\n"
        time.sleep(0.05)
        assert cores.busy_elsewhere() >= 2
        assert cores.free_cores() <= max(1, cores.usable_cores() - 2)
    finally:
        for proc in spinners:
            proc.kill()
            proc.wait()


def test_the_writer_and_the_simulator_ask_the_same_function(monkeypatch):
    assert blas.free_cores is cores.free_cores
    assert blas.usable_cores is cores.usable_cores
    monkeypatch.setattr(cores, "free_cores", lambda: 1)
    assert not container._spare_core()
    monkeypatch.setattr(cores, "free_cores", lambda: 2)
    assert container._spare_core()


def test_the_writer_asks_again_while_a_long_om_is_written(monkeypatch):
    """Without `threaded` fixed, the writer re-asks every _RECHECK_S: a neighbour that starts
    mid-write moves the hashing back onto the writing thread."""
    answers = iter([True, False])
    monkeypatch.setattr(container, "_spare_core", lambda: next(answers))
    monkeypatch.setattr(container._HashingWriter, "_RECHECK_S", 0.0)
    writer = _writer()
    chunk = memoryview(bytes(container._HashingWriter._OVERLAP))
    writer.write(chunk)                              # a core is spare: hashed on the second thread
    writer.write(chunk)                              # not any more: hashed here, piece by piece
    writer.close()
    main = threading.get_ident()
    assert writer.sha.threads[0] != main
    assert set(writer.sha.threads[1:]) == {main} and len(writer.sha.threads) > 2
    assert writer.sha.digest() == hashlib.sha256(bytes(2 * len(chunk))).digest()


def test_the_writer_asks_once_per_interval_and_never_when_told(monkeypatch):
    asked = []
    monkeypatch.setattr(container, "_spare_core", lambda: asked.append(1) or True)
    monkeypatch.setattr(container._HashingWriter, "_RECHECK_S", 3600.0)
    chunk = memoryview(bytes(container._HashingWriter._OVERLAP))
    writer = _writer()
    for _ in range(3):
        writer.write(chunk)
    writer.close()
    assert len(asked) == 1
    fixed = _writer(threaded=False)
    fixed.write(chunk)
    fixed.close()
    assert len(asked) == 1 and set(fixed.sha.threads) == {threading.get_ident()}


class _Sink:
    def write(self, data) -> int:
        return len(data)


class _ThreadsSha:
    """sha256 that notes which thread fed it each piece."""

    def __init__(self):
        self._sha, self.threads = hashlib.sha256(), []

    def update(self, data) -> None:
        self.threads.append(threading.get_ident())
        self._sha.update(data)

    def digest(self) -> bytes:
        return self._sha.digest()


def _writer(**kwargs):
    writer = container._HashingWriter(_Sink(), 0, **kwargs)
    writer.sha = _ThreadsSha()
    return writer
