"""Run one fuzz case through the tools in-process, the way their command lines do, and judge it.

In-process because a fuzz run makes tens of thousands of cases; each CLI's `main` is called
with its output captured, under a SIGALRM deadline.  A case is bad when a tool prints
E19999 or a traceback, exits with a code it never uses, overruns the deadline, or leaves a
temp file or a partial output behind.  (The sandbox in sandbox.py runs the same tools in a
fresh process under an address-space limit; run_fuzz.py runs whole batches that way.)
"""
from __future__ import annotations

import contextlib
import functools
import io
import os
import re
import resource
import shutil
import signal
import sys
import tempfile
import time
import traceback
from dataclasses import dataclass, field

from ge.files import Terminated
from sandbox import Outcome, leftovers, run_tool

CASE_SECONDS = 30
ROOM = 2 << 30      # address space a case may add to the process: the Done-when's 2 GB
CODE = re.compile(r"\b(E\d{5})\b")


class CaseTimeout(BaseException):
    """The case overran its deadline (BaseException: the tools' `except Exception` lets it through)."""


@dataclass
class Verdict:
    bad: str = ""                 # "" | "E19999" | "traceback" | "hang" | "leftover" | "partial" | "exit"
    codes: list = field(default_factory=list)
    detail: str = ""

    def worse(self, other: "Verdict") -> "Verdict":
        """The first bad verdict of the two, with the codes of both."""
        first = self if self.bad or not other.bad else other
        return Verdict(first.bad, self.codes + other.codes, first.detail)


def _alarm(signum, frame):
    raise CaseTimeout()


@contextlib.contextmanager
def address_space_room(room: int = ROOM):
    """Let the process grow by at most `room` bytes of address space while inside (the soft
    RLIMIT_AS, which the tools' budget reads), as a fresh process under `ulimit -v` would."""
    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    with open("/proc/self/status") as f:
        used = next(int(line.split()[1]) * 1024 for line in f if line.startswith("VmSize:"))
    limit = used + room if hard == resource.RLIM_INFINITY else min(hard, used + room)
    resource.setrlimit(resource.RLIMIT_AS, (limit, hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_AS, (soft, hard))


def call(main, argv: list, seconds: float = CASE_SECONDS) -> tuple:
    """(exit code, printed text, bad) of `main(argv)`, with 2 GB of address-space room."""
    out = io.StringIO()
    previous = signal.signal(signal.SIGALRM, _alarm)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out), address_space_room():
            rc = main([str(a) for a in argv])
        bad = ""
    except CaseTimeout:
        rc, bad = -1, "hang"
    except (KeyboardInterrupt, Terminated):   # meant for the fuzzer itself: stop it
        raise
    except BaseException:   # noqa: B036 -- anything escaping main is what we are looking for
        rc, bad = -1, "traceback"
        out.write(traceback.format_exc())
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
    text = out.getvalue()
    if not bad:
        if "E19999" in text:
            bad = "E19999"
        elif "Traceback (most recent call last)" in text:
            bad = "traceback"
        elif rc not in (0, 1, 2):
            bad = "exit"
    return rc, text, bad


@functools.lru_cache(maxsize=None)
def _warm_up() -> None:
    """Compile a small model in this process once, so the modules atc imports on first use
    are loaded before `forked` children start (each child would import them again: ~30x the
    CPU of a refused case)."""
    import seeds
    with tempfile.TemporaryDirectory() as folder:
        seeds.om_seed.__wrapped__("mixed", folder)


def forked(main, argv: list, cwd: str, seconds: float = CASE_SECONDS) -> Outcome:
    """`main(argv)` in a forked child, in `cwd`, with 2 GB of address-space room: what a fresh
    process shows -- the exit code, the output, a crash in C code (ONNX's shape inference), a
    hang, the memory limit -- without a fresh interpreter's start-up and imports, which cost
    the ONNX fuzzer about 0.6 s of CPU per case (sandbox.run_tool is for the user's view)."""
    start = time.monotonic()
    sys.stdout.flush()
    sys.stderr.flush()
    with tempfile.TemporaryFile() as out:
        pid = os.fork()
        if pid == 0:                # the child: runs `main` and never returns
            rc = 70
            try:
                os.dup2(out.fileno(), 1)
                os.dup2(out.fileno(), 2)
                sys.stdout = sys.stderr = open(1, "w", closefd=False, buffering=1, errors="replace")
                os.chdir(cwd)
                with address_space_room():
                    rc = main([str(a) for a in argv])
            except SystemExit as exc:
                rc = exc.code if isinstance(exc.code, int) else 1
            except BaseException:   # noqa: B036 -- what escapes main is what we are looking for
                traceback.print_exc()
            finally:
                try:
                    sys.stdout.flush()
                finally:
                    os._exit(int(rc or 0) & 0xFF)
        timed_out = False
        while True:
            done, status, usage = os.wait4(pid, os.WNOHANG)
            if done:
                break
            if time.monotonic() - start > seconds:
                os.kill(pid, signal.SIGKILL)
                _, status, usage = os.wait4(pid, 0)
                timed_out = True
                break
            time.sleep(0.005)
        out.seek(0)
        text = out.read().decode("utf-8", "replace")
    return Outcome(os.waitstatus_to_exitcode(status), text, time.monotonic() - start, timed_out,
                   usage.ru_maxrss / 1024)


