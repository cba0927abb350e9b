"""The Aipp op: static AI pre-processing on the chip, as GE inserts it after a Data node.

Why an op of its own: `--insert_op_conf` moves image preprocessing (format decoding, crop,
colour-space conversion, normalisation, padding) onto the AI core's AIPP unit, so the model
takes raw uint8 images.  GE inserts an `Aipp` node between the Data node and its consumers
(named `<data>_0_huawei_aipp`, its parameters in the NamedAttrs attribute `aipp`); we do the
same (atc_py/aipp_insert.py), and this module is its semantics, kernel and price.

Input: the raw image batch, uint8 -- [N, H, W, 3] RGB888_U8, [N, H, W, 4] XRGB8888_U8,
[N, H, W, 1] YUV400_U8, [N, H*3/2, W, 1] YUV420SP_U8 (NV12: the Y plane, then interleaved
U,V at half resolution; the dims ACL reports for such an input).  Output: the model's input,
[N, C, H', W'] (or NHWC), C = 3 or 1.

Order, as CANN's AIPP docs state it (hardware order): channel swap (rbuv_swap_switch; and
ax_swap_switch for XRGB) -> crop -> CSC -> mean/min/var_reci -> padding:
- CSC, YUV input: out_i = (sum_j m_ij * (in_j - input_bias_j)) >> 8; RGB input:
  out_i = ((sum_j m_ij * in_j) >> 8) + output_bias_i; both clipped to [0, 255] (8-bit result).
- normalisation: out_i = (x_i - mean_chn_i - min_chn_i) * var_reci_chn_i, with min/var_reci
  held in float16 as AIPP's registers hold them (aipp_comm register layout: fp16 fields).
- padding writes padding_value around the image.
AIPP writes float16 (GE's Aipp output is fp16 NC1HWC0): the kernel's result is rounded to
float16 whatever the precision mode; its recorded compute dtype is float16.
"""
from __future__ import annotations

import numpy as np

from codegen.registry import register
from codegen.work import Work
from ge.errors import InvalidNode, invalid_attr
from ge.ops.registry import OpDef, OpKind, TensorType

OP_TYPE = "Aipp"
IN_CHANNELS = {"RGB888_U8": 3, "XRGB8888_U8": 4, "YUV400_U8": 1, "YUV420SP_U8": 1}


def _params(attrs: dict) -> dict:
    params = attrs.get("aipp")
    if not isinstance(params, dict) or params.get("input_format") not in IN_CHANNELS:
        raise invalid_attr(OP_TYPE, "aipp", params, "it must be the aipp_op parameters with a supported input_format.",
                           "Recompile the model with this version of atc_py.")
    return params


def src_size(params: dict, model_h: int, model_w: int) -> tuple:
    """(h, w) of the source image: src_image_size_*, else the model's input size (GE's rule)."""
    return int(params.get("src_image_size_h") or model_h), int(params.get("src_image_size_w") or model_w)


def raw_shape(params: dict, batch: int, src_h: int, src_w: int) -> tuple:
    """The shape of the raw image tensor the model takes."""
    fmt = params["input_format"]
    if fmt == "YUV420SP_U8":
        return batch, src_h * 3 // 2, src_w, 1
    return batch, src_h, src_w, IN_CHANNELS[fmt]


def output_hw(params: dict, src_h: int, src_w: int) -> tuple:
    """(h, w) after crop and padding (GE's GetOutputHeightWidth, without resize)."""
    h, w = src_h, src_w
    if params.get("crop"):
        h = int(params.get("crop_size_h") or h)
        w = int(params.get("crop_size_w") or w)
    if params.get("padding"):
        h += int(params.get("top_padding_size", 0)) + int(params.get("bottom_padding_size", 0))
        w += int(params.get("left_padding_size", 0)) + int(params.get("right_padding_size", 0))
    return h, w


