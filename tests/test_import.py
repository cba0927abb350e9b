"""ONNX import across opsets 13..21, canonical form, and the generic passes."""
from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from ge.errors import AtcError
from ge.symbolic import Dim
from ge.onnx_import import import_model
from ge.passes import run_generic

from helpers import assert_matches_ort, lower, op_types


def model_of(nodes, inputs, outputs, inits=(), opset=17):
    graph = helper.make_graph(nodes, "g", inputs, outputs, list(inits))
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def fvi(name, shape, elem=TensorProto.FLOAT):
    return helper.make_tensor_value_info(name, elem, shape)


def ints(name, values):
    return numpy_helper.from_array(np.asarray(values, dtype=np.int64), name)


# ------------------------------------------------------------------ attribute vs input forms

@pytest.mark.parametrize("opset", [13, 17, 18, 21])
def test_reduce_mean_axes_attribute_or_input(opset):
    if opset < 18:
        node = helper.make_node("ReduceMean", ["x"], ["y"], axes=[-1], keepdims=1)
        inits = []
    else:
        node = helper.make_node("ReduceMean", ["x", "axes"], ["y"], keepdims=1)
        inits = [ints("axes", [-1])]
    model = model_of([node], [fvi("x", [2, 3, 4])], [fvi("y", None)], inits, opset)
    graph = lower(model)
    (reduce,) = graph.nodes
    assert reduce.attrs["axes"] == [-1] and len(reduce.inputs) == 1
    assert_matches_ort(model, graph)


@pytest.mark.parametrize("opset", [13, 18])
def test_reduce_sum_axes_input_since_13(opset):
    node = helper.make_node("ReduceSum", ["x", "axes"], ["y"], keepdims=0)
    model = model_of([node], [fvi("x", [2, 3, 4])], [fvi("y", None)], [ints("axes", [1])], opset)
    graph = lower(model)
    assert graph.nodes[0].attrs["axes"] == [1] and graph.outputs[0].desc.shape == (2, 4)
    assert_matches_ort(model, graph)


@pytest.mark.parametrize("opset, form", [(13, "split_input"), (18, "split_input"), (18, "num_outputs")])
def test_split_forms(opset, form):
    if form == "split_input":
        node = helper.make_node("Split", ["x", "split"], ["a", "b"], axis=1)
        inits = [ints("split", [1, 3])]
    else:
        node = helper.make_node("Split", ["x"], ["a", "b"], axis=1, num_outputs=2)
        inits = []
    model = model_of([node], [fvi("x", [2, 4])], [fvi("a", None), fvi("b", None)], inits, opset)
    graph = lower(model)
    assert [v.desc.shape for v in graph.nodes[0].outputs] == ([(2, 1), (2, 3)] if form == "split_input"
                                                               else [(2, 2), (2, 2)])
    assert_matches_ort(model, graph)


@pytest.mark.parametrize("opset", [13, 21])
def test_squeeze_unsqueeze_axes_inputs(opset):
    nodes = [helper.make_node("Unsqueeze", ["x", "ax0"], ["u"]),
             helper.make_node("Squeeze", ["u", "ax0"], ["y"])]
    model = model_of(nodes, [fvi("x", [3, 4])], [fvi("y", None)], [ints("ax0", [0])], opset)
    graph = lower(model)
    assert all(n.attrs["axes"] == [0] for n in graph.nodes)
    assert_matches_ort(model, graph)


@pytest.mark.parametrize("bounds", [(None, 6.0), (0.0, None), (-1.0, 1.0)])
def test_clip_bounds_as_optional_inputs(bounds):
    lo, hi = bounds
    names, inits = ["x"], []
    for key, value in (("lo", lo), ("hi", hi)):
        if value is None:
            names.append("")
        else:
            names.append(key)
            inits.append(numpy_helper.from_array(np.asarray(value, dtype=np.float32), key))
    while names[-1] == "":
        names.pop()
    model = model_of([helper.make_node("Clip", names, ["y"])], [fvi("x", [8])], [fvi("y", None)], inits, 13)
    graph = lower(model)
    clip = graph.nodes[0]
    assert [v for v in clip.inputs if v is not None] == [graph.inputs[0]]
    assert clip.attrs.get("min") == lo and clip.attrs.get("max") == hi
    assert_matches_ort(model, graph, feeds={"x": np.linspace(-8, 8, 8, dtype=np.float32)})


def test_old_opset_is_converted_up():
    node = helper.make_node("ReduceMean", ["x"], ["y"], axes=[1], keepdims=1)
    model = model_of([node], [fvi("x", [2, 3])], [fvi("y", None)], opset=11)
    graph = lower(model)
    assert graph.opset == 13 and graph.nodes[0].attrs["axes"] == [1]


def test_future_opset_is_refused():
    model = model_of([helper.make_node("Relu", ["x"], ["y"])], [fvi("x", [2])], [fvi("y", None)], opset=22)
    with pytest.raises(AtcError) as err:
        import_model(model)
    assert err.value.code == "E16006"


# ------------------------------------------------------------------ generic passes

def test_shape_chain_folds_into_a_constant_reshape():
    nodes = [helper.make_node("Shape", ["x"], ["s"]),
             helper.make_node("Gather", ["s", "i0"], ["d0"], axis=0),
             helper.make_node("Unsqueeze", ["d0", "ax0"], ["d0u"]),
             helper.make_node("Concat", ["d0u", "minus1"], ["target"], axis=0),
             helper.make_node("Reshape", ["x", "target"], ["y"])]
    inits = [numpy_helper.from_array(np.asarray(0, dtype=np.int64), "i0"), ints("ax0", [0]),
             ints("minus1", [-1])]
    model = model_of(nodes, [fvi("x", [2, 3, 4])], [fvi("y", None)], inits, 17)
    graph = lower(model)
    assert op_types(graph) == ["Reshape"]
    assert graph.nodes[0].attrs["shape"] == [2, -1] and graph.outputs[0].desc.shape == (2, 12)
    assert_matches_ort(model, graph)


