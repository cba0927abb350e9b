"""Issue 8, files: inputs are regular files read with limits, outputs never replace what is not
ours and are all-or-nothing per run -- also when the run is interrupted by a signal.

Findings covered: 2 (a device/FIFO at --json/--check_report was replaced), 4 (/dev/zero and
FIFOs read without limit or forever), 5 (atc-sim write failures were E19999 and left partial
outputs), 9 (leftovers: fusion_result.json after a failed dump, temp files after SIGTERM or
SIGKILL, a folder named like the .om).  Tools that might block or exhaust memory run in a
sandboxed process (tests/fuzz/sandbox.py: 2 GB address space, 30 s).
"""
from __future__ import annotations

import errno
import os
import signal
import socket
import stat
import subprocess
import sys

import numpy as np
import pytest
from onnx import TensorProto, helper

import cli
from atc_py import zoo
from sandbox import ROOT, leftovers, run_tool
from simulator import cli as sim_cli


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """The small seed model and its .om."""
    root = tmp_path_factory.mktemp("built")
    model = zoo.save("seed_testmodel", str(root), small=True)
    cwd = os.getcwd()
    os.chdir(root)
    try:
        assert cli.main([f"--model={model}", "--framework=5", f"--output={root}/m", "--soc_version=Ascend910"]) == 0
    finally:
        os.chdir(cwd)
    return model, str(root / "m.om")


def _special_files(folder) -> list:
    """A FIFO, a bound socket and (when the sandbox allows mknod) a character device that
    behaves like /dev/null -- never the real /dev/null, which old code would have replaced."""
    fifo = os.path.join(folder, "fifo")
    os.mkfifo(fifo)
    sock_path = os.path.join(folder, "sock")
    sock = socket.socket(socket.AF_UNIX)
    sock.bind(sock_path)
    paths = [fifo, sock_path]
    try:
        os.mknod(os.path.join(folder, "null"), stat.S_IFCHR | 0o666, os.makedev(1, 3))
        paths.append(os.path.join(folder, "null"))
    except (PermissionError, OSError):
        pass
    return paths


def _kind(path) -> int:
    return stat.S_IFMT(os.lstat(path).st_mode)


# --------------------------------------------------------------------------- finding 2

def test_f2_json_and_check_report_never_replace_a_device_fifo_or_socket(built, tmp_path, capsys, monkeypatch):
    model, om = built
    monkeypatch.chdir(tmp_path)
    for path in _special_files(tmp_path):
        kind = _kind(path)
        for args in ([f"--om={om}", "--mode=1", f"--json={path}"],
                     [f"--model={model}", "--framework=5", "--mode=3", f"--check_report={path}"]):
            rc = cli.main(args)
            text = capsys.readouterr().out
            assert rc == 1 and "E13004" in text and "E19999" not in text, text
            assert _kind(path) == kind, f"{path} was replaced"
    assert leftovers(str(tmp_path)) == []


# --------------------------------------------------------------------------- finding 4

@pytest.mark.parametrize("tool,flag", [("atc-sim", "--model"), ("atc", "--om"), ("atc", "--model")])
def test_f4_device_and_fifo_inputs_are_refused_without_reading(tool, flag, tmp_path):
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    for path in ("/dev/zero", fifo):
        if tool == "atc-sim":
            args = [flag, path]
        elif flag == "--om":
            args = ["--mode=6", f"--om={path}"]
        else:
            args = [f"--model={path}", "--framework=5", f"--output={tmp_path}/o", "--soc_version=Ascend910"]
        result = run_tool(tool, args, str(tmp_path), timeout=30)
        assert result.verdict == "coded" and "E13026" in result.codes, (path, result.verdict, result.text)
        assert result.seconds < 20


def test_f4_atc_mode1_refuses_dev_zero_and_a_fifo(tmp_path):
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    for path in ("/dev/zero", fifo):
        result = run_tool("atc", ["--mode=1", f"--om={path}", f"--json={tmp_path}/x.json"], str(tmp_path))
        assert result.verdict == "coded" and "E13026" in result.codes, result.text
    assert not (tmp_path / "x.json").exists()


