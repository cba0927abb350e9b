"""A corpus of atc and ais_bench command lines as Ascend inference guides write them.

Each line is of our own making, in the shape the model-zoo guides use (relative paths, quoted
shapes, `--log=error`, single-dash gflags, AIPP configs of every input format, the dtype,
precision, switch-file and tuning flags of issue 11's table).  Every line must compile its
small model as written; the ais_bench lines then run the .om files the atc lines made.
"""
from __future__ import annotations

import json
import shlex

import numpy as np
import pytest

import cli
from simulator import cli as sim_cli

import models_small

# ---------------------------------------------------------------------------- the files

MODELS = {
    "resnet50.onnx": lambda: models_small.small_cnn(16, 16, 3),
    "yolov5s.onnx": lambda: models_small.small_cnn(16, 16, 3),
    "mobilenet_nhwc.onnx": lambda: models_small.small_cnn(16, 16, 3, layout="NHWC"),
    "crnn_gray.onnx": lambda: models_small.small_cnn(16, 16, 1),
    "bert_base.onnx": models_small.tiny_bert,
    "vit_mlp.onnx": models_small.mlp,
    "siamese.onnx": models_small.two_inputs,
    "c3d.onnx": models_small.video_cnn,
}

AIPP = {
    # ImageNet normalisation of an RGB image (the commonest config in the guides)
    "aipp_resnet50.config": """aipp_op{
    aipp_mode:static
    input_format : RGB888_U8
    src_image_size_w : 16
    src_image_size_h : 16
    mean_chn_0 : 124
    mean_chn_1 : 117
    mean_chn_2 : 104
    var_reci_chn_0 : 0.0171247538316637
    var_reci_chn_1 : 0.0175070028011204
    var_reci_chn_2 : 0.0174291938997821
}
""",
    # BGR-ordered camera frames for an RGB model, cropped out of a larger picture
    "aipp_bgr_crop.cfg": """# crop the centre and swap R/B
aipp_op {
    aipp_mode : static
    related_input_rank : 0
    input_format : RGB888_U8
    src_image_size_w : 20
    src_image_size_h : 20
    crop : true
    load_start_pos_h : 2
    load_start_pos_w : 2
    crop_size_w : 16
    crop_size_h : 16
    rbuv_swap_switch : true
    min_chn_0 : 0.0
    min_chn_1 : 0.0
    min_chn_2 : 0.0
    var_reci_chn_0 : 0.003921568627451
    var_reci_chn_1 : 0.003921568627451
    var_reci_chn_2 : 0.003921568627451
}
""",
    # letterboxed YOLO input: 16x12 picture padded to the 16x16 model input
    "aipp_yolov5_letterbox.cfg": """aipp_op {
    aipp_mode : static
    input_format : RGB888_U8
    src_image_size_w : 16
    src_image_size_h : 12
    padding : true
    top_padding_size : 2
    bottom_padding_size : 2
    padding_value : 114
    var_reci_chn_0 : 0.003921568627451
    var_reci_chn_1 : 0.003921568627451
    var_reci_chn_2 : 0.003921568627451
}
""",
    # NV12 from a video decoder, BT.601 video range to RGB (Huawei's sample matrix)
    "aipp_yuv420sp.cfg": """aipp_op {
    aipp_mode: static
    input_format : YUV420SP_U8
    src_image_size_w : 16
    src_image_size_h : 16
    csc_switch : true
    rbuv_swap_switch : false
    matrix_r0c0 : 298
    matrix_r0c1 : 0
    matrix_r0c2 : 409
    matrix_r1c0 : 298
    matrix_r1c1 : -100
    matrix_r1c2 : -208
    matrix_r2c0 : 298
    matrix_r2c1 : 516
    matrix_r2c2 : 0
    input_bias_0 : 16
    input_bias_1 : 128
    input_bias_2 : 128
    mean_chn_0 : 104
    mean_chn_1 : 117
    mean_chn_2 : 123
}
""",
    # NV21 (V before U), full range, to BGR, cropped
    "aipp_nv21_bgr.cfg": """aipp_op {
    aipp_mode : static
    input_format : YUV420SP_U8
    src_image_size_w : 20
    src_image_size_h : 18
    crop : true
    load_start_pos_w : 2
    load_start_pos_h : 2
    crop_size_w : 16
    crop_size_h : 16
    csc_switch : true
    rbuv_swap_switch : true
    matrix_r0c0 : 256
    matrix_r0c1 : 454
    matrix_r0c2 : 0
    matrix_r1c0 : 256
    matrix_r1c1 : -88
    matrix_r1c2 : -183
    matrix_r2c0 : 256
    matrix_r2c1 : 0
    matrix_r2c2 : 359
    input_bias_0 : 0
    input_bias_1 : 128
    input_bias_2 : 128
}
""",
    # grey-scale text lines for an OCR model
    "aipp_crnn_gray.cfg": """aipp_op {
    aipp_mode : static
    input_format : YUV400_U8
    src_image_size_w : 16
    src_image_size_h : 16
    min_chn_0 : 127.5
    var_reci_chn_0 : 0.0078431372549
}
""",
    # RGBA frames (alpha last: ax_swap) from a display pipeline
    "aipp_rgbx.cfg": """aipp_op {
    aipp_mode : static
    input_format : XRGB8888_U8
    ax_swap_switch : true
    src_image_size_w : 16
    src_image_size_h : 16
    mean_chn_0 : 128
    mean_chn_1 : 128
    mean_chn_2 : 128
    var_reci_chn_0 : 0.0078125
    var_reci_chn_1 : 0.0078125
    var_reci_chn_2 : 0.0078125
}
""",
    # XRGB with the alpha byte first, RGB -> YUV by CSC for a YUV-trained model
    "aipp_xrgb_to_yuv.cfg": """aipp_op {
    aipp_mode : static
    input_format : XRGB8888_U8
    src_image_size_w : 16
    src_image_size_h : 16
    csc_switch : true
    matrix_r0c0 : 66
    matrix_r0c1 : 129
    matrix_r0c2 : 25
    matrix_r1c0 : -38
    matrix_r1c1 : -74
    matrix_r1c2 : 112
    matrix_r2c0 : 112
    matrix_r2c1 : -94
    matrix_r2c2 : -18
    output_bias_0 : 16
    output_bias_1 : 128
    output_bias_2 : 128
}
""",
}

