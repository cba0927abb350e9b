"""`--insert_op_conf`: the AIPP config file (protobuf text of `domi.InsertNewOps`), parsed.

Why our own reader: the file is the text form of GE's `insert_op.proto` (`aipp_op { ... }`
blocks of `field : value` lines, `#` comments), and every mistake must be reported with
the line it is on.  Fields, types and defaults follow insert_op.proto and GE's AippOp
(docs/FORMATS.md, "AIPP configuration file"); what atc_py cannot run is refused by name:
dynamic AIPP (`aipp_mode: dynamic`), resize, and input formats other than RGB888_U8,
XRGB8888_U8, YUV420SP_U8 and YUV400_U8.

`parse_aipp_config(path) -> [AippConfig]`; `AippConfig.params` holds every field with its
default filled in as GE's SetDefaultParams does (CSC matrix and biases when csc_switch is
on, var_reci_chn 1.0), the dict the Aipp op carries as its `aipp` attribute.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Optional

from atc_py.precision_config import read_config
from ge.errors import AtcError

PARAM = "--insert_op_conf"
SUPPORTED_FORMATS = ("YUV420SP_U8", "XRGB8888_U8", "RGB888_U8", "YUV400_U8")
KNOWN_FORMATS = SUPPORTED_FORMATS + ("NC1HWC0DI_FP16", "NC1HWC0DI_S8", "ARGB8888_U8", "YUYV_U8", "YUV422SP_U8",
                                     "AYUV444_U8", "RAW10", "RAW12", "RAW16", "RAW24", "RGB16", "RGB20", "RGB24",
                                     "RGB8_IR", "RGB16_IR", "RGB24_IR")

# field -> kind, following insert_op.proto (mean_chn_i is int32 there; min/var_reci are float)
_FIELDS = {
    "aipp_mode": "mode", "related_input_rank": "uint", "related_input_name": "str", "input_edge_idx": "uint_rep",
    "max_src_image_size": "uint", "support_rotation": "bool",
    "input_format": "format", "csc_switch": "bool", "cpadding_value": "float", "padding_value": "float",
    "rbuv_swap_switch": "bool", "ax_swap_switch": "bool", "single_line_mode": "bool",
    "src_image_size_w": "int", "src_image_size_h": "int",
    "crop": "bool", "load_start_pos_w": "int", "load_start_pos_h": "int", "crop_size_w": "int", "crop_size_h": "int",
    "resize": "bool", "resize_output_w": "int", "resize_output_h": "int",
    "padding": "bool", "left_padding_size": "int", "right_padding_size": "int", "top_padding_size": "int",
    "bottom_padding_size": "int",
    **{f"mean_chn_{i}": "int" for i in range(4)},
    **{f"min_chn_{i}": "float" for i in range(4)},
    **{f"var_reci_chn_{i}": "float" for i in range(4)},
    **{f"matrix_r{r}c{c}": "int" for r in range(3) for c in range(3)},
    **{f"output_bias_{i}": "int" for i in range(3)},
    **{f"input_bias_{i}": "int" for i in range(3)},
}
_DYNAMIC_ONLY = ("max_src_image_size", "support_rotation")
_NON_NEGATIVE = ("src_image_size_w", "src_image_size_h", "load_start_pos_w", "load_start_pos_h", "crop_size_w",
                 "crop_size_h", "resize_output_w", "resize_output_h", "left_padding_size", "right_padding_size",
                 "top_padding_size", "bottom_padding_size")

# GE's defaults (ge_aipp_op.cc SetCscDefaultValue): YUV input -> BGR rows, else RGB -> YUV.
DEFAULT_MATRIX_YUV = ((298, 516, 0), (298, -100, -208), (298, 0, 409))
DEFAULT_MATRIX_RGB = ((66, 129, 25), (-38, -74, 112), (112, -94, -18))
DEFAULT_INPUT_BIAS = (16, 128, 128)
DEFAULT_OUTPUT_BIAS = (16, 128, 128)

_TOKEN = re.compile(r"\s*(?:(#[^\n]*)|([A-Za-z_][A-Za-z0-9_]*)|([:：{}])|(\"(?:[^\"\\\n]|\\.)*\")|"
                    r"([-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?)|(\S))")


def aipp_error(line: Optional[int], reason: str, solution: str = "") -> AtcError:
    where = f"line {line}: " if line is not None else ""
    return AtcError("E10001", f"Value for parameter [{PARAM}] is invalid. Reason: {where}{reason}",
                    solution or "See docs/FORMATS.md (AIPP configuration file) for the fields and their values.")


@dataclass
class AippConfig:
    """One `aipp_op { }` block: the fields as written (with lines) and with defaults applied."""
    line: int                                        # line of the `aipp_op` keyword
    written: dict = field(default_factory=dict)      # field -> value as written
    lines: dict = field(default_factory=dict)        # field -> line
    params: dict = field(default_factory=dict)       # every static field, defaults applied

    @property
    def input_rank(self) -> int:
        return int(self.written.get("related_input_rank", 0))

    def line_of(self, name: str) -> int:
        return self.lines.get(name, self.line)


def _tokens(text: str):
    """(kind, text, line) tokens; comments dropped."""
    line, pos = 1, 0
    while pos < len(text):
        m = _TOKEN.match(text, pos)
        if m is None:                      # only trailing whitespace is left
            break
        start_line = line + text.count("\n", pos, m.start(m.lastindex))
        line += text.count("\n", pos, m.end())
        pos = m.end()
        kind = ("comment", "ident", "punct", "string", "number", "other")[m.lastindex - 1]
        if kind != "comment":
            yield kind, m.group(m.lastindex).replace("：", ":"), start_line


def _value(name: str, kind: str, tok_kind: str, text: str, line: int):
    if kind == "bool":
        if text in ("true", "True", "t", "1"):
            return True
        if text in ("false", "False", "f", "0"):
            return False
        raise aipp_error(line, f"{name} must be true or false, not [{text}].")
    if kind in ("int", "uint", "uint_rep"):
        if tok_kind != "number" or not re.fullmatch(r"[-+]?\d+", text):
            hint = " (mean_chn_i is an integer in insert_op.proto; put fractional means in min_chn_i)" \
                if name.startswith("mean_chn") else ""
            raise aipp_error(line, f"{name} must be an integer, not [{text}]{hint}.")
        value = int(text)
        if kind != "int" and value < 0:
            raise aipp_error(line, f"{name} must not be negative, not [{text}].")
        if abs(value) > 2 ** 31 - 1:
            raise aipp_error(line, f"{name} = {text} is out of the int32 range.")
        return value
    if kind == "float":
        if tok_kind != "number":
            raise aipp_error(line, f"{name} must be a number, not [{text}].")
        return float(text)
    if kind == "str":
        if tok_kind != "string":
            raise aipp_error(line, f"{name} must be a quoted string, not [{text}].")
        return text[1:-1]
    if kind == "mode":
        if text not in ("static", "dynamic"):
            raise aipp_error(line, f"aipp_mode must be static or dynamic, not [{text}].")
        return text
    if kind == "format":
        if text not in KNOWN_FORMATS:
            raise aipp_error(line, f"input_format [{text}] is not an AIPP input format.",
                             f"Use one of {', '.join(SUPPORTED_FORMATS)}.")
        return text
    raise AssertionError(kind)


def _parse_block(tokens, index: int, start_line: int) -> tuple:
    config = AippConfig(start_line)
    while index < len(tokens):
        kind, text, line = tokens[index]
        if text == "}":
            return config, index + 1
        if kind != "ident":
            raise aipp_error(line, f"expected a field name, found [{text}].")
        if text not in _FIELDS:
            raise aipp_error(line, f"[{text}] is not a field of aipp_op.",
                             "Check the spelling against the AIPP configuration template (docs/FORMATS.md).")
        if index + 2 >= len(tokens) or tokens[index + 1][1] != ":":
            raise aipp_error(line, f"expected ':' and a value after [{text}].", f"Write {text} : <value>.")
        v_kind, v_text, v_line = tokens[index + 2]
        value = _value(text, _FIELDS[text], v_kind, v_text, v_line)
        if text in config.written and _FIELDS[text] != "uint_rep":
            raise aipp_error(line, f"[{text}] is given twice in this aipp_op (first on line {config.lines[text]}); "
                             "it can not be configured repeatedly.", "Keep one value.")
        if _FIELDS[text] == "uint_rep":
            config.written.setdefault(text, []).append(value)
        else:
            config.written[text] = value
        config.lines.setdefault(text, line)
        index += 3
    raise aipp_error(start_line, "this aipp_op { is never closed.", "Close the block with }.")


def _validate(config: AippConfig) -> None:
    w = config.written
    mode = w.get("aipp_mode")
    if mode is None:
        raise aipp_error(config.line, "aipp_mode is not set; it must be configured as static.",
                         "Add aipp_mode : static.")
    if mode == "dynamic":
        raise aipp_error(config.line_of("aipp_mode"), "aipp_mode: dynamic is not supported: atc_py runs static "
                         "AIPP only (dynamic AIPP takes its parameters at run time through aclmdlSetInputAIPP).",
                         "Use aipp_mode : static with the parameters in this file.")
    for name in _DYNAMIC_ONLY:
        if name in w:
            raise aipp_error(config.line_of(name), f"{name} is a dynamic AIPP field; it is invalid with "
                             "aipp_mode: static.", f"Remove {name}.")
    if "input_format" not in w:
        raise aipp_error(config.line, "input_format is not set; static AIPP needs it.",
                         f"Add input_format : one of {', '.join(SUPPORTED_FORMATS)}.")
    if w["input_format"] not in SUPPORTED_FORMATS:
        raise aipp_error(config.line_of("input_format"), f"input_format {w['input_format']} is not supported by "
                         f"atc_py (supported: {', '.join(SUPPORTED_FORMATS)}).", "Convert the images before AIPP.")
    for name in _NON_NEGATIVE:
        if w.get(name, 0) < 0:
            raise aipp_error(config.line_of(name), f"{name} must not be smaller than 0.")
    if w.get("resize"):
        raise aipp_error(config.line_of("resize"), "resize: true is not supported (AIPP resize is reserved in "
                         "CANN's aclAippInfo as well).", "Resize the images before AIPP, or use crop and padding.")
    if w.get("single_line_mode"):
        raise aipp_error(config.line_of("single_line_mode"), "single_line_mode: true is not supported.",
                         "Remove single_line_mode.")
    if w["input_format"] == "YUV400_U8" and w.get("csc_switch"):
        raise aipp_error(config.line_of("csc_switch"), "csc_switch: true with input_format YUV400_U8: a one-channel "
                         "image has no colour space to convert.", "Set csc_switch : false.")
    if w["input_format"] == "YUV420SP_U8":
        for name in ("src_image_size_w", "src_image_size_h", "load_start_pos_w", "load_start_pos_h",
                     "crop_size_w", "crop_size_h"):
            if w.get(name, 0) % 2:
                raise aipp_error(config.line_of(name), f"{name} = {w[name]} must be even for YUV420SP_U8 "
                                 "(chroma is sampled per 2x2 block).", "Use an even value.")
    if len(w.get("input_edge_idx", ())) > 1:
        raise aipp_error(config.line_of("input_edge_idx"), "input_edge_idx can not be configured repeatedly.")


def _with_defaults(config: AippConfig) -> dict:
    """The static fields with GE's defaults (SetDefaultParams): crop/padding sizes zeroed when
    switched off, the CSC matrix and biases when csc_switch is on, var_reci_chn 1.0."""
    w = config.written
    p = {name: w.get(name, 0) for name in _NON_NEGATIVE}
    fmt = w["input_format"]
    p.update({
        "aipp_mode": "static", "input_format": fmt, "related_input_rank": w.get("related_input_rank", 0),
        "csc_switch": bool(w.get("csc_switch", False)), "rbuv_swap_switch": bool(w.get("rbuv_swap_switch", False)),
        "ax_swap_switch": bool(w.get("ax_swap_switch", False)), "crop": bool(w.get("crop", False)),
        "padding": bool(w.get("padding", False)),
        "padding_value": float(w.get("padding_value", w.get("cpadding_value", 0.0))),
    })
    if not p["crop"]:
        p.update(load_start_pos_w=0, load_start_pos_h=0, crop_size_w=0, crop_size_h=0)
    if not p["padding"]:
        p.update(left_padding_size=0, right_padding_size=0, top_padding_size=0, bottom_padding_size=0)
    for i in range(4):
        p[f"mean_chn_{i}"] = int(w.get(f"mean_chn_{i}", 0))
        p[f"min_chn_{i}"] = float(w.get(f"min_chn_{i}", 0.0))
        p[f"var_reci_chn_{i}"] = float(w.get(f"var_reci_chn_{i}", 1.0))
    matrix = DEFAULT_MATRIX_YUV if fmt == "YUV420SP_U8" else DEFAULT_MATRIX_RGB
    for r in range(3):
        for c in range(3):
            p[f"matrix_r{r}c{c}"] = int(w.get(f"matrix_r{r}c{c}", matrix[r][c]))
    for i in range(3):
        p[f"input_bias_{i}"] = int(w.get(f"input_bias_{i}", DEFAULT_INPUT_BIAS[i]))
        p[f"output_bias_{i}"] = int(w.get(f"output_bias_{i}", DEFAULT_OUTPUT_BIAS[i]))
    return p


def parse_aipp_text(text: str) -> list:
    tokens = list(_tokens(text))
    configs, index = [], 0
    while index < len(tokens):
        kind, word, line = tokens[index]
        if kind == "other":
            raise aipp_error(line, f"unexpected character [{word}].")
        if word == "multi_shape_op":
            raise aipp_error(line, "multi_shape_op is not supported (dynamic batch through the config file).",
                             "Remove the multi_shape_op block.")
        if word != "aipp_op":
            raise aipp_error(line, f"expected aipp_op {{, found [{word}].", "The file holds aipp_op { ... } blocks.")
        if index + 1 >= len(tokens) or tokens[index + 1][1] != "{":
            raise aipp_error(line, "expected '{' after aipp_op.", "Write aipp_op { ... }.")
        config, index = _parse_block(tokens, index + 2, line)
        _validate(config)
        config.params = _with_defaults(config)
        configs.append(config)
    if not configs:
        raise aipp_error(None, "the file holds no aipp_op block.", "Write aipp_op { aipp_mode : static ... }.")
    ranks = {}
    for config in configs:
        if config.input_rank in ranks:
            raise aipp_error(config.line, f"related_input_rank {config.input_rank} is configured twice (also in the "
                             f"aipp_op on line {ranks[config.input_rank]}); can not insert aipp to the same position.",
                             "Give each aipp_op its own related_input_rank.")
        ranks[config.input_rank] = config.line
    return configs


def parse_aipp_config(path: str) -> list:
    try:
        return parse_aipp_text(read_config(PARAM, path))
    except AtcError as err:             # name the file, as every parameter error does
        message = err.message.replace(f"Value for parameter [{PARAM}]", f"Value [{path}] for parameter [{PARAM}]")
        raise AtcError(err.code, message, err.solution) from None
