"""The memory limit of this process's cgroups (ge.limits._cgroup_room, found through
om_format.cgroups, the discovery om_format.cores shares): v1, v2, hybrid hosts, nested cgroups
(the tightest wins), and files that say "no limit" or cannot be read."""
from __future__ import annotations

from cgroup_fakes import V2, fake_cgroup
from ge import limits
from om_format import cgroups

MiB = 1 << 20
V1_UNLIMITED = "9223372036854771712\n"       # what an unlimited v1 memory cgroup reads (4 KiB pages)


def test_cgroup_v2_memory_max_less_current(tmp_path, monkeypatch):
    fake_cgroup(tmp_path, monkeypatch, "0::/user/job\n", V2,
                {"cg2/user/job/memory.max": f"{512 * MiB}\n", "cg2/user/job/memory.current": f"{100 * MiB}\n"})
    assert limits._cgroup_room() == 412 * MiB
    assert limits.host_memory_bytes() <= 412 * MiB
    assert limits.Budget.of_host().host_bytes <= 412 * MiB


def test_cgroup_v1_memory_limit_in_bytes_where_the_memory_controller_is_mounted(tmp_path, monkeypatch):
    """A docker-style v1 host: the memory hierarchy's root is the container's cgroup; a
    hierarchy without the memory controller is not read, whatever files it holds."""
    membership = "9:name=systemd:/\n4:memory:/docker/abc\n2:cpu,cpuacct:/docker/abc\n0::/\n"
    mounts = [("cgroup", "/docker/abc", "v1 mem", "rw,memory"), ("cgroup", "/docker/abc", "cpu", "rw,cpu,cpuacct"),
              ("cgroup2", "/", "unified", "rw")]
    files = {"v1 mem/memory.limit_in_bytes": f"{256 * MiB}\n", "v1 mem/memory.usage_in_bytes": f"{56 * MiB}\n",
             "cpu/memory.limit_in_bytes": f"{MiB}\n", "cpu/memory.usage_in_bytes": "0\n"}
    fake_cgroup(tmp_path, monkeypatch, membership, mounts, files)
    assert limits._cgroup_room() == 200 * MiB
    assert limits.host_memory_bytes() <= 200 * MiB


def test_a_parents_memory_limit_binds_its_children_and_the_tightest_room_wins(tmp_path, monkeypatch):
    """The room is checked at every level: the parent's limit is larger than the child's, but
    its siblings use most of it."""
    fake_cgroup(tmp_path, monkeypatch, "0::/a/b\n", V2,
                {"cg2/a/b/memory.max": f"{300 * MiB}\n", "cg2/a/b/memory.current": f"{10 * MiB}\n",
                 "cg2/a/memory.max": f"{1000 * MiB}\n", "cg2/a/memory.current": f"{900 * MiB}\n",
                 "cg2/memory.max": "max\n", "cg2/memory.current": f"{5000 * MiB}\n"})
    assert limits._cgroup_room() == 100 * MiB


def test_v1_unlimited_is_no_limit_and_a_limited_v1_parent_still_binds(tmp_path, monkeypatch):
    membership = "4:memory:/process_api/job\n1:cpu:/\n0::/\n"
    mounts = [("cgroup", "/", "mem", "rw,memory"), ("cgroup2", "/", "unified", "rw")]
    files = {"mem/process_api/job/memory.limit_in_bytes": V1_UNLIMITED,
             "mem/process_api/job/memory.usage_in_bytes": f"{MiB}\n",
             "mem/process_api/memory.limit_in_bytes": f"{64 * MiB}\n",
             "mem/process_api/memory.usage_in_bytes": f"{4 * MiB}\n",
             "mem/memory.limit_in_bytes": V1_UNLIMITED, "mem/memory.usage_in_bytes": f"{9000 * MiB}\n"}
    fake_cgroup(tmp_path, monkeypatch, membership, mounts, files)
    assert limits._cgroup_room() == 60 * MiB
    (tmp_path / "mem/process_api/memory.limit_in_bytes").write_text(V1_UNLIMITED)
    assert limits._cgroup_room() is None