CONFIGS = {
    "fusion_switch.cfg": "ConvBatchnormFusionPass:off\nTbeEltwiseFusionPass:off\nV100NotRequantFusionPass:off\n",
    "fusion_off.cfg": "# as in the inference guide\nMatMulBiasAddFusionPass:off\nLayerNormONNXFusionPass:off\n",
    "fusion_switch.json": json.dumps({"Switch": {"GraphFusion": {"ALL": "off"}, "UBFusion": {"ALL": "off"}}}),
    "keep_dtype.cfg": "gelu\nOpType::SoftmaxV2\n",
    "keep_dtype_ln.cfg": "ln\n",
    "ops_info.json": json.dumps({"black-list": {"to-add": ["Gelu"]}, "white-list": {"to-add": ["SoftmaxV2"]}}),
    "customize_dtypes.cfg": "softmax::InputDtype:float32,OutputDtype:float32\n"
                            "OpType::Sigmoid:InputDtype:float16,OutputDtype:float16\n",
    "op_precision.ini": "[ByOpType]\nGelu=high_performance\n[ByNodeName]\nsoftmax=high_precision\n",
}

# ---------------------------------------------------------------------------- atc lines
# (command line, the .om it writes, words its log must hold)

ATC_LINES = [
    # plain conversions, the guides' boilerplate
    ("atc --framework=5 --model=./resnet50.onnx --output=resnet50_bs1 --input_format=NCHW "
     "--input_shape=\"image:1,3,16,16\" --log=error --soc_version=Ascend310P3", "resnet50_bs1.om", ()),
    ("atc --model=resnet50.onnx --framework=5 --output=resnet50_910 --input_format=NCHW "
     "--input_shape='image:1,3,16,16' --log=info --soc_version=Ascend910", "resnet50_910.om", ()),
    ("atc --model=resnet50.onnx --framework=5 --output=resnet50_b2 --soc_version=Ascend910B2",
     "resnet50_b2.om", ()),
    ("atc --model=resnet50.onnx --framework=5 --output=resnet50_910a --soc_version=Ascend910A --log=error",
     "resnet50_910a.om", ()),
    ("atc --framework=5 --model=./resnet50.onnx --output=resnet50_310 --input_format=NCHW "
     "--input_shape=\"image:1,3,16,16\" --log=error --soc_version=Ascend310", "resnet50_310.om", ()),
    # static AIPP with every input format, with and without small-channel
    ("atc --model=./resnet50.onnx --framework=5 --output=./resnet50_aipp --input_format=NCHW "
     "--input_shape=\"image:1,3,16,16\" --log=error --soc_version=Ascend310 "
     "--insert_op_conf=./aipp_resnet50.config --enable_small_channel=1", "resnet50_aipp.om", ()),
    ("atc --model=resnet50.onnx --framework=5 --output=resnet50_aipp_910 --soc_version=Ascend910 "
     "--insert_op_conf=aipp_resnet50.config", "resnet50_aipp_910.om", ()),
    ("atc --model=resnet50.onnx --framework=5 --output=resnet50_bgr --input_shape=image:1,3,16,16 "
     "--soc_version=Ascend310P3 --insert_op_conf=aipp_bgr_crop.cfg --enable_small_channel=1 --log=warning",
     "resnet50_bgr.om", ()),
    ("atc --model=yolov5s.onnx --framework=5 --output=yolov5s_bs1 --input_format=NCHW "
     "--input_shape=\"image:1,3,16,16\" --log=error --soc_version=Ascend310 "
     "--insert_op_conf=aipp_yolov5_letterbox.cfg --enable_small_channel=1 --output_type=FP16",
     "yolov5s_bs1.om", ()),
    ("atc --model=yolov5s.onnx --framework=5 --output=yolov5s_nv12 --input_format=NCHW "
     "--input_shape=\"image:1,3,16,16\" --soc_version=Ascend310P3 --insert_op_conf=aipp_yuv420sp.cfg "
     "--enable_small_channel=1", "yolov5s_nv12.om", ()),
    ("atc --model=yolov5s.onnx --framework=5 --output=yolov5s_nv21 --soc_version=Ascend910B2 "
     "--insert_op_conf=aipp_nv21_bgr.cfg --output_type=FP32", "yolov5s_nv21.om", ()),
    ("atc --model=crnn_gray.onnx --framework=5 --output=crnn_aipp --input_shape=\"image:1,1,16,16\" "
     "--input_format=NCHW --soc_version=Ascend310B1 --insert_op_conf=aipp_crnn_gray.cfg", "crnn_aipp.om", ()),
    ("atc --model=resnet50.onnx --framework=5 --output=resnet50_rgbx --soc_version=Ascend310P3 "
     "--insert_op_conf=aipp_rgbx.cfg --enable_small_channel=0", "resnet50_rgbx.om", ()),
    ("atc --model=resnet50.onnx --framework=5 --output=resnet50_xrgb_yuv --soc_version=Ascend910 "
     "--insert_op_conf=aipp_xrgb_to_yuv.cfg --precision_mode=allow_fp32_to_fp16", "resnet50_xrgb_yuv.om", ()),
    ("atc --model=mobilenet_nhwc.onnx --framework=5 --output=mobilenet_aipp --input_format=NHWC "
     "--input_shape=\"image:1,16,16,3\" --soc_version=Ascend310P3 --insert_op_conf=aipp_resnet50.config "
     "--enable_small_channel=1", "mobilenet_aipp.om", ()),
    ("atc --model=mobilenet_nhwc.onnx --framework=5 --output=mobilenet_yuv --input_format=NHWC "
     "--soc_version=Ascend910B2 --insert_op_conf=aipp_yuv420sp.cfg", "mobilenet_yuv.om", ()),
    # dtype control
    ("atc --model=resnet50.onnx --framework=5 --output=resnet50_fp16out --soc_version=Ascend310P3 "
     "--output_type=FP16 --log=error", "resnet50_fp16out.om", ()),
    ("atc --model=siamese.onnx --framework=5 --output=siamese_out --soc_version=Ascend310P3 "
     "--input_shape=\"a:2,8;b:2,8\" --output_type=\"relu:0:FP16;mul:0:FP32\"", "siamese_out.om", ()),
    ("atc --model=siamese.onnx --framework=5 --output=siamese_fp16in --soc_version=Ascend910 "
     "--input_fp16_nodes=\"a;b\" --output_type=FP16", "siamese_fp16in.om", ()),
    ("atc --model=siamese.onnx --framework=5 --output=siamese_a16 --soc_version=Ascend910B4 "
     "--input_fp16_nodes=a --output_type=relu:0:FP16", "siamese_a16.om", ()),
    ("atc --model=resnet50.onnx --framework=5 --output=resnet50_u8out --soc_version=Ascend310 "
     "--output_type=UINT8", "resnet50_u8out.om", ()),
    # implementation modes (the BERT and ViT guides)
    ("atc --framework=5 --model=bert_base.onnx --output=bert_base_bs1 --input_format=ND "
     "--input_shape=\"input_ids:1,8;segment_ids:1,8;input_mask:1,8\" --log=error --soc_version=Ascend310P3 "
     "--op_select_implmode=high_performance --optypelist_for_implmode=\"Gelu\"", "bert_base_bs1.om", ()),
    ("atc --framework=5 --model=bert_base.onnx --output=bert_base_hp --input_format=ND "
     "--input_shape=\"input_ids:1,8;segment_ids:1,8;input_mask:1,8\" --soc_version=Ascend910B3 "
     "--op_select_implmode=high_performance", "bert_base_hp.om", ()),
    ("atc --framework=5 --model=vit_mlp.onnx --output=vit_hp --soc_version=Ascend310P3 "
     "--op_select_implmode=high_performance --optypelist_for_implmode=Gelu,Sigmoid --log=info",
     "vit_hp.om", ("impl high_performance",)),
    ("atc --framework=5 --model=vit_mlp.onnx --output=vit_hprec --soc_version=Ascend910 "
     "--op_select_implmode=high_precision --optypelist_for_implmode=SoftmaxV2", "vit_hprec.om", ()),
    ("atc --framework=5 --model=vit_mlp.onnx --output=vit_all --soc_version=Ascend910 "
     "--op_select_implmode=high_performance_for_all", "vit_all.om", ()),
    ("atc --framework=5 --model=vit_mlp.onnx --output=vit_opprec --soc_version=Ascend310P3 "
     "--op_precision_mode=op_precision.ini --log=info", "vit_opprec.om", ("Precision override",)),
    # precision overrides
    ("atc --framework=5 --model=vit_mlp.onnx --output=vit_mix --soc_version=Ascend910 "
     "--precision_mode=allow_mix_precision --modify_mixlist=ops_info.json", "vit_mix.om", ()),
    ("atc --framework=5 --model=vit_mlp.onnx --output=vit_keep --soc_version=Ascend310P3 "
     "--keep_dtype=keep_dtype.cfg --log=info", "vit_keep.om", ("Precision override",)),
    ("atc --framework=5 --model=bert_base.onnx --output=bert_keep --soc_version=Ascend310P3 "
     "--input_shape=\"input_ids:1,8;segment_ids:1,8;input_mask:1,8\" --input_format=ND "
     "--keep_dtype=keep_dtype_ln.cfg", "bert_keep.om", ()),
    ("atc --framework=5 --model=vit_mlp.onnx --output=vit_custom --soc_version=Ascend910B2 "
     "--precision_mode=force_fp32 --customize_dtypes=customize_dtypes.cfg", "vit_custom.om", ()),
    ("atc --framework=5 --model=vit_mlp.onnx --output=vit_mix16 --soc_version=Ascend310P3 "
     "--precision_mode=allow_mix_precision_fp16", "vit_mix16.om", ()),
    ("atc --framework=5 --model=vit_mlp.onnx --output=vit_v2 --soc_version=Ascend910B2 "
     "--precision_mode_v2=mixed_float16", "vit_v2.om", ()),
    ("atc --framework=5 --model=resnet50.onnx --output=resnet50_fp32 --soc_version=Ascend910 "
     "--precision_mode=force_fp32 --output_type=FP32", "resnet50_fp32.om", ()),
    # fusion switch files, both forms
    ("atc --model=resnet50.onnx --framework=5 --output=resnet50_nofuse --soc_version=Ascend310P3 "
     "--fusion_switch_file=fusion_switch.cfg", "resnet50_nofuse.om", ("W10101",)),
    ("atc --model=vit_mlp.onnx --framework=5 --output=vit_nofuse --soc_version=Ascend310P3 "
     "--fusion_switch_file=./fusion_off.cfg --log=info", "vit_nofuse.om", ()),
    ("atc --model=bert_base.onnx --framework=5 --output=bert_nofuse --soc_version=Ascend910 "
     "--input_format=ND --fusion_switch_file=fusion_switch.json", "bert_nofuse.om", ()),
    # tuning and memory flags: accepted, W10100
    ("atc --model=resnet50.onnx --framework=5 --output=resnet50_tune --soc_version=Ascend310P3 "
     "--auto_tune_mode=\"RL,GA\"", "resnet50_tune.om", ("W10100",)),
    ("atc --model=resnet50.onnx --framework=5 --output=resnet50_buf --soc_version=Ascend310P3 "
     "--buffer_optimize=off_optimize --disable_reuse_memory=1", "resnet50_buf.om", ("W10100",)),
    ("atc --model=vit_mlp.onnx --framework=5 --output=vit_cache --soc_version=Ascend910B4 "
     "--op_compiler_cache_mode=disable --enable_single_stream=true --log=error", "vit_cache.om", ()),
    ("atc --model=yolov5s.onnx --framework=5 --output=yolov5s_dbg --soc_version=Ascend310P3 "
     "--insert_op_conf=aipp_resnet50.config --op_debug_level=0 --enable_small_channel=1 "
     "--buffer_optimize=l2_optimize", "yolov5s_dbg.om", ("W10100",)),
    # other input formats
    ("atc --model=c3d.onnx --framework=5 --output=c3d_bs1 --input_format=NCDHW "
     "--input_shape=\"clip:1,3,4,8,8\" --soc_version=Ascend910 --log=error", "c3d_bs1.om", ()),
    ("atc --model=c3d.onnx --framework=5 --output=c3d_fp16 --input_format=NCDHW --soc_version=Ascend910B1 "
     "--output_type=FP16 --input_fp16_nodes=clip", "c3d_fp16.om", ()),
    ("atc --model=mobilenet_nhwc.onnx --framework=5 --output=mobilenet_bs1 --input_format=NHWC "
     "--input_shape=\"image:1,16,16,3\" --soc_version=Ascend310P3", "mobilenet_bs1.om", ()),
    # single-dash gflags, as some scripts write them
    ("atc -model=resnet50.onnx -framework=5 -output=resnet50_gflags -soc_version=Ascend310 "
     "-input_shape=image:1,3,16,16 -log=error", "resnet50_gflags.om", ()),
    ("atc -model vit_mlp.onnx -framework 5 -output vit_gflags -soc_version Ascend910 "
     "-op_select_implmode high_performance -optypelist_for_implmode Gelu", "vit_gflags.om", ()),
    ("atc --model=yolov5s.onnx --framework=5 -output=yolov5s_mixed --soc_version=Ascend310P3 "
     "-insert_op_conf=aipp_yuv420sp.cfg --enable_small_channel=1 -output_type=FP16", "yolov5s_mixed.om", ()),
    # out_nodes and everything at once
    ("atc --model=siamese.onnx --framework=5 --output=siamese_relu --soc_version=Ascend310P3 "
     "--out_nodes=\"relu:0\" --output_type=FP16", "siamese_relu.om", ()),
    ("atc --framework=5 --model=bert_base.onnx --output=bert_full --input_format=ND "
     "--input_shape=\"input_ids:1,8;segment_ids:1,8;input_mask:1,8\" --log=error --soc_version=Ascend310P3 "
     "--precision_mode=allow_mix_precision --modify_mixlist=ops_info.json "
     "--op_select_implmode=high_performance --optypelist_for_implmode=Gelu --output_type=FP16 "
     "--fusion_switch_file=fusion_off.cfg --buffer_optimize=off_optimize", "bert_full.om", ()),
]


