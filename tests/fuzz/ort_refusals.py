"""A table of small models with one doubtful node each -- an attribute, a constant input or a
shape onnxruntime may refuse -- for a differential check: whatever onnxruntime refuses, atc
must refuse at compile time with a coded error (finding 6 of issue 8), never compile it for
atc-sim to find, never E19999.  Models onnxruntime accepts are compiled -- and then atc-sim
must compute onnxruntime's numbers -- or refused as unsupported (E16002), or as breaking the
spec where onnxruntime is lax (E16004, an unknown enum value); never crash.  Cases named *_ok
are valid models atc must compile.

Each entry: name -> ONNX model (built at import; no model file is committed).  Found by
probing attribute by attribute against onnxruntime; tests/test_hardening_ops.py runs them.
Left out on purpose: what only onnxruntime's CPU kernels lack (Conv with auto_pad SAME and
dilations > 1 is valid ONNX; atc compiles it).
"""
from __future__ import annotations

import numpy as np
from onnx import TensorProto as TP
from onnx import helper, numpy_helper

F, I = TP.FLOAT, TP.INT64
N = helper.make_node


def _vi(name, elem, shape):
    return helper.make_tensor_value_info(name, elem, shape)


def i64(name, values):
    return numpy_helper.from_array(np.asarray(values, np.int64), name)


def f32(name, values):
    return numpy_helper.from_array(np.asarray(values, np.float32), name)


CASES: dict = {}
# outputs whose order ONNX leaves open (TopK with sorted=0): compared sorted
UNORDERED = {"topk_unsorted"}


def case(name, nodes, inputs, inits=(), out_t=F, opset=17):
    if not isinstance(nodes, list):
        nodes = [nodes]
    graph = helper.make_graph(nodes, "g", [_vi(*x) for x in inputs], [_vi("y", out_t, None)], list(inits))
    CASES[name] = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