def test_f4_sim_input_that_is_a_device_or_fifo_is_refused(built, tmp_path):
    _, om = built
    fifo = tmp_path / "in.npy"
    os.mkfifo(fifo)
    for path in ("/dev/zero", fifo):
        result = run_tool("atc-sim", ["--model", om, "--input", path], str(tmp_path))
        assert result.verdict == "coded" and "E13026" in result.codes, result.text


# --------------------------------------------------------------------------- finding 5

def _sim(capsys, *argv):
    rc = sim_cli.main([str(a) for a in argv])
    out = capsys.readouterr()
    return rc, out.out + out.err


def _assert_nothing_written(folder):
    assert not os.path.exists(folder) or os.listdir(folder) == [], os.listdir(folder)


def test_f5_sim_output_under_a_file_is_coded_and_leaves_nothing(built, tmp_path, capsys):
    _, om = built
    (tmp_path / "file").write_text("x")
    rc, text = _sim(capsys, "--model", om, "--output", tmp_path / "file" / "out", "--profile", tmp_path / "prof")
    assert rc == sim_cli.EXIT_ERROR and "E13004" in text and "E19999" not in text, text
    _assert_nothing_written(tmp_path / "prof")


def test_f5_sim_long_output_name_is_coded_and_leaves_nothing(tmp_path, capsys, monkeypatch):
    """An output tensor named with 300 characters cannot be a file name (ENAMETOOLONG)."""
    name = "y" * 300
    graph = helper.make_graph([helper.make_node("Relu", ["x"], [name], name="relu")], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])],
                              [helper.make_tensor_value_info(name, TensorProto.FLOAT, [1, 4])])
    path = tmp_path / "long.onnx"
    path.write_bytes(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString())
    monkeypatch.chdir(tmp_path)
    assert cli.main([f"--model={path}", "--framework=5", f"--output={tmp_path}/long", "--soc_version=Ascend910"]) == 0
    capsys.readouterr()
    rc, text = _sim(capsys, "--model", tmp_path / "long.om", "--output", tmp_path / "out", "--profile",
                    tmp_path / "prof")
    assert rc == sim_cli.EXIT_ERROR and "E13004" in text and "E19999" not in text, text
    _assert_nothing_written(tmp_path / "out")
    _assert_nothing_written(tmp_path / "prof")


def test_f5_sim_disk_full_mid_run_leaves_no_partial_output(built, tmp_path, capsys, monkeypatch):
    """The disk fills while the Perfetto timeline is written, after the op summary: nothing of
    the run may stay (no op_summary_0.csv, no half msprof_0.json, no output.npy)."""
    _, om = built
    import simulator.profile as profile

    def full_disk(obj, f, *a, **k):
        f.write("[{")
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(profile.json, "dump", full_disk)
    rc, text = _sim(capsys, "--model", om, "--output", tmp_path / "out", "--profile", tmp_path / "prof")
    assert rc == sim_cli.EXIT_ERROR and "E13004" in text and "No space left" in text, text
    _assert_nothing_written(tmp_path / "out")
    _assert_nothing_written(tmp_path / "prof")


def test_f5_sim_writes_everything_when_it_succeeds(built, tmp_path, capsys):
    _, om = built
    rc, text = _sim(capsys, "--model", om, "--output", tmp_path / "out", "--profile", tmp_path / "prof",
                    "--outfmt", "BIN")
    assert rc == 0, text
    assert sorted(os.listdir(tmp_path / "prof")) == ["msprof_0.json", "op_statistic_0.csv", "op_summary_0.csv"]
    assert "summary.json" in os.listdir(tmp_path / "out") and len(os.listdir(tmp_path / "out")) >= 2
    assert leftovers(str(tmp_path)) == []


# --------------------------------------------------------------------------- finding 9

def test_f9_output_whose_om_path_is_a_folder_is_e10022(built, tmp_path, capsys):
    model, _ = built
    (tmp_path / "m.om").mkdir()
    rc = cli.main([f"--model={model}", "--framework=5", f"--output={tmp_path}/m", "--soc_version=Ascend910"])
    text = capsys.readouterr().out
    assert rc == 1 and "E10022" in text and "E19999" not in text, text


