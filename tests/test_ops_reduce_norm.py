"""Reduce, ArgMax/ArgMin, softmax and normalization kernels against onnxruntime.

Reuses `check_op` from test_ops_elementwise: a one-node ONNX model with the config inputs
(Reduce* axes) as constants, compared with compute called in canonical attribute form.
"""
import numpy as np
import pytest

from codegen.registry import kernel_of
from ge.ops.registry import OpKind, TensorType, get_op
from ge.errors import AtcError
from helpers import run_ort_op
from test_ops_elementwise import RNG, check_op, normal, positive

REDUCE_OPS = ["ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceL1",
              "ReduceL2", "ReduceSumSquare", "ReduceLogSum", "ReduceLogSumExp"]

AXES_CASES = [([1], 1), ([1], 0), ([-1], 1), ([0, 2], 0), ([2, -3], 1), (None, 1), (None, 0)]


def _data(op_type, shape):
    if op_type == "ReduceLogSum":
        return positive(*shape)
    if op_type == "ReduceProd":
        return RNG.uniform(0.5, 1.5, shape).astype(np.float32)
    return normal(*shape)


@pytest.mark.parametrize("op_type", REDUCE_OPS)
@pytest.mark.parametrize("axes,keepdims", AXES_CASES)
def test_reduce_float(op_type, axes, keepdims):
    check_op(op_type, [_data(op_type, (2, 3, 4))], {"keepdims": keepdims},
             config={"axes": None if axes is None else np.array(axes, np.int64)})


@pytest.mark.parametrize("op_type", ["ReduceSum", "ReduceMean", "ReduceMax"])
def test_reduce_noop_with_empty_axes(op_type):
    x = normal(2, 3)
    got = check_op(op_type, [x], {"noop_with_empty_axes": 1}, config={"axes": None},
                   zero_work=True)
    np.testing.assert_array_equal(got[0], x)
    check_op(op_type, [x], {"noop_with_empty_axes": 1},
             config={"axes": np.array([], np.int64)}, zero_work=True)