case("pad_bad_len", N("Pad", ["x", "p"], ["y"], name="n"), [("x", F, [1, 4])], [i64("p", [0, 1, 1])])
case("pad_edge_ok", N("Pad", ["x", "p"], ["y"], name="n", mode="edge"), [("x", F, [1, 4])], [i64("p", [0, 1, 0, 1])])
case("pad_neg_too_much", N("Pad", ["x", "p"], ["y"], name="n"), [("x", F, [1, 4])], [i64("p", [0, -3, 0, -3])])
case("conv_group_bad", N("Conv", ["x", "w"], ["y"], name="n", group=2), [("x", F, [1, 3, 8, 8])], [f32("w", np.ones((2, 1, 3, 3)))])
case("conv_chan_bad", N("Conv", ["x", "w"], ["y"], name="n"), [("x", F, [1, 3, 8, 8])], [f32("w", np.ones((2, 4, 3, 3)))])
case("conv_stride0", N("Conv", ["x", "w"], ["y"], name="n", strides=[0, 0]), [("x", F, [1, 3, 8, 8])], [f32("w", np.ones((2, 3, 3, 3)))])
case("conv_dil0", N("Conv", ["x", "w"], ["y"], name="n", dilations=[0, 1]), [("x", F, [1, 3, 8, 8])], [f32("w", np.ones((2, 3, 3, 3)))])
case("conv_bias_len", N("Conv", ["x", "w", "b"], ["y"], name="n"), [("x", F, [1, 3, 8, 8])], [f32("w", np.ones((2, 3, 3, 3))), f32("b", [1, 2, 3])])
case("conv_neg_pad", N("Conv", ["x", "w"], ["y"], name="n", pads=[-1, 0, 0, 0]), [("x", F, [1, 3, 8, 8])], [f32("w", np.ones((2, 3, 3, 3)))])
case("conv_big_kernel", N("Conv", ["x", "w"], ["y"], name="n"), [("x", F, [1, 3, 2, 2])], [f32("w", np.ones((2, 3, 3, 3)))])
case("maxpool_pad_ge_kernel", N("MaxPool", ["x"], ["y"], name="n", kernel_shape=[2, 2], pads=[2, 2, 2, 2]), [("x", F, [1, 1, 4, 4])])
case("maxpool_stride0", N("MaxPool", ["x"], ["y"], name="n", kernel_shape=[2, 2], strides=[0, 1]), [("x", F, [1, 1, 4, 4])])
case("avgpool_no_kernel", N("AveragePool", ["x"], ["y"], name="n"), [("x", F, [1, 1, 4, 4])])
case("reshape_two_minus1", N("Reshape", ["x", "s"], ["y"], name="n"), [("x", F, [2, 6])], [i64("s", [-1, -1])])
case("reshape_bad_count", N("Reshape", ["x", "s"], ["y"], name="n"), [("x", F, [2, 6])], [i64("s", [5, 3])])
case("transpose_bad_perm", N("Transpose", ["x"], ["y"], name="n", perm=[0, 0]), [("x", F, [2, 6])])
case("transpose_perm_len", N("Transpose", ["x"], ["y"], name="n", perm=[0]), [("x", F, [2, 6])])
case("split_bad_sum", N("Split", ["x", "s"], ["y"], name="n", axis=1), [("x", F, [2, 6])], [i64("s", [2, 2])])
case("gather_axis_oob", N("Gather", ["x", "i"], ["y"], name="n", axis=3), [("x", F, [2, 6])], [i64("i", [0])])
case("slice_step0", N("Slice", ["x", "s", "e", "a", "st"], ["y"], name="n"), [("x", F, [2, 6])], [i64("s", [0]), i64("e", [2]), i64("a", [1]), i64("st", [0])])
case("slice_axis_oob", N("Slice", ["x", "s", "e", "a"], ["y"], name="n"), [("x", F, [2, 6])], [i64("s", [0]), i64("e", [2]), i64("a", [4])])
case("slice_dup_axes", N("Slice", ["x", "s", "e", "a"], ["y"], name="n"), [("x", F, [2, 6])], [i64("s", [0, 0]), i64("e", [2, 1]), i64("a", [1, 1])])
case("topk_k_too_big", N("TopK", ["x", "k"], ["y", "idx"], name="n"), [("x", F, [2, 6])], [i64("k", [9])])
case("topk_k_neg", N("TopK", ["x", "k"], ["y", "idx"], name="n"), [("x", F, [2, 6])], [i64("k", [-1])])
case("concat_axis_oob", N("Concat", ["x", "x"], ["y"], name="n", axis=5), [("x", F, [2, 6])])
case("concat_shape_mismatch", N("Concat", ["x", "c"], ["y"], name="n", axis=0), [("x", F, [2, 6])], [f32("c", np.ones((2, 5)))])
case("softmax_axis_oob", N("Softmax", ["x"], ["y"], name="n", axis=4), [("x", F, [2, 6])])
case("unsqueeze_dup", N("Unsqueeze", ["x", "a"], ["y"], name="n"), [("x", F, [2, 6])], [i64("a", [0, 0])])
case("squeeze_not_one", N("Squeeze", ["x", "a"], ["y"], name="n"), [("x", F, [2, 6])], [i64("a", [0])])
case("tile_neg", N("Tile", ["x", "r"], ["y"], name="n"), [("x", F, [2, 6])], [i64("r", [-1, 1])])
case("tile_len", N("Tile", ["x", "r"], ["y"], name="n"), [("x", F, [2, 6])], [i64("r", [1])])
case("expand_incompat", N("Expand", ["x", "s"], ["y"], name="n"), [("x", F, [2, 6])], [i64("s", [3, 6])])
case("add_incompat", N("Add", ["x", "c"], ["y"], name="n"), [("x", F, [2, 6])], [f32("c", np.ones((5,)))])
case("matmul_incompat", N("MatMul", ["x", "c"], ["y"], name="n"), [("x", F, [2, 6])], [f32("c", np.ones((5, 3)))])
case("gemm_incompat", N("Gemm", ["x", "c"], ["y"], name="n"), [("x", F, [2, 6])], [f32("c", np.ones((5, 3)))])
case("bn_scale_len", N("BatchNormalization", ["x", "s", "b", "m", "v"], ["y"], name="n"), [("x", F, [1, 3, 4, 4])], [f32("s", [1, 1]), f32("b", [0, 0, 0]), f32("m", [0, 0, 0]), f32("v", [1, 1, 1])])
case("range_delta0", N("Range", ["a", "b", "d"], ["y"], name="n"), [], [i64("a", 0), i64("b", 5), i64("d", 0)], out_t=I)
case("range_delta0_rt", [N("Range", ["a", "b", "d"], ["r"], name="n"), N("Add", ["r", "x"], ["y"], name="add")], [("x", I, [1])], [i64("a", 0), i64("b", 5), i64("d", 0)], out_t=I)
case("cos_neg_dims", N("ConstantOfShape", ["s"], ["y"], name="n"), [], [i64("s", [-2, 3])])
case("onehot_neg_depth", N("OneHot", ["x", "d", "v"], ["y"], name="n"), [("x", I, [3])], [i64("d", [-3]), f32("v", [0, 1])])
case("reduce_axis_oob", N("ReduceSum", ["x", "a"], ["y"], name="n"), [("x", F, [2, 6])], [i64("a", [3])])
case("reducemax_axis_oob", N("ReduceMax", ["x"], ["y"], name="n", axes=[3]), [("x", F, [2, 6])])
case("einsum_bad", N("Einsum", ["x", "x"], ["y"], name="n", equation="ij,jk->ik"), [("x", F, [2, 6])])
case("flatten_axis_oob", N("Flatten", ["x"], ["y"], name="n", axis=4), [("x", F, [2, 6])])
case("depthtospace_bad", N("DepthToSpace", ["x"], ["y"], name="n", blocksize=2), [("x", F, [1, 3, 2, 2])])
case("depthtospace_bs0", N("DepthToSpace", ["x"], ["y"], name="n", blocksize=0), [("x", F, [1, 4, 2, 2])])
case("resize_scales_and_sizes", N("Resize", ["x", "", "s", "z"], ["y"], name="n"), [("x", F, [1, 1, 4, 4])], [f32("s", [1, 1, 2, 2]), i64("z", [1, 1, 8, 8])])
case("resize_scales_len", N("Resize", ["x", "", "s"], ["y"], name="n"), [("x", F, [1, 1, 4, 4])], [f32("s", [2, 2])])
case("resize_sizes_zero", N("Resize", ["x", "", "", "z"], ["y"], name="n"), [("x", F, [1, 1, 4, 4])], [i64("z", [1, 1, 0, 8])])
case("resize_cubic_coeff", N("Resize", ["x", "", "s"], ["y"], name="n", mode="cubic", cubic_coeff_a=0.0), [("x", F, [1, 1, 4, 4])], [f32("s", [1, 1, 2, 2])])
case("resize_linear_ok", N("Resize", ["x", "", "s"], ["y"], name="n", mode="linear"), [("x", F, [1, 1, 4, 4])], [f32("s", [1, 1, 2, 2])])
case("leakyrelu_int_alpha", N("LeakyRelu", ["x"], ["y"], name="n", alpha=1), [("x", F, [2, 6])])
case("cast_bad_to", N("Cast", ["x"], ["y"], name="n", to=99), [("x", F, [2, 6])])
case("cast_string", N("Cast", ["x"], ["y"], name="n", to=TP.STRING), [("x", F, [2, 6])], out_t=TP.STRING)
case("mod_fmod0_float", N("Mod", ["x", "c"], ["y"], name="n"), [("x", F, [2])], [f32("c", [1, 2])])
case("int32_div0", N("Div", ["x", "c"], ["y"], name="n"), [("x", TP.INT32, [2])], [numpy_helper.from_array(np.array([0, 1], np.int32), "c")], out_t=TP.INT32)
case("mod_const_fold_zero", [N("Mod", ["a", "b"], ["q"], name="n"), N("Add", ["x", "q"], ["y"], name="add")], [("x", I, [2])], [i64("a", [3, 4]), i64("b", [0, 1])], out_t=I)
case("scatter_oob", N("ScatterElements", ["x", "i", "u"], ["y"], name="n", axis=1), [("x", F, [2, 6])], [i64("i", [[7], [0]]), f32("u", [[1], [2]])])
case("scatternd_oob", N("ScatterND", ["x", "i", "u"], ["y"], name="n"), [("x", F, [2, 6])], [i64("i", [[5]]), f32("u", np.ones((1, 6)))])
case("gathernd_bd_too_big", N("GatherND", ["x", "i"], ["y"], name="n", batch_dims=3), [("x", F, [2, 6])], [i64("i", [[0]])])
case("lrn_even_size", N("LRN", ["x"], ["y"], name="n", size=0), [("x", F, [1, 3, 4, 4])])
case("instnorm_scale_len", N("InstanceNormalization", ["x", "s", "b"], ["y"], name="n"), [("x", F, [1, 3, 4, 4])], [f32("s", [1, 1]), f32("b", [0, 0])])
case("layernorm_axis_oob", N("LayerNormalization", ["x", "s"], ["y"], name="n", axis=3), [("x", F, [2, 6])], [f32("s", np.ones(6))])
case("layernorm_scale_len", N("LayerNormalization", ["x", "s"], ["y"], name="n", axis=-1), [("x", F, [2, 6])], [f32("s", np.ones(5))])
case("argmax_scalar", N("ArgMax", ["x"], ["y"], name="n"), [("x", F, [])], out_t=I)
case("argmax_axis_oob", N("ArgMax", ["x"], ["y"], name="n", axis=2), [("x", F, [2, 6])], out_t=I)
case("cumsum_axis_oob", N("CumSum", ["x", "a"], ["y"], name="n"), [("x", F, [2, 6])], [i64("a", 5)])
case("where_incompat", N("Where", ["c", "x", "x"], ["y"], name="n"), [("x", F, [2, 6])], [numpy_helper.from_array(np.ones((3,), bool), "c")])
case("convtranspose_chan", N("ConvTranspose", ["x", "w"], ["y"], name="n"), [("x", F, [1, 3, 4, 4])], [f32("w", np.ones((2, 2, 3, 3)))])
case("convtranspose_kshape", N("ConvTranspose", ["x", "w"], ["y"], name="n", kernel_shape=[5, 5]), [("x", F, [1, 3, 4, 4])], [f32("w", np.ones((3, 2, 3, 3)))])
case("pad_reflect_too_big", N("Pad", ["x", "p"], ["y"], name="n", mode="reflect"), [("x", F, [1, 4])], [i64("p", [0, 5, 0, 5])])
case("gather_float_idx", N("Gather", ["x", "i"], ["y"], name="n"), [("x", F, [2, 6])], [f32("i", [0])])
case("clip_min_gt_max", N("Clip", ["x", "a", "b"], ["y"], name="n"), [("x", F, [2, 6])], [f32("a", 2.0), f32("b", 1.0)])
case("clip_min_not_scalar", N("Clip", ["x", "a"], ["y"], name="n"), [("x", F, [2, 6])], [f32("a", [1.0, 2.0])])
case("dropout_ratio_bad", N("Dropout", ["x", "r"], ["y"], name="n"), [("x", F, [2, 6])], [f32("r", 1.5)])
case("hardmax_axis", N("Hardmax", ["x"], ["y"], name="n", axis=-3), [("x", F, [2, 6])])
case("pow_int_neg", N("Pow", ["x", "c"], ["y"], name="n"), [("x", I, [2])], [i64("c", [-1, 2])], out_t=I)
case("spacetodepth_bad", N("SpaceToDepth", ["x"], ["y"], name="n", blocksize=3), [("x", F, [1, 1, 4, 4])])
case("gridsample_mode", N("GridSample", ["x", "g"], ["y"], name="n", mode="bogus"), [("x", F, [1, 1, 4, 4])], [f32("g", np.zeros((1, 2, 2, 2)))])
case("attr_wrong_type", N("Softmax", ["x"], ["y"], name="n", axis=1.5), [("x", F, [2, 6])])
case("conv_auto_pad_bad", N("Conv", ["x", "w"], ["y"], name="n", auto_pad="BOGUS"), [("x", F, [1, 3, 8, 8])], [f32("w", np.ones((2, 3, 3, 3)))])
case("maxpool_auto_pad_bad", N("MaxPool", ["x"], ["y"], name="n", kernel_shape=[2, 2], auto_pad="bogus"), [("x", F, [1, 1, 4, 4])])
case("resize_mode_ok_bad_ctm_tf", N("Resize", ["x", "", "s"], ["y"], name="n", coordinate_transformation_mode="tf_crop_and_resize"), [("x", F, [1, 1, 4, 4])], [f32("s", [1, 1, 2, 2])])
case("split_num_outputs_bad", N("Split", ["x"], ["y", "z"], name="n", axis=1, num_outputs=3), [("x", F, [2, 6])], opset=18)
case("reshape_allowzero_neg", N("Reshape", ["x", "s"], ["y"], name="n", allowzero=1), [("x", F, [2, 6])], [i64("s", [0, -1])])
case("topk_axis_oob", N("TopK", ["x", "k"], ["y", "idx"], name="n", axis=3), [("x", F, [2, 6])], [i64("k", [1])])
case("unsqueeze_oob", N("Unsqueeze", ["x", "a"], ["y"], name="n"), [("x", F, [2, 6])], [i64("a", [5])])
case("squeeze_oob", N("Squeeze", ["x", "a"], ["y"], name="n"), [("x", F, [2, 6])], [i64("a", [5])])
case("transpose_perm_oob", N("Transpose", ["x"], ["y"], name="n", perm=[0, 2]), [("x", F, [2, 6])])
case("d2s_mode_bogus", N("DepthToSpace", ["x"], ["y"], name="n", blocksize=2, mode="XYZ"), [("x", F, [1, 4, 2, 2])])
case("pad_value_not_scalar", N("Pad", ["x", "p", "v"], ["y"], name="n"), [("x", F, [1, 4])], [i64("p", [0, 1, 0, 1]), f32("v", [1, 2])])
case("cos_value_2elems", N("ConstantOfShape", ["s"], ["y"], name="n", value=numpy_helper.from_array(np.zeros([2], np.float32))), [], [i64("s", [2, 3])])
case("range_float_delta0", N("Range", ["a", "b", "d"], ["y"], name="n"), [], [f32("a", 0), f32("b", 5), f32("d", 0)])
case("onehot_axis_oob", N("OneHot", ["x", "d", "v"], ["y"], name="n", axis=3), [("x", I, [3])], [i64("d", [4]), f32("v", [0, 1])])
case("gap_rank2", N("GlobalAveragePool", ["x"], ["y"], name="n"), [("x", F, [2, 6])])
case("bn_training", N("BatchNormalization", ["x", "s", "b", "m", "v"], ["y"], name="n", training_mode=1), [("x", F, [1, 3, 4, 4])], [f32("s", [1, 1, 1]), f32("b", [0, 0, 0]), f32("m", [0, 0, 0]), f32("v", [1, 1, 1])])
case("maxpool_storage_order2", N("MaxPool", ["x"], ["y"], name="n", kernel_shape=[2, 2], storage_order=2), [("x", F, [1, 1, 4, 4])])
case("maxpool_ceil2", N("MaxPool", ["x"], ["y"], name="n", kernel_shape=[2, 2], ceil_mode=2), [("x", F, [1, 1, 4, 4])])
case("conv_kshape_rank", N("Conv", ["x", "w"], ["y"], name="n", kernel_shape=[3]), [("x", F, [1, 3, 8, 8])], [f32("w", np.ones((2, 3, 3, 3)))])
case("conv_group0", N("Conv", ["x", "w"], ["y"], name="n", group=0), [("x", F, [1, 3, 8, 8])], [f32("w", np.ones((2, 3, 3, 3)))])
case("conv_pads_len", N("Conv", ["x", "w"], ["y"], name="n", pads=[1, 1]), [("x", F, [1, 3, 8, 8])], [f32("w", np.ones((2, 3, 3, 3)))])
case("gemm_bias_bad", N("Gemm", ["x", "c", "b"], ["y"], name="n"), [("x", F, [2, 6])], [f32("c", np.ones((6, 3))), f32("b", np.ones(4))])
case("matmul_scalar", N("MatMul", ["x", "c"], ["y"], name="n"), [("x", F, [2, 6])], [f32("c", 2.0)])
case("softmax_int", N("Softmax", ["x"], ["y"], name="n"), [("x", I, [2, 6])], out_t=I)
case("where_float_cond", N("Where", ["x", "x", "x"], ["y"], name="n"), [("x", F, [2, 6])])
case("bitshift_dir", N("BitShift", ["x", "c"], ["y"], name="n", direction="UP"), [("x", TP.UINT8, [2])], [numpy_helper.from_array(np.array([1, 2], np.uint8), "c")], out_t=TP.UINT8)
case("dequant_axis_oob", N("DequantizeLinear", ["x", "s"], ["y"], name="n", axis=4), [("x", TP.INT8, [2, 6])], [f32("s", np.ones(6))])
case("quant_scale_len", N("QuantizeLinear", ["x", "s"], ["y"], name="n", axis=1), [("x", F, [2, 6])], [f32("s", np.ones(5))], out_t=TP.UINT8)
case("trilu_k_vec", N("Trilu", ["x", "k"], ["y"], name="n"), [("x", F, [2, 6])], [i64("k", [1, 2])])
case("reduce_noop_bad", N("ReduceSum", ["x", "a"], ["y"], name="n", noop_with_empty_axes=5), [("x", F, [2, 6])], [i64("a", [])])
case("argmax_keepdims_bad", N("ArgMax", ["x"], ["y"], name="n", keepdims=7), [("x", F, [2, 6])], out_t=I)
case("gathernd_idx_depth", N("GatherND", ["x", "i"], ["y"], name="n"), [("x", F, [2, 6])], [i64("i", [[0, 1, 2]])])
case("expand_rank_neg", N("Expand", ["x", "s"], ["y"], name="n"), [("x", F, [2, 6])], [i64("s", [-1, 6])])
case("tile_float_rep", N("Tile", ["x", "r"], ["y"], name="n"), [("x", F, [2, 6])], [f32("r", [1, 1])])
case("slice_float_starts", N("Slice", ["x", "s", "e"], ["y"], name="n"), [("x", F, [2, 6])], [f32("s", [0]), f32("e", [1])])
case("hardsigmoid_ok", N("HardSigmoid", ["x"], ["y"], name="n", alpha=0.0), [("x", F, [2, 6])])
case("celu_alpha0", N("Celu", ["x"], ["y"], name="n", alpha=0.0), [("x", F, [2, 6])])
case("gridsample_align_bad", N("GridSample", ["x", "g"], ["y"], name="n", align_corners=3), [("x", F, [1, 1, 4, 4])], [f32("g", np.zeros((1, 2, 2, 2)))])
case("einsum_bad_eq", N("Einsum", ["x"], ["y"], name="n", equation="ij->k"), [("x", F, [2, 6])])
case("einsum_garbage", N("Einsum", ["x"], ["y"], name="n", equation="!!"), [("x", F, [2, 6])])
case("mean_no_inputs_ok", N("Mean", ["x", "x"], ["y"], name="n"), [("x", F, [2, 6])])
case("lpnorm_p3", N("LpNormalization", ["x"], ["y"], name="n", p=3), [("x", F, [2, 6])])
case("lppool_p0", N("LpPool", ["x"], ["y"], name="n", kernel_shape=[2, 2], p=0), [("x", F, [1, 1, 4, 4])])
case("roialign_mode", N("RoiAlign", ["x", "r", "b"], ["y"], name="n", mode="bogus"), [("x", F, [1, 1, 4, 4])], [f32("r", [[0, 0, 2, 2]]), i64("b", [0])])
case("shrink_ok", N("Shrink", ["x"], ["y"], name="n", lambd=-1.0), [("x", F, [2, 6])])
case("scatter_dup_shape", N("ScatterElements", ["x", "i", "u"], ["y"], name="n", axis=0, reduction="bogus"), [("x", F, [2, 6])], [i64("i", [[0]]), f32("u", [[1]])])
case("mod_int_fmod2", N("Mod", ["x", "c"], ["y"], name="n", fmod=2), [("x", I, [2])], [i64("c", [1, 2])], out_t=I)
case("resize_sizes_rank", N("Resize", ["x", "", "", "z"], ["y"], name="n"), [("x", F, [1, 1, 4, 4])], [i64("z", [8, 8])])
case("resize_axes_oob", N("Resize", ["x", "", "s"], ["y"], name="n", axes=[5]), [("x", F, [1, 1, 4, 4])], [f32("s", [2])], opset=18)
case("resize_exclude_outside", N("Resize", ["x", "", "s"], ["y"], name="n", mode="linear", exclude_outside=1), [("x", F, [1, 1, 4, 4])], [f32("s", [1, 1, 2, 2])])
case("instnorm_eps_neg", N("InstanceNormalization", ["x", "s", "b"], ["y"], name="n", epsilon=-1.0), [("x", F, [1, 3, 4, 4])], [f32("s", [1, 1, 1]), f32("b", [0, 0, 0])])
case("layernorm_eps0", N("LayerNormalization", ["x", "s"], ["y"], name="n", epsilon=0.0), [("x", F, [2, 6])], [f32("s", np.ones(6))])
case("convt_output_shape_len", N("ConvTranspose", ["x", "w"], ["y"], name="n", output_shape=[1]), [("x", F, [1, 3, 4, 4])], [f32("w", np.ones((3, 2, 3, 3)))])
case("convt_outpad_big", N("ConvTranspose", ["x", "w"], ["y"], name="n", output_padding=[5, 5]), [("x", F, [1, 3, 4, 4])], [f32("w", np.ones((3, 2, 3, 3)))])
case("convt_strides0", N("ConvTranspose", ["x", "w"], ["y"], name="n", strides=[0, 1]), [("x", F, [1, 3, 4, 4])], [f32("w", np.ones((3, 2, 3, 3)))])
case("shape_start_oob", N("Shape", ["x"], ["y"], name="n", start=5), [("x", F, [2, 6])], out_t=I, opset=15)
case("shape_start_gt_end", N("Shape", ["x"], ["y"], name="n", start=1, end=0), [("x", F, [2, 6])], out_t=I, opset=15)
case("range_inf_limit", N("Range", ["a", "b", "d"], ["y"], name="n"), [], [f32("a", 0), f32("b", np.inf), f32("d", 1)])
case("range_nan", N("Range", ["a", "b", "d"], ["y"], name="n"), [], [f32("a", 0), f32("b", np.nan), f32("d", 1)])
case("tile_zero", N("Tile", ["x", "r"], ["y"], name="n"), [("x", F, [2, 6])], [i64("r", [0, 1])])
case("split_zero_piece", N("Split", ["x", "s"], ["y", "z"], name="n", axis=1), [("x", F, [2, 6])], [i64("s", [0, 6])])
case("gather_scalar_idx", N("Gather", ["x", "i"], ["y"], name="n"), [("x", F, [2, 6])], [i64("i", 1)])
case("matmul_1d", N("MatMul", ["x", "c"], ["y"], name="n"), [("x", F, [6])], [f32("c", np.ones(6))])
case("gemm_alpha0", N("Gemm", ["x", "c"], ["y"], name="n", alpha=0.0), [("x", F, [2, 6])], [f32("c", np.ones((6, 3)))])
case("gemm_3d", N("Gemm", ["x", "c"], ["y"], name="n"), [("x", F, [1, 2, 6])], [f32("c", np.ones((6, 3)))])
case("cumsum_excl2", N("CumSum", ["x", "a"], ["y"], name="n", exclusive=2), [("x", F, [2, 6])], [i64("a", 0)])
case("argmin_last", N("ArgMin", ["x"], ["y"], name="n", select_last_index=1), [("x", F, [2, 6])], out_t=I)
case("topk_unsorted", N("TopK", ["x", "k"], ["y", "idx"], name="n", sorted=0), [("x", F, [2, 6])], [i64("k", [2])])
case("einsum_ellipsis", N("Einsum", ["x", "x"], ["y"], name="n", equation="...i,...i->..."), [("x", F, [2, 6])])
case("squeeze_no_axes", N("Squeeze", ["x"], ["y"], name="n"), [("x", F, [1, 6])])
case("concat_scalar", N("Concat", ["x", "x"], ["y"], name="n", axis=0), [("x", F, [])])
case("reshape_zero_copy", N("Reshape", ["x", "s"], ["y"], name="n"), [("x", F, [2, 6])], [i64("s", [0, 3, 2])])
case("reshape_zero_oob", N("Reshape", ["x", "s"], ["y"], name="n"), [("x", F, [2, 6])], [i64("s", [2, 6, 0])])
case("slice_neg_step", N("Slice", ["x", "s", "e", "a", "st"], ["y"], name="n"), [("x", F, [2, 6])], [i64("s", [10]), i64("e", [-100]), i64("a", [1]), i64("st", [-2])])
case("expand_lower_rank", N("Expand", ["x", "s"], ["y"], name="n"), [("x", F, [2, 6])], [i64("s", [6])])
case("bn_eps_neg", N("BatchNormalization", ["x", "s", "b", "m", "v"], ["y"], name="n", epsilon=-1.0), [("x", F, [1, 3, 4, 4])], [f32("s", [1, 1, 1]), f32("b", [0, 0, 0]), f32("m", [0, 0, 0]), f32("v", [1, 1, 1])])
case("softmax_opset11_axis", N("Softmax", ["x"], ["y"], name="n", axis=-3), [("x", F, [2, 6])], opset=11)
case("reducemean_axes_attr18", N("ReduceMean", ["x"], ["y"], name="n", axes=[1]), [("x", F, [2, 6])], opset=18)
case("upsample_old", N("Upsample", ["x", "s"], ["y"], name="n"), [("x", F, [1, 1, 2, 2])], [f32("s", [1, 1, 2, 2])], opset=9)
case("resize_empty_both", N("Resize", ["x", "", "", ""], ["y"], name="n"), [("x", F, [1, 1, 4, 4])])
case("hardmax_ok", N("Hardmax", ["x"], ["y"], name="n"), [("x", F, [2, 6])])
case("where_bcast", N("Where", ["c", "x", "z"], ["y"], name="n"), [("x", F, [2, 6])], [numpy_helper.from_array(np.ones((1, 6), bool), "c"), f32("z", 0.0)])
case("nonzero_ok", N("NonZero", ["x"], ["y"], name="n"), [("x", F, [2, 6])], out_t=I)
case("maxpool_dilated_ceil", N("MaxPool", ["x"], ["y"], name="n", kernel_shape=[3, 3], dilations=[2, 2], ceil_mode=1, strides=[2, 2]), [("x", F, [1, 1, 7, 7])])
case("avgpool_ceil_pads", N("AveragePool", ["x"], ["y"], name="n", kernel_shape=[3, 3], pads=[1, 1, 1, 1], ceil_mode=1, strides=[2, 2], count_include_pad=1), [("x", F, [1, 1, 6, 6])])
case("convt_output_shape", N("ConvTranspose", ["x", "w"], ["y"], name="n", output_shape=[9, 9], strides=[2, 2]), [("x", F, [1, 3, 4, 4])], [f32("w", np.ones((3, 2, 3, 3)))])
case("convt_output_shape_small", N("ConvTranspose", ["x", "w"], ["y"], name="n", output_shape=[2, 2], strides=[2, 2]), [("x", F, [1, 3, 4, 4])], [f32("w", np.ones((3, 2, 3, 3)))])
case("prelu_slope_bad", N("PRelu", ["x", "s"], ["y"], name="n"), [("x", F, [2, 6])], [f32("s", np.ones(5))])
case("instnorm_rank2", N("InstanceNormalization", ["x", "s", "b"], ["y"], name="n"), [("x", F, [2, 6])], [f32("s", [1, 1, 1, 1, 1, 1]), f32("b", np.zeros(6))])
case("groupnorm_bad", N("GroupNormalization", ["x", "s", "b"], ["y"], name="n", num_groups=4), [("x", F, [1, 6, 2, 2])], [f32("s", np.ones(6)), f32("b", np.zeros(6))], opset=21)
case("groupnorm_scale_len", N("GroupNormalization", ["x", "s", "b"], ["y"], name="n", num_groups=2), [("x", F, [1, 6, 2, 2])], [f32("s", np.ones(5)), f32("b", np.zeros(5))], opset=21)


