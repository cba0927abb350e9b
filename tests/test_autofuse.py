"""Autofuse: grouping rules, NF1xxx refusals, flags, naming, and AutofusedKernel numerics
against onnxruntime on the unfused model (fp32 and fp16), plus the .om round trip."""
from __future__ import annotations

import os
import re
import subprocess
import sys

import numpy as np
import onnx
import pytest

from atc_py import zoo
from codegen.fused.autofused import decode_subgraph
from codegen.registry import kernel_of
from ge.ops.registry import TensorType
from fusion_passes.autofuse import AutofuseFlags, AutoFusePass
from fusion_passes.base import creates_cycle
from ge.errors import AtcError
from builder import Net
from helpers import assert_matches_ort, fuse_model, lower, op_types, random_feeds, run_ir, run_ort

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
KERNEL = "AutofusedKernel"
NAME = re.compile(r"^autofused_[a-z0-9_]+_[0-9a-f]{8}$")


def autofuse(model, flags: str = "", **kw):
    """Run autofuse alone (flags given explicitly, the environment is not read)."""
    graph, stats = fuse_model(model, passes=[lambda switches: AutoFusePass(switches, flags)], **kw)
    return graph, stats["AutoFusePass"]


def codes(stats) -> list:
    return [m.code for m in stats.misses]


def kernels(graph) -> list:
    return [n for n in graph.nodes if n.op_type == KERNEL]


# -- the done-when models ------------------------------------------------------------------

@pytest.mark.parametrize("precision", ["fp32", "fp16"])
def test_seed_addge_is_one_kernel(precision):
    model = zoo.build("seed_addge", small=True)
    graph, stats = fuse_model(model)
    assert op_types(graph) == [KERNEL]
    node = graph.nodes[0]
    assert node.attrs["member_ops"] == ["Add", "GreaterOrEqual"]
    assert node.name.startswith("autofused_add_greaterorequal_") and NAME.match(node.attrs["kernel_name"])
    assert node.provenance["pass"] == "AutoFusePass"
    st = stats["AutoFusePass"]
    assert (st.match_times, st.effect_times) == (1, 1)
    assert_matches_ort(model, graph, precision=precision)


@pytest.mark.parametrize("precision", ["fp32", "fp16"])
def test_seed_mulreducesum_is_one_kernel(precision):
    model = zoo.build("seed_mulreducesum", small=True)
    graph, _ = fuse_model(model)
    assert op_types(graph) == [KERNEL]
    assert graph.nodes[0].attrs["member_ops"] == ["Mul", "ReduceSum"]
    assert_matches_ort(model, graph, precision=precision)


def test_efficientnet_silu_and_squeeze_excite():
    """After the named passes nothing is left for autofuse in EfficientNet: each depthwise
    Conv is a DepthwiseConvBNReLU kernel whose epilogue is the canonical Swish (SiLU), each
    squeeze-excite gate one SqueezeExcitation kernel, and its x * gate the projection conv's
    input scale."""
    model = zoo.build("efficientnet_b4", small=True)
    graph, stats = fuse_model(model)
    counts = graph.op_type_counts()
    for op in ("Sigmoid", "BatchNormalization", "Conv", "Mul", "GlobalAveragePool", KERNEL):
        assert op not in counts, counts
    depthwise = [n for n in graph.nodes if n.op_type == "DepthwiseConvBNReluFusionOp"]
    assert len(depthwise) == counts["SqueezeExcitationFusionOp"]             # one per MBConv block
    assert all(n.attrs["activation"] == "Swish" for n in depthwise)
    scaled = [n for n in graph.nodes if n.attrs.get("input_scale")]
    assert len(scaled) == counts["SqueezeExcitationFusionOp"]
    assert stats["AutoFusePass"].effect_times == 0
    assert_matches_ort(model, graph)
    assert_matches_ort(model, graph, precision="fp16")


