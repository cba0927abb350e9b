"""How many of the cores this process may use are free right now -- the one answer to "is a
core free?" for the whole project.

Two callers need it: the .om writer (om_format.container), which hashes a chunk on a second
thread while it writes it only when a second core is free, and the simulator's numeric
executor (simulator/blas.py, runner.py), which runs one BLAS thread or worker process per free
core.  Both ask the same question, so they get the same answer: the cores in this process's
affinity mask, capped by its cgroup's CPU quota (a container given 1.5 CPUs on a 64-core host
may use 1, not 64: more threads would only be throttled), minus the threads of other processes that are
runnable at this instant (/proc/loadavg's running count, less this process's own running
threads).  An instant count, not the 1-minute load average: the average trails a neighbour
that has just started or stopped by a minute, and it counts tasks sleeping on I/O.  Callers
that run long re-ask (before every forward; every fraction of a second while writing).

It lives in om_format, the bottom layer, because the .om writer needs it and nothing of ours
may sit below the writer; it imports nothing of ours.
"""
from __future__ import annotations

import os
import re
from typing import Iterator, Optional

PROC_CGROUP = "/proc/self/cgroup"         # which cgroup this process is in, per hierarchy
PROC_MOUNTINFO = "/proc/self/mountinfo"   # where the cgroup hierarchies are mounted


def usable_cores() -> int:
    """Cores this process may run on: its affinity mask, capped by its cgroup's CPU quota."""
    try:
        affinity = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        affinity = os.cpu_count() or 1
    quota = cgroup_cpu_limit()
    return max(1, affinity if quota is None else min(affinity, quota))


def cgroup_cpu_limit() -> Optional[int]:
    """Whole CPUs this process's cgroup quota allows, rounded down and at least 1; None when no
    quota is set or none can be read.  cgroup v2 `cpu.max` ("max 100000" or "150000 100000")
    and v1 `cpu.cfs_quota_us` / `cpu.cfs_period_us` (-1: none), in the process's own cgroup and
    every ancestor up to the mount point (a parent's quota binds its children); the tightest wins."""
    limits = []
    for directory, version in _cpu_cgroup_dirs():
        if version == 2:
            quota, period = ((_read_fields(os.path.join(directory, "cpu.max")) or []) + [None, None])[:2]
        else:
            quota = (_read_fields(os.path.join(directory, "cpu.cfs_quota_us")) or [None])[0]
            period = (_read_fields(os.path.join(directory, "cpu.cfs_period_us")) or [None])[0]
        try:
            quota, period = int(quota), int(period)
        except (TypeError, ValueError):     # "max", a missing file, a malformed one: no limit here
            continue
        if quota > 0 and period > 0:
            limits.append(quota // period)
    return max(1, min(limits)) if limits else None


def _read_fields(path: str) -> Optional[list]:
    try:
        with open(path, encoding="ascii") as f:
            return f.read(256).split()
    except (OSError, UnicodeDecodeError):
        return None


def _cpu_cgroup_dirs() -> Iterator[tuple]:
    """(directory, cgroup version) of this process's cgroup and its ancestors, in every mounted
    hierarchy that can hold a CPU quota: cgroup2, or a v1 hierarchy with the cpu controller."""
    try:
        with open(PROC_CGROUP, encoding="utf-8") as f:
            membership = f.read().splitlines()
        with open(PROC_MOUNTINFO, encoding="utf-8") as f:
            mounts = f.read().splitlines()
    except (OSError, UnicodeDecodeError):
        return
    paths = {}                               # 2 -> the v2 path; 1 -> the v1 cpu controller's path
    for line in membership:                  # "0::/a/b" (v2) or "4:cpu,cpuacct:/a/b" (v1)
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        if parts[0] == "0" and parts[1] == "":
            paths[2] = parts[2]
        elif "cpu" in parts[1].split(","):
            paths[1] = parts[2]
    for line in mounts:                      # "id parent dev root mountpoint opts ... - fstype src superopts"
        left, sep, right = line.partition(" - ")
        fields, tail = left.split(), right.split()
        if not sep or len(fields) < 5 or not tail:
            continue
        if tail[0] == "cgroup2":
            version = 2
        elif tail[0] == "cgroup" and len(tail) > 2 and "cpu" in tail[2].split(","):
            version = 1
        else:
            continue
        if version not in paths:
            continue
        root, mountpoint = _unescape(fields[3]), _unescape(fields[4])
        yield from ((d, version) for d in _up_to(mountpoint, root, paths[version]))


def _up_to(mountpoint: str, root: str, path: str) -> list:
    """The directories of cgroup `path` and its ancestors under a hierarchy whose `root` is
    mounted at `mountpoint`; the mount point alone when the path lies outside that root (a
    cgroup namespace shows the process's cgroup as the root)."""
    rel = os.path.relpath(os.path.normpath("/" + path), os.path.normpath("/" + root))
    parts = [] if rel == "." or rel == ".." or rel.startswith(".." + os.sep) else rel.split(os.sep)
    return [os.path.join(mountpoint, *parts[:n]) for n in range(len(parts), -1, -1)]


def _unescape(field: str) -> str:
    """mountinfo writes a space, tab, newline or backslash in a path as a 3-digit octal escape."""
    return re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), field)


def running_tasks(loadavg_text: str) -> int:
    """The count of runnable tasks in a /proc/loadavg line ("0.52 0.58 0.59 3/467 12345" -> 3)."""
    return int(loadavg_text.split()[3].split("/")[0])


def own_running_threads() -> int:
    """This process's threads that are runnable now (at least the one asking)."""
    try:
        count = 0
        for tid in os.listdir("/proc/self/task"):
            with open(f"/proc/self/task/{tid}/stat", "rb") as f:
                # state is the field after the ")" that closes the thread name
                if f.read().rsplit(b")", 1)[1].split()[0] == b"R":
                    count += 1
        return max(1, count)
    except (OSError, IndexError):
        return 1


def busy_elsewhere() -> int:
    """Runnable threads of other processes right now; 0 where /proc is not available."""
    try:
        with open("/proc/loadavg") as f:
            running = running_tasks(f.read())
    except (OSError, ValueError, IndexError):
        return 0
    return max(0, running - own_running_threads())


def free_cores() -> int:
    """Usable cores minus those other processes are running on, at least 1 (the caller's own)."""
    return max(1, usable_cores() - busy_elsewhere())