def test_f9_failed_debug_dump_leaves_no_fusion_result(built, tmp_path, capsys, monkeypatch):
    model, _ = built
    monkeypatch.chdir(tmp_path)
    (tmp_path / "dbg").write_text("a file where the debug folder should be")
    monkeypatch.setenv("AUTOFUSE_DFX_FLAGS", f"--debug_dir={tmp_path / 'dbg'}")
    rc = cli.main([f"--model={model}", "--framework=5", f"--output={tmp_path}/m", "--soc_version=Ascend910"])
    text = capsys.readouterr().out
    assert rc == 1 and "E13004" in text, text
    assert sorted(os.listdir(tmp_path)) == ["dbg"]


_SIGNAL_DURING_RENAME = """
import os, signal, sys
sys.path.insert(0, {root!r})
# A background job (`pytest &`) starts with SIGINT ignored, and Python then installs no
# KeyboardInterrupt handler: restore the one an interactive `atc` run has.
signal.signal(signal.SIGINT, signal.default_int_handler)
real = os.replace
def replace(src, dst, *a, **k):
    os.kill(os.getpid(), signal.{sig})     # the signal arrives while the .om is being put in place
    return real(src, dst, *a, **k)
os.replace = replace
import cli
sys.exit(cli.main(sys.argv[1:]))
"""


@pytest.mark.parametrize("sig", ["SIGTERM", "SIGINT"])
def test_f9_signal_during_the_om_write_leaves_no_temp_file(built, tmp_path, sig):
    model, _ = built
    script = tmp_path / "run.py"
    script.write_text(_SIGNAL_DURING_RENAME.format(root=ROOT, sig=sig))
    out = tmp_path / "out"
    out.mkdir()
    proc = subprocess.run([sys.executable, str(script), f"--model={model}", "--framework=5",
                           f"--output={out}/m", "--soc_version=Ascend910"], cwd=tmp_path,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode != 0, proc.stdout
    assert leftovers(str(tmp_path)) == [], proc.stdout + proc.stderr
    files = sorted(os.listdir(out))
    assert files in ([], ["m.om"]), files      # all or nothing
    if files:
        from om_format.container import read_om
        read_om(str(out / "m.om"))              # and complete if there


def test_f9_sigterm_at_any_moment_leaves_no_temp_file(tmp_path):
    """A real SIGTERM at several moments of a compile that writes a 48 MB .om."""
    model = tmp_path / "big.onnx"
    weight = helper.make_tensor("w", TensorProto.FLOAT, [3072, 4096], np.ones(3072 * 4096, np.float32).tobytes(),
                                raw=True)
    graph = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["y"], name="mm")], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3072])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4096])], [weight])
    model.write_bytes(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString())
    for delay in (0.8, 1.4, 2.0):
        out = tmp_path / f"out{delay}"
        proc = subprocess.Popen([sys.executable, os.path.join(ROOT, "cli.py"), f"--model={model}", "--framework=5",
                                 f"--output={out}/m", "--soc_version=Ascend910", "--precision_mode=force_fp32"],
                                cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            proc.wait(timeout=delay)
        except subprocess.TimeoutExpired:
            proc.send_signal(signal.SIGTERM)
            proc.wait(timeout=60)
        assert leftovers(str(tmp_path)) == [], delay
        if out.exists() and os.listdir(out):
            from om_format.container import read_om
            read_om(str(out / "m.om"))


def test_f9_leftover_of_a_killed_run_is_swept_by_the_next(built, tmp_path, capsys, monkeypatch):
    model, _ = built
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    stale = tmp_path / f".m.om.atc-tmp-{dead.pid}-0badc0de"
    stale.write_bytes(b"half an .om")
    alive = tmp_path / f".m.om.atc-tmp-{os.getppid()}-0badc0de"   # a running process's: kept
    alive.write_bytes(b"someone else's write in progress")
    monkeypatch.chdir(tmp_path)
    assert cli.main([f"--model={model}", "--framework=5", f"--output={tmp_path}/m", "--soc_version=Ascend910"]) == 0
    assert not stale.exists() and alive.exists()
