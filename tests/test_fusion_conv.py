"""ConvBNReLU and ConvPoolFC fusions: exact op lists after the passes, numbers against
onnxruntime on the unfused model (fp32 and fp16), match/effect counts, every miss with its
NF code and reason, and the GE_FUSION_DISABLE_LIST switch."""
from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from atc_py import zoo
from codegen.registry import kernel_of
from ge.ops.registry import TensorType
from fusion_passes import pipeline
from builder import Net
from helpers import assert_matches_ort, fuse_model, lower, op_types

RNG = np.random.default_rng(7)
N, CIN, COUT, H = 2, 4, 8, 6
CONV_PASS, HEAD_PASS = "ConvBNReluFusionPass", "ConvPoolFCFusionPass"
CBR, HEAD = "ConvBNReluFusionOp", "ConvPoolFCFusionOp"


def fuse_named(model, **kwargs):
    """The named passes without autofuse, which would otherwise take the conv blocks these
    passes refuse (tests/test_autofuse.py covers that)."""
    named = [type(p) for p in pipeline.fusion_passes() if p.pass_name != "AutoFusePass"]
    return fuse_model(model, passes=named, **kwargs)


def _init(name, array):
    return numpy_helper.from_array(np.asarray(array), name)


def _f32(shape, scale=1.0):
    return (RNG.standard_normal(shape) * scale).astype(np.float32)


def _bn_inits(prefix, c=COUT):
    return [_init(f"{prefix}_s", RNG.uniform(0.5, 1.5, c).astype(np.float32)),
            _init(f"{prefix}_b", _f32(c, 0.2)), _init(f"{prefix}_m", _f32(c, 0.3)),
            _init(f"{prefix}_v", RNG.uniform(0.5, 1.5, c).astype(np.float32))]


