"""Run a command and measure the peak resident memory of that process alone.

Why not `os.wait4(child).ru_maxrss`: Linux starts an exec'd process's maxrss at the
resident size of the process it was forked from -- with vfork, which `subprocess` uses, at
that process's *peak*.  A bench or test process that once held a model (or a pytest run
that has grown to 600 MB) lends that memory to every child it measures: the children of
bench_memory.py all "peaked" at the 1.4 GB its parent reached reading BERT-base.  So the
command is started from a launcher, a `python -S` of a few MB that forks and execs it,
and the launcher reports the child's ru_maxrss on a last line of its own, which `run`
takes off the output.  What the child inherits is then the launcher's few MB.
"""
from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from typing import Optional

# Forks, execs argv[1:], waits; prints the child's ru_maxrss (KiB) and CPU time (user + system,
# microseconds) on a line of its own and
# ends as the child did (its exit code, or killed by the same signal).
_LAUNCHER = """\
import os, signal, sys
pid = os.fork()
if pid == 0:
    try:
        os.execv(sys.argv[1], sys.argv[1:])
    finally:
        os._exit(127)
_, status, usage = os.wait4(pid, 0)
sys.stdout.flush()
os.write(1, b"\\n@@peak_rss_kib=%d cpu_us=%d\\n" % (usage.ru_maxrss, (usage.ru_utime + usage.ru_stime) * 1e6))
if os.WIFSIGNALED(status):
    signal.signal(os.WTERMSIG(status), signal.SIG_DFL)
    os.kill(os.getpid(), os.WTERMSIG(status))
os._exit(os.waitstatus_to_exitcode(status))
"""
_MARK = re.compile(rb"\n@@peak_rss_kib=(\d+) cpu_us=(\d+)\n\Z")


def command(args: list) -> list:
    """`args` run through the launcher (args[0] must be a path: it is exec'd as is)."""
    return [sys.executable, "-S", "-c", _LAUNCHER, *map(str, args)]


def split(output: bytes) -> tuple:
    """(the command's own output, its peak RSS in bytes, its CPU seconds); both None when the
    launcher was killed before it could report."""
    found = _MARK.search(output)
    if found is None:
        return output, None, None
    return output[:found.start()], int(found.group(1)) * 1024, int(found.group(2)) / 1e6


def run(args: list, cwd: Optional[str] = None, env: Optional[dict] = None, timeout: Optional[float] = None,
        **popen) -> tuple:
    """(exit code, seconds, peak RSS bytes or None, CPU seconds or None, output bytes with
    stderr merged).  The
    launcher leads its own process group, so a timeout kills the command too."""
    start = time.perf_counter()
    proc = subprocess.Popen(command(args), cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            start_new_session=True, **popen)
    try:
        out, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, _ = proc.communicate()
    seconds = time.perf_counter() - start
    out, peak, cpu = split(out)
    return proc.returncode, seconds, peak, cpu, out
