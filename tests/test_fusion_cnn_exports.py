"""The CNN patterns on real exports (tests/cnn_blocks.py, both torch exporters, default
settings): every activation recognized once and fused into conv and GEMM epilogues, depthwise,
grouped and dilated conv blocks under their own passes, squeeze-excite, conv chains,
DenseNet's growing concatenation, ShuffleNet's channel shuffle, pooled stores and the
Inception-style head -- the exact kernels after fusion, no plain Conv left, and the numbers
against onnxruntime in fp32 and fp16.  The misses of each new pattern, with their NF codes,
are tested on small hand-built graphs at the end."""
from __future__ import annotations

import collections

import numpy as np
import pytest

from builder import Net
from codegen.registry import kernel_of
from fusion_passes.canonical import CanonicalizePass
from helpers import assert_matches_ort, fuse_model, op_types

import cnn_blocks

CASES = [(m, e) for m in cnn_blocks.MODELS for e in cnn_blocks.EXPORTERS]


@pytest.fixture(scope="session")
def cnn_exports(tmp_path_factory):
    pytest.importorskip("torch")
    pytest.importorskip("onnxscript")
    import onnx
    root = tmp_path_factory.mktemp("cnn_blocks")
    cache: dict = {}

    def get(name, exporter):
        if (name, exporter) not in cache:
            path = cnn_blocks.export(name, exporter, str(root / f"{name}_{exporter}.onnx"))
            model = onnx.load(path)
            cache[name, exporter] = (model,) + fuse_model(model)
        return cache[name, exporter]

    return get


def kernels(graph) -> dict:
    """Launched kernels per op type (views launch none)."""
    return dict(collections.Counter(n.op_type for n in graph.nodes if not kernel_of(n.op_type).no_task))


def _producer_of_output(graph, i):
    return graph.outputs[i].producer


ACTIVATIONS = {     # cnn_blocks' activation, in its order -> (canonical op, attrs the kernel records)
    "gelu": ("Gelu", {}), "gelu_tanh": ("Gelu", {"act_approximate": "tanh"}), "silu": ("Swish", {}),
    "quick_gelu": ("Swish", {"act_alpha": 1.702}), "hardswish": ("HardSwish", {}),
    "hardsigmoid": ("HardSigmoid", {"act_alpha": 1 / 6, "act_beta": 0.5}), "relu6": ("Clip", {"act_min": 0.0, "act_max": 6.0}),
    "mish": ("Mish", {}), "hand_hardswish": ("HardSwish", {}),
    "hand_hardsigmoid": ("HardSigmoid", {"act_alpha": 1 / 6, "act_beta": 0.5}),
    "minmax_clamp": ("Clip", {"act_min": -1.5, "act_max": 2.0}),
}


ONNX_DEFAULTS = {"act_beta": 0.5}


@pytest.mark.parametrize("exporter", cnn_blocks.EXPORTERS)
def test_every_activation_is_one_op_in_conv_and_gemm_epilogues(cnn_exports, exporter):
    model, graph, stats = cnn_exports("activations", exporter)
    n = len(ACTIVATIONS)
    assert len(graph.outputs) == 2 * n and len(graph.nodes) == 2 * n, op_types(graph)
    for i, (name, (op, attrs)) in enumerate(ACTIVATIONS.items()):
        conv, gemm = _producer_of_output(graph, i), _producer_of_output(graph, n + i)
        gemm_name = "FastGelu" if attrs.get("act_approximate") == "tanh" else op
        assert conv.op_type == "ConvBNReluFusionOp", (name, conv.op_type)
        assert gemm.op_type == f"MatMulBias{gemm_name}FusionOp", (name, gemm.op_type)
        for node in (conv, gemm):
            assert node.attrs["activation"] == op, (name, node.attrs)
            got = {k: v for k, v in node.attrs.items() if k.startswith("act_")}
            assert set(got) <= set(attrs) | {"act_beta"}, (name, got)
            for key, value in attrs.items():            # HardSigmoid's beta may be left at its default 0.5
                have = got.get(key, ONNX_DEFAULTS.get(key))
                assert have == (pytest.approx(value, rel=1e-6) if isinstance(value, float) else value), (name, key)
    canonical = stats["CanonicalizePass"].by_rewrite        # (dynamo writes Mish and the clamp as ops itself)
    assert canonical.get("Swish") == 4 and canonical.get("HardSwish") == 2 and canonical.get("HardSigmoid") == 2
    assert canonical.get("GeluErf") == 2 and canonical.get("GeluTanh") == 2
    for precision in ("fp32", "fp16"):
        assert_matches_ort(model, graph, precision=precision)


