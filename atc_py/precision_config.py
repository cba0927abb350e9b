"""The four precision config files ATC takes, parsed into plain data with line-numbered errors.

Why a module of its own: the files are user text in Huawei's documented syntax (see
docs/FORMATS.md, "Precision configuration files"), parsed before the model is loaded so
a typo fails fast, and the parsed form is what `atc_py.precision` applies after fusion.

- `--keep_dtype`: one entry a line, an ONNX node name or `OpType::<type>`; `#` comments.
- `--customize_dtypes`: `<node>::InputDtype:<t>,...,OutputDtype:<t>,...` or
  `OpType::<type>:InputDtype:<t>,...,OutputDtype:<t>,...`.
- `--modify_mixlist`: JSON `{"black-list"|"white-list"|"gray-list": {"to-add"|"to-remove": [types]}}`.
- `--op_precision_mode`: ini, `[ByOpType]` / `[ByNodeName]` sections of `key=mode` lines
  (a file without sections is by op type, the older documented form).
"""
from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from typing import Optional

import numpy as np

from ge.errors import AtcError

# Bounds for config files: they are lists of names, never large.
MAX_CONFIG_BYTES = 4 * 1024 * 1024

IMPL_MODES = ("high_precision", "high_performance", "super_performance", "keep_fp16",
              "support_out_of_bound_index", "enable_float_32_execution", "enable_hi_float_32_execution")
# Modes with numerical effect here; the others are accepted and reported (W10104).
NUMERIC_IMPL_MODES = {"high_precision": "high_precision", "high_performance": "high_performance",
                      "super_performance": "high_performance", "keep_fp16": "keep_fp16"}

CUSTOM_DTYPES = {"float16": np.float16, "fp16": np.float16, "half": np.float16,
                 "float32": np.float32, "fp32": np.float32, "float": np.float32}
NON_FLOAT_DTYPES = ("int8", "uint8", "int16", "uint16", "int32", "uint32", "int64", "uint64", "bool")
MIXLIST_LISTS = ("black-list", "white-list", "gray-list")
MIXLIST_ACTIONS = ("to-add", "to-remove")


def config_error(param: str, path: str, line: Optional[int], reason: str, solution: str) -> AtcError:
    where = f"{path}, line {line}" if line is not None else path
    return AtcError("E10001", f"Value [{path}] for parameter [{param}] is invalid. Reason: {where}: {reason}",
                    solution)


def read_config(param: str, path: str) -> str:
    """The text of a config file: a regular file of bounded size, UTF-8."""
    if not path:
        raise AtcError("E10004", f"Value for {param} is empty.", f"Pass {param}=<file>.")
    if not os.path.isfile(path):
        raise config_error(param, path, None, "the file does not exist or is not a regular file.",
                           f"Check the path given to {param}.")
    size = os.path.getsize(path)
    if size > MAX_CONFIG_BYTES:
        raise config_error(param, path, None, f"it has {size} bytes; a config file is at most {MAX_CONFIG_BYTES}.",
                           "Give the config file, not a model or data file.")
    try:
        with open(path, "rb") as f:
            return f.read().decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise config_error(param, path, None, f"it is not UTF-8 text ({exc.reason} at byte {exc.start}).",
                           "Save the file as UTF-8 text.")
    except OSError as exc:
        raise config_error(param, path, None, f"it cannot be read ({exc.strerror}).", "Check its permissions.")


def _lines(text: str):
    """(line number, stripped line) for every line that is not blank or a # comment."""
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if line and not line.startswith("#"):
            yield number, line


# --------------------------------------------------------------------------- keep_dtype

@dataclass
class NameTypeList:
    """Entries naming ONNX nodes or op types, each with the line it came from."""
    names: dict = field(default_factory=dict)      # node name -> line
    types: dict = field(default_factory=dict)      # op type -> line


def parse_keep_dtype(path: str) -> NameTypeList:
    param = "--keep_dtype"
    entries = NameTypeList()
    for number, line in _lines(read_config(param, path)):
        if line.startswith("OpType::"):
            op_type = line[len("OpType::"):].strip()
            if not op_type or any(c.isspace() for c in op_type) or ":" in op_type:
                raise config_error(param, path, number, f"[{line}] is not of the form OpType::<type>.",
                                   "Write one node name or OpType::<type> a line, e.g. OpType::Conv2D.")
            entries.types[op_type] = number
        else:
            if "::" in line:
                raise config_error(param, path, number, f"[{line}] has '::' but does not start with OpType::.",
                                   "Write one node name or OpType::<type> a line.")
            entries.names[line] = number
    return entries


# --------------------------------------------------------------------------- customize_dtypes

@dataclass
class CustomDtype:
    dtype: np.dtype          # the float dtype the kernel computes in
    line: int
    text: str


@dataclass
class CustomizeDtypes:
    names: dict = field(default_factory=dict)      # node name -> CustomDtype
    types: dict = field(default_factory=dict)      # op type -> CustomDtype


