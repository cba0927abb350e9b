"""`atc` option values that used to escape as E19999 (an OSError or ValueError from the OS):
each is now an ATC code, a non-zero exit, and no file left behind."""
from __future__ import annotations

import os

import pytest

import cli
from atc_py import zoo


@pytest.fixture
def seed(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)   # fusion_result.json lands in the working folder
    return zoo.save("seed_testmodel", str(tmp_path), small=True)


def _fails(capsys, code, *args):
    rc = cli.main(list(args))
    out = capsys.readouterr()
    text = out.out + out.err
    assert rc == 1 and code in text and "E19999" not in text and "Traceback" not in text, text
    return text


def _compile(seed, out, *extra):
    return [f"--model={seed}", "--framework=5", f"--output={out}", "--soc_version=Ascend910", *extra]


def test_nul_in_a_path_option(seed, tmp_path, capsys):
    assert "NUL" in _fails(capsys, "E10001", *_compile(seed, f"{tmp_path}/a\0b"))


def test_out_nodes_naming_nothing(seed, tmp_path, capsys):
    _fails(capsys, "E10001", *_compile(seed, tmp_path / "o", "--out_nodes=;;"))
    assert not os.path.exists(tmp_path / "o.om")


def test_mode1_json_that_is_a_folder_or_unwritable(seed, tmp_path, capsys):
    om = tmp_path / "m"
    assert cli.main(_compile(seed, om)) == 0
    _fails(capsys, "E10022", "--mode=1", f"--om={om}.om", f"--json={tmp_path}")
    _fails(capsys, "E13004", "--mode=1", f"--om={om}.om", "--json=/proc/no_such.json")


@pytest.mark.parametrize("report,code", [("", "E10004"), (".", "E10022"), ("/proc/no_such.json", "E13004")])
def test_mode3_check_report_paths(seed, capsys, report, code):
    _fails(capsys, code, f"--model={seed}", "--framework=5", "--mode=3", f"--check_report={report}")


def test_unwritable_fusion_result_leaves_no_om(seed, tmp_path, capsys):
    (tmp_path / "fusion_result.json").mkdir()   # never replaced: it is not a regular file
    _fails(capsys, "E10022", *_compile(seed, tmp_path / "o"))
    assert not os.path.exists(tmp_path / "o.om")
