"""MultiHeadAttentionFusionPass and its kernel: exporter variants fused and checked against
onnxruntime (fp32 and fp16), zoo transformers, every miss with its NF code, the switch."""
import math

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from atc_py import zoo
from codegen.fused.attention import OP_TYPE, SLOTS
from codegen.registry import kernel_of
from ge.ops.registry import TensorType
from fusion_passes import pipeline
from fusion_passes.canonical import CanonicalizePass
from fusion_passes.multi_head_attention import MultiHeadAttentionFusionPass
from ge.errors import AtcError
from helpers import assert_matches_ort, fuse_model, op_types, random_feeds

B, S, H, D = 2, 5, 2, 4
HID = H * D
PASS = "MultiHeadAttentionFusionPass"


def build(packed=None, scale="div", k_form="direct", mask="none", bias=True, axis=-1,
          probs_output=False, weight_input=False, kv_heads=H, cross=False, reshape_zero=False,
          mask_before_scale=False, linear="matmul", gemm_attrs=None, merge_rows=False, unflatten_swap=False,
          v_scale=False, seed=0):
    """One self-attention block as exporters write it; keywords pick the variant."""
    rng = np.random.default_rng(seed)
    nodes, inits = [], []
    inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, [B, S, HID])]

    def const(array, dtype=np.float32):
        name = f"c{len(inits)}"
        inits.append(numpy_helper.from_array(np.asarray(array, dtype=dtype), name))
        return name

    def node(op, ins, n_out=1, **attrs):
        name = f"{op}_{len(nodes)}"
        outs = [f"{name}_out{i}" for i in range(n_out)]
        nodes.append(helper.make_node(op, ins, outs, name=name, **attrs))
        return outs[0] if n_out == 1 else outs

    def proj(src, width, tag):
        w = (rng.standard_normal((HID, width)) / math.sqrt(HID)).astype(np.float32)
        attrs = dict(gemm_attrs or {})
        if linear == "gemm" and attrs.get("transB"):
            w = np.ascontiguousarray(w.T)
        if weight_input and tag in ("q", "qkv"):
            inputs.append(helper.make_tensor_value_info("Wq", TensorProto.FLOAT, list(w.shape)))
            w_name = "Wq"
        else:
            w_name = const(w)
        if linear == "gemm":    # GPT-2 Conv1D: Reshape[-1,H] -> Gemm(W, C) -> Reshape[B,S,N]
            flat = node("Reshape", [src, const([-1, HID], np.int64)])
            if attrs.get("transA"):
                flat = node("Transpose", [flat], perm=[1, 0])
            y = node("Gemm", [flat, w_name] + ([const(rng.normal(0, 0.1, width))] if bias else []), **attrs)
            return node("Reshape", [y, const([S, B, width] if unflatten_swap else [B, S, width], np.int64)])
        y = node("MatMul", [src, w_name])
        return node("Add", [const(rng.normal(0, 0.1, width)), y]) if bias else y

    kv_src = "x"
    if cross:
        inputs.append(helper.make_tensor_value_info("x_kv", TensorProto.FLOAT, [B, S, HID]))
        kv_src = "x_kv"
    if packed:
        qkv = proj("x", 3 * HID, "qkv")
        if packed == "split":
            q, k, v = node("Split", [qkv, const([HID] * 3, np.int64)], n_out=3, axis=2)
        else:
            q, k, v = (node("Slice", [qkv, const([i * HID], np.int64), const([(i + 1) * HID], np.int64),
                                      const([-1], np.int64)]) for i in range(3))
    else:
        q, k, v = proj("x", HID, "q"), proj(kv_src, kv_heads * D, "k"), proj(kv_src, kv_heads * D, "v")

    def heads(t, h, perm):
        shape = [0, 0, h, -1] if reshape_zero else ([S, B, h, D] if unflatten_swap else [B, S, h, D])
        return node("Transpose", [node("Reshape", [t, const(shape, np.int64)])], perm=perm)

    if scale == "q_after_projection":   # BART eager: q_proj(x) * D**-0.5, then the head views
        q = node("Mul", [q, const(D ** -0.5)])
    qh = heads(q, H, [0, 2, 1, 3])
    if k_form == "direct":
        kt = heads(k, kv_heads, [0, 2, 3, 1])
    else:   # k.transpose(1, 2) then .transpose(-1, -2)
        kt = node("Transpose", [heads(k, kv_heads, [0, 2, 1, 3])], perm=[0, 1, 3, 2])
    vh = heads(v, kv_heads, [0, 2, 1, 3])
    if v_scale:         # scales the output, not the scores
        vh = node("Mul", [vh, const(0.5)])
    if scale in ("qk", "qk_and_scores"):   # SDPA-style: each side by D**-0.25, constant first on K
        qh = node("Mul", [qh, const(D ** -0.25)])
        kt = node("Mul", [const(D ** -0.25), kt])
    elif scale == "qk_div":     # older exports: q / D**0.25, k^T / D**0.25
        qh = node("Div", [qh, const(D ** 0.25)])
        kt = node("Div", [kt, const(D ** 0.25)])
    elif scale == "q_by_a_vector":     # one factor per feature: not a scale of the scores
        qh = node("Mul", [qh, const(np.linspace(0.5, 1.0, D))])
    elif scale == "q_by_a_computed_scalar":
        inputs.append(helper.make_tensor_value_info("s", TensorProto.FLOAT, [1]))
        qh = node("Mul", [qh, "s"])
    s = node("MatMul", [qh, kt])

    def apply_scale(s):
        if scale == "div":
            return node("Div", [s, const(math.sqrt(D))])
        if scale == "mul":
            return node("Mul", [const(1.0 / math.sqrt(D)), s])
        if scale == "qk_and_scores":
            return node("Div", [s, const(2.0)])
        return s

    if not mask_before_scale:
        s = apply_scale(s)
    tril = np.tril(np.ones((S, S), dtype=bool))[None, None]
    if mask == "add_input":
        inputs.append(helper.make_tensor_value_info("mask", TensorProto.FLOAT, [B, 1, 1, S]))
        s = node("Add", ["mask", s])
    elif mask == "add_const":
        s = node("Add", [s, const(np.where(tril, 0.0, -1e4))])
    elif mask == "add_zero":     # ViT dynamo: a folded "no mask"
        s = node("Add", [s, const(np.zeros((B, 1, S, S)))])
    elif mask == "where":
        s = node("Where", [const(tril, np.bool_), s, const(np.finfo(np.float32).min)])
    elif mask == "where_inverted":
        s = node("Where", [const(~tril, np.bool_), const(-1e9), s])
    elif mask == "where_input":
        inputs.append(helper.make_tensor_value_info("cond", TensorProto.BOOL, [1, 1, S, S]))
        s = node("Where", ["cond", s, const(-1e9)])
    if mask_before_scale:
        s = apply_scale(s)
    p = node("Softmax", [s], axis=axis)
    o = node("MatMul", [p, vh])
    o = node("Transpose", [o], perm=[0, 2, 1, 3])
    merged = [B * S, HID] if merge_rows else [B, S, HID]     # rows: GPT-2 dynamo, into the c_proj Gemm
    y = node("Reshape", [o, const([0, 0, -1] if reshape_zero else merged, np.int64)])
    outputs = [helper.make_tensor_value_info(y, TensorProto.FLOAT, merged)]
    if probs_output:
        outputs.append(helper.make_tensor_value_info(p, TensorProto.FLOAT, [B, H, S, S]))
    graph = helper.make_graph(nodes, "mha", inputs, outputs, inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    onnx.checker.check_model(model)
    return model


def run_pass(model, **kw):
    """The canonicalization stage (the form the pass reads) and the MHA pass."""
    graph, stats = fuse_model(model, passes=[CanonicalizePass, MultiHeadAttentionFusionPass], **kw)
    return graph, stats[PASS]


def slots(node) -> dict:
    return SLOTS.read(node.inputs)


def fused_nodes(graph):
    return [n for n in graph.nodes if n.op_type == OP_TYPE]


# -- variants that fuse -------------------------------------------------------------------
VARIANTS = {
    "separate_div": dict(),
    "mul_scale_k_two_transposes": dict(scale="mul", k_form="two"),
    "scale_on_q_and_k": dict(scale="qk"),       # the operand scales fold into the kernel's scale
    "div_on_q_and_k": dict(scale="qk_div"),
    "scale_on_q_and_k_and_the_scores": dict(scale="qk_and_scores"),
    "scale_on_q_after_its_projection": dict(scale="q_after_projection"),
    "scale_on_q_and_k_gqa_two_transposes": dict(scale="qk", kv_heads=1, k_form="two"),
    "no_scale": dict(scale="none"),
    "packed_split_where_causal": dict(packed="split", mask="where"),
    "packed_slice_where_inverted_no_bias": dict(packed="slice", mask="where_inverted", bias=False),
    "padding_mask_input_reshape_0_-1": dict(mask="add_input", reshape_zero=True),
    "const_causal_bias": dict(mask="add_const", k_form="two"),
    "zero_const_mask_is_no_mask": dict(mask="add_zero"),
    "conv1d_packed_split_where_causal": dict(linear="gemm", packed="split", mask="where"),
    "conv1d_separate_transb_alpha_beta": dict(linear="gemm", gemm_attrs=dict(transB=1, alpha=0.5, beta=2.0)),
    "conv1d_packed_no_bias_padding_mask": dict(linear="gemm", packed="split", bias=False, mask="add_input"),
    "multi_query_one_kv_head": dict(kv_heads=1),
    "cross_attention": dict(cross=True),
    "where_condition_computed": dict(mask="where_input"),
    "constant_mask_before_the_scale": dict(mask="add_const", mask_before_scale=True),
    "conv1d_rows_regrouped_sequence_major": dict(linear="gemm", unflatten_swap=True),   # read as [S, B, .] blocks
}
# mask form -> (the kernel slot that holds it, mask_kind)
EXPECTED_MASK = {"where": ("mask", "where"), "where_inverted": ("mask", "where"), "add_input": ("bias", "none"),
                 "add_const": ("bias", "none"), "add_zero": (None, "none"), "none": (None, "none"),
                 "where_input": ("mask", "where")}


@pytest.mark.parametrize("name", VARIANTS)
def test_variant_fuses_and_matches_ort(name):
    kw = VARIANTS[name]
    model = build(**kw)
    graph, stats = run_pass(model)
    if kw.get("unflatten_swap"):      # the kernel reads x and writes its output through views
        assert sorted(set(op_types(graph))) == [OP_TYPE, "Reshape"] and op_types(graph).count(OP_TYPE) == 1
    else:
        assert op_types(graph) == [OP_TYPE]
    assert (stats.match_times, stats.effect_times, stats.misses) == (1, 1, [])
    node = fused_nodes(graph)[0]
    assert node.attrs["num_heads"] == H and node.attrs["head_dim"] == D
    assert node.attrs["kv_heads"] == kw.get("kv_heads", H)
    expected_scale = {"none": 1.0, "qk_and_scores": 0.5 / math.sqrt(D)}.get(kw.get("scale"), 1.0 / math.sqrt(D))
    assert node.attrs["scale"] == pytest.approx(expected_scale, rel=1e-6)
    slot, kind = EXPECTED_MASK[kw.get("mask", "none")]
    assert node.attrs["mask_kind"] == kind
    given = {name for name in ("bias", "mask") if slots(node)[name] is not None}
    assert given == ({slot} if slot else set())
    assert (slots(node)["x_q"].name == "x") != bool(kw.get("unflatten_swap"))
    assert slots(node)["w_q"].desc.shape == (HID, HID)
    assert (slots(node)["x_k"].name == "x_kv") == bool(kw.get("cross"))
    assert node.provenance["pass"] == PASS and "Softmax_" in " ".join(node.provenance["origin"])
    assert_matches_ort(model, graph)
    assert_matches_ort(model, graph, precision="fp16")


def test_separate_weights_are_reused_and_packed_ones_split_per_role():
    model = build()
    node = fused_nodes(run_pass(model)[0])[0]
    names = [init.name for init in model.graph.initializer]
    assert [slots(node)[w].name for w in ("w_q", "w_k", "w_v")] == [names[0], names[2], names[4]]
    graph, _ = run_pass(build(packed="split"))
    node = fused_nodes(graph)[0]
    assert sum(slots(node)[w].const.size for w in ("w_q", "w_k", "w_v")) == HID * 3 * HID   # no copy kept twice


def test_conv1d_weights_are_the_canonical_matmul_weights():
    """Gemm's transB/alpha are folded by canonicalization (GemmAsMatMul), once."""
    graph, _ = run_pass(build(linear="gemm", gemm_attrs=dict(transB=1, alpha=2.0)))
    assert slots(fused_nodes(graph)[0])["w_q"].name.endswith("/as_matmul")


def test_zero_mask_is_not_a_kernel_input():
    graph, _ = run_pass(build(mask="add_zero"))
    node = fused_nodes(graph)[0]
    assert slots(node)["bias"] is None and slots(node)["mask"] is None


@pytest.mark.parametrize("linear", ["matmul", "gemm"])
def test_heads_merged_to_rows_are_read_through_a_view(linear):
    """A merge straight to [B*S,H*D] (GPT-2 dynamo, into the c_proj Gemm): the kernel writes
    [B,S,H*D] and a Reshape (a view, no kernel) keeps the graph's value and name."""
    model = build(linear=linear, packed="split", mask="where", merge_rows=True)
    graph, stats = run_pass(model)
    assert op_types(graph) == [OP_TYPE, "Reshape"] and (stats.effect_times, stats.misses) == (1, [])
    mha, view = graph.nodes
    assert mha.outputs[0].desc.shape == (B, S, HID) and view.inputs[0] is mha.outputs[0]
    assert view.outputs[0].name == model.graph.output[0].name and view.outputs[0].desc.shape == (B * S, HID)
    assert view.origin == [model.graph.node[-1].name] and view.origin[0] not in mha.origin   # the exporter's Reshape
    assert "pass" not in view.provenance
    assert_matches_ort(model, graph)
    assert_matches_ort(model, graph, precision="fp16")


def test_fused_kernel_differs_when_a_bias_is_dropped():
    """The comparison can fail: zeroing the query bias changes the output."""
    model = build()
    graph, _ = run_pass(model)
    bias = slots(fused_nodes(graph)[0])["b_q"]
    bias.set_const(np.zeros_like(bias.const))
    with pytest.raises(AssertionError):
        assert_matches_ort(model, graph)


# -- zoo transformers (small configs) -----------------------------------------------------
def _bert_feeds(model):
    feeds = random_feeds(model)
    feeds["attention_mask"] = np.array([[1, 1, 1, 1, 1, 1, 0, 0]], np.int64)   # a real 0/1 padding mask
    return feeds


ZOO = {   # after canonicalization: the pooler/classifier Gemm is MatMul + Add, GELU one op
    "bert_base": ({"Add": 23, "Cast": 1, "Div": 5, "Gather": 2, "Gelu": 2, "MatMul": 7, "Mul": 6, OP_TYPE: 2,
                   "Pow": 5, "ReduceMean": 10, "Reshape": 1, "Sqrt": 5, "Sub": 6, "Tanh": 1},
                  ("bias", "none"), _bert_feeds),
    "vit_base": ({"Add": 12, "Concat": 1, "Conv": 1, "Gather": 1, "Gelu": 2, "LayerNormalization": 5,
                  "MatMul": 7, OP_TYPE: 2, "Reshape": 1, "Transpose": 1},
                 (None, "none"), random_feeds),
    "gpt2": ({"Add": 11, "Gather": 1, "Gelu": 2, "LayerNormalization": 5, "MatMul": 7, OP_TYPE: 2},
             ("mask", "where"), random_feeds),
}


@pytest.mark.parametrize("name", ZOO)
def test_zoo_small(name):
    counts, (slot, mask_kind), feeds_of = ZOO[name]
    model = zoo.build(name, small=True)
    graph, stats = run_pass(model)
    assert graph.op_type_counts() == counts
    assert (stats.match_times, stats.effect_times, stats.misses) == (2, 2, [])
    assert {n.attrs["mask_kind"] for n in fused_nodes(graph)} == {mask_kind}
    assert all((slots(n)["bias"] is not None or slots(n)["mask"] is not None) == bool(slot)
               for n in fused_nodes(graph))
    assert {(n.attrs["num_heads"], n.attrs["head_dim"]) for n in fused_nodes(graph)} == {(2, 16)}
    feeds = feeds_of(model)
    assert_matches_ort(model, graph, feeds)
    assert_matches_ort(model, graph, feeds, precision="fp16")


# -- misses ---------------------------------------------------------------------------------
MISSES = {
    "probs_used_elsewhere": (dict(probs_output=True), "NF2001", "used outside the pattern"),
    "weight_not_constant": (dict(weight_input=True), "NF2002", "weight Wq of MatMul"),
    "softmax_axis_not_last": (dict(axis=2), "NF2003", "axis=2"),
    "computed_mask_before_scale": (dict(mask="add_input", mask_before_scale=True), "NF2006", "before the scale"),
    "conv1d_trans_a": (dict(linear="gemm", packed="split", gemm_attrs=dict(transA=1)), "NF2003", "transA=1"),
    "conv1d_weight_not_constant": (dict(linear="gemm", weight_input=True), "NF2002", "weight Wq of Gemm"),
    "scale_on_v": (dict(v_scale=True), "NF2006", "V is scaled by 0.5"),
    "q_scaled_by_a_vector": (dict(scale="q_by_a_vector"), "NF2006", "scales the heads by a [4] constant, not one"),
    "q_scaled_by_a_computed_scalar": (dict(scale="q_by_a_computed_scalar"), "NF2002",
                                      "scales the heads by a computed tensor"),
}


@pytest.mark.parametrize("name", MISSES)
def test_miss_reports_reason_and_leaves_graph(name):
    kw, code, text = MISSES[name]
    model = build(**kw)
    graph, stats = run_pass(model)
    assert op_types(graph) == op_types(fuse_model(model, passes=[CanonicalizePass])[0])
    assert (stats.match_times, stats.effect_times) == (1, 0)
    [miss] = stats.misses
    assert miss.code == code and text in miss.constraint, (miss.code, miss.constraint)
    assert miss.pass_name == PASS and "Softmax" in [t for _, t in miss.nodes]
    assert miss.tensors and all("shape" in t and "dtype" in t for t in miss.tensors.values())
    assert_matches_ort(model, graph)


def test_softmax_outside_attention_is_not_a_candidate():
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 8])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])
    w = numpy_helper.from_array(np.ones((8, 3), np.float32), "w")
    nodes = [helper.make_node("MatMul", ["x", "w"], ["l"]), helper.make_node("Softmax", ["l"], ["y"])]
    model = helper.make_model(helper.make_graph(nodes, "cls", [x], [y], [w]),
                              opset_imports=[helper.make_opsetid("", 17)])
    graph, stats = run_pass(model)
    assert op_types(graph) == ["MatMul", "Softmax"] and stats.match_times == 0