class ConvNet(Net):
    """builder.Net with input x [n, cin, h, h], a running tensor `y` (the last op's output)
    and conv/BN shortcuts; `model(*extra)` outputs y and the extra tensors."""

    def __init__(self, cin=CIN, h=H, n=N, opset=17):
        super().__init__(opset)
        self.y, self.cin = self.input("x", [n, cin, h, h]), cin

    def op(self, op_type, *inputs, **attrs):
        self.y = super().op(op_type, *inputs, **attrs)
        return self.y

    def conv(self, cout=COUT, bias=False, group=1, dilation=1, k=3, weight=None):
        w = weight or self.const(_f32((cout, self.cin // group, k, k), (self.cin // group * k * k) ** -0.5), "w")
        ins = [self.y, w] + ([self.const(_f32(cout, 0.1), "b")] if bias else [])
        self.cin = cout
        pad = dilation * (k - 1) // 2
        return self.op("Conv", *ins, kernel_shape=[k, k], pads=[pad] * 4, strides=[1, 1],
                       dilations=[dilation] * 2, group=group)

    def bn(self, params=None):
        if params is None:
            prefix = self.name("bn")
            self.inits.extend(_bn_inits(prefix, self.cin))
            params = [f"{prefix}_{s}" for s in "sbmv"]
        return self.op("BatchNormalization", self.y, *params, epsilon=1e-3)

    def model(self, *extra_outputs):
        return super().model(self.y, *extra_outputs)


def _act(net, kind, order=0):
    y = net.y
    if kind == "Relu":
        return net.op("Relu", y)
    if kind == "Relu6":
        return net.op("Clip", y, net.const(np.float32(0)), net.const(np.float32(6)))
    if kind == "ClipMin":
        return net.op("Clip", y, net.const(np.float32(-0.5)))
    if kind == "LeakyRelu":
        return net.op("LeakyRelu", y, alpha=0.2)
    if kind in ("Sigmoid", "HardSwish", "Tanh"):
        return net.op(kind, y)
    if kind == "SiLU":
        sig = net.op("Sigmoid", y)
        return net.op("Mul", *([y, sig] if order == 0 else [sig, y]))
    raise ValueError(kind)


def _residual(net, order=0, shape=(N, COUT, H, H)):
    r = net.input(net.name("r"), list(shape))
    return net.op("Add", *([net.y, r] if order == 0 else [r, net.y]))


def _variant(bn, bias, residual, act, order=0, res_shape=(N, COUT, H, H)):
    net = ConvNet()
    net.conv(bias=bias)
    if bn:
        net.bn()
    if residual:
        _residual(net, order, res_shape)
    if act:
        _act(net, act, order)
    return net.model()


def _stats_ok(stats, name, matched, effected):
    assert (stats[name].match_times, stats[name].effect_times) == (matched, effected)


def _unfused(model):
    return op_types(lower(model))


# -- ConvBNReLU: every variant fuses to exactly one kernel with onnxruntime's numbers --------

VARIANTS = {
    "conv_bn": dict(bn=True, bias=False, residual=False, act=None),
    "conv_bias_bn": dict(bn=True, bias=True, residual=False, act=None),
    "conv_relu": dict(bn=False, bias=True, residual=False, act="Relu"),
    "conv_bn_relu": dict(bn=True, bias=False, residual=False, act="Relu"),
    "conv_bn_add_relu": dict(bn=True, bias=False, residual=True, act="Relu"),
    "conv_bn_add_relu_swapped": dict(bn=True, bias=False, residual=True, act="Relu", order=1),
    "conv_add_relu": dict(bn=False, bias=True, residual=True, act="Relu"),
    "conv_nobias_add": dict(bn=False, bias=False, residual=True, act=None),
    "conv_bn_add_broadcast": dict(bn=True, bias=False, residual=True, act="Relu", res_shape=(1, COUT, 1, 1)),
    "conv_bn_relu6": dict(bn=True, bias=False, residual=False, act="Relu6"),
    "conv_clip_min_only": dict(bn=False, bias=True, residual=False, act="ClipMin"),
    "conv_leaky": dict(bn=False, bias=False, residual=False, act="LeakyRelu"),
    "conv_bn_sigmoid": dict(bn=True, bias=False, residual=False, act="Sigmoid"),
    "conv_bn_hardswish": dict(bn=True, bias=False, residual=False, act="HardSwish"),
    "conv_bn_silu": dict(bn=True, bias=False, residual=False, act="SiLU"),
    "conv_bn_silu_swapped": dict(bn=True, bias=False, residual=False, act="SiLU", order=1),
    "conv_tanh": dict(bn=False, bias=True, residual=False, act="Tanh"),
}


@pytest.mark.parametrize("name", VARIANTS)
def test_conv_variant_fuses_and_matches_ort(name):
    model = _variant(**VARIANTS[name])
    graph, stats = fuse_named(model)
    assert op_types(graph) == [CBR]
    _stats_ok(stats, CONV_PASS, 1, 1)
    node = graph.nodes[0]
    assert node.provenance["pass"] == CONV_PASS
    assert set(node.origin) == {n.name for n in model.graph.node}
    assert node.attrs["has_residual"] == VARIANTS[name]["residual"]
    assert_matches_ort(model, graph)
    assert_matches_ort(model, graph, precision="fp16")


def test_activation_attrs_recorded():
    graph, _ = fuse_named(_variant(bn=True, bias=False, residual=False, act="Relu6"))
    assert graph.nodes[0].attrs["activation"] == "Clip"
    assert (graph.nodes[0].attrs["act_min"], graph.nodes[0].attrs["act_max"]) == (0.0, 6.0)
    graph, _ = fuse_named(_variant(bn=False, bias=False, residual=False, act="LeakyRelu"))
    assert graph.nodes[0].attrs["act_alpha"] == pytest.approx(0.2)
    graph, _ = fuse_named(_variant(bn=True, bias=False, residual=False, act="SiLU"))   # canonical: Swish
    assert graph.nodes[0].attrs["activation"] == "Swish" and "act_alpha" not in graph.nodes[0].attrs


def test_bn_is_folded_into_new_constants():
    model = _variant(bn=True, bias=False, residual=False, act="Relu")
    graph, _ = fuse_named(model)
    x, w, b = graph.nodes[0].inputs
    original = numpy_helper.to_array(model.graph.initializer[0])
    assert w.is_const and b.is_const and w.const.dtype == np.float32
    assert w.const.shape == original.shape and not np.allclose(w.const, original)


def test_fused_work_keeps_conv_macs_and_epilogue():
    model = _variant(bn=True, bias=False, residual=True, act="Relu")
    plain = lower(model)
    conv = next(n for n in plain.nodes if n.op_type == "Conv")
    t = lambda v: TensorType(np.dtype(np.float16), tuple(v.desc.shape))  # noqa: E731
    conv_work = kernel_of("Conv").work([t(v) for v in conv.inputs], [t(conv.outputs[0])], conv.attrs)
    graph, _ = fuse_named(model)
    node = graph.nodes[0]
    out = t(node.outputs[0])
    work = kernel_of(CBR).work([t(v) for v in node.inputs], [out], node.attrs)
    assert work.cube_macs == conv_work.cube_macs > 0
    assert work.vector_ops["alu"] == 3 * out.size          # bias, residual add, relu
    assert work.onchip_bytes == 2 * out.nbytes             # conv accumulator, residual sum


# -- ConvBNReLU: misses and non-matches --------------------------------------------------------

def _assert_miss(model, code, words, pass_name=CONV_PASS):
    graph, stats = fuse_named(model)
    assert op_types(graph) == _unfused(model)
    s = stats[pass_name]
    assert s.effect_times == 0 and s.match_times == len(s.misses) >= 1
    miss = s.misses[0]
    assert miss.code == code, miss
    assert words in miss.constraint, miss.constraint
    assert miss.to_json()["op_types"] and miss.tensors
    return miss


@pytest.mark.parametrize("conv,variant_pass,words", [
    (dict(group=2), "GroupConvBNReluFusionPass", "group != 1 is not fused, as GE's ConvBatchnormFusionPass documents"),
    (dict(group=CIN), "DepthwiseConvBNReluFusionPass", "group != 1 is not fused"),
    (dict(dilation=2), "DilatedConvBNReluFusionPass", "dilation != 1"),
])
def test_grouped_and_dilated_convs_are_convbnrelu_misses_fused_by_their_own_pass(conv, variant_pass, words):
    """GE's constraint stays on ConvBNReluFusionPass (NF2003, naming the pass that takes the
    conv); the variant's own pass fuses it into its own op type."""
    net = ConvNet()
    net.conv(**conv)
    net.bn()
    _act(net, "Relu")
    model = net.model()
    graph, stats = fuse_named(model)
    fused_op = variant_pass.replace("Pass", "Op")
    assert op_types(graph) == [fused_op]
    [miss] = stats[CONV_PASS].misses
    assert miss.code == "NF2003" and words in miss.constraint and variant_pass in miss.constraint
    _stats_ok(stats, variant_pass, 1, 1)
    assert graph.nodes[0].provenance["pass"] == variant_pass
    assert_matches_ort(model, graph)
    assert_matches_ort(model, graph, precision="fp16")


def test_conv_output_with_other_consumer_is_a_miss():
    net = ConvNet()
    conv = net.conv()
    net.bn()
    _act(net, "Relu")
    model = net.model(conv)
    _assert_miss(model, "NF2001", "consumers")


def test_conv_output_feeding_two_ops_is_a_miss():
    net = ConvNet()
    conv = net.conv()
    relu = _act(net, "Relu")
    net.op("Add", relu, conv)
    _assert_miss(net.model(), "NF2001", "exactly one consumer")


def test_non_constant_bn_params_is_a_miss():
    net = ConvNet()
    net.conv()
    prefix = net.name("bn")
    net.inits.extend(_bn_inits(prefix)[1:])
    scale = net.input("bn_scale", [COUT])
    net.bn([scale] + [f"{prefix}_{s}" for s in "bmv"])
    miss = _assert_miss(net.model(), "NF2002", "BatchNormalization parameters")
    assert "bn_scale" in miss.tensors


def test_non_constant_conv_weight_is_a_miss():
    net = ConvNet()
    w = net.input("weight", [COUT, CIN, 3, 3])
    net.conv(weight=w)
    _act(net, "Relu")
    _assert_miss(net.model(), "NF2002", "weight")


def test_bare_conv_is_not_a_match():
    net = ConvNet()
    net.conv(bias=True)
    net.op("Softmax", net.y, axis=1)
    graph, stats = fuse_named(net.model())
    assert op_types(graph) == ["Conv", "Softmax"]
    _stats_ok(stats, CONV_PASS, 0, 0)


def test_bn_output_with_two_consumers_fuses_up_to_bn():
    """The BN output stays visible, so Conv+BN fuses and the Relu stays separate."""
    net = ConvNet()
    net.conv()
    bn = net.bn()
    _act(net, "Relu")
    model = net.model(bn)
    graph, stats = fuse_named(model)
    assert op_types(graph) == [CBR, "Relu"]
    _stats_ok(stats, CONV_PASS, 1, 1)
    assert_matches_ort(model, graph)


def test_disable_list_restores_unfused_conv():
    model = _variant(bn=True, bias=False, residual=True, act="Relu")
    graph, stats = fuse_named(model, disabled_ops=[CBR])
    assert op_types(graph) == ["Conv", "BatchNormalization", "Add", "Relu"]
    assert stats[CONV_PASS].effect_times == 0 and stats[CONV_PASS].disabled_by == "GE_FUSION_DISABLE_LIST"
    assert_matches_ort(model, graph)


# -- ConvPoolFC ---------------------------------------------------------------------------------

def _head(conv_block="bn_relu", pool="gap", flatten="flatten", fc="gemm", opset=17, fc_weight=None,
          extra_outputs_of=None):
    net = ConvNet()
    net.conv(bias=conv_block == "plain")
    if conv_block == "bn_relu":
        net.bn()
        _act(net, "Relu")
    block = net.y
    if pool == "gap":
        net.op("GlobalAveragePool", net.y)
    else:
        axes, keepdims = pool
        if opset >= 18:
            net.op("ReduceMean", net.y, net.const(np.array(axes, np.int64)), keepdims=keepdims)
        else:
            net.op("ReduceMean", net.y, axes=axes, keepdims=keepdims)
    if flatten == "flatten":
        net.op("Flatten", net.y, axis=1)
    elif flatten == "reshape":
        net.op("Reshape", net.y, net.const(np.array([N, COUT], np.int64)))
    classes = 5
    if fc == "gemm":
        w = fc_weight or net.const(_f32((classes, COUT), 0.3))
        net.op("Gemm", net.y, w, net.const(_f32(classes, 0.1)), transB=1)
    elif fc == "gemm_scaled":
        net.op("Gemm", net.y, net.const(_f32((COUT, classes), 0.3)), net.const(_f32((1, classes), 0.1)),
               alpha=0.5, beta=2.0)
    elif fc == "matmul_add":
        net.op("MatMul", net.y, net.const(_f32((COUT, classes), 0.3)))
        net.op("Add", net.const(_f32(classes, 0.1)), net.y)
    elif fc == "matmul":
        net.op("MatMul", net.y, fc_weight or net.const(_f32((COUT, classes), 0.3)))
    net.opset = opset
    return net.model(*([block] if extra_outputs_of == "block" else []))


HEADS = {
    "bn_relu_gap_flatten_gemm": dict(),
    "plain_conv_gap_gemm_scaled": dict(conv_block="plain", fc="gemm_scaled"),
    "reducemean_keepdims0_matmul_add": dict(pool=([2, 3], 0), flatten=None, fc="matmul_add"),
    "reducemean_neg_axes_reshape_gemm": dict(pool=([-1, -2], 1), flatten="reshape"),
    "reducemean_opset18_axes_input": dict(pool=([2, 3], 1), opset=18),
    "reducemean_keepdims0_flatten_matmul": dict(pool=([2, 3], 0), fc="matmul"),
}


@pytest.mark.parametrize("name", HEADS)
def test_head_fuses_and_matches_ort(name):
    model = _head(**HEADS[name])
    graph, stats = fuse_named(model)
    assert op_types(graph) == [HEAD]
    _stats_ok(stats, HEAD_PASS, 1, 1)
    assert_matches_ort(model, graph)
    assert_matches_ort(model, graph, precision="fp16")


def test_head_work_counts_conv_pool_and_fc():
    graph, _ = fuse_named(_head())
    node = graph.nodes[0]
    t = lambda v: None if v is None else TensorType(np.dtype(np.float32), tuple(v.desc.shape))  # noqa: E731
    work = kernel_of(HEAD).work([t(v) for v in node.inputs], [t(node.outputs[0])], node.attrs)
    conv_macs = N * COUT * H * H * CIN * 9
    assert work.cube_macs == conv_macs + N * COUT * 5
    block_bytes = N * COUT * H * H * 4
    assert work.onchip_bytes == 2 * block_bytes + N * COUT * 4    # accumulator, block output, pooled


def test_head_miss_reducemean_over_one_axis():
    # ReduceMean over H only, then Flatten gives (N, C*W): still a head shape for Gemm.
    net = ConvNet()
    net.conv()
    net.bn()
    _act(net, "Relu")
    net.op("ReduceMean", net.y, axes=[2], keepdims=1)
    net.op("Flatten", net.y, axis=1)
    net.op("Gemm", net.y, net.const(_f32((5, COUT * H), 0.3)), transB=1)
    model = net.model()
    graph, stats = fuse_named(model)
    assert op_types(graph) == [CBR, "ReduceMean", "Reshape", "MatMul"]   # canonical Flatten, Gemm
    miss = stats[HEAD_PASS].misses[0]
    assert miss.code == "NF2003" and "pooling is not global" in miss.constraint
    _stats_ok(stats, HEAD_PASS, 1, 0)
    assert_matches_ort(model, graph)


def test_head_miss_conv_output_used_elsewhere():
    model = _head(extra_outputs_of="block")
    graph, stats = fuse_named(model)
    assert op_types(graph) == [CBR, "GlobalAveragePool", "Reshape", "MatMulBiasFusionOp"]
    miss = stats[HEAD_PASS].misses[0]
    assert miss.code == "NF2001" and "used outside the pattern" in miss.constraint


def test_head_miss_fc_weight_not_constant():
    net_model = _head(fc="matmul", pool=([2, 3], 0), flatten=None, fc_weight="fcw")
    net_model.graph.input.append(helper.make_tensor_value_info("fcw", TensorProto.FLOAT, [COUT, 5]))
    graph, stats = fuse_named(net_model)
    assert op_types(graph) == [CBR, "ReduceMean", "MatMul"]
    miss = stats[HEAD_PASS].misses[0]
    assert miss.code == "NF2002" and "must be constants" in miss.constraint and "fcw" in miss.constraint


def test_pool_not_followed_by_fc_is_not_a_match():
    net = ConvNet()
    net.conv()
    _act(net, "Relu")
    net.op("GlobalAveragePool", net.y)
    graph, stats = fuse_named(net.model())
    assert op_types(graph) == [CBR, "GlobalAveragePool"]
    _stats_ok(stats, HEAD_PASS, 0, 0)


def test_disable_head_keeps_conv_fusion():
    model = _head()
    graph, stats = fuse_named(model, disabled_ops=[HEAD])
    assert op_types(graph) == [CBR, "GlobalAveragePool", "Reshape", "MatMulBiasFusionOp"]
    _stats_ok(stats, CONV_PASS, 1, 1)
    assert stats[HEAD_PASS].effect_times == 0 and stats[HEAD_PASS].disabled_by == "GE_FUSION_DISABLE_LIST"
    assert_matches_ort(model, graph, precision="fp16")


# -- zoo graphs (small configs) -----------------------------------------------------------------

def test_seed_testmodel_three_convs_and_head():
    model = zoo.build("seed_testmodel", small=True)
    graph, stats = fuse_named(model)
    assert op_types(graph) == [CBR, CBR, HEAD]
    _stats_ok(stats, CONV_PASS, 3, 3)
    _stats_ok(stats, HEAD_PASS, 1, 1)
    assert_matches_ort(model, graph)
    assert_matches_ort(model, graph, precision="fp16")


def test_resnet50_small_every_conv_fused():
    """53 Conv: the 4 downsample Conv+BN join their stage's conv3 kernel as residual convs
    (54 -> 50 kernels): 48 conv blocks + the head + MaxPool."""
    model = zoo.build("resnet50", small=True)
    graph, stats = fuse_named(model)
    assert graph.op_type_counts() == {CBR: 48, HEAD: 1, "MaxPool": 1}
    _stats_ok(stats, CONV_PASS, 49, 49)
    assert stats[CONV_PASS].misses == []
    assert sum(1 for n in graph.nodes if n.attrs.get("residual_conv")) == 4
    assert sum(len([o for o in n.origin if o.endswith("Conv")]) for n in graph.nodes) == 53
    head = next(n for n in graph.nodes if n.op_type == HEAD)
    assert head.attrs["has_residual"] and head.attrs["activation"] == "Relu"
    assert_matches_ort(model, graph)


def test_efficientnet_small_depthwise_convs_fuse_as_depthwise():
    model = zoo.build("efficientnet_b4", small=True)
    depthwise = sum(1 for n in lower(model).nodes if n.op_type == "Conv" and n.attrs.get("group", 1) != 1)
    graph, stats = fuse_named(model)
    misses = stats[CONV_PASS].misses
    assert depthwise > 0 and len(misses) == depthwise
    assert all(m.code == "NF2003" and "group != 1" in m.constraint for m in misses)
    _stats_ok(stats, "DepthwiseConvBNReluFusionPass", depthwise, depthwise)
    assert "Conv" not in op_types(graph)
    _stats_ok(stats, HEAD_PASS, 1, 1)
    assert_matches_ort(model, graph)


def test_passes_registered_in_order():
    names = [p.pass_name for p in pipeline.fusion_passes()]
    assert names.index(CONV_PASS) < names.index(HEAD_PASS)


# -- residual convolution: ResNet's downsample branch joins the conv3 kernel --------------------

def _downsample_block(main_bn=True, side_bn=True, side_bias=False, main_bias=False, side_first=False,
                      swap=False, act="Relu", side_k=1, side_group=1, side_extra_output=False, head=False):
    """x -> Conv3x3(stride 2)[+BN] -> Add(., downsample(x)) -> act, downsample = Conv1x1(stride 2)
    [+BN]: one torchvision Bottleneck's tail, BN kept (TorchScript) or folded (dynamo: biases)."""
    net = ConvNet()

    def side():
        k = side_k
        w = net.const(_f32((COUT, CIN // side_group, k, k), (CIN * k * k) ** -0.5), "wds")
        ins = ["x", w] + ([net.const(_f32(COUT, 0.1), "bds")] if side_bias else [])
        y = net.op("Conv", *ins, kernel_shape=[k, k], pads=[0] * 4, strides=[2, 2] if k == 1 else [1, 1],
                   group=side_group)
        if side_bn:
            net.inits.extend(_bn_inits("ds"))
            y = net.op("BatchNormalization", y, *[f"ds_{s}" for s in "sbmv"], epsilon=1e-5)
        return y

    def main():
        w = net.const(_f32((COUT, CIN, 3, 3), (CIN * 9) ** -0.5), "w")
        ins = ["x", w] + ([net.const(_f32(COUT, 0.1), "b")] if main_bias else [])
        y = net.op("Conv", *ins, kernel_shape=[3, 3], pads=[1] * 4, strides=[2, 2])
        if main_bn:
            y = net.op("BatchNormalization", y, *[f"m_{s}" for s in "sbmv"], epsilon=1e-5)
            net.inits.extend(_bn_inits("m"))
        return y

    if side_first:
        ds = side()
        y = main()
    else:
        y = main()
        ds = side()
    net.op("Add", *([ds, y] if swap else [y, ds]))
    if act:
        _act(net, act)
    extra = [ds] if side_extra_output else []
    if head:
        net.cin = COUT
        net.op("GlobalAveragePool", net.y)
        net.op("Flatten", net.y, axis=1)
        net.op("Gemm", net.y, net.const(_f32((5, COUT), 0.3)), net.const(_f32(5, 0.1)), transB=1)
    return net.model(*extra)


RESIDUAL_CONVS = {
    "torchscript_bn_kept": dict(),
    "dynamo_bn_folded_biases": dict(main_bn=False, side_bn=False, main_bias=True, side_bias=True),
    "side_visited_first": dict(side_first=True),
    "side_first_bn_folded": dict(side_first=True, main_bn=False, side_bn=False, main_bias=True, side_bias=True),
    "add_operands_swapped": dict(swap=True),
    "only_side_has_bias": dict(main_bn=False, side_bn=False, side_bias=True),
    "no_activation": dict(act=None),
    "silu": dict(act="SiLU", side_bn=False),
}


@pytest.mark.parametrize("name", RESIDUAL_CONVS)
def test_residual_conv_fuses_both_convs_and_matches_ort(name):
    model = _downsample_block(**RESIDUAL_CONVS[name])
    graph, stats = fuse_named(model)
    assert op_types(graph) == [CBR]
    _stats_ok(stats, CONV_PASS, 1, 1)
    node = graph.nodes[0]
    assert node.attrs["residual_conv"] and not node.attrs["has_residual"]
    assert set(node.origin) == {n.name for n in model.graph.node}
    assert [v.name for v in node.inputs[::4]] == ["x", "x"]           # x and res_x: both convs read x
    assert_matches_ort(model, graph)
    assert_matches_ort(model, graph, precision="fp16")


def test_residual_conv_work_counts_both_gemms_and_one_tile():
    model = _downsample_block(main_bn=False, side_bn=False, main_bias=True, side_bias=True)
    t = lambda v: None if v is None else TensorType(np.dtype(np.float16), tuple(v.desc.shape))  # noqa: E731
    plain = lower(model)
    convs = [n for n in plain.nodes if n.op_type == "Conv"]
    macs = sum(kernel_of("Conv").work([t(v) for v in c.inputs], [t(c.outputs[0])], c.attrs).cube_macs for c in convs)
    node = fuse_named(model)[0].nodes[0]
    out = t(node.outputs[0])
    work = kernel_of(CBR).work([t(v) for v in node.inputs], [out], node.attrs)
    assert work.cube_macs == macs == N * COUT * (H // 2) ** 2 * (CIN * 9 + CIN)
    assert work.vector_ops["alu"] == 2 * out.size          # one (summed) bias, relu: the add is in the cube
    assert work.onchip_bytes == out.nbytes                 # one accumulator tile for both GEMMs
    assert len(node.inputs) == 6 and node.inputs[3] is None


def test_residual_conv_block_feeds_the_head():
    model = _downsample_block(head=True)
    graph, stats = fuse_named(model)
    assert op_types(graph) == [HEAD]
    assert graph.nodes[0].attrs["residual_conv"]
    assert_matches_ort(model, graph)
    assert_matches_ort(model, graph, precision="fp16")


def _residual_conv_miss(model, code, words, kernels, pass_name=CONV_PASS):
    graph, stats = fuse_named(model)
    assert sorted(op_types(graph)) == sorted(kernels)
    block = next(n for n in graph.nodes if n.op_type == CBR)
    assert block.attrs["has_residual"] and not block.attrs.get("residual_conv")
    misses = [m for m in stats[pass_name].misses if m.code == code]
    assert len(misses) == 1, stats[CONV_PASS].misses
    assert words in misses[0].constraint, misses[0].constraint
    assert "Conv" in misses[0].to_json()["op_types"] and misses[0].tensors
    assert_matches_ort(model, graph)
    return misses[0]


@pytest.mark.parametrize("side_first", [False, True])
def test_residual_conv_miss_output_used_elsewhere(side_first):
    model = _downsample_block(side_bn=False, side_extra_output=True, side_first=side_first)
    _residual_conv_miss(model, "NF2001", "graph output", ["Conv", CBR])


@pytest.mark.parametrize("side_first", [False, True])
def test_residual_conv_miss_shapes_differ(side_first):
    """A [N, C, 1, 1] conv output broadcasts in the Add, but cannot share the output tile."""
    model = _downsample_block(side_bn=False, side_k=H, side_first=side_first)
    miss = _residual_conv_miss(model, "NF2004", "same output tile", ["Conv", CBR])
    assert "not fused as the residual convolution" in miss.constraint


def test_residual_conv_miss_group_conv():
    model = _downsample_block(side_bn=False, side_group=2)       # a grouped conv: its own pass says why
    _residual_conv_miss(model, "NF2003", "residual conv", ["Conv", CBR], "GroupConvBNReluFusionPass")


def test_residual_conv_switched_off_restores_both_convs():
    model = _downsample_block()
    graph, stats = fuse_named(model, disabled_ops=[CBR])
    assert sorted(op_types(graph)) == sorted(["Conv", "BatchNormalization"] * 2 + ["Add", "Relu"])
    assert_matches_ort(model, graph)


# -- permuted store: ViT's patch embedding ------------------------------------------------------

def _patch_embed(view="reshape", perm=(0, 2, 1), bn=False, act=None, tail=False, view_extra_output=False,
                 cls_last=False):
    """Conv(k = s = 2, bias) -> [BN] [act] -> Reshape[N, C, HW] | none -> Transpose[perm]
    [-> Concat(CLS) -> Add(position)] as both exporters write ViT's patch embedding."""
    net = ConvNet(h=8)
    w = net.const(_f32((COUT, CIN, 2, 2), 0.3), "w")
    net.op("Conv", "x", w, net.const(_f32(COUT, 0.1), "b"), kernel_shape=[2, 2], strides=[2, 2])
    net.cin = COUT
    if bn:
        net.bn()
    if act:
        _act(net, act)
    hw = 16
    if view == "reshape":
        net.op("Reshape", net.y, net.const(np.array([N, COUT, -1], np.int64)))
    viewed = net.y
    net.op("Transpose", net.y, perm=list(perm))
    if tail:
        cls = net.const(_f32((N, 1, COUT)), "cls")
        net.op("Concat", *([net.y, cls] if cls_last else [cls, net.y]), axis=-2 if cls_last else 1)
        net.op("Add", net.y, net.const(_f32((1, hw + 1, COUT)), "pos"))
    return net.model(*([viewed] if view_extra_output else []))


PATCH_EMBEDS = {
    "vit_reshape_transpose": dict(),
    "nhwc_transpose_no_view": dict(view=None, perm=(0, 2, 3, 1)),
    "bn_relu_then_permute": dict(bn=True, act="Relu"),
    "reverse_perm": dict(perm=(2, 1, 0)),
}


@pytest.mark.parametrize("name", PATCH_EMBEDS)
def test_permuted_store_fuses_and_matches_ort(name):
    cfg = PATCH_EMBEDS[name]
    model = _patch_embed(**cfg)
    graph, stats = fuse_named(model)
    assert op_types(graph) == [CBR]
    _stats_ok(stats, CONV_PASS, 1, 1)
    node = graph.nodes[0]
    assert node.attrs["output_perm"] == list(cfg.get("perm", (0, 2, 1)))
    assert node.attrs["output_shape"] == ([N, COUT, 16] if cfg.get("view", "reshape") else [N, COUT, 4, 4])
    assert set(node.origin) == {n.name for n in model.graph.node}
    assert_matches_ort(model, graph)
    assert_matches_ort(model, graph, precision="fp16")


def test_permuted_store_work_is_the_conv_block():
    graph, _ = fuse_named(_patch_embed())
    node = graph.nodes[0]
    t = lambda v: TensorType(np.dtype(np.float32), tuple(v.desc.shape))  # noqa: E731
    work = kernel_of(CBR).work([t(v) for v in node.inputs], [t(node.outputs[0])], node.attrs)
    assert work.cube_macs == N * COUT * 16 * CIN * 4
    assert work.vector_ops == {"alu": N * COUT * 16}       # the bias; the layout change is in the store
    assert tuple(node.outputs[0].desc.shape) == (N, 16, COUT)


@pytest.mark.parametrize("cls_last", [False, True])
def test_concatenated_store_takes_the_cls_token(cls_last):
    """Conv -> Reshape -> Transpose -> Concat(CLS): one kernel that copies the CLS rows."""
    model = _patch_embed(tail=True, cls_last=cls_last)
    graph, stats = fuse_named(model)
    assert op_types(graph) == [CBR, "Add"]
    node = graph.nodes[0]
    assert (node.attrs["concat_axis"], node.attrs["concat_index"], node.attrs["concat_parts"]) == \
        (1, 0 if cls_last else 1, 1)
    assert node.inputs[3:7] == [None] * 4 and node.inputs[7].name.startswith("cls")
    assert tuple(node.outputs[0].desc.shape) == (N, 17, COUT)
    t = lambda v: None if v is None else TensorType(np.dtype(np.float16), tuple(v.desc.shape))  # noqa: E731
    work = kernel_of(CBR).work([t(v) for v in node.inputs], [t(node.outputs[0])], node.attrs)
    assert work.cube_macs == N * COUT * 16 * CIN * 4
    assert work.vector_ops == {"alu": N * COUT * 16, "move": N * COUT}      # bias on the tile; CLS copy
    assert_matches_ort(model, graph)
    assert_matches_ort(model, graph, precision="fp16")


def test_patch_embedding_is_one_kernel_with_autofuse():
    """The whole pipeline on the ViT embedding: autofuse absorbs the position Add into the
    conv kernel (its tail), so conv, views, transpose, CLS concat and Add run as one kernel."""
    model = _patch_embed(tail=True)
    graph, _ = fuse_model(model)
    assert op_types(graph) == ["AutofusedKernel"]
    assert graph.nodes[0].attrs["member_ops"] == [CBR, "Add"]
    assert set(graph.nodes[0].origin) == {n.name for n in model.graph.node}
    assert_matches_ort(model, graph)
    assert_matches_ort(model, graph, precision="fp16")


def test_permuted_store_view_used_elsewhere_is_not_absorbed():
    model = _patch_embed(view_extra_output=True)
    graph, stats = fuse_named(model)
    assert op_types(graph) == ["Conv", "Reshape", "Transpose"]
    _stats_ok(stats, CONV_PASS, 0, 0)


def test_head_refuses_a_permuted_conv_block():
    net = ConvNet()
    net.conv(bias=True)
    _act(net, "Relu")
    net.op("Transpose", net.y, perm=[0, 2, 3, 1])
    net.op("ReduceMean", net.y, axes=[1, 2], keepdims=0)
    net.op("Gemm", net.y, net.const(_f32((5, COUT), 0.3)), transB=1)
    model = net.model()
    graph, stats = fuse_named(model)
    assert op_types(graph) == [CBR, "ReduceMean", "MatMul"]
    miss = stats[HEAD_PASS].misses[0]
    assert miss.code == "NF2006" and "permuted" in miss.constraint
    assert_matches_ort(model, graph)


# -- adversarial geometry and epilogue variants (review): each must fuse and match ORT --------
def _geometry_model(xshape, wshape, conv_attrs, tail):
    """Conv (+ `tail` nodes reading "c", ending in "y") with K = wshape[0] output channels."""
    k = wshape[0]
    inits = [_init("w", _f32(wshape, 0.3)), _init("s", RNG.uniform(0.5, 1.5, k).astype(np.float32)),
             _init("b", _f32(k)), _init("m", _f32(k)), _init("v", RNG.uniform(0.01, 0.05, k).astype(np.float32)),
             _init("lo", np.array(1.0, np.float32)), _init("hi", np.array(-1.0, np.float32)),
             _init("r", _f32((k,) + (1,) * (len(xshape) - 2)))]
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], **conv_attrs)] + tail
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(xshape))],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


_RELU = [helper.make_node("Relu", ["c"], ["y"])]
GEOMETRY = {
    "auto_pad_same_upper_stride2": ((2, 3, 5, 5), (4, 3, 3, 3), dict(auto_pad="SAME_UPPER", strides=[2, 2]), _RELU),
    "auto_pad_same_lower_stride2": ((2, 3, 5, 5), (4, 3, 3, 3), dict(auto_pad="SAME_LOWER", strides=[2, 2]), _RELU),
    "auto_pad_valid": ((2, 3, 5, 5), (4, 3, 3, 3), dict(auto_pad="VALID"), _RELU),
    "asymmetric_pads_strides": ((2, 3, 5, 5), (4, 3, 3, 3), dict(pads=[0, 1, 2, 0], strides=[2, 1]), _RELU),
    "conv1d_bn": ((2, 3, 7), (4, 3, 3), dict(pads=[1, 1]),
                  [helper.make_node("BatchNormalization", ["c", "s", "b", "m", "v"], ["y"])]),
    "conv3d_relu": ((1, 3, 4, 4, 4), (4, 3, 3, 3, 3), dict(pads=[1] * 6), _RELU),
    "bn_eps_0.1_momentum_0.5": ((2, 3, 5, 5), (4, 3, 3, 3), dict(pads=[1] * 4),
                                [helper.make_node("BatchNormalization", ["c", "s", "b", "m", "v"], ["y"],
                                                  epsilon=0.1, momentum=0.5)]),
    "clip_min_above_max": ((2, 3, 5, 5), (4, 3, 3, 3), dict(pads=[1] * 4),
                           [helper.make_node("Clip", ["c", "lo", "hi"], ["y"])]),
    "leaky_relu_default_alpha": ((2, 3, 5, 5), (4, 3, 3, 3), dict(pads=[1] * 4),
                                 [helper.make_node("LeakyRelu", ["c"], ["y"])]),
    "residual_per_channel_constant": ((2, 3, 5, 5), (4, 3, 3, 3), dict(pads=[1] * 4),
                                      [helper.make_node("Add", ["r", "c"], ["y"])]),
}


@pytest.mark.parametrize("name", GEOMETRY)
def test_conv_geometry_and_epilogue_variants_fuse_and_match_ort(name):
    model = _geometry_model(*GEOMETRY[name])
    graph, stats = fuse_named(model)
    assert op_types(graph) == [CBR]
    assert_matches_ort(model, graph)
    assert_matches_ort(model, graph, precision="fp16")


@pytest.mark.parametrize("tail", ["bn_after_relu", "x_plus_x", "silu_sigmoid_of_other_tensor"])
def test_conv_tails_that_are_not_the_pattern_stay_unfused(tail):
    """BN not reading the conv, Add(c, c), and Mul(c, Sigmoid(other)) are not conv epilogues."""
    nodes = {"bn_after_relu": [helper.make_node("Relu", ["c"], ["t"]),
                               helper.make_node("BatchNormalization", ["t", "s", "b", "m", "v"], ["y"])],
             "x_plus_x": [helper.make_node("Add", ["c", "c"], ["y"])],
             "silu_sigmoid_of_other_tensor": [helper.make_node("Sigmoid", ["c"], ["t"]),
                                              helper.make_node("Abs", ["c"], ["u"]),
                                              helper.make_node("Mul", ["u", "t"], ["y"])]}[tail]
    model = _geometry_model((2, 3, 5, 5), (4, 3, 3, 3), dict(pads=[1] * 4), nodes)
    graph, _ = fuse_named(model)
    if tail == "bn_after_relu":      # Conv + Relu is a block; the BN after it is not folded
        assert op_types(graph) == [CBR, "BatchNormalization"]
    else:
        assert CBR not in op_types(graph)
    assert_matches_ort(model, graph)
    assert_matches_ort(model, graph, precision="fp16")