@pytest.mark.parametrize("op_type", ["ReduceSum", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceLogSumExp"])
def test_reduce_int(op_type):
    x = RNG.integers(-4, 5, (3, 4, 2)).astype(np.int32)
    check_op(op_type, [x], {"keepdims": 0}, config={"axes": np.array([1], np.int64)})


def test_reduce_mean_fp16_accumulates_in_fp32():
    x = np.full((4096,), 1.0009765625, np.float16)          # sum overflows fp16 precision
    got = get_op("ReduceMean").compute([x], {"keepdims": 0})[0]
    assert got.dtype == np.float16 and got == np.float16(1.0009765625)


def test_reduce_bad_axis_is_atc_error():
    op = get_op("ReduceSum")
    with pytest.raises(AtcError):
        op.infer([TensorType(np.dtype(np.float32), (2, 3))], {"axes": [2]})


def test_reduce_work_counts_every_input_element():
    op = get_op("ReduceSum")
    t = [TensorType(np.dtype(np.float32), (4, 8))]
    out = op.infer(t, {"axes": [1]})
    assert kernel_of(op.op_type).work(t, out, {"axes": [1]}).vector_ops == {"alu": 32}


@pytest.mark.parametrize("op_type", ["ArgMax", "ArgMin"])
@pytest.mark.parametrize("axis", [0, 1, -1])
@pytest.mark.parametrize("keepdims", [0, 1])
@pytest.mark.parametrize("last", [0, 1])
def test_arg(op_type, axis, keepdims, last):
    x = RNG.integers(0, 3, (3, 4, 5)).astype(np.float32)       # many ties
    check_op(op_type, [x], {"axis": axis, "keepdims": keepdims, "select_last_index": last},
             fp16=False)


def test_arg_default_axis_int():
    check_op("ArgMax", [RNG.integers(-9, 9, (4, 3)).astype(np.int64)])


# ---------------------------------------------------------------------------------------
# Softmax family and norms

@pytest.mark.parametrize("op_type", ["Softmax", "LogSoftmax"])
@pytest.mark.parametrize("axis", [None, 0, 1, -1])
def test_softmax(op_type, axis):
    attrs = {} if axis is None else {"axis": axis}
    check_op(op_type, [normal(2, 3, 5) * 4], attrs, opset=13)


@pytest.mark.parametrize("shape", [(2, 3, 4, 5), (2, 3), (2, 3, 6), (1, 3, 2, 2, 2)])
def test_batch_norm(shape):
    c = shape[1]
    check_op("BatchNormalization",
             [normal(*shape), normal(c), normal(c), normal(c), positive(c)],
             {"epsilon": 1e-3}, opset=15)


@pytest.mark.parametrize("shape", [(2, 3, 4, 5), (4, 3)])
def test_batch_norm_training_mode_matches_onnx_reference(shape):
    """training_mode=1: Y from the batch statistics, and the updated running mean and var
    (onnxruntime's CPU build has no training BatchNormalization: ONNX's reference decides)."""
    from onnx import helper, TensorProto
    from onnx.reference import ReferenceEvaluator
    c = shape[1]
    inputs = [normal(*shape) * 2 + 1, normal(c), normal(c), normal(c), positive(c)]
    attrs = {"epsilon": 1e-3, "momentum": 0.8, "training_mode": 1}
    names = ["x", "s", "b", "m", "v"]
    node = helper.make_node("BatchNormalization", names, ["y", "rm", "rv"], **attrs)
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info(n, TensorProto.FLOAT, a.shape)
                                            for n, a in zip(names, inputs)],
                              [helper.make_tensor_value_info(n, TensorProto.FLOAT, None) for n in ("y", "rm", "rv")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 15)])
    expected = ReferenceEvaluator(model).run(None, dict(zip(names, inputs)))
    op = get_op("BatchNormalization")
    got = op.compute(inputs, attrs)
    types = op.infer([TensorType(a.dtype, a.shape) for a in inputs], attrs)
    assert [(t.dtype, t.shape) for t in types] == [(e.dtype, e.shape) for e in expected]
    for g, e in zip(got, expected):
        np.testing.assert_allclose(g, e, rtol=1e-5, atol=1e-5)
    assert op.node_kind(attrs) == OpKind.OPAQUE and op.node_kind({}) == OpKind.BROADCAST


@pytest.mark.parametrize("axis", [None, -1, 1, -2])
@pytest.mark.parametrize("bias", [True, False])
def test_layer_norm(axis, bias):
    shape = (2, 3, 8)
    norm_shape = shape[(axis if axis is not None else -1):]
    inputs = [normal(*shape) * 3 + 1, normal(*norm_shape)]
    if bias:
        inputs.append(normal(*norm_shape))
    attrs = {"epsilon": 1e-4} if axis is None else {"axis": axis}
    check_op("LayerNormalization", inputs, attrs, opset=17)


@pytest.mark.parametrize("axis", [None, -1, 1])
def test_rms_norm(axis):
    """ONNX RMSNormalization (opset 23; transformers' RMSNorm) and onnxruntime's
    SimplifiedLayerNormalization (the same in the ONNX domain of its optimizer's graphs)."""
    shape = (2, 3, 8)
    norm_shape = shape[(axis if axis is not None else -1):]
    inputs = [normal(*shape) * 3 + 1, normal(*norm_shape)]
    attrs = {"epsilon": 1e-4} if axis is None else {"axis": axis}
    check_op("RMSNormalization", inputs, attrs, opset=23)
    for dtype, tol in ((np.float32, 1e-6), (np.float16, 1e-3)):
        data = [a.astype(dtype) for a in inputs]
        expected = run_ort_op("SimplifiedLayerNormalization", data, attrs, opset=17, n_outputs=2)
        got = get_op("SimplifiedLayerNormalization").compute(data, attrs)
        for g, e in zip(got, expected):      # Y, then inv_std_var (float32, normalized axes kept as 1)
            assert (g.dtype, g.shape) == (e.dtype, e.shape)
            np.testing.assert_allclose(g.astype(np.float32), e.astype(np.float32), rtol=tol, atol=tol)