def test_disable_list_keeps_unfused_ops():
    model = build(packed="split", mask="where")
    graph, stats = run_pass(model, disabled_ops=[OP_TYPE])
    assert op_types(graph) == op_types(fuse_model(model, passes=[CanonicalizePass])[0])
    assert (stats.match_times, stats.effect_times, stats.disabled_by) == (1, 0, "GE_FUSION_DISABLE_LIST")


def test_registered_in_pipeline():
    assert PASS in [p.pass_name for p in pipeline.fusion_passes()]


# -- kernel contract ------------------------------------------------------------------------
def _types(b=1, s=8, hidden=32, heads=2, kv_heads=2, dtype=np.float16, **extra):
    """Input types by slot name and attrs of a self-attention node with an additive mask."""
    d = hidden // heads
    t = lambda *shape: TensorType(np.dtype(dtype), shape)  # noqa: E731
    given = dict(x_q=t(b, s, hidden), w_q=t(hidden, heads * d), b_q=t(heads * d), x_k=t(b, s, hidden),
                 w_k=t(hidden, kv_heads * d), b_k=t(kv_heads * d), x_v=t(b, s, hidden), w_v=t(hidden, kv_heads * d),
                 b_v=t(kv_heads * d), bias=t(b, 1, 1, s))
    given.update(extra)
    return SLOTS.pack(**given), {"num_heads": heads, "kv_heads": kv_heads, "head_dim": d, "scale": 0.25,
                                 "mask_kind": "none"}


