"""Whose fault an error is: a user's bad model keeps its E-code (E16004 from the op's rule,
named by node); a bug in our code is E19999 with the node named and the cause chained --
never the reverse."""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from onnx import TensorProto, helper

from codegen import registry as kernels
from ge.errors import AtcError, InternalError
from ge.ir import Graph
from ge.ops import registry as ops
from ge.passes.infer_and_fold import infer_and_fold
from helpers import lower, run_ir

F32 = np.dtype(np.float32)


def _relu_model():
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    graph = helper.make_graph([helper.make_node("Relu", ["x"], ["y"], name="the_relu")], "g", [x], [y])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


def _broken(exc):
    def fail(*args):
        raise exc
    return fail


def test_a_bug_in_a_shape_rule_is_e19999_with_the_node_and_the_cause(monkeypatch):
    relu = ops.get_op("Relu")
    monkeypatch.setitem(ops._REGISTRY, "Relu", dataclasses.replace(relu, infer=_broken(KeyError("oops"))))
    with pytest.raises(InternalError) as err:
        lower(_relu_model())
    assert err.value.code == "E19999" and "[the_relu]" in err.value.message and "KeyError" in err.value.message
    assert isinstance(err.value.__cause__, KeyError)


def _const_graph(op_type, arrays, attrs):
    g = Graph("g")
    node = g.make_node(op_type, [g.constant(f"c{i}", a) for i, a in enumerate(arrays)], attrs=attrs,
                       name="the_node")
    g.outputs = [node.outputs[0]]
    return g


def test_folding_inputs_the_rule_rejects_are_the_models_e16004():
    g = _const_graph("Concat", [np.ones((2, 3), F32), np.ones((3, 2), F32)], {"axis": 0})
    with pytest.raises(AtcError) as err:
        infer_and_fold(g)
    assert err.value.code == "E16004" and "[the_node]" in err.value.message and "differ" in err.value.message


def test_a_kernel_failing_on_inputs_its_rule_accepts_is_e19999(monkeypatch):
    add = ops.get_op("Add")
    monkeypatch.setitem(ops._REGISTRY, "Add", dataclasses.replace(add, compute=_broken(IndexError("bug"))))
    g = _const_graph("Add", [np.ones((2, 3), F32), np.ones((2, 3), F32)], {})
    with pytest.raises(InternalError) as err:
        infer_and_fold(g)
    assert "[the_node]" in err.value.message and isinstance(err.value.__cause__, IndexError)


def test_a_kernel_bug_at_run_time_is_e19999_naming_the_kernel(monkeypatch):
    graph = lower(_relu_model())
    kernel = kernels.kernel_of("Relu")
    broken = dataclasses.replace(kernel, op=dataclasses.replace(kernel.op, compute=_broken(TypeError("bug"))))
    monkeypatch.setitem(kernels._KERNELS, "Relu", broken)
    with pytest.raises(InternalError) as err:
        run_ir(graph, {"x": np.ones((2, 3), F32)})
    assert "[the_relu]" in err.value.message and isinstance(err.value.__cause__, TypeError)


@pytest.mark.parametrize("op_type,shapes,attrs", [
    ("Add", [(2, 3), (4, 3)], {}),                                  # shapes that do not broadcast
    ("Conv", [(1, 2, 4, 4), (2, 2, 3, 3)], {"group": 0}),
    ("MaxPool", [(1, 1, 4, 4)], {"kernel_shape": [2, 2], "strides": [0, 1]}),
    ("DepthToSpace", [(1, 4, 2, 2)], {"blocksize": 0}),
    ("Reshape", [(6,)], {"shape": [2, 0, 3]}),
    ("Split", [()], {"num_outputs": 2}),
    ("Resize", [(1, 0)], {"sizes": [1, 2]}),
])
def test_shape_rules_say_invalid_node_for_the_models_mistakes(op_type, shapes, attrs):
    op = ops.get_op(op_type)
    with pytest.raises(AtcError) as err:
        op.infer([ops.TensorType(F32, s) for s in shapes], attrs)
    assert err.value.code == "E16004"


def test_at_node_names_the_node_of_every_error_class():
    """at_node copies the error whatever its class (InvalidNode's __init__ takes no code:
    copy.copy used to fail with a TypeError, turning the model's mistake into E19999)."""
    from ge.errors import InvalidNode, at_node
    named = at_node(InvalidNode("the axes are out of range"), "Reduce_3", "ReduceSum")
    assert type(named) is InvalidNode and named.code == "E16004"
    assert named.message == "Node [Reduce_3] (ReduceSum): the axes are out of range"
    assert str(named) == f"E16004: {named.message}"