def test_efficientnet_autofuse_alone_fuses_silu_into_every_conv():
    model = zoo.build("efficientnet_b4", small=True)
    graph, stats = autofuse(model)
    assert "Sigmoid" not in graph.op_type_counts() and "Conv" not in graph.op_type_counts()
    assert stats.effect_times == stats.match_times == len(kernels(graph))
    assert_matches_ort(model, graph)


# -- grouping rules --------------------------------------------------------------------------

def test_diamond_with_an_opaque_branch_is_a_cycle_refusal():
    """Relu feeds Add directly and through Softmax: {Relu, Add} would be a cycle (the
    reachability check says so); Add still fuses with the Sigmoid after it."""
    net = Net()
    x = net.input("x", [2, 8])
    r = net.op("Relu", x)
    s = net.op("Softmax", r, axis=-1)            # opaque: the path r -> s -> add leaves any group
    y = net.op("Sigmoid", net.op("Add", r, s))
    model = net.model(y)
    plain = lower(model)
    relu, _, add, _ = plain.nodes
    assert creates_cycle([relu, add]) and not creates_cycle([add, plain.nodes[3]])
    graph, stats = autofuse(model)
    assert op_types(graph) == ["Relu", "Softmax", KERNEL]
    assert graph.nodes[2].attrs["member_ops"] == ["Add", "Sigmoid"]
    cycle = [m for m in stats.misses if m.code == "NF1002"]
    assert len(cycle) == 1 and cycle[0].anchor == "n3" and cycle[0].reason_name == "WillCreateCycle"
    assert [t for _, t in cycle[0].nodes] == ["Relu", "Add"] and "re-enters" in cycle[0].constraint
    assert_matches_ort(model, graph)


def test_diamond_of_pointwise_branches_is_one_multi_use_kernel():
    net = Net()
    x = net.input("x", [2, 8])
    s = net.op("Sigmoid", x)
    y = net.op("Add", net.op("Relu", s), net.op("Neg", s))
    model = net.model(y)
    graph, stats = autofuse(model)
    assert op_types(graph) == [KERNEL]
    assert graph.nodes[0].attrs["member_ops"] == ["Sigmoid", "Relu", "Neg", "Add"]
    assert "NF1002" not in codes(stats)
    assert_matches_ort(model, graph)


def test_opaque_op_splits_groups():
    net = Net()
    x = net.input("x", [2, 8])
    a = net.op("Relu", net.op("Add", x, x))
    s = net.op("Softmax", a, axis=-1)
    y = net.op("Sigmoid", net.op("Mul", s, x))
    model = net.model(y)
    graph, stats = autofuse(model)
    assert op_types(graph) == [KERNEL, "Softmax", KERNEL]
    assert [n.attrs["member_ops"] for n in kernels(graph)] == [["Add", "Relu"], ["Mul", "Sigmoid"]]
    opaque = [m for m in stats.misses if m.code == "NF1005"]
    assert len(opaque) == 1 and opaque[0].anchor == "n3" and "Softmax" in opaque[0].constraint
    assert_matches_ort(model, graph)


def test_max_fusion_size_caps_groups():
    net = Net()
    y = net.input("x", [4, 4])
    for op in ("Relu", "Neg", "Sigmoid", "Abs", "Exp"):
        y = net.op(op, y)
    model = net.model(y)
    graph, stats = autofuse(model, "--max_fusion_size=3")
    assert [n.attrs["member_ops"] for n in kernels(graph)] == [["Relu", "Neg", "Sigmoid"], ["Abs", "Exp"]]
    cap = [m for m in stats.misses if m.code == "NF1004"]
    assert len(cap) == 1 and "--max_fusion_size=3" in cap[0].constraint
    assert_matches_ort(model, graph)
    graph, _ = autofuse(model)                                 # default cap: one kernel
    assert op_types(graph) == [KERNEL]


