"""ATC's options, validated once, with ATC's error codes and messages.

`cli.py` only parses text into an `AtcOptions`; everything here is reusable from Python.
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Optional

from ge.errors import AtcError, invalid_param

FRAMEWORKS = {"0": "Caffe", "1": "MindSpore", "3": "TensorFlow", "5": "Onnx"}
MODES = {"0": "generate offline model", "1": "convert model to JSON", "3": "pre-check only",
         "6": "display model info"}
LOG_LEVELS = ("debug", "info", "warning", "error", "null")
INPUT_FORMATS = ("NCHW", "ND")
PRECISION_MODES = ("force_fp16", "force_fp32", "allow_fp32_to_fp16", "must_keep_origin_dtype",
                   "allow_mix_precision")


@dataclass
class AtcOptions:
    model: str = ""
    framework: Optional[str] = None
    output: str = ""
    soc_version: str = ""
    mode: str = "0"
    input_shape: str = ""
    input_format: str = "NCHW"
    out_nodes: str = ""
    log: str = "null"
    om: str = ""
    json: str = ""
    check_report: str = "check_result.json"
    precision_mode: str = "force_fp16"
    fusion_switch_file: str = ""
    super_kernel_scope: str = ""

    def validate(self) -> None:
        """Check every option that the chosen mode uses; raise the first AtcError found."""
        for name in ("model", "output", "om", "json", "check_report", "fusion_switch_file"):
            if "\0" in getattr(self, name):
                raise invalid_param(getattr(self, name).replace("\0", "\\0"), f"--{name}",
                                    "it contains a NUL character, which no file path can hold.")
        if self.mode not in MODES:
            raise invalid_param(self.mode, "--mode", f"it must be one of {', '.join(MODES)} "
                                f"({'; '.join(f'{k}: {v}' for k, v in MODES.items())}).")
        if self.log not in LOG_LEVELS:
            raise AtcError("E10010", f"Value [{self.log}] for parameter [--log] is invalid. Reason: it must be "
                           f"one of {', '.join(LOG_LEVELS)}.", "Use --log=debug|info|warning|error|null.")
        if self.mode in ("1", "6"):
            if not self.om:
                raise AtcError("E10004", "Value for --om is empty.", f"--mode={self.mode} needs --om=<model.om>.")
            if self.mode == "1" and not self.json:
                raise AtcError("E10004", "Value for --json is empty.", "--mode=1 needs --json=<file.json>.")
            return
        if self.framework is None or self.framework == "":
            raise AtcError("E10007", "--framework is required. The value must be 0(Caffe) or 1(MindSpore) or "
                           "3(TensorFlow) or 5(Onnx).", "Pass --framework=5 for an ONNX model.")
        if self.framework not in FRAMEWORKS:
            raise AtcError("E10007", f"--framework is invalid: [{self.framework}]. The value must be 0(Caffe) "
                           "or 1(MindSpore) or 3(TensorFlow) or 5(Onnx).", "Pass --framework=5 for an ONNX model.")
        if self.framework != "5":
            raise invalid_param(self.framework, "--framework",
                                f"{FRAMEWORKS[self.framework]} models are not supported; only 5(Onnx) is supported.",
                                "Export the model to ONNX and pass --framework=5.")
        if not self.model:
            raise AtcError("E10004", "Value for --model is empty.", "Pass --model=<path to .onnx>.")
        if self.input_format not in INPUT_FORMATS:
            raise invalid_param(self.input_format, "--input_format",
                                f"for ONNX models it must be one of {', '.join(INPUT_FORMATS)}.")
        if self.precision_mode not in PRECISION_MODES:
            raise invalid_param(self.precision_mode, "--precision_mode",
                                f"it must be one of {', '.join(PRECISION_MODES)}.")
        if self.mode == "0":
            if not self.output:
                raise AtcError("E10004", "Value for --output is empty.", "Pass --output=<path without .om>.")
            if self.output.endswith(("/", os.sep)) or os.path.isdir(self.output):
                raise AtcError("E10022", f"Value [{self.output}] for parameter [--output] is invalid. Reason: "
                               "it is a directory; give a file path without the .om suffix.",
                               "For example --output=out/resnet50.")
            if os.path.isdir(self.om_path):
                raise AtcError("E10022", f"Value [{self.output}] for parameter [--output] is invalid. Reason: "
                               f"[{self.om_path}], where the model would go, is a directory.",
                               "Give another --output, or move the folder away.")
            if not self.soc_version:
                raise AtcError("E10004", "Value for --soc_version is empty.", "Pass e.g. --soc_version=Ascend910.")
        from codegen.super_kernel import scope_matcher
        scope_matcher(self.super_kernel_scope)   # raises E10001 on a bad scope
        if self.soc_version:
            from simulator.cost_model import available_socs
            socs = available_socs()
            if self.soc_version not in socs:
                raise invalid_param(self.soc_version, "--soc_version",
                                    f"it is not a supported chip; valid values: {', '.join(socs)}.",
                                    f"Use one of {', '.join(socs)}.")

    @property
    def om_path(self) -> str:
        return self.output + ".om"   # as ATC does: --output is a path without the suffix
