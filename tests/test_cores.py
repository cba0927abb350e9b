"""One answer to "is a core free?" (om_format/cores.py), asked by the .om writer's hashing
thread and by the simulator's BLAS threads alike."""
from __future__ import annotations

import hashlib
import subprocess
import sys
import threading
import time

import pytest

from cgroup_fakes import V2, fake_cgroup
from om_format import cgroups, container, cores
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
    mid-write (two "no core free" answers in a row) moves the hashing back onto the writing
    thread; one such answer alone (a blip) does not; a free core again moves it out."""
    answers = iter([True, False, True, False, False, True])
    monkeypatch.setattr(container, "_spare_core", lambda: next(answers))
    monkeypatch.setattr(container._HashingWriter, "_RECHECK_S", 0.0)
    writer = _writer()
    chunk = memoryview(bytes(container._HashingWriter._OVERLAP))
    where = []
    for _ in range(6):
        before = len(writer.sha.threads)
        writer.write(chunk)
        writer._collect(keep=0)                      # (wait for the hashing thread, to see where it went)
        where.append(set(writer.sha.threads[before:]))
    writer.close()
    main = threading.get_ident()
    on_thread = [main not in threads for threads in where]
    assert on_thread == [True, True, True, True, False, True]
    assert len(where[4]) == 1 and writer.sha.threads.count(main) > 1      # hashed here, piece by piece
    assert writer.sha.digest() == hashlib.sha256(bytes(6 * len(chunk))).digest()


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


# -- cgroup CPU quota: fake /proc/self/cgroup, /proc/self/mountinfo and cgroup files ----------

def _fake_cgroup(tmp_path, monkeypatch, membership: str, mounts: list, files: dict, affinity: int = 8):
    """The affinity mask is faked too, so the quota is what decides."""
    fake_cgroup(tmp_path, monkeypatch, membership, mounts, files)
    monkeypatch.setattr(cores.os, "sched_getaffinity", lambda pid: set(range(affinity)))
    monkeypatch.setattr(cores, "QUOTA_RECHECK_S", 0.0)        # these tests change the files between calls


def test_cgroup_v2_quota_caps_the_usable_cores_rounded_down(tmp_path, monkeypatch):
    _fake_cgroup(tmp_path, monkeypatch, "0::/user/job\n", V2, {"cg2/user/job/cpu.max": "250000 100000\n"})
    assert cores.cgroup_cpu_limit() == 2                     # 2.5 CPUs -> 2 whole ones
    assert cores.usable_cores() == 2
    assert 1 <= cores.free_cores() <= 2


def test_cgroup_quota_below_one_cpu_still_leaves_one(tmp_path, monkeypatch):
    _fake_cgroup(tmp_path, monkeypatch, "0::/\n", V2, {"cg2/cpu.max": "50000 100000"})
    assert cores.cgroup_cpu_limit() == 1
    assert cores.usable_cores() == 1


def test_a_parents_quota_binds_its_children_and_the_tightest_wins(tmp_path, monkeypatch):
    _fake_cgroup(tmp_path, monkeypatch, "0::/a/b\n", V2,
                 {"cg2/a/b/cpu.max": "max 100000", "cg2/a/cpu.max": "300000 100000", "cg2/cpu.max": "700000 100000"})
    assert cores.cgroup_cpu_limit() == 3
    assert cores.usable_cores() == 3


def test_no_quota_leaves_the_affinity_mask(tmp_path, monkeypatch):
    _fake_cgroup(tmp_path, monkeypatch, "0::/job\n", V2, {"cg2/job/cpu.max": "max 100000\n"}, affinity=6)
    assert cores.cgroup_cpu_limit() is None
    assert cores.usable_cores() == 6


def test_the_affinity_mask_wins_when_it_is_smaller(tmp_path, monkeypatch):
    _fake_cgroup(tmp_path, monkeypatch, "0::/\n", V2, {"cg2/cpu.max": "1600000 100000"}, affinity=3)
    assert cores.cgroup_cpu_limit() == 16
    assert cores.usable_cores() == 3


def test_cgroup_v1_cfs_quota_is_read_where_the_cpu_controller_is_mounted(tmp_path, monkeypatch):
    """A docker-style v1 host: the cgroup path is the mount's root, the mount point has a space."""
    membership = "9:name=systemd:/\n4:memory:/docker/abc\n2:cpu,cpuacct:/docker/abc\n0::/\n"
    mounts = [("cgroup", "/docker/abc", "v1 cpu", "rw,cpu,cpuacct"),
              ("cgroup", "/docker/abc", "mem", "rw,memory"), ("cgroup2", "/", "unified", "rw")]
    files = {"v1 cpu/cpu.cfs_quota_us": "350000\n", "v1 cpu/cpu.cfs_period_us": "100000\n",
             "mem/cpu.cfs_quota_us": "100000\n", "mem/cpu.cfs_period_us": "100000\n"}   # not a cpu hierarchy
    _fake_cgroup(tmp_path, monkeypatch, membership, mounts, files)
    assert cores.cgroup_cpu_limit() == 3
    assert cores.usable_cores() == 3
    (tmp_path / "v1 cpu/cpu.cfs_quota_us").write_text("-1\n")                           # v1's "no quota"
    assert cores.cgroup_cpu_limit() is None
    assert cores.usable_cores() == 8