def test_reduce_is_a_sink():
    net = Net()
    x = net.input("x", [2, 4, 8])
    r = net.op("ReduceSum", net.op("Mul", x, x), net.const(np.array([-1], np.int64)), keepdims=1)
    y = net.op("Sqrt", net.op("Add", r, net.const(np.ones((1, 1, 1), np.float32))))
    model = net.model(y)
    graph, stats = autofuse(model)
    assert [n.attrs["member_ops"] for n in kernels(graph)] == [["Mul", "ReduceSum"], ["Add", "Sqrt"]]
    assert "NF1007" in codes(stats)
    assert_matches_ort(model, graph)
    assert_matches_ort(model, graph, precision="fp16")


def test_view_inside_a_group_and_incompatible_space():
    net = Net()
    x = net.input("x", [2, 4, 8])
    r = net.op("Reshape", net.op("Relu", x), net.const(np.array([8, 8], np.int64)))
    ok = net.op("Mul", r, net.const(np.full((1, 8), 2.0, np.float32)))     # same elements: a view
    a = net.input("a", [4, 4])
    rows = net.op("Reshape", net.op("Neg", a), net.const(np.array([2, 8], np.int64)))
    flat = net.op("Reshape", net.op("Exp", rows), net.const(np.array([16], np.int64)))
    bad = net.op("Add", flat, net.const(np.ones((3, 1), np.float32)))     # [3, 16]: [4, 4] and [2, 8] do not fit
    model = net.model(ok, bad)
    graph, stats = autofuse(model)
    members = [n.attrs["member_ops"] for n in kernels(graph)]
    assert ["Relu", "Reshape", "Mul"] in members
    assert ["Neg", "Reshape", "Exp", "Reshape"] in members and not any("Add" in m for m in members)
    incompatible = [m for m in stats.misses if m.code == "NF1008"]
    assert len(incompatible) == 1 and "[4, 4]" in incompatible[0].constraint
    assert_matches_ort(model, graph)


def test_a_tensor_read_through_a_fitting_view_joins_the_group():
    """A decoder's padding mask: Cast [B, S] -> view [B, 1, 1, S] -> And with the causal
    [1, 1, S, S] -> Where: the cast is read only through the view, which broadcasts into
    the kernel's [B, 1, S, S], so the whole mask is one kernel."""
    net = Net()
    mask = net.input("mask", [2, 8], onnx.TensorProto.INT64)
    view = net.op("Reshape", net.op("Cast", mask, to=onnx.TensorProto.BOOL), net.const(np.array([2, 1, 1, 8], np.int64)))
    causal = net.const(np.tril(np.ones((1, 1, 8, 8), bool)))
    keep = net.op("And", view, causal)
    model = net.model(net.op("Where", keep, net.const(np.float32(0.0)), net.const(np.float32(-1e9))))
    graph, stats = autofuse(model)
    assert [n.attrs["member_ops"] for n in kernels(graph)] == [["Cast", "Reshape", "And", "Where"]]
    assert stats.misses == []
    feeds = {"mask": np.array([[1] * 8, [1] * 5 + [0] * 3], np.int64)}
    assert_matches_ort(model, graph, feeds)


def test_matmul_tail_and_graph_output_intermediate():
    """MatMul absorbs bias + Gelu; the pre-activation sum is also a graph output, so the
    kernel has two outputs."""
    rng = np.random.default_rng(1)
    net = Net()
    x = net.input("x", [3, 8])
    mm = net.op("MatMul", x, net.const(rng.standard_normal((8, 5)).astype(np.float32)))
    pre = net.op("Add", mm, net.const(rng.standard_normal(5).astype(np.float32)))
    y = net.op("Tanh", pre)
    model = net.model(y, pre)
    graph, stats = autofuse(model)
    assert op_types(graph) == [KERNEL]
    node = graph.nodes[0]
    assert node.attrs["anchor"] == "MatMul" and len(node.outputs) == 2
    assert {v.name for v in node.outputs} == {y, pre}
    assert_matches_ort(model, graph)
    assert_matches_ort(model, graph, precision="fp16")
    graph, stats = autofuse(model, "--autofuse_disable_pass=tail")
    assert op_types(graph) == ["MatMul", KERNEL] and "NF1006" in codes(stats)
    assert_matches_ort(model, graph)