def test_rms_norm_refuses_a_scale_that_does_not_fit():
    with pytest.raises(AtcError, match="scale"):
        get_op("RMSNormalization").infer([TensorType(np.float32, (2, 8)), TensorType(np.float32, (3,))], {})


@pytest.mark.parametrize("shape", [(2, 3, 4, 5), (2, 4, 7)])
def test_instance_norm(shape):
    c = shape[1]
    check_op("InstanceNormalization", [normal(*shape) * 2, normal(c), normal(c)],
             {"epsilon": 1e-3})


@pytest.mark.parametrize("groups", [1, 2, 4])
def test_group_norm_opset21_per_channel(groups):
    x, scale, bias = normal(2, 4, 3, 3) + 2, normal(4), normal(4)
    # onnxruntime's one-pass variance is off by ~1e-5 here; we also check a float64 reference.
    got = check_op("GroupNormalization", [x, scale, bias], {"num_groups": groups}, opset=21,
                   atol=5e-5)[0]
    g = x.astype(np.float64).reshape(2, groups, -1)
    mean, var = g.mean(-1, keepdims=True), g.var(-1, keepdims=True)
    ref = ((g - mean) / np.sqrt(var + 1e-5)).reshape(x.shape) * scale[:, None, None] + \
        bias[:, None, None]
    np.testing.assert_allclose(got, ref, rtol=1e-5, atol=3e-6)


def test_group_norm_opset18_per_group_scale_matches_expanded():
    x, scale, bias = normal(2, 4, 3), normal(2), normal(2)
    op = get_op("GroupNormalization")
    per_group = op.compute([x, scale, bias], {"num_groups": 2})[0]
    per_channel = op.compute([x, np.repeat(scale, 2), np.repeat(bias, 2)], {"num_groups": 2})[0]
    np.testing.assert_array_equal(per_group, per_channel)
    with pytest.raises(AtcError):
        op.compute([x, scale, bias], {"num_groups": 3})


@pytest.mark.parametrize("size", [1, 3, 5])
def test_lrn(size):
    check_op("LRN", [normal(2, 6, 3, 3) * 3],
             {"size": size, "alpha": 0.01, "beta": 0.6, "bias": 2.0})


@pytest.mark.parametrize("size", [2, 4])
def test_lrn_even_size_against_spec_loop(size):
    """onnxruntime rejects even sizes; the spec's window is [c - floor((s-1)/2), c + ceil(..)]."""
    x = normal(2, 5, 3)
    got = get_op("LRN").compute([x], {"size": size})[0]
    lo, hi = (size - 1) // 2, size - 1 - (size - 1) // 2
    sq = np.stack([np.sum(x[:, max(0, c - lo):c + hi + 1] ** 2, axis=1) for c in range(5)], 1)
    np.testing.assert_allclose(got, x / (1.0 + 1e-4 / size * sq) ** 0.75, rtol=1e-6, atol=1e-7)


def test_lrn_defaults():
    check_op("LRN", [normal(1, 4, 2, 2)], {"size": 3})


def test_registered_kinds_and_config_inputs():
    for name in REDUCE_OPS + ["ArgMax", "ArgMin"]:
        assert get_op(name).kind == OpKind.REDUCE, name
    for name in REDUCE_OPS:
        assert get_op(name).config_inputs == ((1, "axes"),), name
    assert get_op("BatchNormalization").kind == OpKind.BROADCAST
    for name in ["Softmax", "LogSoftmax", "LayerNormalization", "RMSNormalization", "InstanceNormalization",
                 "GroupNormalization", "LRN"]:
        assert get_op(name).kind == OpKind.OPAQUE, name