def _judge(rc, text, bad, what) -> Verdict:
    return Verdict(bad, CODE.findall(text), f"{what}: rc={rc}\n{text[-3000:]}" if bad else "")


def om_case(data: bytes, workdir: str, simulate: bool = True) -> Verdict:
    """A (damaged) .om through atc --mode=6, --mode=1 and atc-sim (outputs and profile)."""
    import cli
    from simulator import cli as sim_cli

    os.makedirs(workdir, exist_ok=True)
    path = os.path.join(workdir, "case.om")
    with open(path, "wb") as f:
        f.write(data)
    verdict = Verdict()
    rc, text, bad = call(cli.main, ["--mode=6", f"--om={path}"])
    verdict = verdict.worse(_judge(rc, text, bad, "atc --mode=6"))
    rc, text, bad = call(cli.main, ["--mode=1", f"--om={path}", f"--json={workdir}/case.json"])
    verdict = verdict.worse(_judge(rc, text, bad, "atc --mode=1"))
    if rc != 0 and os.path.exists(f"{workdir}/case.json"):
        verdict = verdict.worse(Verdict("partial", detail="atc --mode=1 failed and left its JSON"))
    if simulate:
        rc, text, bad = call(sim_cli.main, ["--model", path, "--output", f"{workdir}/out", "--profile",
                                            f"{workdir}/prof", "--warmup_count", "0"])
        verdict = verdict.worse(_judge(rc, text, bad, "atc-sim"))
        if rc == 1 and (os.path.exists(f"{workdir}/out") or os.path.exists(f"{workdir}/prof")):
            verdict = verdict.worse(Verdict("partial", detail="atc-sim failed and left outputs"))
    return _finish(verdict, workdir)


def onnx_case(model: bytes, workdir: str, simulate: bool = True, isolate: bool = False,
              fresh_process: bool = False) -> Verdict:
    """An ONNX model through atc (compile) and, when it compiled, atc-sim.  `isolate` runs atc
    in a forked child (`forked`) with 2 GB of address-space room -- or, with `fresh_process`,
    in a new interpreter under the sandbox's 2 GB limit, as a user would: ONNX's C++ shape
    inference runs inside atc, and a crash there must be counted, not take the fuzzer down."""
    import cli
    from simulator import cli as sim_cli

    os.makedirs(workdir, exist_ok=True)
    path = os.path.join(workdir, "case.onnx")
    with open(path, "wb") as f:
        f.write(model)
    args = [f"--model={path}", "--framework=5", f"--output={workdir}/m", "--soc_version=Ascend910",
            "--precision_mode=force_fp32"]
    if isolate:
        if fresh_process:
            outcome = run_tool("atc", args, workdir, timeout=CASE_SECONDS)
        else:
            _warm_up()
            outcome = forked(cli.main, args, workdir)
        rc, text = outcome.rc, outcome.text
        bad = outcome.verdict if outcome.bad else ""
    else:
        cwd = os.getcwd()
        os.chdir(workdir)     # fusion_result.json lands in the working folder
        try:
            rc, text, bad = call(cli.main, args)
        finally:
            os.chdir(cwd)
    verdict = _judge(rc, text, bad, "atc")
    if rc != 0 and (os.path.exists(f"{workdir}/m.om") or os.path.exists(f"{workdir}/fusion_result.json")):
        verdict = verdict.worse(Verdict("partial", detail="atc failed and left its outputs"))
    if simulate and rc == 0:
        rc, text, bad = call(sim_cli.main, ["--model", f"{workdir}/m.om", "--output", f"{workdir}/out",
                                            "--warmup_count", "0"])
        verdict = verdict.worse(_judge(rc, text, bad, "atc-sim"))
    return _finish(verdict, workdir)


def _finish(verdict: Verdict, workdir: str) -> Verdict:
    left = leftovers(workdir)
    if left:
        verdict = verdict.worse(Verdict("leftover", detail=f"temp files left: {left}"))
    shutil.rmtree(workdir, ignore_errors=True)
    return verdict