# Found by the seed-3 fuzz run on the final code, and their siblings (probed against onnxruntime):
# a BatchNormalization whose X is a scalar or whose parameters are not one value per channel --
# ONNX's shape inference checks that only from opset 14 on, so an opset-13 model reached folding.
def bn(name, x_shape, p_shapes, opset=13, const_x=False):
    params = [f32(n, np.ones(s)) for n, s in zip("sbmv", p_shapes)]
    x = [f32("x", np.ones(x_shape))] if const_x else []
    case(name, N("BatchNormalization", ["x", "s", "b", "m", "v"], ["y"], name="n"),
         [] if const_x else [("x", F, list(x_shape))], x + params, opset=opset)


bn("bn_scalar_x_folded", (), [(1,)] * 4, const_x=True)
bn("bn_scalar_x_folded_scalar_params", (), [()] * 4, const_x=True)
bn("bn_rank1_x_one_channel_ok", (3,), [(1,)] * 4)
bn("bn_rank1_x_params_of_3", (3,), [(3,)] * 4, const_x=True)
bn("bn_params_rank2_op13", (2, 3), [(1, 3)] * 4)
bn("bn_params_scalar_op13", (2, 3, 4), [()] * 4)
bn("bn_params_len1_op13", (2, 3, 4), [(1,)] * 4)
bn("bn_bias_len_op13", (2, 3, 4), [(3,), (1,), (3,), (3,)])
bn("bn_one_channel_ok_op13", (2, 1, 4), [(1,)] * 4)