def test_a_hybrid_host_reads_the_v2_limit_when_memory_is_not_a_v1_controller(tmp_path, monkeypatch):
    """systemd's hybrid layout: some controllers on v1 hierarchies, the rest (memory here) on
    the unified v2 tree, where the process's v2 path is its cgroup."""
    membership = "3:cpu,cpuacct:/\n1:name=systemd:/svc\n0::/svc\n"
    mounts = [("cgroup", "/", "cpu", "rw,cpu,cpuacct"), ("cgroup2", "/", "unified", "rw,nsdelegate")]
    fake_cgroup(tmp_path, monkeypatch, membership, mounts,
                {"unified/svc/memory.max": f"{128 * MiB}\n", "unified/svc/memory.current": f"{28 * MiB}\n"})
    assert limits._cgroup_room() == 100 * MiB


def test_unreadable_or_malformed_memory_files_mean_no_limit(tmp_path, monkeypatch):
    fake_cgroup(tmp_path, monkeypatch, "0::/job\n", V2,
                {"cg2/job/memory.max": "lots\n", "cg2/job/memory.current": "0\n",
                 "cg2/memory.max": "-5\n", "cg2/memory.current": "0\n"})
    assert limits._cgroup_room() is None
    monkeypatch.setattr(cgroups, "PROC_MOUNTINFO", str(tmp_path / "missing"))
    assert limits._cgroup_room() is None


def test_a_limit_whose_usage_cannot_be_read_still_binds_at_the_limit(tmp_path, monkeypatch):
    fake_cgroup(tmp_path, monkeypatch, "0::/job\n", V2,
                {"cg2/job/memory.max": f"{32 * MiB}\n", "cg2/job/memory.current": "garbage\n"})
    assert limits._cgroup_room() == 32 * MiB


def test_cpu_and_memory_find_their_own_v1_hierarchies(tmp_path, monkeypatch):
    """One discovery for both controllers: each gets the directories of its own hierarchy."""
    membership = "4:memory:/m/x\n2:cpu,cpuacct:/c\n0::/\n"
    mounts = [("cgroup", "/", "mem", "rw,memory"), ("cgroup", "/", "cpu", "rw,cpu,cpuacct")]
    fake_cgroup(tmp_path, monkeypatch, membership, mounts, {})
    assert list(cgroups.controller_dirs("memory")) == [(str(tmp_path / p), 1) for p in ("mem/m/x", "mem/m", "mem")]
    assert list(cgroups.controller_dirs("cpu")) == [(str(tmp_path / p), 1) for p in ("cpu/c", "cpu")]


def test_page_cache_the_kernel_can_drop_is_room(tmp_path, monkeypatch):
    """memory.current (v2) and usage_in_bytes (v1) count the page cache -- a model file just
    read, 4 GB for a 1.1B decoder -- which the kernel drops before it kills anything under
    the limit: its inactive part (memory.stat inactive_file; v1 total_inactive_file, the
    hierarchy's) is room, as docker and the kubelet count a cgroup's working set."""
    fake_cgroup(tmp_path, monkeypatch, "0::/job\n", V2,
                {"cg2/job/memory.max": f"{512 * MiB}\n", "cg2/job/memory.current": f"{400 * MiB}\n",
                 "cg2/job/memory.stat": f"anon {60 * MiB}\nfile {340 * MiB}\nactive_file {40 * MiB}\n"
                                        f"inactive_file {300 * MiB}\n"})
    assert limits._cgroup_room() == 412 * MiB
    other = tmp_path / "v1"
    other.mkdir()
    fake_cgroup(other, monkeypatch, "4:memory:/\n", [("cgroup", "/", "mem", "rw,memory")],
                {"mem/memory.limit_in_bytes": f"{256 * MiB}\n", "mem/memory.usage_in_bytes": f"{200 * MiB}\n",
                 "mem/memory.stat": f"cache {160 * MiB}\ninactive_file {10 * MiB}\n"
                                    f"total_cache {160 * MiB}\ntotal_inactive_file {150 * MiB}\n"})
    assert limits._cgroup_room() == 206 * MiB