# ---------------------------------------------------------------------------- ais_bench lines
# run after the atc lines, on the .om files they wrote; (command line, files it must write)

AIS_BENCH_LINES = [
    ("python3 -m ais_bench --model=resnet50_bs1.om --output=./result --output_dirname=resnet50 --outfmt=BIN",
     ["result/resnet50/pure_infer_data_0.bin", "result/resnet50_summary.json"]),
    ("python3 -m ais_bench --model resnet50_aipp.om --input ./prep_aipp --output ./result "
     "--output_dirname aipp --outfmt NPY --device 0",
     ["result/aipp/img_0_0.npy", "result/aipp/img_1_0.npy"]),
    ("python3 -m ais_bench --model yolov5s_nv12.om --input prep_nv12 --output result --output_dirname yolo "
     "--outfmt BIN --device 0,1", ["result/yolo/frame_0.bin"]),
    ("python3 -m ais_bench --model siamese_out.om --input prep_a,prep_b --output result "
     "--output_dirname siamese --outfmt NPY", ["result/siamese/pair0_0.npy", "result/siamese/pair0_1.npy",
                                               "result/siamese/pair1_0.npy"]),
    ("python3 -m ais_bench --model bert_base_bs1.om --loop 10 --pure_data_type zero --display_all_summary 1",
     []),
    ("python3 -m ais_bench --model vit_hp.om --loop 5 --warmup_count 2 --debug 1", []),
    ("python3 -m ais_bench --model c3d_bs1.om --output result --output_dirname c3d --profiler 1",
     ["result/profiler/op_statistic_0.csv", "result/profiler/op_summary_0.csv"]),
    ("python3 -m ais_bench --model=crnn_aipp.om --batchsize=1 --loop=3 --device=0", []),
    ("python3 -m ais_bench --model resnet50_aipp.om --input prep_aipp --output result --output_dirname on_310p3 "
     "--soc_version Ascend310P3", ["result/on_310p3/img_0_0.npy"]),
]