# Zero points and scales of the quantized matrix ops, in shapes onnxruntime refuses: QLinear*'s
# x/a and y per tensor only; B's per tensor, [N] for a 2-D B or [..., 1, N]; QLinearConv's
# weight per tensor or one per output channel.  Left out: MatMulInteger's per-row A and
# ConvInteger's per-channel weight zero points, valid ONNX only onnxruntime's CPU kernels lack
# (tests/test_ops_quant.py checks them against the spec's formula).
def u8(name, shape, value=1):
    return numpy_helper.from_array(np.full(shape, value, np.uint8), name)


def mmi(name, a_shape, b_shape, a_zp=None, b_zp=None):
    inits = [u8("a", a_shape), u8("b", b_shape), u8("az", a_zp if a_zp is not None else ())]
    inputs = ["a", "b", "az" if a_zp is not None else ""]
    if b_zp is not None:
        inits.append(u8("bz", b_zp))
        inputs.append("bz")
    case(name, N("MatMulInteger", inputs, ["y"], name="n"), [], inits, out_t=TP.INT32)


mmi("mmi_a_zero_point_rank3", (3, 4, 4), (1, 4, 2), a_zp=(1, 4, 2))
mmi("mmi_a_zero_point_1x1", (4, 4), (4, 2), a_zp=(1, 1))
mmi("mmi_a_zero_point_one_value_ok", (4, 4), (4, 2), a_zp=(1,))
mmi("mmi_b_zero_point_per_column_ok", (4, 4), (4, 2), b_zp=(2,))
mmi("mmi_b_zero_point_1xn_ok", (4, 4), (4, 2), b_zp=(1, 2))
mmi("mmi_b_zero_point_batched_ok", (3, 4, 4), (3, 4, 2), b_zp=(3, 1, 2))
mmi("mmi_b_zero_point_per_row_of_b", (4, 4), (4, 2), b_zp=(4,))
mmi("mmi_b_zero_point_full", (4, 4), (4, 2), b_zp=(4, 2))
mmi("mmi_b_zero_point_n_on_batched_b", (3, 4, 4), (3, 4, 2), b_zp=(2,))
mmi("mmi_b_zero_point_other_batch", (3, 4, 4), (1, 4, 2), b_zp=(3, 1, 2))


