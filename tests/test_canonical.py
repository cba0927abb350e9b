"""The canonicalization stage (fusion_passes/canonical/): one entry of the fusion pipeline,
before the named passes, running its ordered list of rewrites to a fixed point and saying
what each changed.  The rewrites' own tests (on real exports) sit with the patterns they
serve; this file holds the stage's contract."""
from __future__ import annotations

import numpy as np

from fusion_passes import pipeline
from fusion_passes.base import FusionPass
from fusion_passes.canonical import REWRITES, CanonicalizePass
from fusion_passes.canonical.rewrite import Rewrite, absorb_origin, add_node, replace_value
from ge.ir import Graph, TensorDesc
from ge.passes.contract import CANONICAL, TYPED, run_passes
from helpers import op_types

F32 = np.dtype(np.float32)


def test_the_stage_runs_first_and_is_not_a_fusion_pass():
    passes = pipeline.fusion_passes()
    assert isinstance(passes[0], CanonicalizePass)
    assert all(isinstance(p, FusionPass) for p in passes[1:])
    names, _ = pipeline.known_names()
    assert "CanonicalizePass" not in names          # not switchable like a fusion, not in the report
    assert all(isinstance(r, Rewrite) and r.name and r.anchor_types for r in REWRITES)
    assert len({r.name for r in REWRITES}) == len(REWRITES)


class NegNegToIdentity(Rewrite):
    """-(-x) -> x (a stand-in rewrite: it bypasses two nodes)."""

    name = "NegNeg"
    anchor_types = ("Neg",)

    def apply(self, graph, node):
        inner = node.inputs[0].producer
        if inner is None or inner.op_type != "Neg":
            return False
        replace_value(graph, node.outputs[0], inner.inputs[0])
        return True


class DropIdentity(Rewrite):
    name = "DropIdentity"
    anchor_types = ("Identity",)

    def apply(self, graph, node):
        replace_value(graph, node.outputs[0], node.inputs[0])
        return True


class ReluReluToRelu(Rewrite):
    """relu(relu(x)) -> relu(x), as a new node that stands for both."""

    name = "ReluRelu"
    anchor_types = ("Relu",)

    def apply(self, graph, node):
        inner = node.inputs[0].producer
        if inner is None or inner.op_type != "Relu":
            return False
        new = add_node(graph, "Relu", [inner.inputs[0]], {}, "relu", [inner, node])
        replace_value(graph, node.outputs[0], new.outputs[0])
        return True


def _chain(*ops):
    g = Graph("g")
    x = g.new_value("x", TensorDesc(F32, (2, 3)))
    g.inputs.append(x)
    value = x
    for op in ops:
        value = g.make_node(op, [value], name=g.unique_name(op.lower()), descs=[TensorDesc(F32, (2, 3))]).outputs[0]
    g.outputs = [value]
    g.properties |= {TYPED, CANONICAL}
    return g


def test_rewrites_run_to_a_fixed_point_and_are_counted_by_name():
    graph = _chain("Relu", "Neg", "Identity", "Neg")      # dropping the Identity exposes -(-y)
    [result] = run_passes(graph, [CanonicalizePass(rewrites=[NegNegToIdentity(), DropIdentity()])])
    assert op_types(graph) == ["Relu"]
    assert result.by_rewrite == {"DropIdentity": 1, "NegNeg": 1} and result.changes == 2
    assert graph.outputs[0].name == "neg_0:0"             # the graph output keeps its name


def test_a_replacing_node_stands_for_what_it_replaced():
    graph = _chain("Relu", "Relu", "Relu")
    [result] = run_passes(graph, [CanonicalizePass(rewrites=[ReluReluToRelu()])])
    assert op_types(graph) == ["Relu"] and result.by_rewrite == {"ReluRelu": 2}
    assert sorted(graph.nodes[0].origin) == ["relu", "relu_0", "relu_1"]
    assert graph.outputs[0].name == "relu_1:0"


def test_absorbed_origins_follow_the_node():
    graph = _chain("Relu", "Neg")
    relu, neg = graph.nodes
    absorb_origin(relu, [neg])
    assert relu.origin == ["relu", "neg"]


def test_a_token_view_rises_above_a_bias_only_when_the_bias_keeps_its_rank():
    """Reshape([6,5] <- Add(MatMul(view(x), W), b[1,1,5])): lifted, the Add would read the
    rank-2 view and broadcast it to [1,6,5] -- the graph output changed shape.  The view stays."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper
    from helpers import assert_matches_ort, fuse_model
    rng = np.random.default_rng(0)
    inits = [numpy_helper.from_array(rng.standard_normal((4, 5)).astype(np.float32), "W"),
             numpy_helper.from_array(rng.standard_normal((1, 1, 5)).astype(np.float32), "b"),
             numpy_helper.from_array(np.array([2, 3, 4], np.int64), "s3"),
             numpy_helper.from_array(np.array([6, 5], np.int64), "s2")]
    nodes = [helper.make_node("Transpose", ["x"], ["xt"], perm=[1, 0]),    # the linear reads a view of a view
             helper.make_node("Reshape", ["xt", "s3"], ["v"]),
             helper.make_node("MatMul", ["v", "W"], ["mm"]),
             helper.make_node("Add", ["mm", "b"], ["y"]),
             helper.make_node("Reshape", ["y", "s2"], ["out"])]
    model = helper.make_model(helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 6])],
        [helper.make_tensor_value_info("out", TensorProto.FLOAT, [6, 5])], initializer=inits),
        opset_imports=[helper.make_opsetid("", 17)])
    onnx.checker.check_model(model)
    graph, _ = fuse_model(model)
    assert [tuple(v.desc.shape) for v in graph.outputs] == [(6, 5)]
    assert_matches_ort(model, graph)


def test_a_view_of_an_empty_tensor_stays_a_view_of_it():
    """Unsqueeze [3, 0] -> [1, 3, 0] as a Reshape: its 0 is an empty axis (allowzero), not
    "copy input dim 2", which does not exist (the model was refused with E16004)."""
    from builder import Net
    from helpers import assert_matches_ort, fuse_model
    net = Net(opset=17)
    x = net.input("x", [3, 0])
    y = net.op("Unsqueeze", net.op("Relu", x), net.const(np.array([0], np.int64)))
    model = net.model(net.op("Relu", y))
    graph, _ = fuse_model(model)
    assert [tuple(v.desc.shape) for v in graph.outputs] == [(1, 3, 0)]
    assert_matches_ort(model, graph, feeds={"x": np.zeros((3, 0), np.float32)})


def test_a_gather_of_out_of_range_indices_is_no_identity():
    """GatherND indices [[0,0],[0,1],[0,2],[1,0],[1,1],[1,5]] on [2, 3] data would enumerate
    it once 5 is taken modulo 3; but 5 is out of range (onnxruntime refuses the run), so the
    node stays a GatherND, which refuses it too, instead of becoming a Reshape that runs."""
    from fusion_passes.canonical.identity_gather import IdentityGather
    g = Graph("g")
    x = g.new_value("x", TensorDesc(F32, (2, 3)))
    g.inputs.append(x)
    for last, rewritten in ((2, True), (5, False)):
        idx = g.constant(f"idx{last}", np.array([[0, 0], [0, 1], [0, 2], [1, 0], [1, 1], [1, last]], np.int64))
        node = g.make_node("GatherND", [x, idx], name=g.unique_name("gather"), descs=[TensorDesc(F32, (6,))])
        assert IdentityGather().apply(g, node) is rewritten
