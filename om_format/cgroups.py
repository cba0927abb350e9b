"""Where this process's cgroup lives, for one controller -- the directories whose limit files
bind it (its own cgroup and every ancestor up to the mount point: a parent's limit binds its
children, so the tightest wins).

Two callers read limits there: om_format/cores.py (the CPU quota) and ge/limits.py (the memory
limit).  The discovery is the hard part and the same for both: /proc/self/cgroup says which
cgroup the process is in, per hierarchy ("0::/a/b" for cgroup v2, "4:memory:/a/b" for a v1
hierarchy), and /proc/self/mountinfo says where each hierarchy is mounted and which part of it
(its root: a container or a cgroup namespace sees its own cgroup as "/").  That covers v1, v2,
hybrid hosts (v1 controllers next to an empty v2 tree: both are listed, a missing file is no
limit) and namespaces.

It lives in om_format, the bottom layer, next to cores.py which needs it; it imports nothing
of ours.
"""
from __future__ import annotations

import os
import re
from typing import Iterator, Optional

PROC_CGROUP = "/proc/self/cgroup"         # which cgroup this process is in, per hierarchy
PROC_MOUNTINFO = "/proc/self/mountinfo"   # where the cgroup hierarchies are mounted


def controller_dirs(controller: str) -> Iterator[tuple]:
    """(directory, cgroup version) of this process's cgroup and its ancestors, innermost first,
    in every mounted hierarchy that can hold `controller`'s limits ("cpu", "memory"): cgroup2,
    or a v1 hierarchy with that controller.  Nothing when /proc cannot be read."""
    try:
        with open(PROC_CGROUP, encoding="utf-8") as f:
            membership = f.read().splitlines()
        with open(PROC_MOUNTINFO, encoding="utf-8") as f:
            mounts = f.read().splitlines()
    except (OSError, UnicodeDecodeError):
        return
    paths = {}                               # 2 -> the v2 path; 1 -> the v1 controller's path
    for line in membership:                  # "0::/a/b" (v2) or "4:cpu,cpuacct:/a/b" (v1)
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        if parts[0] == "0" and parts[1] == "":
            paths[2] = parts[2]
        elif controller in parts[1].split(","):
            paths[1] = parts[2]
    for line in mounts:                      # "id parent dev root mountpoint opts ... - fstype src superopts"
        left, sep, right = line.partition(" - ")
        fields, tail = left.split(), right.split()
        if not sep or len(fields) < 5 or not tail:
            continue
        if tail[0] == "cgroup2":
            version = 2
        elif tail[0] == "cgroup" and len(tail) > 2 and controller in tail[2].split(","):
            version = 1
        else:
            continue
        if version not in paths:
            continue
        root, mountpoint = _unescape(fields[3]), _unescape(fields[4])
        yield from ((d, version) for d in _up_to(mountpoint, root, paths[version]))


def read_fields(path: str) -> Optional[list]:
    """The whitespace-separated fields of a small cgroup file; None when it cannot be read."""
    try:
        with open(path, encoding="ascii") as f:
            return f.read(256).split()
    except (OSError, UnicodeDecodeError):
        return None


def read_int(path: str) -> Optional[int]:
    """The one integer a cgroup file holds; None when it is missing, unreadable, "max" or
    anything else that is not a single integer."""
    fields = read_fields(path)
    if not fields or len(fields) != 1:
        return None
    try:
        return int(fields[0])
    except ValueError:
        return None


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