def conv_integer(name, x_zp=(), w_zp=()):
    case(name, N("ConvInteger", ["x", "w", "xz", "wz"], ["y"], name="n"), [("x", TP.UINT8, [1, 3, 5, 5])],
         [u8("w", (4, 3, 3, 3)), u8("xz", x_zp), u8("wz", w_zp)], out_t=TP.INT32)


conv_integer("convinteger_ok")
conv_integer("convinteger_x_zero_point_per_channel", x_zp=(3,))
conv_integer("convinteger_w_zero_point_rank4", w_zp=(4, 1, 1, 1))


def qlinear(name, op, x_shape, w, x=(), wq=((), ()), y=(), wz_values=0):
    xs, ws, ys = (f32(n, np.full(s, v)) for n, s, v in (("xs", x, 0.02), ("ws", wq[1], 0.01), ("ys", y, 0.05)))
    wz = numpy_helper.from_array(np.full(wq[0], wz_values, np.int8) if np.isscalar(wz_values)
                                 else np.asarray(wz_values, np.int8).reshape(wq[0]), "wz")
    wt = numpy_helper.from_array(np.ones(w, np.int8), "w")
    case(name, N(op, ["x", "xs", "xz", "w", "ws", "wz", "ys", "yz"], ["y"], name="n"), [("x", TP.UINT8, x_shape)],
         [xs, u8("xz", x), wt, ws, wz, ys, u8("yz", y)], out_t=TP.UINT8)