@pytest.mark.parametrize("exporter", cnn_blocks.EXPORTERS)
def test_mobile_blocks_depthwise_squeeze_excite_and_chains(cnn_exports, exporter):
    model, graph, stats = cnn_exports("mobile", exporter)
    assert kernels(graph) == {"ConvBNReluFusionOp": 7, "DepthwiseConvBNReluFusionOp": 4, "SqueezeExcitationFusionOp": 2,
                              "ConvChainFusionOp": 1, "ConvPoolFCFusionOp": 1}
    depthwise = [n for n in graph.nodes if n.op_type == "DepthwiseConvBNReluFusionOp"]
    assert sorted(n.attrs["activation"] for n in depthwise) == ["Clip", "Clip", "HardSwish", "Swish"]
    se = sorted((n.attrs["fc1_activation"], n.attrs["fc2_activation"], n.attrs["scale_input"])
                for n in graph.nodes if n.op_type == "SqueezeExcitationFusionOp")
    assert se == [("Relu", "HardSigmoid", 0), ("Swish", "Sigmoid", 0)]       # both gates go to the projection
    scaled = [n for n in graph.nodes if n.attrs.get("input_scale")]
    assert len(scaled) == 2 and all(n.inputs[6].producer.op_type == "SqueezeExcitationFusionOp" for n in scaled)
    [chain] = [n for n in graph.nodes if n.op_type == "ConvChainFusionOp"]     # the stride-2 block's projection
    assert chain.attrs["emit_first"] == 1 and len(chain.outputs) == 2           # ... also read by the residual
    [why] = [m for m in stats["ConvBNReluFusionPass"].misses if m.code != "NF2003"]
    assert why.code == "NF2001" and why.anchor in chain.origin            # ConvBNReLU said why; the chain took it
    for precision in ("fp32", "fp16"):
        assert_matches_ort(model, graph, precision=precision)


@pytest.mark.parametrize("exporter", cnn_blocks.EXPORTERS)
def test_grouped_dilated_and_segmentation_head(cnn_exports, exporter):
    model, graph, stats = cnn_exports("grouped", exporter)
    assert kernels(graph) == {"ConvBNReluFusionOp": 4, "GroupConvBNReluFusionOp": 1, "DilatedConvBNReluFusionOp": 3,
                              "ConvChainFusionOp": 1, "Resize": 1}
    refused = [m for m in stats["ConvBNReluFusionPass"].misses if m.code == "NF2003"]
    assert len(refused) == 4
    assert sum("GroupConvBNReluFusionPass fuses it" in m.constraint for m in refused) == 1
    assert sum("DilatedConvBNReluFusionPass fuses it" in m.constraint for m in refused) == 3
    residual = next(n for n in graph.nodes if n.op_type == "ConvBNReluFusionOp" and n.attrs["has_residual"])
    assert residual.attrs["activation"] == "Relu"                 # ResNeXt's conv3 + residual Add + ReLU
    concat = [n for n in graph.nodes if "concat_axis" in n.attrs]
    assert len(concat) == 1 and concat[0].op_type == "ConvBNReluFusionOp"    # ASPP's 1x1 branch writes the concat
    [chain] = [n for n in graph.nodes if n.op_type == "ConvChainFusionOp"]          # project -> classifier
    assert (chain.attrs["first_op"], chain.attrs["second_op"], chain.attrs["emit_first"]) == ("ConvBNReluFusionOp", "Conv", 0)
    for precision in ("fp32", "fp16"):
        assert_matches_ort(model, graph, precision=precision)


