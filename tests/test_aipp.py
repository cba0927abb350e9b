"""Static AIPP (--insert_op_conf): the config file's syntax and refusals (with their lines),
the Aipp op GE inserts after the Data node, its numerics against an independent per-pixel
reference for every input format, --compare against onnxruntime, and its price."""
from __future__ import annotations

import csv

import numpy as np
import pytest

from atc_py.aipp_config import parse_aipp_text
from codegen.om_import import load_om_graph
from ge.errors import AtcError

import models_small
from helpers import run_ort
from test_atc_flags import atc, base, failed, run_sim, work  # noqa: F401  (fixtures)

RGB_NORMALISE = """aipp_op {
    aipp_mode : static
    related_input_rank : 0
    input_format : RGB888_U8
    src_image_size_w : 16
    src_image_size_h : 16
    mean_chn_0 : 124
    mean_chn_1 : 116
    mean_chn_2 : 104
    min_chn_0 : 0.5
    var_reci_chn_0 : 0.0171
    var_reci_chn_1 : 0.0175
    var_reci_chn_2 : 0.0174
}
"""

YUV_TO_RGB = """aipp_op {
    aipp_mode: static
    input_format : YUV420SP_U8
    src_image_size_w : 16
    src_image_size_h : 16
    csc_switch : true
    rbuv_swap_switch : false
    matrix_r0c0 : 256
    matrix_r0c1 : 0
    matrix_r0c2 : 359
    matrix_r1c0 : 256
    matrix_r1c1 : -88
    matrix_r1c2 : -183
    matrix_r2c0 : 256
    matrix_r2c1 : 454
    matrix_r2c2 : 0
    input_bias_0 : 0
    input_bias_1 : 128
    input_bias_2 : 128
    var_reci_chn_0 : 0.00392157
    var_reci_chn_1 : 0.00392157
    var_reci_chn_2 : 0.00392157
}
"""

XRGB_CROP_PAD = """aipp_op {
    aipp_mode : static
    input_format : XRGB8888_U8
    ax_swap_switch : true        # RGBX in memory
    rbuv_swap_switch : true      # and BGR for the model
    src_image_size_w : 20
    src_image_size_h : 18
    crop : true
    load_start_pos_w : 3
    load_start_pos_h : 2
    crop_size_w : 14
    crop_size_h : 12
    padding : true
    left_padding_size : 1
    right_padding_size : 1
    top_padding_size : 2
    bottom_padding_size : 2
    padding_value : 0
    mean_chn_0 : 128
    mean_chn_1 : 128
    mean_chn_2 : 128
}
"""

GRAY = """aipp_op {
    aipp_mode : static
    input_format : YUV400_U8
    src_image_size_w : 16
    src_image_size_h : 16
    min_chn_0 : 127.5
    var_reci_chn_0 : 0.0078431
}
"""


# --------------------------------------------------------------------------- independent reference

