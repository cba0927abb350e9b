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
may sit below the writer; it imports only om_format.cgroups (which finds the cgroup's
directories, for ge.limits' memory limit too).
"""
from __future__ import annotations

import os
import time
from typing import Optional

from om_format import cgroups
from om_format.cgroups import controller_dirs, read_fields, read_int

# The quota is read again at most this often: reading the cgroup files costs ~0.2 ms and
# usable_cores runs before every forward (a small model's forward: ~0.6 ms); a quota rarely
# changes, and when it does a second's delay costs nothing.
QUOTA_RECHECK_S = 1.0
_quota_read = None               # (cgroups.PROC_CGROUP, cgroups.PROC_MOUNTINFO, when, limit) of the last read


def usable_cores() -> int:
    """Cores this process may run on: its affinity mask, capped by its cgroup's CPU quota."""
    try:
        affinity = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        affinity = os.cpu_count() or 1
    quota = _recent_cgroup_cpu_limit()
    return max(1, affinity if quota is None else min(affinity, quota))


def _recent_cgroup_cpu_limit() -> Optional[int]:
    """cgroup_cpu_limit, read again once QUOTA_RECHECK_S has passed since the last read (or
    at once when other proc files are asked about)."""
    global _quota_read
    now, where = time.monotonic(), (cgroups.PROC_CGROUP, cgroups.PROC_MOUNTINFO)
    if _quota_read is None or _quota_read[:2] != where or now - _quota_read[2] >= QUOTA_RECHECK_S:
        _quota_read = where + (now, cgroup_cpu_limit())
    return _quota_read[3]


def cgroup_cpu_limit() -> Optional[int]:
    """Whole CPUs this process's cgroup quota allows, rounded down and at least 1; None when no
    quota is set or none can be read.  cgroup v2 `cpu.max` ("max 100000" or "150000 100000")
    and v1 `cpu.cfs_quota_us` / `cpu.cfs_period_us` (-1: none), in the process's own cgroup and
    every ancestor up to the mount point (om_format.cgroups finds them; a parent's quota binds its
    children); the tightest wins."""
    limits = []
    for directory, version in controller_dirs("cpu"):
        if version == 2:
            quota, period = ((read_fields(os.path.join(directory, "cpu.max")) or []) + [None, None])[:2]
        else:
            quota = read_int(os.path.join(directory, "cpu.cfs_quota_us"))
            period = read_int(os.path.join(directory, "cpu.cfs_period_us"))
        try:
            quota, period = int(quota), int(period)
        except (TypeError, ValueError):     # "max", a missing file, a malformed one: no limit here
            continue
        if quota > 0 and period > 0:
            limits.append(quota // period)
    return max(1, min(limits)) if limits else None


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