qlinear("qlmm_ok", "QLinearMatMul", [2, 3, 4], (4, 5))
qlinear("qlmm_b_per_column_ok", "QLinearMatMul", [2, 3, 4], (4, 5), wq=((5,), (5,)))
qlinear("qlmm_b_batched_ok", "QLinearMatMul", [2, 3, 4], (2, 4, 5), wq=((2, 1, 5), (2, 1, 5)))
qlinear("qlmm_a_per_row", "QLinearMatMul", [2, 3, 4], (4, 5), x=(3,))
qlinear("qlmm_a_odd_length", "QLinearMatMul", [2, 3, 4], (4, 5), x=(2,))
qlinear("qlmm_a_1x1", "QLinearMatMul", [2, 3, 4], (4, 5), x=(1, 1))
qlinear("qlmm_y_per_column", "QLinearMatMul", [2, 3, 4], (4, 5), y=(5,))
qlinear("qlmm_b_per_row_of_b", "QLinearMatMul", [2, 3, 4], (4, 5), wq=((4,), (4,)))
qlinear("qlconv_ok", "QLinearConv", [1, 3, 5, 5], (4, 3, 3, 3))
qlinear("qlconv_w_per_channel_ok", "QLinearConv", [1, 3, 5, 5], (4, 3, 3, 3), wq=((4,), (4,)))
qlinear("qlconv_w_scale_per_channel_ok", "QLinearConv", [1, 3, 5, 5], (4, 3, 3, 3), wq=((), (4,)))
qlinear("qlconv_w_rank4", "QLinearConv", [1, 3, 5, 5], (4, 3, 3, 3), wq=((4, 1, 1, 1), (4, 1, 1, 1)))
qlinear("qlconv_w_per_input_channel", "QLinearConv", [1, 3, 5, 5], (4, 3, 3, 3), wq=((3,), (3,)))
qlinear("qlconv_w_zero_points_differ_ok", "QLinearConv", [1, 3, 5, 5], (4, 3, 3, 3), wq=((4,), (4,)), wz_values=[0, 1, 0, 0])
qlinear("qlconv_x_per_channel", "QLinearConv", [1, 3, 5, 5], (4, 3, 3, 3), x=(3,))
qlinear("qlconv_y_per_channel", "QLinearConv", [1, 3, 5, 5], (4, 3, 3, 3), y=(4,))