def test_unreadable_or_malformed_cgroup_files_mean_no_limit(tmp_path, monkeypatch):
    _fake_cgroup(tmp_path, monkeypatch, "0::/job\n", V2,
                 {"cg2/job/cpu.max": "lots\n", "cg2/cpu.max": "100000 0\n"}, affinity=4)
    assert cores.cgroup_cpu_limit() is None
    assert cores.usable_cores() == 4
    monkeypatch.setattr(cgroups, "PROC_CGROUP", str(tmp_path / "missing"))
    assert cores.cgroup_cpu_limit() is None
    assert cores.usable_cores() == 4


def test_a_cgroup_path_outside_the_mounted_root_reads_the_mount_point_only(tmp_path, monkeypatch):
    """Seen from inside a cgroup namespace the mount's root can differ from the listed path:
    the mount point (the process's visible cgroup) is read, nothing above it."""
    _fake_cgroup(tmp_path, monkeypatch, "0::/../../elsewhere\n", [("cgroup2", "/ns", "cg2", "rw")],
                 {"cg2/cpu.max": "200000 100000"})
    assert cores.cgroup_cpu_limit() == 2
    assert [d for d, _ in cgroups.controller_dirs("cpu")] == [str(tmp_path / "cg2")]


def test_the_quota_is_read_again_only_after_quota_recheck_s(tmp_path, monkeypatch):
    """usable_cores runs before every forward (blas.fit_to_free_cores): reading the cgroup
    files each time cost ~0.2 ms, a third of a small model's forward.  A quota rarely changes:
    it is read again once QUOTA_RECHECK_S has passed, or when the files asked about change."""
    _fake_cgroup(tmp_path, monkeypatch, "0::/\n", V2, {"cg2/cpu.max": "300000 100000"})
    monkeypatch.setattr(cores, "QUOTA_RECHECK_S", 60.0)
    now = [1000.0]
    monkeypatch.setattr(cores.time, "monotonic", lambda: now[0])
    reads = []
    real = cores.cgroup_cpu_limit
    monkeypatch.setattr(cores, "cgroup_cpu_limit", lambda: reads.append(1) or real())
    assert cores.usable_cores() == 3
    (tmp_path / "cg2/cpu.max").write_text("200000 100000")
    now[0] += 30
    assert cores.usable_cores() == 3 and len(reads) == 1      # within the interval: not read again
    now[0] += 31
    assert cores.usable_cores() == 2 and len(reads) == 2
    other = tmp_path / "other"
    other.mkdir()
    _fake_cgroup(other, monkeypatch, "0::/\n", V2, {"cg2/cpu.max": "100000 100000"})
    monkeypatch.setattr(cores, "QUOTA_RECHECK_S", 60.0)
    assert cores.usable_cores() == 1 and len(reads) == 3      # other files asked about: read at once