def _pixels(raw: np.ndarray, params: dict, src_h: int, src_w: int) -> np.ndarray:
    """[N, H, W, 3 or 1] int32 channels per pixel from the raw buffer (before any switch)."""
    fmt = params["input_format"]
    if fmt == "YUV420SP_U8":
        y = raw[:, :src_h, :, 0].astype(np.int32)
        uv = raw[:, src_h:, :, 0].astype(np.int32).reshape(raw.shape[0], src_h // 2, src_w // 2, 2)
        uv = uv.repeat(2, axis=1).repeat(2, axis=2)               # each chroma pair serves a 2x2 block
        return np.stack([y, uv[..., 0], uv[..., 1]], axis=-1)
    if fmt == "XRGB8888_U8":
        # XRGB: X first in each pixel; ax_swap_switch takes RGBX (X last) instead
        return raw[..., 0:3].astype(np.int32) if params.get("ax_swap_switch") else raw[..., 1:4].astype(np.int32)
    return raw.astype(np.int32)


def preprocess(raw: np.ndarray, attrs: dict, round_fp16: bool = True) -> np.ndarray:
    """The Aipp op on a raw batch; float16 (the AIPP unit's output) unless `round_fp16` is
    False (the float32 reference that atc-sim --compare feeds onnxruntime)."""
    params = _params(attrs)
    channels, layout = int(attrs["output_channels"]), str(attrs["output_format"])
    src_h, src_w = int(attrs["src_h"]), int(attrs["src_w"])
    x = _pixels(np.asarray(raw), params, src_h, src_w)
    rgb_like = params["input_format"] in ("RGB888_U8", "XRGB8888_U8")
    if params.get("rbuv_swap_switch") and x.shape[-1] == 3:
        x = x[..., [2, 1, 0]] if rgb_like else x[..., [0, 2, 1]]     # R<->B, or U<->V (NV21)
    if params.get("crop"):
        h0, w0 = int(params.get("load_start_pos_h", 0)), int(params.get("load_start_pos_w", 0))
        ch = int(params.get("crop_size_h") or src_h)
        cw = int(params.get("crop_size_w") or src_w)
        x = x[:, h0:h0 + ch, w0:w0 + cw]
    if params.get("csc_switch") and x.shape[-1] == 3:
        m = np.array([[int(params[f"matrix_r{r}c{c}"]) for c in range(3)] for r in range(3)], dtype=np.int64)
        if rgb_like:
            out = (np.einsum("rc,nhwc->nhwr", m, x.astype(np.int64)) >> 8) + \
                np.array([int(params[f"output_bias_{i}"]) for i in range(3)])
        else:
            bias = np.array([int(params[f"input_bias_{i}"]) for i in range(3)])
            out = np.einsum("rc,nhwc->nhwr", m, x.astype(np.int64) - bias) >> 8
        x = np.clip(out, 0, 255)
    x = x[..., :channels].astype(np.float32)
    mean = np.array([params.get(f"mean_chn_{i}", 0) for i in range(channels)], dtype=np.float32)
    low = np.array([params.get(f"min_chn_{i}", 0.0) for i in range(channels)], dtype=np.float16).astype(np.float32)
    var = np.array([params.get(f"var_reci_chn_{i}", 1.0) for i in range(channels)],
                   dtype=np.float16).astype(np.float32)
    x = (x - mean - low) * var
    if params.get("padding"):
        pads = ((0, 0), (int(params.get("top_padding_size", 0)), int(params.get("bottom_padding_size", 0))),
                (int(params.get("left_padding_size", 0)), int(params.get("right_padding_size", 0))), (0, 0))
        x = np.pad(x, pads, constant_values=np.float32(params.get("padding_value", 0.0)))
    if layout == "NCHW":
        x = x.transpose(0, 3, 1, 2)
    x = np.ascontiguousarray(x)
    return x.astype(np.float16) if round_fp16 else x


def _compute(inputs, attrs):
    return [preprocess(inputs[0], attrs)]


def _infer(inputs, attrs):
    params = _params(attrs)
    raw = inputs[0]
    if np.dtype(raw.dtype) != np.uint8 or len(raw.shape) != 4:
        raise InvalidNode(f"Op [{OP_TYPE}] takes a 4-D uint8 image, not {np.dtype(raw.dtype)} "
                       f"{list(raw.shape)}.", "Recompile the model with this version of atc_py.")
    src_h, src_w = int(attrs["src_h"]), int(attrs["src_w"])
    if tuple(raw.shape) != raw_shape(params, raw.shape[0], src_h, src_w):
        raise InvalidNode(f"Op [{OP_TYPE}] input {list(raw.shape)} does not hold a {src_h}x{src_w} "
                       f"{params['input_format']} image.", "Recompile the model with this version of atc_py.")
    h, w = output_hw(params, src_h, src_w)
    c = int(attrs["output_channels"])
    shape = (raw.shape[0], c, h, w) if attrs["output_format"] == "NCHW" else (raw.shape[0], h, w, c)
    return [TensorType(np.dtype(str(attrs["output_dtype"])), shape)]


def _work(inputs, outputs, attrs):
    """Per output element: one move (decode/swap/crop/pad placement), the CSC's three
    multiply-adds, shift and clip (7 ALU ops) when on, and the normalisation's subtract and
    multiply (2 ALU ops)."""
    params = attrs.get("aipp", {})
    n = outputs[0].size
    work = Work().add_vector("move", n).add_vector("alu", 2 * n)
    if params.get("csc_switch"):
        work.add_vector("alu", 7 * n)
    return work


AIPP = OpDef(op_type=OP_TYPE, kind=OpKind.OPAQUE, compute=_compute, infer=_infer)
register(AIPP, _work, om_type="Aipp")
