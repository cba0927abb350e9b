"""Ops with optional extra outputs produce them through atc and the simulator, as onnxruntime
does: Dropout's mask, Unique's indices/inverse/counts (their length known only at run
time), TopK's indices, LayerNormalization's Mean/InvStdDev, MaxPool's Indices.  A node that
leaves an optional output unnamed ("") gets the others right."""
from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

import atc_py
from ge.errors import AtcError
from helpers import run_ort

F = TensorProto.FLOAT
RNG = np.random.default_rng(5)


def _model(nodes, inputs, outputs, inits=(), opset=17):
    graph = helper.make_graph(nodes, "g", inputs, outputs, list(inits))
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 8
    return model


def _compile_and_run(model, tmp_path, runs, name="m"):
    """Compile to an .om, run every feed set on the simulator, compare every output with
    onnxruntime (values and shapes); returns the session."""
    atc_py.compile(model, output=str(tmp_path / name), soc_version="Ascend910", precision_mode="force_fp32")
    session = atc_py.InferSession(str(tmp_path / f"{name}.om"))
    assert session.get_output_names() == [o.name for o in model.graph.output]
    for feeds in runs:
        got = session.infer(feeds)
        ref = list(run_ort(model, feeds).values())
        assert len(got) == len(ref)
        for g, r in zip(got, ref):
            assert g.dtype == r.dtype and g.shape == r.shape, (g.dtype, r.dtype, g.shape, r.shape)
            np.testing.assert_allclose(g, r, rtol=1e-5, atol=1e-6)
    return session


def _kernel_types(session):
    return [n.op_type for n in session.model.graph.nodes]


def test_dropout_mask_is_all_true_in_inference(tmp_path):
    x = helper.make_tensor_value_info("x", F, [2, 3, 4])
    model = _model([helper.make_node("Dropout", ["x", "r"], ["y", "mask"]), helper.make_node("Relu", ["y"], ["z"])],
                   [x], [helper.make_tensor_value_info("z", F, None),
                         helper.make_tensor_value_info("mask", TensorProto.BOOL, None)],
                   [helper.make_tensor("r", F, [], [0.3])])
    session = _compile_and_run(model, tmp_path, [{"x": RNG.standard_normal((2, 3, 4)).astype(np.float32)}])
    assert "Dropout" in _kernel_types(session)


def test_dropout_without_its_mask_is_removed(tmp_path):
    x = helper.make_tensor_value_info("x", F, [2, 3])
    model = _model([helper.make_node("Dropout", ["x"], ["y"]), helper.make_node("Relu", ["y"], ["z"])],
                   [x], [helper.make_tensor_value_info("z", F, None)])
    session = _compile_and_run(model, tmp_path, [{"x": RNG.standard_normal((2, 3)).astype(np.float32)}])
    assert "Dropout" not in _kernel_types(session)


def test_training_mode_dropout_is_refused_unless_its_ratio_is_zero(tmp_path):
    x = helper.make_tensor_value_info("x", F, [2, 3])
    outputs = [helper.make_tensor_value_info("y", F, None), helper.make_tensor_value_info("mask", TensorProto.BOOL,
                                                                                          None)]
    training = helper.make_tensor("t", TensorProto.BOOL, [], [True])

    def dropout(ratio):
        return _model([helper.make_node("Dropout", ["x", "r", "t"], ["y", "mask"])], [x], outputs,
                      [helper.make_tensor("r", F, [], [ratio]), training])

    with pytest.raises(AtcError) as err:
        atc_py.compile(dropout(0.5), output=str(tmp_path / "t"), soc_version="Ascend910")
    assert err.value.code == "E16004" and "training mode" in err.value.message
    assert not (tmp_path / "t.om").exists()
    _compile_and_run(dropout(0.0), tmp_path, [{"x": RNG.standard_normal((2, 3)).astype(np.float32)}], name="z")


@pytest.mark.parametrize("attrs,outputs", [
    ({"sorted": 1}, ["y", "indices", "inverse", "counts"]),
    ({"sorted": 0}, ["y", "", "", "counts"]),                 # unnamed optional outputs in between
    ({"sorted": 1, "axis": 0}, ["y", "indices", "inverse", "counts"]),
    ({"sorted": 0, "axis": -1}, ["y", "", "inverse"]),
])
def test_unique_outputs_have_their_run_time_length(tmp_path, attrs, outputs):
    x = helper.make_tensor_value_info("x", F, [6, 4])
    types = {"y": F, "indices": TensorProto.INT64, "inverse": TensorProto.INT64, "counts": TensorProto.INT64}
    model = _model([helper.make_node("Unique", ["x"], outputs, **attrs)], [x],
                   [helper.make_tensor_value_info(o, types[o], None) for o in outputs if o], opset=17)
    base = RNG.integers(0, 3, (6, 4)).astype(np.float32)
    runs = [{"x": base}, {"x": np.zeros((6, 4), np.float32)}, {"x": np.arange(24, dtype=np.float32).reshape(6, 4)},
            {"x": np.repeat(base[:2], 3, axis=0)}]
    session = _compile_and_run(model, tmp_path, runs)
    assert session.model.graph.is_dynamic


def test_unique_of_a_constant_folds(tmp_path):
    c = helper.make_tensor("c", F, [5], [3, 1, 3, 2, 1])
    x = helper.make_tensor_value_info("x", F, [1])
    model = _model([helper.make_node("Unique", ["c"], ["u", "", "", "n"], sorted=0),
                    helper.make_node("Mul", ["u", "x"], ["y"]), helper.make_node("Cast", ["n"], ["nf"], to=F),
                    helper.make_node("Add", ["y", "nf"], ["z"])],
                   [x], [helper.make_tensor_value_info("z", F, None)], [c])
    session = _compile_and_run(model, tmp_path, [{"x": np.array([2.0], np.float32)}])
    assert "Unique" not in _kernel_types(session) and not session.model.graph.is_dynamic


@pytest.mark.parametrize("op,node_outputs,attrs,shape", [
    ("TopK", ["v", "i"], {"axis": 1}, [3, 8]),
    ("LayerNormalization", ["v", "mean", "inv"], {"axis": -1}, [3, 8]),
    ("MaxPool", ["v", "i"], {"kernel_shape": [2, 2], "strides": [2, 2]}, [1, 2, 8, 8]),
])
def test_extra_outputs_through_atc(tmp_path, op, node_outputs, attrs, shape):
    x = helper.make_tensor_value_info("x", F, shape)
    inits, inputs = [], ["x"]
    if op == "TopK":
        inits, inputs = [helper.make_tensor("k", TensorProto.INT64, [1], [3])], ["x", "k"]
    if op == "LayerNormalization":
        inits, inputs = [helper.make_tensor("s", F, [shape[-1]], RNG.standard_normal(shape[-1]).tolist())], ["x", "s"]
    types = {"i": TensorProto.INT64, "mean": F, "inv": F, "v": F}
    model = _model([helper.make_node(op, inputs, node_outputs, **attrs)], [x],
                   [helper.make_tensor_value_info(o, types[o], None) for o in node_outputs], inits)
    _compile_and_run(model, tmp_path, [{"x": RNG.standard_normal(shape).astype(np.float32)}])