def reference(raw: np.ndarray, text: str, channels: int = 3) -> np.ndarray:
    """The documented AIPP steps pixel by pixel, in plain Python: swap -> crop -> CSC ->
    (x - mean - min) * var_reci -> padding; NCHW float32 (min/var_reci as fp16 registers)."""
    p = parse_aipp_text(text)[0].params
    fmt = p["input_format"]
    n = raw.shape[0]
    h = p["src_image_size_h"]
    w = p["src_image_size_w"]
    y0, x0 = (p["load_start_pos_h"], p["load_start_pos_w"]) if p["crop"] else (0, 0)
    ch, cw = (p["crop_size_h"] or h, p["crop_size_w"] or w) if p["crop"] else (h, w)
    top, bottom, left, right = ((p["top_padding_size"], p["bottom_padding_size"], p["left_padding_size"],
                                 p["right_padding_size"]) if p["padding"] else (0, 0, 0, 0))
    out = np.full((n, channels, ch + top + bottom, cw + left + right), p["padding_value"], np.float32)
    f16 = lambda v: float(np.float16(v))  # noqa: E731
    for b in range(n):
        for i in range(ch):
            for j in range(cw):
                r, c = y0 + i, x0 + j
                if fmt == "YUV420SP_U8":
                    px = [int(raw[b, r, c, 0]), int(raw[b, h + r // 2, (c // 2) * 2, 0]),
                          int(raw[b, h + r // 2, (c // 2) * 2 + 1, 0])]
                elif fmt == "XRGB8888_U8":
                    px = [int(v) for v in (raw[b, r, c, 0:3] if p["ax_swap_switch"] else raw[b, r, c, 1:4])]
                else:
                    px = [int(v) for v in raw[b, r, c, :]]
                if p["rbuv_swap_switch"] and len(px) == 3:
                    px = [px[2], px[1], px[0]] if fmt != "YUV420SP_U8" else [px[0], px[2], px[1]]
                if p["csc_switch"]:
                    m = [[p[f"matrix_r{rr}c{cc}"] for cc in range(3)] for rr in range(3)]
                    if fmt == "YUV420SP_U8":
                        px = [sum(m[k][q] * (px[q] - p[f"input_bias_{q}"]) for q in range(3)) >> 8 for k in range(3)]
                    else:
                        px = [(sum(m[k][q] * px[q] for q in range(3)) >> 8) + p[f"output_bias_{k}"] for k in range(3)]
                    px = [min(255, max(0, v)) for v in px]
                for k in range(channels):
                    out[b, k, top + i, left + j] = (px[k] - p[f"mean_chn_{k}"] - f16(p[f"min_chn_{k}"])) * \
                        f16(p[f"var_reci_chn_{k}"])
    return out


def _compile(work, capsys, text, h=16, w=16, channels=3, *extra, layout="NCHW"):
    model = models_small.save(models_small.small_cnn(h, w, channels, layout), work / "cnn.onnx")
    conf = work / "aipp.cfg"
    conf.write_text(text)
    rc, out = atc(capsys, *base(model, work / "cnn"), f"--insert_op_conf={conf}", *extra)
    return rc, out, model


# --------------------------------------------------------------------------- the inserted op

def test_aipp_op_is_inserted_after_the_data_node(work, capsys):
    rc, text, _ = _compile(work, capsys, RGB_NORMALISE)
    assert rc == 0, text
    loaded = load_om_graph(str(work / "cnn.om"))
    (raw,) = loaded.graph.inputs
    assert (raw.name, str(raw.desc.dtype), raw.desc.shape, raw.desc.format) == ("image", "uint8", (1, 16, 16, 3),
                                                                                 "NHWC")
    aipp = loaded.graph.nodes[0]
    assert aipp.op_type == "Aipp" and aipp.name == "image_0_huawei_aipp" and aipp.inputs[0] is raw
    assert aipp.attrs["aipp"]["input_format"] == "RGB888_U8" and aipp.attrs["aipp"]["mean_chn_0"] == 124
    assert str(loaded.compute_dtypes[aipp.name]) == "float16"              # the AIPP unit writes fp16


@pytest.mark.parametrize("text,h,w,channels", [(RGB_NORMALISE, 16, 16, 3), (YUV_TO_RGB, 16, 16, 3),
                                               (XRGB_CROP_PAD, 16, 16, 3), (GRAY, 16, 16, 1)])
def test_aipp_numerics_match_the_per_pixel_reference_and_onnxruntime(work, capsys, text, h, w, channels):
    rc, out, model = _compile(work, capsys, text, h, w, channels, "--precision_mode=force_fp32")
    assert rc == 0, out
    loaded = load_om_graph(str(work / "cnn.om"))
    raw_shape = loaded.graph.inputs[0].desc.shape
    raw = np.random.default_rng(11).integers(0, 256, raw_shape, dtype=np.uint8)
    raw.tofile(work / "img.bin")                                          # ais_bench's raw input form
    rc, out = run_sim(capsys, "--model", work / "cnn.om", "--input", work / "img.bin", "--output", work / "o")
    assert rc == 0, out
    got = np.load(work / "o" / "y.npy")
    image = reference(raw, text, channels)
    from codegen.aipp import preprocess
    kernel = preprocess(raw, loaded.graph.nodes[0].attrs)
    np.testing.assert_allclose(kernel.astype(np.float32), image, rtol=1e-3, atol=1e-3)   # fp16 output
    expected = run_ort(models_small.small_cnn(h, w, channels), {"image": image})["y"]
    np.testing.assert_allclose(got, expected, rtol=2e-3, atol=2e-3)
    rc, out = run_sim(capsys, "--model", work / "cnn.om", "--compare", model)
    assert rc == 0 and "compare PASS" in out and "(fp16)" in out, out


def test_yuv420sp_nv21_swaps_u_and_v(work, capsys):
    nv21 = YUV_TO_RGB.replace("rbuv_swap_switch : false", "rbuv_swap_switch : true")
    raw = np.random.default_rng(2).integers(0, 256, (1, 24, 16, 1), dtype=np.uint8)
    from codegen.aipp import preprocess
    attrs = {"aipp": parse_aipp_text(nv21)[0].params, "output_channels": 3, "output_format": "NCHW",
             "output_dtype": "float32", "src_h": 16, "src_w": 16}
    np.testing.assert_allclose(preprocess(raw, attrs, round_fp16=False), reference(raw, nv21), rtol=1e-6)
    swapped = raw.copy()
    uv = swapped[0, 16:, :, 0].reshape(8, 8, 2)
    swapped[0, 16:, :, 0] = uv[..., ::-1].reshape(8, 16)
    attrs["aipp"] = parse_aipp_text(YUV_TO_RGB)[0].params
    np.testing.assert_allclose(preprocess(raw, {**attrs, "aipp": parse_aipp_text(nv21)[0].params}),
                               preprocess(swapped, attrs))


def test_aipp_on_an_nhwc_model(work, capsys):
    rc, out, model = _compile(work, capsys, RGB_NORMALISE, 16, 16, 3, "--input_format=NHWC", layout="NHWC")
    assert rc == 0, out
    rc, out = run_sim(capsys, "--model", work / "cnn.om", "--compare", model)
    assert rc == 0 and "compare PASS" in out, out


def test_csc_default_matrix_is_ge_s(work, capsys):
    """csc_switch without a matrix: GE's default YUV -> BGR (BT.601 narrow) rows."""
    p = parse_aipp_text("aipp_op { aipp_mode: static input_format: YUV420SP_U8 csc_switch: true }")[0].params
    assert [p[f"matrix_r0c{c}"] for c in range(3)] == [298, 516, 0]
    assert [p[f"input_bias_{i}"] for i in range(3)] == [16, 128, 128]
    p = parse_aipp_text("aipp_op { aipp_mode: static input_format: RGB888_U8 csc_switch: true }")[0].params
    assert [p[f"matrix_r0c{c}"] for c in range(3)] == [66, 129, 25]
    assert [p[f"output_bias_{i}"] for i in range(3)] == [16, 128, 128]


def test_aipp_kernel_is_priced(work, capsys):
    rc, out, _ = _compile(work, capsys, YUV_TO_RGB)
    assert rc == 0, out
    rc, out = run_sim(capsys, "--model", work / "cnn.om", "--profile", work / "prof")
    assert rc == 0, out
    with open(work / "prof" / "op_summary_0.csv", newline="") as f:
        rows = {r["OP Type"]: r for r in csv.DictReader(f)}
    assert float(rows["Aipp"]["Task Duration(us)"]) > 0
    assert rows["Aipp"]["Input Data Types"] == "DT_UINT8" and rows["Aipp"]["Output Data Types"] == "DT_FLOAT16"


def test_enable_small_channel_is_accepted_and_recorded(work, capsys):
    rc, out, _ = _compile(work, capsys, RGB_NORMALISE, 16, 16, 3, "--enable_small_channel=1")
    assert rc == 0, out
    from codegen.om_import import load_om_graph as load
    from om_format import attrs as om_attrs
    from om_format.container import load_model_def
    model = load_model_def(load(str(work / "cnn.om")).om)
    assert om_attrs.get_attrs(model.attr)["enable_small_channel"] == 1
    rc, out, _ = _compile(work, capsys, RGB_NORMALISE, 16, 16, 3, "--enable_small_channel=2")
    failed(rc, out, "E10001")


# --------------------------------------------------------------------------- refusals

@pytest.mark.parametrize("text,words", [
    ("aipp_op {\n aipp_mode : dynamic\n max_src_image_size : 752640\n}\n", "line 2: aipp_mode: dynamic"),
    ("aipp_op {\n aipp_mode : static\n input_format : RGB888_U8\n mean_chn_0 : 123.68\n}\n", "line 4: mean_chn_0"),
    ("aipp_op {\n aipp_mode : static\n input_format : RGB888_U8\n csc : true\n}\n", "line 4: [csc]"),
    ("aipp_op {\n aipp_mode : static\n input_format : BGR888_U8\n}\n", "line 3: input_format [BGR888_U8]"),
    ("aipp_op {\n aipp_mode : static\n input_format : YUYV_U8\n}\n", "line 3: input_format YUYV_U8"),
    ("aipp_op {\n aipp_mode : static\n}\n", "input_format is not set"),
    ("aipp_op {\n input_format : RGB888_U8\n}\n", "aipp_mode is not set"),
    ("aipp_op {\n aipp_mode : static\n input_format : RGB888_U8\n crop : yes\n}\n", "line 4: crop must be"),
    ("aipp_op {\n aipp_mode : static\n input_format : RGB888_U8\n", "never closed"),
    ("aipp_op {\n aipp_mode : static\n input_format : RGB888_U8\n resize : true\n}\n", "line 4: resize"),
    ("aipp_op {\n aipp_mode : static\n input_format : YUV420SP_U8\n src_image_size_w : 15\n}\n", "line 4"),
    ("aipp_op {\n aipp_mode : static\n input_format : RGB888_U8\n src_image_size_h : -1\n}\n", "line 4"),
    ("aipp_op {\n aipp_mode : static\n input_format : RGB888_U8\n var_reci_chn_0 : 1\n var_reci_chn_0 : 2\n}\n",
     "line 5: [var_reci_chn_0] is given twice"),
    ("multi_shape_op {\n}\n", "line 1: multi_shape_op"),
    ("aipp_op { aipp_mode : static input_format : RGB888_U8 }\naipp_op { aipp_mode : static "
     "input_format : RGB888_U8 }\n", "configured twice"),
    ("", "no aipp_op"),
])
def test_malformed_configs_name_the_line(work, capsys, text, words):
    rc, out, _ = _compile(work, capsys, text)
    failed(rc, out, "E10001", work / "cnn.om")
    assert words in out and "--insert_op_conf" in out and "aipp.cfg" in out


@pytest.mark.parametrize("text,words", [
    (RGB_NORMALISE.replace("related_input_rank : 0", "related_input_rank : 1"), "related_input_rank 1"),
    (RGB_NORMALISE.replace("src_image_size_w : 16", "src_image_size_w : 20"), "aipp output is 16x20"),
    (XRGB_CROP_PAD.replace("crop_size_w : 14", "crop_size_w : 18"), "goes past the source image"),
    (GRAY, "gives 1"),
])
def test_configs_that_do_not_fit_the_model_are_refused(work, capsys, text, words):
    rc, out, _ = _compile(work, capsys, text)
    failed(rc, out, "E10001", work / "cnn.om")
    assert words in out


def test_aipp_input_cannot_also_be_fp16(work, capsys):
    rc, out, _ = _compile(work, capsys, RGB_NORMALISE, 16, 16, 3, "--input_fp16_nodes=image")
    failed(rc, out, "E10034", work / "cnn.om")


def test_aipp_needs_an_image_layout(work, capsys):
    rc, out, _ = _compile(work, capsys, RGB_NORMALISE, 16, 16, 3, "--input_format=ND")
    failed(rc, out, "E10001", work / "cnn.om")
    assert "NCHW or NHWC" in out


def test_parser_accepts_comments_fullwidth_colons_and_one_line_blocks():
    configs = parse_aipp_text("# comment\naipp_op{ aipp_mode ： static  input_format : RGB888_U8 "
                              "related_input_rank: 0 } # trailing\n")
    assert configs[0].params["input_format"] == "RGB888_U8" and configs[0].line == 2
    with pytest.raises(AtcError):
        parse_aipp_text("aipp_op { aipp_mode : static input_format : RGB888_U8 $ }")