def _datasets(work):
    """The preprocessed inputs ais_bench reads: .bin image files, NV12 frames, paired .npy."""
    rng = np.random.default_rng(4)
    (work / "prep_aipp").mkdir()
    for k in range(2):
        rng.integers(0, 256, (1, 16, 16, 3), dtype=np.uint8).tofile(work / "prep_aipp" / f"img_{k}.bin")
    (work / "prep_nv12").mkdir()
    rng.integers(0, 256, (1, 24, 16, 1), dtype=np.uint8).tofile(work / "prep_nv12" / "frame.bin")
    for name in ("prep_a", "prep_b"):
        (work / name).mkdir()
        for k in range(2):
            np.save(work / name / f"pair{k}.npy", rng.standard_normal((2, 8)).astype(np.float32))


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    work = tmp_path_factory.mktemp("corpus")
    for name, make in MODELS.items():
        models_small.save(make(), work / name)
    for name, text in {**AIPP, **CONFIGS}.items():
        (work / name).write_text(text)
    return work


def test_the_corpus_is_big_and_covers_the_table():
    lines = [line for line, _, _ in ATC_LINES]
    assert len(lines) >= 40 and len(set(lines)) == len(lines)
    text = " ".join(lines)
    for flag in ("--insert_op_conf", "--enable_small_channel", "--op_select_implmode", "--optypelist_for_implmode",
                 "--output_type", "--input_fp16_nodes", "--keep_dtype", "--modify_mixlist", "--customize_dtypes",
                 "--op_precision_mode", "--fusion_switch_file", "--auto_tune_mode", "--buffer_optimize",
                 "--disable_reuse_memory", "--input_format=NCDHW", "--input_format=NHWC", " -output="):
        assert flag in text, flag
    formats = {line.split(":", 1)[1].strip() for t in AIPP.values() for line in t.splitlines()
               if line.strip().startswith("input_format")}
    assert formats == {"RGB888_U8", "YUV420SP_U8", "YUV400_U8", "XRGB8888_U8"}
    chips = {a.split("=", 1)[1] for line in lines for a in shlex.split(line) if "soc_version=" in a}
    assert chips >= {"Ascend310", "Ascend310B1", "Ascend310P3", "Ascend910", "Ascend910A", "Ascend910B1",
                     "Ascend910B2", "Ascend910B3", "Ascend910B4"}, chips


