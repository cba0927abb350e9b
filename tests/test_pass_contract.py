"""The one pass contract: every pass (generic, fusion, autofuse) is a GraphPass with a name,
requires/ensures and run(graph) -> result; run_passes enforces the order and the IR's
invariants; FusionPass.run owns the checks every rewrite needs."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pytest

from atc_py import zoo
from fusion_passes import pipeline, reasons
from fusion_passes.base import FusionPass, FusionResult, Match, fuse
from fusion_passes.conv_bn_relu import ConvBNReluFusionPass
from ge.errors import InternalError
from ge.ir import Graph, TensorDesc
from ge.onnx_import import import_model
from ge.passes import GENERIC_PASSES
from ge.passes.contract import CANONICAL, TYPED, GraphPass, PassResult, check_order, run_passes
from helpers import lower, op_types

F32 = np.dtype(np.float32)


def test_the_compile_pipeline_is_in_a_consistent_order():
    check_order(GENERIC_PASSES)
    ensured = set().union(*(p.ensures for p in GENERIC_PASSES))
    assert {TYPED, CANONICAL} <= ensured
    passes = pipeline.fusion_passes()
    check_order(passes, ensured)
    assert all(isinstance(p, GraphPass) and p.name for p in list(GENERIC_PASSES) + passes)
    assert [p.name for p in passes][-1] == "AutoFusePass"


def test_a_fusion_on_an_untyped_graph_is_an_internal_error():
    graph = import_model(zoo.build("seed_testmodel", small=True))      # no generic passes yet
    with pytest.raises(InternalError) as err:
        run_passes(graph, [ConvBNReluFusionPass()])
    assert err.value.code == "E19999" and "ConvBNReluFusionPass" in err.value.message
    assert "typed" in err.value.message


class ReshapeAnOutput(GraphPass):
    """A broken pass: it makes the graph output another (well-formed) value of another shape."""

    name = "ReshapeAnOutput"
    requires = frozenset({TYPED})

    def run(self, graph: Graph) -> PassResult:
        out = graph.outputs[0]
        node = graph.make_node("Reshape", [out], attrs={"shape": [-1], "allowzero": 0},
                               name=graph.unique_name("broken"), descs=[TensorDesc(out.desc.dtype, (out.desc.size,))])
        graph.outputs = [node.outputs[0]] + list(graph.outputs[1:])
        node.outputs[0].name, out.name = out.name, graph.unique_name(out.name)
        return PassResult(self.name, 1)


def test_a_pass_that_changes_what_the_graph_returns_is_an_internal_error():
    """verify() sees a well-formed graph; run_passes compares the outputs' names, dtypes and
    shapes before and after every pass on a typed graph, so the broken pass is named."""
    graph = lower(zoo.build("seed_testmodel", small=True))
    with pytest.raises(InternalError) as err:
        run_passes(graph, [ReshapeAnOutput()])
    assert err.value.code == "E19999" and "ReshapeAnOutput changed the graph outputs" in err.value.message


class CountAdds(GraphPass):
    """A stand-in for a canonicalization stage: any GraphPass is one more entry in the list."""

    name = "CountAdds"
    requires = frozenset({TYPED})

    def run(self, graph: Graph) -> PassResult:
        return PassResult(self.name, sum(n.op_type == "Add" for n in graph.nodes))


def test_a_new_stage_is_just_another_entry_in_the_list():
    model = zoo.build("resnet50", small=True)
    plain = lower(model)
    staged = plain.clone()
    baseline = run_passes(plain, pipeline.fusion_passes())
    passes = pipeline.fusion_passes()
    results = run_passes(staged, [CountAdds()] + passes)
    assert results[0].pass_name == "CountAdds" and results[0].changes > 0
    assert op_types(staged) == op_types(plain)
    fusions = lambda rs: [(r.pass_name, r.match_times, r.effect_times)  # noqa: E731
                          for r in rs if isinstance(r, FusionResult)]
    assert fusions(results[1:]) == fusions(baseline)


def _relu_neg(relu_is_output: bool):
    g = Graph("g")
    x = g.new_value("x", TensorDesc(F32, (2, 3)))
    g.inputs.append(x)
    relu = g.make_node("Relu", [x], descs=[TensorDesc(F32, (2, 3))])
    neg = g.make_node("Neg", [relu.outputs[0]], descs=[TensorDesc(F32, (2, 3))])
    g.outputs = [neg.outputs[0]] + ([relu.outputs[0]] if relu_is_output else [])
    g.properties |= {TYPED, CANONICAL}
    return g, relu, neg


@dataclass
class ChainMatch(Match):
    pass


class ReluNegPass(FusionPass):
    """Matches Relu -> Neg and trusts the runner for the checks every rewrite needs."""

    pass_name = pattern_name = "ReluNeg"
    fused_ops = ("ReluNegOp",)
    anchor_types = ("Relu",)

    def match(self, graph, relu):
        neg = relu.outputs[0].consumers[0]
        return ChainMatch([relu, neg], "ReluNegOp", [neg.outputs[0]])

    def rewrite(self, graph, match):
        return fuse(graph, match.nodes, "Neg", [match.nodes[0].inputs[0]], match.outputs, {}, self.pass_name)


def test_run_refuses_a_match_that_would_hide_an_intermediate():
    graph, relu, neg = _relu_neg(relu_is_output=True)
    [result] = run_passes(graph, [ReluNegPass()])
    assert op_types(graph) == ["Relu", "Neg"]
    assert (result.match_times, result.effect_times) == (1, 0)
    assert [m.code for m in result.misses] == [reasons.OTHER_CONSUMERS]


def test_run_rewrites_a_clean_match():
    graph, relu, neg = _relu_neg(relu_is_output=False)
    [result] = run_passes(graph, [ReluNegPass()])
    assert op_types(graph) == ["Neg"] and result.effect_times == 1 and not result.misses
    assert graph.nodes[0].provenance["origin"] == [relu.name, neg.name]