def test_anchor_takes_no_prologue_and_one_anchor_per_kernel():
    rng = np.random.default_rng(2)
    net = Net()
    x = net.input("x", [2, 4])
    w = net.const(rng.standard_normal((4, 4)).astype(np.float32))
    a = net.op("MatMul", net.op("Relu", x), w)
    b = net.op("MatMul", x, w)
    y = net.op("Add", a, b)
    model = net.model(y)
    graph, stats = autofuse(model)
    assert op_types(graph).count(KERNEL) == 1 and "Relu" in op_types(graph)
    assert any(m.code == "NF1009" and "cannot share an epilogue" in m.constraint for m in stats.misses)
    assert_matches_ort(model, graph)


def _permuted_epilogue(epilogue: bool = True):
    """ConvNeXt's block end: GEMM (+bias) on NHWC rows, permute back to NCHW, layer scale per
    channel, residual Add -- or (epilogue=False) the permute alone after the GEMM."""
    rng = np.random.default_rng(3)
    net = Net()
    x = net.input("x", [2, 3, 3, 8])
    residual = net.input("r", [2, 8, 3, 3])
    mm = net.op("MatMul", x, net.const(rng.standard_normal((8, 8)).astype(np.float32)))
    y = net.op("Transpose", mm, perm=[0, 3, 1, 2])
    if epilogue:
        y = net.op("Add", residual, net.op("Mul", net.const(rng.random((8, 1, 1)).astype(np.float32) + 0.5), y))
    return net.model(y)


def test_a_transpose_joins_the_elementwise_tail_of_its_gemm():
    model = _permuted_epilogue()
    graph, stats = autofuse(model)
    assert op_types(graph) == [KERNEL]
    assert graph.nodes[0].attrs["member_ops"] == ["MatMul", "Transpose", "Mul", "Add"]
    assert graph.nodes[0].attrs["anchor"] == "MatMul"
    for precision in ("fp32", "fp16"):
        assert_matches_ort(model, graph, precision=precision)
    graph, stats = autofuse(model, "--autofuse_disable_pass=transpose")
    assert op_types(graph) == ["MatMul", "Transpose", KERNEL] and "NF1006" in codes(stats)
    assert graph.nodes[2].attrs["member_ops"] == ["Mul", "Add"]
    assert_matches_ort(model, graph)


def test_a_permutation_alone_is_no_epilogue():
    """A kernel whose only epilogue would be a Transpose stays as its pass built it (a named
    kernel keeps its identity); the miss says why."""
    model = _permuted_epilogue(epilogue=False)
    graph, stats = autofuse(model)
    assert op_types(graph) == ["MatMul", "Transpose"]
    [miss] = [m for m in stats.misses if m.code == "NF2006"]
    assert "only a permutation" in miss.constraint and (stats.match_times, stats.effect_times) == (0, 0)
    assert_matches_ort(model, graph)


def test_disabling_reduce_keeps_the_chain_open():
    model = zoo.build("seed_mulreducesum", small=True)
    graph, stats = autofuse(model, "--autofuse_disable_pass=reduce")
    assert op_types(graph) == ["Mul", "ReduceSum"]
    assert codes(stats) == ["NF1006"]


# -- flags and switches -----------------------------------------------------------------------