def test_kernel_infer_and_work():
    kernel = kernel_of(OP_TYPE)
    inputs, attrs = _types()
    [out] = kernel.op.infer(inputs, attrs)
    assert out.shape == (1, 8, 32) and out.dtype == np.float16
    work = kernel.work(inputs, [out], attrs)
    scores = 1 * 2 * 8 * 8
    assert work.cube_macs == 8 * 32 * 96 + 2 * scores * 16
    assert work.vector_ops == {"alu": 8 * 96 + 5 * scores, "transcendental": scores, "div": scores}
    assert work.onchip_bytes == 2 * (2 * scores + 8 * 96)
    no_bias, _ = _types(bias=None)
    assert kernel.work(no_bias, [out], attrs).vector_ops["alu"] == 8 * 96 + 4 * scores


def test_kernel_work_of_grouped_query_rotary_and_projected_inputs():
    """GQA reads KV heads by group (K/V projections are narrower, not repeated); RoPE costs
    3 vector ops per rotated Q and K element; a projected input costs no projection."""
    kernel = kernel_of(OP_TYPE)
    inputs, attrs = _types(heads=4, kv_heads=2, bias=None)
    [out] = kernel.op.infer(inputs, attrs)
    gqa = kernel.work(inputs, [out], attrs)
    scores = 4 * 8 * 8
    assert gqa.cube_macs == 8 * 32 * (32 + 16 + 16) + 2 * scores * 8
    rot = dict(attrs, rotary_dim=8)
    cos = TensorType(np.dtype(np.float16), (1, 8, 4))
    with_rope, _ = _types(heads=4, kv_heads=2, bias=None, rope_cos=cos, rope_sin=cos)
    assert kernel.work(with_rope, [out], rot).vector_ops["alu"] - gqa.vector_ops["alu"] == 3 * (4 * 8 + 2 * 8) * 8
    projected, _ = _types(heads=4, kv_heads=2, bias=None, w_q=None, b_q=None)
    assert kernel.work(projected, [out], attrs).cube_macs == gqa.cube_macs - 8 * 32 * 32


def test_kernel_rejects_inconsistent_shapes():
    kernel = kernel_of(OP_TYPE)
    inputs, attrs = _types()
    with pytest.raises(AtcError):
        kernel.op.infer(inputs, dict(attrs, num_heads=3))
    bad_bias, _ = _types(bias=TensorType(np.dtype(np.float16), (1, 1, 3, 3)))
    with pytest.raises(AtcError):
        kernel.op.infer(bad_bias, attrs)
    with pytest.raises(AtcError):
        kernel.op.infer(inputs, dict(attrs, mask_kind="add"))       # mask_kind add without a mask
    with pytest.raises(AtcError):
        kernel.op.infer(inputs, dict(attrs, kv_heads=3))            # 3 KV heads do not group 2 heads
    with pytest.raises(AtcError):
        kernel.op.infer(inputs, dict(attrs, rotary_dim=8))          # rotary without its tables
