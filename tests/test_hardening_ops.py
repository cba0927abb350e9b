"""Issue 8, finding 6: atc validates what it compiles.  Models onnxruntime (or the simulator)
would reject are refused at compile time with E16004 naming the node -- never compiled with
exit 0 for atc-sim to discover: unknown Pad/Resize modes, kernel_shape not matching the
weight, zero Resize scales, constant integer division by zero (folded to 0 before), unknown
attributes, out-of-range constant Gather indices.
"""
from __future__ import annotations

import os

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import cli


def _model(tmp_path, node, x_shape, inits=(), x_type=TensorProto.FLOAT, opset=17):
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", x_type, x_shape)],
                              [helper.make_tensor_value_info("y", x_type, None)], list(inits))
    path = tmp_path / "m.onnx"
    path.write_bytes(helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)]).SerializeToString())
    return path


def _refused(tmp_path, capsys, path, *names):
    rc = cli.main([f"--model={path}", "--framework=5", f"--output={tmp_path}/o", "--soc_version=Ascend910"])
    text = capsys.readouterr().out
    assert rc == 1 and "E16004" in text and "E19999" not in text, text
    for name in names:
        assert name in text, text
    assert not os.path.exists(tmp_path / "o.om")
    return text


def _i64(name, values):
    return numpy_helper.from_array(np.asarray(values, np.int64), name)


def _f32(name, values):
    return numpy_helper.from_array(np.asarray(values, np.float32), name)


@pytest.fixture(autouse=True)
def _cwd(monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)


@pytest.mark.parametrize("mode", ["bogus", "CONSTANT"])
def test_f6_unknown_pad_mode(tmp_path, capsys, mode):
    node = helper.make_node("Pad", ["x", "pads"], ["y"], name="pad", mode=mode)
    _refused(tmp_path, capsys, _model(tmp_path, node, [1, 4], [_i64("pads", [0, 1, 0, 1])]), "[pad]", mode)


@pytest.mark.parametrize("attr,value", [("antialias", 1), ("mode", "bilinear"),   # antialias: nearest mode
                                        ("coordinate_transformation_mode", "bogus"), ("nearest_mode", "nope")])
def test_f6_unknown_resize_modes(tmp_path, capsys, attr, value):
    node = helper.make_node("Resize", ["x", "", "scales"], ["y"], name="resize", **{attr: value})
    _refused(tmp_path, capsys, _model(tmp_path, node, [1, 1, 4, 4], [_f32("scales", [1, 1, 2, 2])]), "[resize]")


@pytest.mark.parametrize("scales", [[1, 1, 0, 0], [1, 1, -2, 2], [1, 1, float("inf"), 1], [1, 1, float("nan"), 1]])
def test_f6_zero_or_invalid_resize_scales(tmp_path, capsys, scales):
    node = helper.make_node("Resize", ["x", "", "scales"], ["y"], name="resize")
    _refused(tmp_path, capsys, _model(tmp_path, node, [1, 1, 4, 4], [_f32("scales", scales)]), "[resize]")


def test_f6_kernel_shape_not_matching_the_weight(tmp_path, capsys):
    node = helper.make_node("Conv", ["x", "w"], ["y"], name="conv", kernel_shape=[5, 5])
    w = _f32("w", np.ones((2, 3, 3, 3)))
    _refused(tmp_path, capsys, _model(tmp_path, node, [1, 3, 8, 8], [w]), "[conv]", "kernel_shape")


def test_f6_constant_integer_division_by_zero_is_not_folded_to_zero(tmp_path, capsys):
    nodes = [helper.make_node("Div", ["a", "b"], ["q"], name="div"),
             helper.make_node("Add", ["x", "q"], ["y"], name="add")]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.INT64, [2])],
                              [helper.make_tensor_value_info("y", TensorProto.INT64, [2])],
                              [_i64("a", [7, 8]), _i64("b", [2, 0])])
    path = tmp_path / "m.onnx"
    path.write_bytes(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString())
    _refused(tmp_path, capsys, path, "[div]", "division by zero")


@pytest.mark.parametrize("op", ["Div", "Mod"])
def test_f6_run_time_input_divided_by_a_constant_zero(tmp_path, capsys, op):
    node = helper.make_node(op, ["x", "b"], ["y"], name="div")
    _refused(tmp_path, capsys, _model(tmp_path, node, [3], [_i64("b", [1, 0, 2])], TensorProto.INT64), "[div]")


def test_f6_float_division_by_zero_stays_legal(tmp_path, capsys):
    node = helper.make_node("Div", ["x", "b"], ["y"], name="div")
    path = _model(tmp_path, node, [2], [_f32("b", [0, 1])])
    rc = cli.main([f"--model={path}", "--framework=5", f"--output={tmp_path}/o", "--soc_version=Ascend910"])
    assert rc == 0, capsys.readouterr().out


@pytest.mark.parametrize("op,attr", [("Relu", "alpha"), ("Conv", "bogus_attr")])
def test_f6_unknown_attribute(tmp_path, capsys, op, attr):
    if op == "Relu":
        node, inits, shape = helper.make_node("Relu", ["x"], ["y"], name="n", **{attr: 0.1}), [], [1, 4]
    else:
        node = helper.make_node("Conv", ["x", "w"], ["y"], name="n", **{attr: 1})
        inits, shape = [_f32("w", np.ones((2, 3, 3, 3)))], [1, 3, 8, 8]
    _refused(tmp_path, capsys, _model(tmp_path, node, shape, inits), "[n]", attr)


@pytest.mark.parametrize("op,indices", [("Gather", [0, 5]), ("Gather", [-6]), ("GatherElements", [[0, 9]]),
                                        ("GatherND", [[0, 4]])])
def test_f6_out_of_range_constant_gather_indices(tmp_path, capsys, op, indices):
    node = helper.make_node(op, ["x", "i"], ["y"], name="gather", **({"axis": 1} if op == "GatherElements" else {}))
    _refused(tmp_path, capsys, _model(tmp_path, node, [5, 4], [_i64("i", indices)]), "[gather]", "out of range")