def test_enable_autofuse_false_leaves_the_graph_unfused(monkeypatch):
    model = zoo.build("seed_addge", small=True)
    monkeypatch.setenv("AUTOFUSE_FLAGS", "--enable_autofuse=false")
    graph, stats = fuse_model(model)                                   # the pipeline's pass reads the env
    assert op_types(graph) == ["Add", "GreaterOrEqual"]
    st = stats["AutoFusePass"]
    assert (st.match_times, st.effect_times) == (1, 0) and "enable_autofuse=false" in st.disabled_by
    monkeypatch.setenv("AUTOFUSE_FLAGS", "--enable_autofuse=true;--max_fusion_size=8")
    assert op_types(fuse_model(model)[0]) == [KERNEL]


def test_disable_list_switches_autofuse_off():
    model = zoo.build("seed_addge", small=True)
    graph, stats = fuse_model(model, disabled_ops=[KERNEL])
    assert op_types(graph) == ["Add", "GreaterOrEqual"]
    assert stats["AutoFusePass"].disabled_by == "GE_FUSION_DISABLE_LIST"


def test_flag_parsing_errors_and_warnings():
    flags = AutofuseFlags.parse("--autofuse_disable_pass=reduce,concat;--autofuse_enable_pass=concat,bogus;--x=1")
    assert "reduce" not in flags.categories and {"pointwise", "tail", "view"} <= flags.categories
    assert any("concat" in w for w in flags.warnings) and any("bogus" in w for w in flags.warnings)
    assert any("--x" in w for w in flags.warnings)
    for bad in ("--enable_autofuse=maybe", "--max_fusion_size=0", "--max_fusion_size=ten"):
        with pytest.raises(AtcError) as err:
            AutofuseFlags.parse(bad)
        assert err.value.code == "E10001" and "AUTOFUSE_FLAGS" in err.value.message


# -- names and hashes ------------------------------------------------------------------------

def _two_blocks(alpha_b=0.1):
    net = Net()
    outs = []
    for i, alpha in enumerate((0.1, alpha_b)):
        x = net.input(f"x{i}", [2, 8])
        outs.append(net.op("LeakyRelu", net.op("Add", x, x), alpha=alpha))
    return net.model(*outs)


def test_kernel_names_are_stable_and_shared_by_identical_blocks():
    model = _two_blocks()
    first, _ = autofuse(model)
    second, _ = autofuse(model)
    names = [n.name for n in kernels(first)]
    assert names == [n.name for n in kernels(second)] and len(set(names)) == 2
    a, b = kernels(first)
    assert a.attrs["kernel_name"] == b.attrs["kernel_name"] and NAME.match(a.attrs["kernel_name"])
    assert a.attrs["topology_hash"] == b.attrs["topology_hash"]
    other, _ = autofuse(_two_blocks(alpha_b=0.2))
    c, d = kernels(other)
    assert c.attrs["topology_hash"] == a.attrs["topology_hash"] != d.attrs["topology_hash"]


def test_long_groups_cap_the_name():
    net = Net()
    y = net.input("x", [4])
    for _ in range(9):
        y = net.op("Relu", y)
    graph, _ = autofuse(net.model(y))
    name = graph.nodes[0].attrs["kernel_name"]
    assert name.startswith("autofused_relu_relu_relu_relu_relu_relu_x3_") and NAME.match(name)


# -- kernel contract ---------------------------------------------------------------------------

def test_work_is_the_members_work_and_intermediates_stay_on_chip():
    model = zoo.build("seed_addge", small=True)
    unfused = lower(model)
    fused, _ = fuse_model(model)
    node = fused.nodes[0]
    t = lambda v: TensorType(v.desc.dtype, tuple(v.desc.shape))  # noqa: E731
    work = kernel_of(KERNEL).work([t(v) for v in node.inputs], [t(v) for v in node.outputs], node.attrs)
    members = [kernel_of(n.op_type).work([t(v) for v in n.inputs], [t(v) for v in n.outputs], n.attrs)
               for n in unfused.nodes]
    assert work.vector_ops == (members[0] + members[1]).vector_ops
    add = unfused.nodes[0].outputs[0]
    assert work.onchip_bytes == add.desc.nbytes                 # the Add result never leaves the chip
    assert kernel_of(KERNEL).op.infer([t(v) for v in node.inputs], node.attrs) == [t(v) for v in node.outputs]


