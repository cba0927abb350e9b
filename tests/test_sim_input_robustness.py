"""atc-sim --input files the user may hand over: byte orders, layouts and lying headers."""
from __future__ import annotations

import numpy as np
import pytest

import cli as atc_cli
from atc_py import zoo
from codegen.om_import import load_om_graph
from simulator import cli as sim_cli


@pytest.fixture(scope="module")
def seed_om(tmp_path_factory):
    root = tmp_path_factory.mktemp("siminput")
    onnx_path = zoo.save("seed_testmodel", str(root), small=True)
    assert atc_cli.main([f"--model={onnx_path}", "--framework=5", f"--output={root / 'seed'}",
                         "--soc_version=Ascend910"]) == 0
    om = str(root / "seed.om")
    value = load_om_graph(om).graph.inputs[0]
    x = np.random.default_rng(0).standard_normal(value.desc.shape).astype(np.float32)
    return om, x


def _run(capsys, om, tmp_path, path, name):
    rc = sim_cli.main(["--model", om, "--input", str(path), "--output", str(tmp_path / name)])
    text = capsys.readouterr().out
    assert "Traceback" not in text and "E19999" not in text, text
    return rc, text


def test_big_endian_and_fortran_order_give_the_native_result(seed_om, tmp_path, capsys):
    om, x = seed_om
    outputs = {}
    for name, array in (("native", x), ("big_endian", x.astype(">f4")), ("fortran", np.asfortranarray(x))):
        np.save(tmp_path / f"{name}.npy", array)
        rc, text = _run(capsys, om, tmp_path, tmp_path / f"{name}.npy", name)
        assert rc == 0, text
        outputs[name] = [np.load(p) for p in sorted((tmp_path / name).glob("*.npy"))]
    for name in ("big_endian", "fortran"):
        for got, want in zip(outputs[name], outputs["native"]):
            np.testing.assert_array_equal(got, want)


def test_header_claiming_a_huge_shape_is_refused_before_allocating(seed_om, tmp_path, capsys):
    om, x = seed_om
    with open(tmp_path / "lying.npy", "wb") as f:   # a valid header whose shape is a lie
        np.lib.format.write_array_header_1_0(f, {"descr": "<f4", "fortran_order": False,
                                                 "shape": (99999999999, 99999999999, 1, 1)})
        f.write(x.tobytes())
    rc, text = _run(capsys, om, tmp_path, tmp_path / "lying.npy", "lying")
    assert rc == 1 and "E10001" in text and "99999999999" in text and "allocate" not in text, text


def test_truncated_npy_says_so(seed_om, tmp_path, capsys):
    om, x = seed_om
    np.save(tmp_path / "x.npy", x)
    (tmp_path / "cut.npy").write_bytes((tmp_path / "x.npy").read_bytes()[:200])
    rc, text = _run(capsys, om, tmp_path, tmp_path / "cut.npy", "cut")
    assert rc == 1 and "truncated" in text, text


def test_folder_ignores_subfolders_named_like_inputs(seed_om, tmp_path, capsys):
    om, x = seed_om
    folder = tmp_path / "in"
    (folder / "zz.npy").mkdir(parents=True)
    np.save(folder / "a.npy", x)
    rc, text = _run(capsys, om, tmp_path, folder, "out")
    assert rc == 0, text