@pytest.mark.parametrize("line,om,words", ATC_LINES, ids=[om for _, om, _ in ATC_LINES])
def test_atc_line_compiles_as_written(corpus, monkeypatch, capsys, line, om, words):
    monkeypatch.chdir(corpus)
    argv = shlex.split(line)
    assert argv[0] == "atc"
    rc = cli.main(argv[1:])
    out = capsys.readouterr()
    text = out.out + out.err
    assert rc == 0 and cli.SUCCESS_LINE in text, text
    assert (corpus / om).is_file()
    for word in words:
        assert word in text, (word, text)


def test_ais_bench_lines_run_as_written(corpus, monkeypatch, capsys):
    monkeypatch.chdir(corpus)
    needed = {om for _, om, _ in ATC_LINES}
    for line, _ in AIS_BENCH_LINES:
        om = next(a.split("=", 1)[-1] for a in shlex.split(line) if a.endswith(".om"))
        assert om in needed
        if not (corpus / om).exists():      # run alone (-k): compile what the line needs
            atc_line = next(line for line, out, _ in ATC_LINES if out == om)
            assert cli.main(shlex.split(atc_line)[1:]) == 0
    _datasets(corpus)
    for line, files in AIS_BENCH_LINES:
        argv = shlex.split(line)
        assert argv[:3] == ["python3", "-m", "ais_bench"]
        rc = sim_cli.main(argv[3:])
        text = capsys.readouterr().out
        assert rc == 0 and "Traceback" not in text, (line, text)
        assert "NPU_compute_time" in text
        for path in files:
            assert (corpus / path).is_file(), (line, path)