def test_subgraph_attr_is_plain_json_without_node_names():
    model = zoo.build("seed_mulreducesum", small=True)
    graph, _ = fuse_model(model)
    text = graph.nodes[0].attrs["subgraph"]
    assert isinstance(text, str)
    sub = decode_subgraph(text)
    assert [op[0] for op in sub.ops] == ["Mul", "ReduceSum"] and sub.ops[1][1]["axes"] == [-1]
    assert sub.outputs == [("o", 1, 0)]
    plain = lower(model)
    names = [n.name for n in plain.nodes] + [v.name for v in plain.values() if not v.is_const]
    assert all(name not in text for name in names if name.startswith("/")), names   # ONNX node/value names


def test_om_round_trip_through_the_cli(tmp_path):
    model_path = zoo.save("seed_addge", str(tmp_path), small=True)
    out = tmp_path / "addge"
    env = {k: v for k, v in os.environ.items() if k not in ("AUTOFUSE_FLAGS", "GE_FUSION_DISABLE_LIST")}
    proc = subprocess.run([sys.executable, os.path.join(REPO, "cli.py"), f"--model={model_path}", "--framework=5",
                           f"--output={out}", "--soc_version=Ascend910"], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    from codegen.om_import import load_om_graph
    from simulator.executor import run_graph
    loaded = load_om_graph(f"{out}.om")
    assert op_types(loaded.graph) == [KERNEL]
    node = loaded.graph.nodes[0]
    fused, _ = fuse_model(onnx.load(model_path))
    assert node.attrs["subgraph"] == fused.nodes[0].attrs["subgraph"]
    assert node.attrs["kernel_name"] == fused.nodes[0].attrs["kernel_name"]
    assert node.provenance["pass"] == "AutoFusePass"
    feeds = random_feeds(onnx.load(model_path))
    got = run_graph(loaded.graph, feeds, lambda n: loaded.compute_dtypes[n.name])
    expected = run_ort(onnx.load(model_path), feeds)
    for name, ref in expected.items():
        np.testing.assert_array_equal(got[name], ref)


def test_unstorable_attr_leaves_the_group_unfused():
    model = zoo.build("seed_addge", small=True)
    graph = lower(model)
    graph.nodes[0].attrs["opaque_handle"] = object()        # not JSON-able: cannot travel in the .om
    stats = AutoFusePass(flags="").run(graph)
    assert op_types(graph) == ["Add", "GreaterOrEqual"]
    assert stats.match_times == 1 and stats.effect_times == 0 and codes(stats) == ["NF9999"]


def test_an_anchored_group_follows_the_cube_under_mixed_precision():
    """allow_mix_precision runs cube kernels in fp16: an autofused group holding a conv is one."""
    from codegen.om_builder import compute_dtype
    model = zoo.build("efficientnet_b4", small=True)
    graph, _ = fuse_model(model, passes=[AutoFusePass])          # autofuse alone: it takes the convs' tails
    anchored = [n for n in graph.nodes if n.op_type == KERNEL]
    assert anchored and all(any(t in n.attrs["subgraph"] for t in ('"Conv"', "FusionOp")) for n in anchored)
    assert all(compute_dtype(n, "allow_mix_precision") == np.float16 for n in anchored)
    pointwise, _ = fuse_model(zoo.build("seed_addge", small=True))
    assert op_types(pointwise) == [KERNEL]
    assert compute_dtype(pointwise.nodes[0], "allow_mix_precision") == np.float32
    feeds = random_feeds(model)
    expected, got = run_ort(model, feeds), run_ir(graph, feeds, "allow_mix_precision")
    for name, ref in expected.items():
        np.testing.assert_allclose(got[name], ref, rtol=2e-2, atol=2e-2 * max(1.0, float(np.abs(ref).max())))