# Inputs that hold one number, or one shape, in ranks onnxruntime refuses; a scalar through
# Transpose/Slice (np.ascontiguousarray made it 1-D); keepdims / noop_with_empty_axes other
# than 0/1, which onnxruntime reads as "on only when 1".
case("cumsum_axis_rank2", N("CumSum", ["x", "a"], ["y"], name="n"), [("x", F, [2, 6])], [i64("a", [[1]])])
case("cumsum_axis_two_values", N("CumSum", ["x", "a"], ["y"], name="n"), [("x", F, [2, 6])], [i64("a", [1, 1])])
case("cumsum_axis_one_value_ok", N("CumSum", ["x", "a"], ["y"], name="n"), [("x", F, [2, 6])], [i64("a", [1])])
case("cumsum_axis_runtime_vector", N("CumSum", ["x", "a"], ["y"], name="n"), [("x", F, [2, 6]), ("a", I, [2])])
case("range_start_vector", N("Range", ["s", "l", "d"], ["y"], name="n"), [("s", F, [2])], [f32("l", 5), f32("d", 1)])
case("range_start_1x1", N("Range", ["s", "l", "d"], ["y"], name="n"), [("s", F, [1, 1])], [f32("l", 5), f32("d", 1)])
case("range_start_one_value_ok", N("Range", ["s", "l", "d"], ["y"], name="n"), [("s", F, [1])], [f32("l", 5), f32("d", 1)])
case("range_const_delta_vector", N("Range", ["s", "l", "d"], ["y"], name="n"), [], [f32("s", 0), f32("l", 5), f32("d", [1, 1])])
case("reshape_shape_scalar", N("Reshape", ["x", "s"], ["y"], name="n"), [("x", F, [1])], [i64("s", 1)])
case("reshape_shape_scalar_runtime", N("Reshape", ["x", "s"], ["y"], name="n"), [("x", F, [1]), ("s", I, [])])
case("transpose_scalar_ok", N("Transpose", ["x"], ["y"], name="n"), [("x", F, [])])
case("transpose_folded_scalar_ok", [N("Transpose", ["c"], ["t"], name="n"), N("Add", ["t", "x"], ["y"], name="add")],
     [("x", F, [])], [f32("c", 2.0)])
