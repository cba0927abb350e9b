"""Property-based tests (hypothesis) of the invariants that matter most, on random graphs:

- autofuse never creates a cycle: every group it forms is acyclic to contract, and the graph
  after it is a DAG that passes `Graph.verify`;
- every rewrite of the whole fusion pipeline keeps the graph's outputs (names, dtypes,
  shapes and values) and `verify()` holds after each pass;
- an .om written from any such graph reads back to the same graph: lowering what was read
  gives the same bytes, and the attribute encoding round-trips any attribute value.

Random graphs are drawn as recipes (op, operands among earlier tensors, attributes) over
one [2, 4] float32 activation, then built with tests/builder.py and lowered like any model.
Steps include MatMul+bias(+act) and the decomposed LayerNorm, so the named passes
(MatMulBiasAct, LayerNorm, LayerNormMatMul) rewrite too.  The examples are derandomized (the same ones on every run, for CI) and few: the whole file
runs in seconds.
"""
from __future__ import annotations

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from builder import Net
from codegen.om_builder import build_partitions
from codegen.om_import import load_om_graph
from fusion_passes import autofuse_grouping, pipeline
from fusion_passes.autofuse import AutoFusePass
from fusion_passes.base import creates_cycle
from ge.passes.contract import run_passes
from helpers import lower, random_feeds, run_ir
from om_format.attrs import from_attr, to_attr
from om_format.container import build_om