def covering(model, graph) -> dict:
    """ONNX node name -> (ONNX op type, the kernel that computes it)."""
    onnx_types = {n.name: n.op_type for n in model.graph.node}
    return {name: (onnx_types.get(name), node) for node in graph.nodes for name in node.origin}


def kernels_with(model, graph, *onnx_types) -> list:
    """Kernels covering an ONNX node of each of `onnx_types`."""
    cover = covering(model, graph)
    found = [{id(k) for t, k in cover.values() if t == op} for op in onnx_types]
    ids = set.intersection(*found)
    return [n for n in graph.nodes if id(n) in ids]


@pytest.mark.parametrize("exporter", cnn_blocks.EXPORTERS)
def test_dense_blocks_shuffle_and_inception_head(cnn_exports, exporter):
    model, graph, stats = cnn_exports("dense", exporter)
    assert kernels(graph) == {"ConvBNReluFusionOp": 10, "AutofusedKernel": 7, "ConvChainFusionOp": 3,
                              "MaxPool": 1, "ConvPoolFCFusionOp": 1, "Split": 1}   # ShuffleNet's x.chunk(2)
    assert stats["CanonicalizePass"].by_rewrite.get("SlicesAsSplit", 0) == (exporter == "torchscript")
    for name, (op, kernel) in covering(model, graph).items():
        if op in ("Conv", "Concat", "Transpose", "AveragePool", "BatchNormalization"):
            assert kernel.provenance.get("pass"), (name, kernel.op_type)        # in a fused kernel
    assert stats["CanonicalizePass"].by_rewrite.get("ConcatPrefix", 0) >= 2
    # each dense layer's conv2 writes the growing concat, and the next layer's BN + ReLU joins it
    writes = kernels_with(model, graph, "Conv", "Concat", "BatchNormalization")
    assert len(writes) == 4 and all(n.op_type == "AutofusedKernel" for n in writes)   # (block 2's last: a ReLU only)
    assert len(kernels_with(model, graph, "Conv", "AveragePool")) == 1       # transition conv + AvgPool 2x2
    shuffles = kernels_with(model, graph, "Conv", "Concat", "Transpose")
    assert len(shuffles) == 2 and {n.op_type for n in shuffles} == {"ConvChainFusionOp"}   # dw -> pw -> shuffled concat
    head = next(n for n in graph.nodes if n.op_type == "ConvPoolFCFusionOp")
    assert head.attrs["concat_axis"] == 1 and head.attrs["concat_parts"] == 2      # the Inception-style head
    for precision in ("fp32", "fp16"):
        assert_matches_ort(model, graph, precision=precision)


@pytest.mark.parametrize("exporter", cnn_blocks.EXPORTERS)
def test_convnext_blocks_end_in_one_kernel(cnn_exports, exporter):
    """Each CNBlock: the depthwise conv with its NHWC permute, LayerNorm + fc1 + GELU, and fc2
    whose permute back to NCHW, layer scale and residual Add join its epilogue (autofuse's
    transpose category).  The stage-opening 2x2 conv feeds the block's depthwise conv and its
    residual Add: it stays a plain Conv kernel and ConvBNReLU says why (NF2001)."""
    model, graph, stats = cnn_exports("convnext", exporter)
    assert kernels(graph) == {"ConvBNReluFusionOp": 1, "LayerNormalization": 2, "Transpose": 2, "Conv": 1,
                              "DepthwiseConvBNReluFusionOp": 3, "LayerNormMatMulFusionOp": 3, "AutofusedKernel": 3}
    ends = [n for n in graph.nodes if n.op_type == "AutofusedKernel"]
    assert all(n.attrs["anchor"] == "MatMulBiasFusionOp" for n in ends)
    assert all(n.attrs["member_ops"][:4] == ["MatMulBiasFusionOp", "Transpose", "Mul", "Add"] for n in ends)
    [down] = [n for n in graph.nodes if n.op_type == "Conv"]
    assert any(m.code == "NF2001" and m.anchor in down.origin for m in stats["ConvBNReluFusionPass"].misses)
    for precision in ("fp32", "fp16"):
        assert_matches_ort(model, graph, precision=precision)