def test_identity_dropout_and_dead_nodes_go():
    nodes = [helper.make_node("Identity", ["x"], ["a"]),
             helper.make_node("Dropout", ["a"], ["b"]),
             helper.make_node("Relu", ["b"], ["y"]),
             helper.make_node("Neg", ["x"], ["unused"])]
    model = model_of(nodes, [fvi("x", [4])], [fvi("y", None)])
    graph = import_model(model)
    changes = run_generic(graph)
    assert op_types(graph) == ["Relu"] and graph.nodes[0].inputs[0] is graph.inputs[0]
    assert changes["EliminateIdentity"] == 2 and changes["DeadCodeElimination"] == 1


def test_identity_feeding_a_graph_output_keeps_the_output_name():
    nodes = [helper.make_node("Relu", ["x"], ["r"]), helper.make_node("Identity", ["r"], ["y"])]
    graph = lower(model_of(nodes, [fvi("x", [4])], [fvi("y", None)]))
    assert op_types(graph) == ["Relu"] and graph.outputs[0].name == "y"


def test_constant_subgraphs_fold_and_every_value_is_typed():
    nodes = [helper.make_node("Constant", [], ["c"], value=numpy_helper.from_array(np.ones((2, 2), np.float32))),
             helper.make_node("Mul", ["c", "c"], ["c2"]),
             helper.make_node("Add", ["x", "c2"], ["y"])]
    model = model_of(nodes, [fvi("x", [2, 2])], [fvi("y", None)])
    graph = lower(model)
    assert op_types(graph) == ["Add"]
    assert np.array_equal(graph.nodes[0].inputs[1].const, np.ones((2, 2), np.float32))
    graph.verify()


def test_run_time_config_input_stays_an_input_the_kernel_reads():
    nodes = [helper.make_node("Reshape", ["x", "shape_in"], ["y"], name="dyn_reshape")]
    model = model_of(nodes, [fvi("x", [2, 3]), fvi("shape_in", [2], TensorProto.INT64)], [fvi("y", None)])
    graph = lower(model)
    reshape = graph.nodes[0]
    assert reshape.inputs[1].name == "shape_in" and "shape" not in reshape.attrs
    out = graph.outputs[0].desc.shape          # rank 2 from the shape input's length, sizes from its values
    assert len(out) == 2 and all(isinstance(d, Dim) for d in out) and graph.is_dynamic


def test_kernel_errors_name_the_node():
    node = helper.make_node("Softmax", ["x"], ["y"], axis=5, name="bad_softmax")
    model = model_of([node], [fvi("x", [2, 3])], [fvi("y", None)])
    with pytest.raises(AtcError) as err:
        lower(model)
    assert err.value.code == "E16004" and "bad_softmax" in err.value.message


def test_run_time_kernel_errors_name_the_node():
    from helpers import run_ir
    # what only the run-time values reveal: an integer divisor of 0 fed at run time
    node = helper.make_node("Div", ["x", "d"], ["y"], name="bad_div")
    model = model_of([node], [fvi("x", [3], TensorProto.INT64), fvi("d", [3], TensorProto.INT64)],
                     [fvi("y", None, TensorProto.INT64)])
    graph = lower(model)
    with pytest.raises(AtcError) as err:
        run_ir(graph, {"x": np.ones(3, np.int64), "d": np.array([1, 0, 2], np.int64)})
    assert err.value.code == "E16004" and "[bad_div]" in err.value.message


@pytest.mark.parametrize("case", ["add_float_int", "softmax_int"])
def test_type_errors_onnxruntime_refuses_are_refused(case):
    if case == "add_float_int":
        nodes = [helper.make_node("Add", ["x", "k"], ["y"], name="mixed_add")]
        inits = [ints("k", [1, 2, 3])]
        inputs = [fvi("x", [3])]
    else:
        nodes = [helper.make_node("Softmax", ["x"], ["y"], name="int_softmax")]
        inits, inputs = [], [fvi("x", [3], TensorProto.INT64)]
    model = model_of(nodes, inputs, [fvi("y", None)], inits)
    with pytest.raises(AtcError) as err:
        lower(model)
    assert err.value.code == "E16004"
    assert ("mixed_add" if case == "add_float_int" else "int_softmax") in err.value.message


def test_empty_node_names_get_unique_ones_and_repeated_names_are_refused():
    nodes = [helper.make_node("Relu", ["x"], ["a"]), helper.make_node("Neg", ["a"], ["b"]),
             helper.make_node("Abs", ["b"], ["y"], name="Neg_1")]
    model = model_of(nodes, [fvi("x", [4])], [fvi("y", None)])
    graph = lower(model)
    assert len({n.name for n in graph.nodes}) == 3
    assert_matches_ort(model, graph)
    nodes = [helper.make_node("Relu", ["x"], ["a"], name="n"), helper.make_node("Neg", ["a"], ["y"], name="n")]
    with pytest.raises(AtcError) as err:
        lower(model_of(nodes, [fvi("x", [4])], [fvi("y", None)]))
    assert err.value.code == "E16001" and "['n']" in err.value.message