def _custom_spec(param: str, path: str, number: int, line: str, spec: str) -> np.dtype:
    """`InputDtype:float16,float16,OutputDtype:float16` -> the one float dtype it names."""
    section, seen, floats = None, {"InputDtype": 0, "OutputDtype": 0}, []
    for token in (t.strip() for t in spec.split(",")):
        for key in seen:
            if token.startswith(key + ":"):
                section, token = key, token[len(key) + 1:].strip()
                seen[key] += 1
        if section is None:
            raise config_error(param, path, number, f"[{line}] must list InputDtype:... and/or OutputDtype:...",
                               "Write <node>::InputDtype:float16,...,OutputDtype:float16.")
        name = token.lower()
        if name in CUSTOM_DTYPES:
            floats.append(np.dtype(CUSTOM_DTYPES[name]))
        elif name not in NON_FLOAT_DTYPES:
            raise config_error(param, path, number, f"[{token}] in [{line}] is not a data type atc_py supports "
                               f"(float16, float32 and integer types).", "Use float16 or float32.")
    if any(count > 1 for count in seen.values()):
        raise config_error(param, path, number, f"[{line}] lists InputDtype or OutputDtype twice.",
                           "Write each of InputDtype: and OutputDtype: once.")
    if not floats:
        raise config_error(param, path, number, f"[{line}] names no float type (float16 or float32).",
                           "Give the float type the operator should compute in.")
    if len(set(floats)) > 1:
        raise config_error(param, path, number, f"[{line}] mixes float16 and float32; an atc_py kernel computes "
                           "all its float tensors in one dtype.", "Give one float type for every float tensor.")
    return floats[0]


def parse_customize_dtypes(path: str) -> CustomizeDtypes:
    param = "--customize_dtypes"
    result = CustomizeDtypes()
    for number, line in _lines(read_config(param, path)):
        if line.startswith("OpType::"):
            op_type, sep, spec = line[len("OpType::"):].partition(":")
            if not sep or not op_type.strip():
                raise config_error(param, path, number, f"[{line}] is not OpType::<type>:InputDtype:...",
                                   "Write OpType::<type>:InputDtype:float16,...,OutputDtype:float16.")
            result.types[op_type.strip()] = CustomDtype(_custom_spec(param, path, number, line, spec), number, line)
        else:
            name, sep, spec = line.partition("::")
            if not sep or not name.strip():
                raise config_error(param, path, number, f"[{line}] is not <node>::InputDtype:...",
                                   "Write <node>::InputDtype:float16,...,OutputDtype:float16.")
            result.names[name.strip()] = CustomDtype(_custom_spec(param, path, number, line, spec), number, line)
    return result


# --------------------------------------------------------------------------- modify_mixlist

@dataclass
class MixList:
    """list name ("black-list", ...) -> action ("to-add"/"to-remove") -> set of op types."""
    entries: dict = field(default_factory=dict)

    def get(self, list_name: str, action: str) -> set:
        return set(self.entries.get(list_name, {}).get(action, ()))


def parse_modify_mixlist(path: str) -> MixList:
    param = "--modify_mixlist"
    text = read_config(param, path)
    try:
        doc = json.loads(text)
    except ValueError as exc:
        line = getattr(exc, "lineno", None)
        raise config_error(param, path, line, f"it is not valid JSON ({getattr(exc, 'msg', exc)}).",
                           'Write {"black-list": {"to-add": ["OpType"]}}.')
    if not isinstance(doc, dict):
        raise config_error(param, path, None, "the top level must be a JSON object.",
                           'Write {"black-list": {"to-add": ["OpType"]}}.')
    mix = MixList()
    for list_name, actions in doc.items():
        if list_name not in MIXLIST_LISTS:
            raise config_error(param, path, None, f"[{list_name}] is not one of {', '.join(MIXLIST_LISTS)}.",
                               "Use black-list, white-list or gray-list.")
        if not isinstance(actions, dict):
            raise config_error(param, path, None, f"[{list_name}] must be an object of to-add / to-remove lists.",
                               f'Write "{list_name}": {{"to-add": ["OpType"]}}.')
        for action, types in actions.items():
            if action not in MIXLIST_ACTIONS:
                raise config_error(param, path, None, f"[{list_name}.{action}] is not to-add or to-remove.",
                                   "Use to-add or to-remove.")
            if not isinstance(types, list) or not all(isinstance(t, str) and t.strip() for t in types):
                raise config_error(param, path, None, f"[{list_name}.{action}] must be a list of op type names.",
                                   f'Write "{action}": ["Conv2D", "Sigmoid"].')
            mix.entries.setdefault(list_name, {})[action] = {t.strip() for t in types}
    return mix


# --------------------------------------------------------------------------- op_precision_mode

@dataclass
class ModeEntry:
    mode: str
    line: int


@dataclass
class OpPrecisionModes:
    by_type: dict = field(default_factory=dict)     # op type -> ModeEntry
    by_name: dict = field(default_factory=dict)     # node name -> ModeEntry


def parse_op_precision_mode(path: str) -> OpPrecisionModes:
    param = "--op_precision_mode"
    result = OpPrecisionModes()
    section = result.by_type                        # no section header: the older by-type form
    for number, raw in enumerate(read_config(param, path).splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith(("#", ";")):
            continue
        if line.startswith("["):
            header = line.strip("[]").strip()
            if not line.endswith("]") or header not in ("ByOpType", "ByNodeName"):
                raise config_error(param, path, number, f"section [{line}] is not [ByOpType] or [ByNodeName].",
                                   "Use [ByOpType] and [ByNodeName] sections of key=mode lines.")
            section = result.by_type if header == "ByOpType" else result.by_name
            continue
        key, sep, mode = line.partition("=")
        key, mode = key.strip(), mode.strip()
        if not sep or not key or not mode:
            raise config_error(param, path, number, f"[{line}] is not of the form key=mode.",
                               "Write one OpType=high_precision (or node=mode) a line.")
        if mode not in IMPL_MODES:
            raise config_error(param, path, number, f"mode [{mode}] is not one of {', '.join(IMPL_MODES)}.",
                               "Use high_precision or high_performance.")
        section[key] = ModeEntry(mode, number)
    return result