SETTINGS = settings(max_examples=30, deadline=None, derandomize=True, database=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
SHAPE = [2, 4]
UNARY = ("Relu", "Sigmoid", "Neg", "Exp", "Tanh", "Abs")
BINARY = ("Add", "Mul", "Sub", "Max")


@st.composite
def recipes(draw):
    """A random DAG: each step reads earlier tensors (0 is the input) and makes one."""
    steps = []
    for i in range(draw(st.integers(1, 10))):
        tensors = i + 1
        pick = st.integers(0, tensors - 1)
        kind = draw(st.sampled_from(["unary", "binary", "bias", "matmul", "gemm", "layernorm", "reduce",
                                     "softmax", "view", "transpose", "leaky"]))
        steps.append((kind, draw(st.sampled_from(UNARY + BINARY)), draw(pick), draw(pick)))
    outputs = draw(st.sets(st.integers(1, len(steps)), max_size=3))
    return steps, sorted(outputs)


def build(recipe):
    steps, extra = recipe
    net = Net(18, seed=len(steps))
    tensors = [net.input("x", SHAPE)]
    for kind, op, a, b in steps:
        x, y = tensors[a], tensors[b]
        if kind == "unary":
            out = net.op(op if op in UNARY else "Relu", x)
        elif kind == "binary":
            out = net.op(op if op in BINARY else "Add", x, y)
        elif kind == "bias":
            out = net.op("Add", x, net.rand(SHAPE[-1]))
        elif kind == "matmul":
            out = net.op("MatMul", x, net.rand(SHAPE[-1], SHAPE[-1]))
        elif kind == "gemm":        # MatMul + bias [+ activation]: MatMulBiasAct's pattern
            out = net.op("Add", net.op("MatMul", x, net.rand(SHAPE[-1], SHAPE[-1])), net.rand(SHAPE[-1]))
            out = net.op(op, out) if op in ("Relu", "Sigmoid", "Tanh") else out
        elif kind == "layernorm":   # the decomposed form exporters write: LayerNorm's pattern
            axes = net.const(np.array([-1], np.int64))
            centered = net.op("Sub", x, net.op("ReduceMean", x, axes, keepdims=1))
            var = net.op("ReduceMean", net.op("Mul", centered, centered), axes, keepdims=1)
            normed = net.op("Div", centered, net.op("Sqrt", net.op("Add", var, net.const(1e-5))))
            out = net.op("Add", net.op("Mul", normed, net.rand(SHAPE[-1])), net.rand(SHAPE[-1]))
        elif kind == "reduce":      # keepdims: the result broadcasts back into later ops
            out = net.op("Add", x, net.op("ReduceSum", y, net.const(np.array([-1], np.int64)), keepdims=1))
        elif kind == "softmax":
            out = net.op("Softmax", x, axis=-1)
        elif kind == "view":
            out = net.op("Reshape", net.op("Reshape", x, net.const(np.array([8], np.int64))),
                         net.const(np.array(SHAPE, np.int64)))
        elif kind == "transpose":
            out = net.op("Transpose", net.op("Transpose", x, perm=[1, 0]), perm=[1, 0])
        else:
            out = net.op("LeakyRelu", x, alpha=0.25)
        tensors.append(out)
    # every tensor nothing reads is an output, plus a few drawn ones: nothing is dead
    read = {i for _, _, a, b in steps for i in (a, b)}
    outputs = sorted(set(extra) | {i for i in range(1, len(tensors)) if i not in read})
    return net.model(*[tensors[i] for i in outputs])


def _signature(graph) -> list:
    return [(v.name, str(np.dtype(v.desc.dtype)), tuple(v.desc.shape)) for v in graph.outputs]


@SETTINGS
@given(recipes())
def test_autofuse_never_creates_a_cycle(recipe):
    graph = lower(build(recipe))
    graph.topological_sort()
    found = autofuse_grouping.group_nodes(graph, set(autofuse_grouping.CATEGORIES), 64, "AutoFusePass")
    for group in found.groups:
        assert not creates_cycle(group.members), [n.name for n in group.members]
    [result] = run_passes(graph, [AutoFusePass(flags="")])      # sorts and verifies: a cycle raises
    refused = [m for m in result.misses if m.constraint == "a path leaves the group and re-enters it"]
    assert not refused, "the runner had to refuse a group the grouping proof accepted"


@SETTINGS
@given(recipes())
def test_every_rewrite_keeps_the_outputs_and_the_invariants(recipe):
    model = build(recipe)
    graph = lower(model)
    before = _signature(graph)
    feeds = random_feeds(model, seed=1)
    expected = run_ir(graph, feeds)
    run_passes(graph, pipeline.fusion_passes())                # verify() after every pass
    assert _signature(graph) == before
    got = run_ir(graph, feeds)
    for name, ref in expected.items():
        np.testing.assert_allclose(got[name], ref, rtol=2e-5, atol=2e-5, err_msg=name)


def _om_bytes(graph, precision_mode="force_fp32") -> bytes:
    parts = build_partitions(graph, "m", "Ascend910", precision_mode)
    return build_om(parts.as_dict(), name="m", ops=len(graph.nodes), platform_version="Ascend910")


@SETTINGS
@given(recipes(), st.booleans())
def test_om_write_read_round_trips_any_graph(tmp_path_factory, recipe, fused):
    graph = lower(build(recipe))
    if fused:
        run_passes(graph, pipeline.fusion_passes())
    data = _om_bytes(graph)
    path = tmp_path_factory.mktemp("om") / "m.om"
    path.write_bytes(data)
    loaded = load_om_graph(str(path)).graph
    assert [(n.name, n.op_type) for n in loaded.nodes] == [(n.name, n.op_type) for n in graph.nodes]
    assert _signature(loaded) == _signature(graph)
    assert _om_bytes(loaded) == data


FLOAT32 = st.floats(width=32, allow_nan=False)
SCALARS = st.one_of(st.booleans(), st.integers(-(1 << 63), (1 << 63) - 1), FLOAT32,
                    st.text(max_size=8), st.binary(max_size=8))
ATTR_VALUES = st.one_of(
    SCALARS,
    st.lists(st.integers(-(1 << 31), 1 << 31), max_size=5),
    st.lists(FLOAT32, min_size=1, max_size=5),
    st.lists(st.text(max_size=4), min_size=1, max_size=4),
    st.lists(st.lists(st.integers(-100, 100), max_size=3), min_size=1, max_size=3),
    st.builds(lambda shape, seed: np.random.default_rng(seed).standard_normal(shape).astype(np.float32),
              st.lists(st.integers(0, 3), max_size=3), st.integers(0, 9)),
)


@SETTINGS
@given(ATTR_VALUES)
def test_attribute_encoding_round_trips(value):
    back = from_attr(to_attr(value))
    if isinstance(value, np.ndarray):
        np.testing.assert_array_equal(back, value)
        assert back.dtype == value.dtype and back.shape == value.shape
    else:
        assert back == value and type(back) is type(value)
