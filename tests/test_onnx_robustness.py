"""ONNX files that parse as protobuf but are semantically broken, and --input_shape edge cases:
each is a coded ATC error from `atc` (--mode=0) and from the pre-check (--mode=3), no
E19999, no traceback, no .om left behind."""
from __future__ import annotations

import os

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto as T
from onnx import helper, numpy_helper

import cli

X = helper.make_tensor_value_info("x", T.FLOAT, [1, 4])
Y = helper.make_tensor_value_info("y", T.FLOAT, [1, 4])


def _model(nodes, inputs=(X,), outputs=(Y,), inits=(), opset=17):
    graph = helper.make_graph(list(nodes), "g", list(inputs), list(outputs), list(inits))
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 8
    return model


def _with_raw(name, dtype, dims, raw):
    tensor = helper.make_tensor(name, dtype, [1], b"\0" * np.dtype(helper.tensor_dtype_to_np_dtype(dtype)).itemsize,
                                raw=True)
    tensor.dims[:] = dims
    tensor.raw_data = raw
    return tensor


def _add_w(w):
    return _model([helper.make_node("Add", ["x", "w"], ["y"], name="add")], inits=[w])


def _relu(x=X):
    return _model([helper.make_node("Relu", [x.name], ["y"], name="relu")], inputs=[x])


SHORT_FLOATS = helper.make_tensor("w", T.FLOAT, [1, 4], [1.0, 2.0, 3.0, 4.0])
del SHORT_FLOATS.float_data[2:]

BROKEN = {
    "raw_data_not_a_multiple_of_the_element_size": (_add_w(_with_raw("w", T.FLOAT, [1, 4], b"\0" * 3)), "E16001"),
    "raw_data_of_the_wrong_size": (_add_w(_with_raw("w", T.FLOAT16, [1, 4], b"\0" * 6)), "E16001"),
    "float_data_too_short": (_add_w(SHORT_FLOATS), "E16001"),
    "initializer_with_a_negative_dim": (_add_w(_with_raw("w", T.FLOAT, [-1, 4], b"\0" * 16)), "E16001"),
    "initializer_whose_size_overflows_int64": (_add_w(_with_raw("w", T.FLOAT, [1 << 62, 4], b"\0" * 16)), "E16001"),
    "input_whose_size_overflows_int64": (_relu(helper.make_tensor_value_info("x", T.FLOAT, [1 << 62, 1 << 62])),
                                         "E16001"),
    # strings, float8 FNUZ and uint4 are held (tests/test_storage_types.py); sequences and the
    # types after opset 21 (float4e2m1, int2, ...) are not
    "sequence_input": (_model([helper.make_node("Identity", ["x"], ["y"], name="i")],
                              [helper.make_tensor_sequence_value_info("x", T.FLOAT, [1, 4])],
                              [helper.make_tensor_sequence_value_info("y", T.FLOAT, [1, 4])]), "E16001"),
    "float4_input": (_model([helper.make_node("Identity", ["x"], ["y"], name="i")],
                            [helper.make_tensor_value_info("x", T.FLOAT4E2M1, [1, 4])],
                            [helper.make_tensor_value_info("y", T.FLOAT4E2M1, [1, 4])], opset=21), "E16001"),
    "no_graph_output": (_model([helper.make_node("Relu", ["x"], ["y"], name="relu")], outputs=[]), "E16001"),
    "initializer_defined_twice": (_model([helper.make_node("Add", ["x", "w"], ["y"], name="add")],
                                         inits=[numpy_helper.from_array(np.ones((1, 4), np.float32), "w")] * 2),
                                  "E16001"),
    "graph_input_listed_twice": (_model([helper.make_node("Relu", ["x"], ["y"], name="relu")], inputs=[X, X]),
                                 "E16001"),
    "add_with_one_input": (_model([helper.make_node("Add", ["x"], ["y"], name="add")]), "E16001"),
    "string_where_an_int_attribute_belongs": (_model([helper.make_node("Softmax", ["x"], ["y"], name="s",
                                                                        axis="abc")]), "E16004"),
    "pads_that_give_a_negative_dim": (_model([helper.make_node("Pad", ["x", "p"], ["y"], name="pad")],
                                             inits=[numpy_helper.from_array(np.array([0, -9, 0, 0], np.int64), "p")]),
                                      "E16004"),
    "repeats_whose_size_overflows_int64": (_model([helper.make_node("Tile", ["x", "r"], ["y"], name="tile")],
                                                  inits=[numpy_helper.from_array(np.array([1 << 30, 1 << 32], np.int64),
                                                                                 "r")]), "E16004"),
}


def _atc(capsys, *args):
    rc = cli.main(list(args))
    out = capsys.readouterr()
    text = out.out + out.err
    assert "Traceback" not in text and "E19999" not in text, text
    return rc, text


@pytest.mark.parametrize("case", sorted(BROKEN))
def test_broken_model_is_a_coded_error_in_every_mode(case, tmp_path, capsys):
    model, code = BROKEN[case]
    path = tmp_path / "m.onnx"
    path.write_bytes(model.SerializeToString())
    out = tmp_path / "out"
    rc, text = _atc(capsys, f"--model={path}", "--framework=5", f"--output={out}", "--soc_version=Ascend910")
    assert rc == 1 and code in text, text
    assert not os.path.exists(f"{out}.om")
    rc, text = _atc(capsys, f"--model={path}", "--framework=5", "--mode=3",
                    f"--check_report={tmp_path / 'check.json'}")
    assert rc == 1, text


def test_onnxruntime_refuses_the_structural_ones_too():
    """So those errors are about broken models, not models we should accept.  (onnxruntime
    takes a twice-defined initializer with a warning and the last one winning, and a graph
    without outputs as a no-op; onnx.checker refuses the first, and an .om needs an output.)"""
    for case in ("add_with_one_input", "string_where_an_int_attribute_belongs", "graph_input_listed_twice"):
        with pytest.raises(Exception):
            ort.InferenceSession(BROKEN[case][0].SerializeToString(), providers=["CPUExecutionProvider"])


def _dyn_model(tmp_path, name="x"):
    path = tmp_path / "dyn.onnx"
    model = _relu(helper.make_tensor_value_info(name, T.FLOAT, ["N", 4]))
    model.graph.node[0].input[0] = name
    path.write_bytes(model.SerializeToString())
    return path


@pytest.mark.parametrize("shape,code", [
    ("x:2,4;x:3,4", "E10002"),                       # the same input twice, different dims
    ("x:1_0,4", "E10002"),                           # int() would read 10
    ("x:99999999999999999999999,4", "E10002"),       # beyond int64
    ("x:4611686018427387904,4", "E10011"),           # fits int64, its byte size does not
])
def test_input_shape_edge_cases(shape, code, tmp_path, capsys):
    path = _dyn_model(tmp_path)
    rc, text = _atc(capsys, f"--model={path}", "--framework=5", f"--output={tmp_path / 'o'}",
                    "--soc_version=Ascend910", f"--input_shape={shape}")
    assert rc == 1 and code in text, text


def test_input_shape_spaces_repeats_and_colons_in_names_work(tmp_path, capsys):
    path = _dyn_model(tmp_path, name="a:b")
    rc, text = _atc(capsys, f"--model={path}", "--framework=5", f"--output={tmp_path / 'o'}",
                    "--soc_version=Ascend910", "--input_shape=a:b: 2 , 4 ;a:b:2,4")
    assert rc == 0, text
