"""Run atc or atc-sim the way a user does -- a fresh process -- under a 2 GB address-space
limit and a time limit, and classify what came out.

Why a process: a hostile input may try to exhaust memory or block; under `resource.setrlimit`
that shows up as a MemoryError (which must still be a coded error), and a hang as a timeout,
without taking the test run down with it.
"""
from __future__ import annotations

import json
import os
import re
import resource
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass

from bench import peak_rss

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
ADDRESS_SPACE = 2 << 30        # bytes: the Done-when limit of issue 8
TIME_LIMIT = 30.0              # seconds
CODE = re.compile(r"\b(E\d{5})\b")


@dataclass
class Outcome:
    rc: int
    text: str
    seconds: float
    timed_out: bool = False
    max_rss_mb: float = 0.0     # the process's peak resident memory

    @property
    def codes(self) -> list:
        return CODE.findall(self.text)

    @property
    def verdict(self) -> str:
        """ok | coded | compare (atc-sim exit 2) | hang | traceback | E19999 | crash | uncoded."""
        if self.timed_out:
            return "hang"
        if "Traceback (most recent call last)" in self.text:
            return "traceback"
        if "E19999" in self.text:
            return "E19999"
        if self.rc < 0 or self.rc > 2:
            return "crash"          # killed by a signal (rc < 0), or an exit code we never use
        if self.rc == 0:
            return "ok"
        if self.rc == 2:
            return "compare"
        return "coded" if self.codes else "uncoded"

    @property
    def bad(self) -> bool:
        return self.verdict not in ("ok", "coded", "compare")


def _limit(address_space: int):
    def apply():
        resource.setrlimit(resource.RLIMIT_AS, (address_space, address_space))
    return apply


def run_tool(tool: str, args: list, cwd: str, *, timeout: float = TIME_LIMIT, address_space: int = ADDRESS_SPACE,
             env: dict = None) -> Outcome:
    """`tool` is "atc" or "atc-sim"; stdout and stderr together."""
    module = {"atc": os.path.join(ROOT, "cli.py"), "atc-sim": "-m simulator"}[tool]
    command = [sys.executable, *module.split()] if tool == "atc-sim" else [sys.executable, module]
    full_env = {**os.environ, "PYTHONPATH": ROOT, "OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1", **(env or {})}
    start = time.monotonic()
    with tempfile.TemporaryFile() as out:
        # Through bench/peak_rss.py's launcher, so max_rss_mb is the tool's own peak, not
        # this (pytest) process's size lent to it by fork/exec; it leads its process group,
        # so a timeout kills the tool too.
        proc = subprocess.Popen(peak_rss.command([*command, *args]), cwd=cwd, env=full_env,
                                stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                                start_new_session=True,
                                preexec_fn=_limit(address_space) if address_space else None)
        timed_out = False
        while proc.poll() is None:
            if time.monotonic() - start > timeout:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
                timed_out = True
                break
            time.sleep(0.01)
        out.seek(0)
        text, peak, _ = peak_rss.split(out.read())
    outcome = Outcome(proc.returncode, text.decode("utf-8", "replace"), time.monotonic() - start, timed_out,
                      (peak or 0) / (1 << 20))
    _log(tool, args, outcome)
    return outcome


def _log(tool: str, args: list, outcome: Outcome) -> None:
    """With ATC_SANDBOX_LOG=FILE, one JSON line per sandboxed run (for RELIABILITY.md's
    figures: the peak memory and the time of every hostile case the tests try)."""
    path = os.environ.get("ATC_SANDBOX_LOG")
    if path:
        with open(path, "a") as f:
            f.write(json.dumps({"tool": tool, "args": [str(a)[:120] for a in args], "rc": outcome.rc,
                                "verdict": outcome.verdict, "codes": sorted(set(outcome.codes)),
                                "seconds": round(outcome.seconds, 2), "max_rss_mb": round(outcome.max_rss_mb, 1)})
                    + "\n")


def leftovers(folder: str) -> list:
    """Temp files an interrupted write may leave: ours (.atc-tmp-) and the old ones (.om-*.tmp, *.tmpNNN)."""
    found = []
    for dirpath, _, files in os.walk(folder):
        for name in files:
            if ".atc-tmp-" in name or (name.startswith(".om-") and name.endswith(".tmp")) \
                    or re.search(r"\.tmp\d+$", name):
                found.append(os.path.join(dirpath, name))
    return found