@pytest.mark.parametrize("exporter", cnn_blocks.EXPORTERS)
def test_ghost_bottleneck_chains_the_linear_depthwise_conv_into_its_squeeze_excite(cnn_exports, exporter):
    """GhostNet's stride-2 bottleneck: the linear depthwise conv and the SE that pools it are
    one ConvChain kernel (the conv's output also written, for the gated ghost conv after it);
    every Conv of the block is in a fused kernel."""
    model, graph, stats = cnn_exports("ghost", exporter)
    assert kernels(graph) == {"ConvBNReluFusionOp": 3, "DepthwiseConvBNReluFusionOp": 2, "ConvChainFusionOp": 2}
    [se_chain] = [n for n in graph.nodes if n.attrs.get("second_op") == "SqueezeExcitationFusionOp"]
    assert se_chain.attrs["first_op"] == "Conv" and se_chain.attrs["emit_first"] == 1
    [gated] = [n for n in graph.nodes if n.attrs.get("input_scale")]
    assert gated.inputs[0] is se_chain.outputs[1] and se_chain.outputs[0] in gated.inputs
    for name, (op, kernel) in covering(model, graph).items():
        if op == "Conv":
            assert kernel.provenance.get("pass"), (name, kernel.op_type)
    for precision in ("fp32", "fp16"):
        assert_matches_ort(model, graph, precision=precision)


# -- misses, with their NF codes ----------------------------------------------------------------