case("slice_scalar", N("Slice", ["x", "s", "e"], ["y"], name="n"), [("x", F, [])], [i64("s", np.zeros(0)), i64("e", np.zeros(0))])
case("reduce_keepdims_7_ok", N("ReduceMax", ["x"], ["y"], name="n", keepdims=7), [("x", F, [2, 6])])
case("reduce_noop_2_ok", N("ReduceSum", ["x", "a"], ["y"], name="n", noop_with_empty_axes=2), [("x", F, [2, 6])], [i64("a", np.zeros(0))])


# Found by the seed-4 fuzz run and probing around it: a reduction naming an axis twice
# (onnxruntime reduces it once; numpy refused), and the scales / zero points of the other
# quantized ops -- DequantizeLinear's zero point not shaped like its scale, QGemm's, the
# com.microsoft QLinear* ops' (QLinearAdd/Mul: rank 0 only).
case("reduce_duplicate_axes_ok", N("ReduceMean", ["x"], ["y"], name="n", axes=[1, -2], keepdims=0), [("x", F, [4, 3, 4])], opset=13)
case("reduce_duplicate_axes_kept_ok", N("ReduceMax", ["x"], ["y"], name="n", axes=[0, 0, 2]), [("x", F, [4, 3, 4])], opset=13)
case("reduce_duplicate_axes_input_ok", N("ReduceSum", ["x", "a"], ["y"], name="n", keepdims=0), [("x", F, [4, 3, 4])], [i64("a", [-2, -2])])
case("dequant_zero_point_not_like_scale", N("DequantizeLinear", ["x", "s", "z"], ["y"], name="n", axis=0),
     [("x", TP.UINT8, [2, 3, 4])], [f32("s", 0.1), u8("z", (2,))])
case("dequant_scalar_zero_point_per_axis_scale", N("DequantizeLinear", ["x", "s", "z"], ["y"], name="n", axis=1),
     [("x", TP.UINT8, [2, 3, 4])], [f32("s", [0.1, 0.2, 0.3]), u8("z", ())])


def ms_case(name, node, inputs, inits, out_t):
    graph = helper.make_graph([node], "g", [_vi(*x) for x in inputs], [_vi("y", out_t, None)], list(inits))
    CASES[name] = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1)])


def i8(name, shape, value=0):
    return numpy_helper.from_array(np.full(shape, value, np.int8), name)


def qgemm(name, a=((), ()), b=((), ()), y=None):
    inits = [f32("as", np.full(a[1], 0.02)), i8("az", a[0], 1), i8("b", (5, 8), 1), f32("bs", np.full(b[1], 0.01)),
             i8("bz", b[0])]
    inputs = ["a", "as", "az", "b", "bs", "bz", ""]
    if y is not None:
        inits += [f32("ys", np.full(y, 0.05)), i8("yz", y)]
        inputs += ["ys", "yz"]
    ms_case(name, N("QGemm", inputs, ["y"], name="n", domain="com.microsoft", transB=1), [("a", TP.INT8, [4, 8])], inits,
            TP.INT8 if y is not None else F)


qgemm("qgemm_ok")
qgemm("qgemm_b_per_column_ok", b=((5,), (5,)), y=())
qgemm("qgemm_a_scale_per_row", a=((), (4,)))
qgemm("qgemm_b_per_k", b=((8,), (8,)))
qgemm("qgemm_b_rank2", b=((1, 5), (1, 5)))
qgemm("qgemm_y_per_column", y=(5,))
ms_case("qlinear_add_zero_point_of_one_value", N("QLinearAdd", ["x", "s", "z", "x", "s", "z2", "s", "z"], ["y"], name="n",
                                                 domain="com.microsoft"),
        [("x", TP.UINT8, [1, 3, 4, 4])], [f32("s", 0.1), u8("z", ()), u8("z2", (1,))], TP.UINT8)
ms_case("qlinear_gap_zero_point_of_one_value_ok", N("QLinearGlobalAveragePool", ["x", "s", "z", "s", "z2"], ["y"], name="n",
                                                    domain="com.microsoft", channels_last=0),
        [("x", TP.UINT8, [1, 3, 4, 4])], [f32("s", 0.1), u8("z", (1,)), u8("z2", ())], TP.UINT8)


# Empty tensors (the seed-3 ONNX run's one E10003: atc compiled an ArgMax of an empty axis that
# atc-sim could not run): ArgMax/ArgMin of an empty axis is refused as onnxruntime refuses it;
# ReduceMean of nothing is 0 in onnxruntime (numpy: nan); Softmax of an empty tensor is empty.
case("argmax_empty_axis", N("ArgMax", ["x"], ["y"], name="n", axis=-1, keepdims=0), [("x", F, [2, 0])], out_t=I)
case("argmin_empty_axis", N("ArgMin", ["x"], ["y"], name="n"), [("x", F, [0])], out_t=I)
case("argmax_empty_other_axis_ok", N("ArgMax", ["x"], ["y"], name="n", axis=-1), [("x", F, [0, 3])], out_t=I)
case("reduce_mean_of_nothing_ok", N("ReduceMean", ["x"], ["y"], name="n", keepdims=0), [("x", F, [2, 0])], opset=13)
case("softmax_empty_ok", N("Softmax", ["x"], ["y"], name="n"), [("x", F, [2, 0])])
case("logsoftmax_empty_ok", N("LogSoftmax", ["x"], ["y"], name="n"), [("x", F, [0])])