def _conv(net, x, cin, cout, k=1, **attrs):
    return net.op("Conv", x, net.rand(cout, cin, k, k), net.rand(cout), pads=[k // 2] * 4, **attrs)


def _misses(stats, pass_name):
    return [(m.code, m.constraint) for m in stats[pass_name].misses]


def test_a_plain_conv_says_why_it_stays_plain():
    net = Net()
    x = net.input("x", [1, 4, 8, 8])
    y = net.op("MaxPool", _conv(net, x, 4, 4, 3), kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])
    graph, stats = fuse_model(model := net.model(y))
    assert op_types(graph) == ["Conv", "MaxPool"]
    [(code, text)] = _misses(stats, "ConvBNReluFusionPass")
    assert code == "NF2006" and "it feeds MaxPool" in text
    assert stats["ConvBNReluFusionPass"].match_times == 0              # not a candidate, still explained
    assert_matches_ort(model, graph)


def test_conv_chain_needs_a_pointwise_second_conv():
    net = Net()
    x = net.input("x", [1, 4, 8, 8])
    y = _conv(net, _conv(net, x, 4, 4, 3), 4, 4, 3)                   # 3x3 -> 3x3: halo needed
    graph, stats = fuse_model(net.model(y))
    assert op_types(graph) == ["Conv", "Conv"]
    codes = {code for code, text in _misses(stats, "ConvChainFusionPass") if "only a 1x1 conv" in text}
    assert codes == {"NF2003"}


def test_squeeze_excite_misses():
    def se(k, const_weight=True):
        net = Net()
        x = net.input("x", [2, 8, 4, 4])
        pooled = net.op("GlobalAveragePool", x)
        w1 = net.rand(4, 8, k, k) if const_weight else net.input("w1", [4, 8, k, k])
        h = net.op("Relu", net.op("Conv", pooled, w1, net.rand(4), pads=[k // 2] * 4))
        g = net.op("Sigmoid", net.op("Conv", h, net.rand(8, 4, 1, 1), net.rand(8)))
        return net.model(net.op("Mul", x, g))

    graph, stats = fuse_model(model := se(3))
    [(code, text)] = _misses(stats, "SqueezeExcitationFusionPass")
    assert code == "NF2003" and "unpadded 1x1 conv" in text
    assert "SqueezeExcitationFusionOp" not in op_types(graph)
    assert_matches_ort(model, graph)
    graph, stats = fuse_model(se(1, const_weight=False))
    assert [code for code, _ in _misses(stats, "SqueezeExcitationFusionPass")] == ["NF2002"]
    graph, stats = fuse_model(model := se(1))
    assert op_types(graph) == ["SqueezeExcitationFusionOp"] and graph.nodes[0].attrs["scale_input"] == 1
    for precision in ("fp32", "fp16"):
        assert_matches_ort(model, graph, precision=precision)


def test_a_squeeze_excite_whose_hidden_tensor_is_read_elsewhere_is_refused():
    net = Net()
    x = net.input("x", [2, 8, 4, 4])
    h = net.op("Relu", net.op("Conv", net.op("GlobalAveragePool", x), net.rand(4, 8, 1, 1), net.rand(4)))
    g = net.op("Sigmoid", net.op("Conv", h, net.rand(8, 4, 1, 1), net.rand(8)))
    graph, stats = fuse_model(model := net.model(net.op("Mul", x, g), h))      # h: a graph output too
    assert [code for code, _ in _misses(stats, "SqueezeExcitationFusionPass")] == ["NF2001"]
    assert "SqueezeExcitationFusionOp" not in op_types(graph)
    assert_matches_ort(model, graph)


def test_head_over_a_concat_along_another_axis_is_a_miss():
    net = Net()
    x, other = net.input("x", [1, 4, 6, 6]), net.input("o", [1, 8, 2, 6])
    block = net.op("Concat", net.op("Relu", _conv(net, x, 4, 8, 3)), other, axis=2)
    pooled = net.op("Flatten", net.op("GlobalAveragePool", block))
    graph, stats = fuse_model(model := net.model(net.op("Gemm", pooled, net.rand(5, 8), net.rand(5), transB=1)))
    [(code, text)] = _misses(stats, "ConvPoolFCFusionPass")
    assert code == "NF2006" and "concat_axis" in text
    assert_matches_ort(model, graph)


def test_concat_prefix_keeps_a_concat_along_another_axis():
    net = Net()
    a, b, c = (net.input(n, [1, 2, 3, 3]) for n in "abc")
    first = net.op("Concat", a, b, axis=1)
    second = net.op("Concat", a, b, c, axis=2)                   # same operands, another axis: no prefix
    graph, stats = fuse_model(model := net.model(first, second))
    assert sorted(op_types(graph)) == ["Concat", "Concat"]
    assert not stats["CanonicalizePass"].by_rewrite.get("ConcatPrefix")
    assert_matches_ort(model, graph)


def test_clip_merge_refuses_ranges_that_do_not_meet():
    net = Net()
    x = net.input("x", [2, 5])
    y = net.op("Clip", net.op("Clip", x, net.const(np.float32(2.0)), net.const(np.float32(3.0))),
               net.const(np.float32(-1.0)), net.const(np.float32(1.0)))
    graph, stats = fuse_model(model := net.model(y), passes=[CanonicalizePass])
    assert op_types(graph) == ["Clip", "Clip"] and not stats["CanonicalizePass"].by_rewrite
    assert_matches_ort(model, graph)


def test_swish_keeps_a_sigmoid_read_elsewhere():
    net = Net()
    x = net.input("x", [2, 5])
    s = net.op("Sigmoid", x)
    graph, stats = fuse_model(model := net.model(net.op("Mul", x, s), s), passes=[CanonicalizePass])
    assert sorted(op_types(graph)) == ["Mul", "Sigmoid"]
    assert_matches_ort(model, graph)


@pytest.mark.parametrize("starts,ends,steps,kept", [
    ([0], [1 << 62], [1], False),          # every channel, in order: the identity (timm's GhostModule)
    ([0], [4], [1], True),                 # fewer channels
    ([-1], [-(1 << 62)], [-1], True),      # every channel, reversed
])
def test_slice_noop_drops_only_the_identity(starts, ends, steps, kept):
    net = Net()
    x = net.input("x", [1, 6, 2, 2])
    y = net.op("Slice", net.op("Relu", x), net.const(np.array(starts)), net.const(np.array(ends)),
               net.const(np.array([1])), net.const(np.array(steps)))
    graph, stats = fuse_model(model := net.model(net.op("Sigmoid", y)), passes=[CanonicalizePass])
    assert ("Slice" in op_types(graph)) == kept
    assert stats["CanonicalizePass"].by_rewrite.get("SliceNoop", 0) == (0 if kept else 1)
    assert_matches_ort(model, graph)


@pytest.mark.parametrize("starts,ends,fused", [
    ([0], [-1], True),                     # Wav2Vec2's SamePad: the last step dropped = one less end pad
    ([1], [1 << 62], True),                # the first step dropped = one less start pad
    ([0], [-3], False),                    # more than the padding: a real Slice
])
def test_a_cropped_conv_is_a_conv_with_less_padding(starts, ends, fused):
    net = Net(opset=20)
    x = net.input("x", [1, 8, 10])
    y = net.op("Conv", x, net.rand(8, 2, 4), net.rand(8), group=4, pads=[2, 2])
    y = net.op("Slice", y, net.const(np.array(starts)), net.const(np.array(ends)), net.const(np.array([2])))
    graph, stats = fuse_model(model := net.model(net.op("Gelu", y)))
    assert stats["CanonicalizePass"].by_rewrite.get("ConvCrop", 0) == int(fused)
    assert op_types(graph) == (["GroupConvBNReluFusionOp"] if fused else ["Conv", "Slice", "Gelu"])
    for precision in ("fp32", "fp16"):
        assert_matches_ort(model, graph, precision=precision)


@pytest.mark.parametrize("ranges,axis,split", [
    ([(0, 3), (3, 6)], 1, [3, 3]),                # TorchScript's x.chunk(2, dim=1)
    ([(4, 6), (0, 1), (1, 4)], 1, [1, 3, 2]),     # any order, unequal pieces
    ([(0, 3), (4, 6)], 1, None),                  # a gap: not a split
    ([(0, 4), (3, 6)], 1, None),                  # an overlap: not a split
    ([(0, 3), (3, 6)], 3, None),                  # not the channels (rotate_half's halves stay Slices)
])
def test_slices_tiling_the_channels_are_one_split(ranges, axis, split):
    net = Net()
    x = net.input("x", [1, 6, 2, 6])
    r = net.op("Relu", x)
    outs = [net.op("Sigmoid", net.op("Slice", r, net.const(np.array([a])), net.const(np.array([b])),
                                     net.const(np.array([axis])))) for a, b in ranges]
    graph, stats = fuse_model(model := net.model(*outs), passes=[CanonicalizePass])
    assert stats["CanonicalizePass"].by_rewrite.get("SlicesAsSplit", 0) == (split is not None)
    if split is None:
        assert op_types(graph).count("Slice") == len(ranges)
    else:
        [node] = [n for n in graph.nodes if n.op_type == "Split"]
        assert "Slice" not in op_types(graph) and list(node.attrs["split"]) == split and node.attrs["axis"] == 1
    assert_matches_ort(model, graph)


def test_a_conv_chain_never_waits_for_itself():
    """Depthwise conv -> SE (switched off: its ops stay) gating the 1x1 conv after it: chaining
    the depthwise conv with that 1x1 conv would need the gate computed from the chain's own
    first output (NF1002)."""
    net = Net()
    x = net.input("x", [1, 8, 6, 6])
    dw = net.op("Conv", x, net.rand(8, 1, 3, 3), net.rand(8), pads=[1] * 4, group=8)
    s = _conv(net, net.op("Relu", _conv(net, net.op("ReduceMean", dw, axes=[2, 3]), 8, 2)), 2, 8)
    y = net.op("Relu", _conv(net, net.op("Mul", dw, net.op("HardSigmoid", s)), 8, 4))
    graph, stats = fuse_model(model := net.model(y), disabled_ops=["SqueezeExcitationFusionOp"])
    assert "ConvChainFusionOp" not in op_types(graph)
    assert [m.code for m in stats["ConvChainFusionPass"].misses] == ["NF1002"]
    assert_matches_ort(model, graph)
