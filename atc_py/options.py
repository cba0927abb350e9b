"""ATC's options, validated once, with ATC's error codes and messages.

`cli.py` only parses text into an `AtcOptions`; everything here is reusable from Python.
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Optional

from ge.errors import AtcError, AtcWarning, invalid_param

FRAMEWORKS = {"0": "Caffe", "1": "MindSpore", "3": "TensorFlow", "5": "Onnx"}
MODES = {"0": "generate offline model", "1": "convert model to JSON", "3": "pre-check only",
         "6": "display model info"}
LOG_LEVELS = ("debug", "info", "warning", "error", "null")
# Layout of the model's inputs: NCHW/NHWC name 4-D inputs, NCDHW/NDHWC 5-D ones, ND any rank.
INPUT_FORMATS = ("NCHW", "NHWC", "ND", "NCDHW", "NDHWC")
PRECISION_MODES = ("force_fp16", "force_fp32", "allow_fp32_to_fp16", "must_keep_origin_dtype",
                   "allow_mix_precision")
# Spellings ATC also takes, and what they mean here (docs/FORMATS.md, "precision modes").
PRECISION_MODE_ALIASES = {"allow_mix_precision_fp16": "allow_mix_precision", "cube_fp16in_fp32out": "force_fp32"}
PRECISION_MODE_V2 = {"fp16": "force_fp16", "origin": "must_keep_origin_dtype", "mixed_float16": "allow_mix_precision",
                     "cube_fp16in_fp32out": "force_fp32"}
IMPL_MODES = ("high_performance", "high_precision", "high_performance_for_all", "high_precision_for_all")


# Tuning, memory and debug options of ATC that change nothing in a simulated build: accepted
# (values checked where ATC documents a value set) with W10100 saying they have no effect.
NO_EFFECT_OPTIONS = {
    "auto_tune_mode": ("RL,GA", "GA,RL", "RL", "GA"),
    "buffer_optimize": ("l2_optimize", "l1_optimize", "off_optimize"),
    "disable_reuse_memory": ("0", "1"),
    "op_compiler_cache_mode": ("enable", "disable", "force"),
    "op_compiler_cache_dir": None,
    "op_debug_level": ("0", "1", "2", "3", "4"),
    "debug_dir": None,
    "enable_single_stream": ("true", "false"),
    "enable_scope_fusion_passes": None,
    "enable_compress_weight": ("true", "false"),
    "compress_weight_conf": None,
    "external_weight": ("0", "1"),
    "save_original_model": ("true", "false"),
    "display_model_info": ("0", "1"),
    "dump_mode": ("0", "1"),
    "status_check": ("0", "1"),
    "op_bank_path": None,
    "host_env_os": None,
    "host_env_cpu": None,
    "virtual_type": ("0", "1"),
    "aicore_num": None,
    "allow_hf32": ("true", "false"),
    "deterministic": ("0", "1"),
    "atomic_clean_policy": ("0", "1"),
    "oo_level": ("O1", "O2", "O3"),
}
CONFIG_FILE_OPTIONS = ("insert_op_conf", "keep_dtype", "modify_mixlist", "customize_dtypes", "op_precision_mode",
                       "fusion_switch_file")


@dataclass
class AtcOptions:
    model: str = ""
    framework: Optional[str] = None
    output: str = ""
    soc_version: str = ""
    mode: str = "0"
    input_shape: str = ""
    input_hint_shape: str = ""       # the shapes a dynamic model's report is priced at
    input_format: str = "NCHW"
    # gears (atc_py/gears.py) and run-time shape ranges (deprecated by GE: ranges go in
    # --input_shape now): mutually exclusive
    dynamic_batch_size: str = ""
    dynamic_image_size: str = ""
    dynamic_dims: str = ""
    input_shape_range: str = ""
    out_nodes: str = ""
    log: str = "null"
    om: str = ""
    json: str = ""
    check_report: str = "check_result.json"
    precision_mode: str = "force_fp16"
    precision_mode_v2: str = ""
    fusion_switch_file: str = ""
    super_kernel_scope: str = ""
    # data preprocessing and dtype control (docs/FORMATS.md)
    insert_op_conf: str = ""
    enable_small_channel: str = "0"
    output_type: str = ""
    input_fp16_nodes: str = ""
    # precision overrides (docs/FORMATS.md, "Precision configuration files")
    keep_dtype: str = ""
    modify_mixlist: str = ""
    customize_dtypes: str = ""
    op_precision_mode: str = ""
    op_select_implmode: str = ""
    optypelist_for_implmode: str = ""
    # options accepted without effect: name -> value (see NO_EFFECT_OPTIONS)
    no_effect: dict = field(default_factory=dict)
    # W-code warnings found while validating, printed by the driver
    warnings: list = field(default_factory=list)
    # config files parsed by validate(): keep_dtype, modify_mixlist, customize_dtypes,
    # op_precision_mode, aipp; and "gears", the GearSpec of a gear flag
    parsed: dict = field(default_factory=dict)

    @property
    def small_channel(self) -> bool:
        """--enable_small_channel=1: convs of at most 4 input channels are priced with C0 = 4."""
        return self.enable_small_channel == "1"

    def validate(self) -> None:
        """Check every option that the chosen mode uses; raise the first AtcError found."""
        for name in ("model", "output", "om", "json", "check_report") + CONFIG_FILE_OPTIONS:
            if "\0" in getattr(self, name):
                raise invalid_param(getattr(self, name).replace("\0", "\\0"), f"--{name}",
                                    "it contains a NUL character, which no file path can hold.")
        if self.mode not in MODES:
            raise invalid_param(self.mode, "--mode", f"it must be one of {', '.join(MODES)} "
                                f"({'; '.join(f'{k}: {v}' for k, v in MODES.items())}).")
        if self.log not in LOG_LEVELS:
            raise AtcError("E10010", f"Value [{self.log}] for parameter [--log] is invalid. Reason: it must be "
                           f"one of {', '.join(LOG_LEVELS)}.", "Use --log=debug|info|warning|error|null.")
        self._validate_no_effect()
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
        self._validate_precision_mode()
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
        self._validate_dtype_flags()
        self._validate_impl_flags()
        self.parsed = parse_config_files(self)
        self._validate_dynamic_shapes()

    # -- groups of checks --------------------------------------------------------------

    def _validate_no_effect(self) -> None:
        for name, value in sorted(self.no_effect.items()):
            allowed = NO_EFFECT_OPTIONS.get(name, ())
            if allowed and value not in allowed:
                raise invalid_param(value, f"--{name}", f"it must be one of {', '.join(allowed)}.")
            self.warnings.append(AtcWarning("W10100", f"Option [--{name}={value}] is accepted and has no effect in "
                                            "atc_py (no real tuning, memory planning or dumps here)."))

    def _validate_precision_mode(self) -> None:
        if self.precision_mode_v2:
            if self.precision_mode_v2 not in PRECISION_MODE_V2:
                raise invalid_param(self.precision_mode_v2, "--precision_mode_v2",
                                    f"it must be one of {', '.join(PRECISION_MODE_V2)}.")
            if self.precision_mode not in ("", "force_fp16"):
                raise AtcError("E10001", "Parameters [--precision_mode] and [--precision_mode_v2] cannot be used "
                               "together.", "Keep one of them.")
            self.precision_mode = PRECISION_MODE_V2[self.precision_mode_v2]
        self.precision_mode = PRECISION_MODE_ALIASES.get(self.precision_mode, self.precision_mode)
        if self.precision_mode not in PRECISION_MODES:
            raise invalid_param(self.precision_mode, "--precision_mode",
                                f"it must be one of {', '.join(PRECISION_MODES + tuple(PRECISION_MODE_ALIASES))}.")

    def _validate_dtype_flags(self) -> None:
        if self.enable_small_channel not in ("0", "1"):
            raise invalid_param(self.enable_small_channel, "--enable_small_channel", "it must be 0 or 1.")
        if self.output_type:
            from atc_py.dtype_flags import parse_output_type
            parse_output_type(self.output_type)            # syntax and types; nodes checked on the graph
        if self.input_fp16_nodes:
            from atc_py.dtype_flags import parse_node_list
            parse_node_list(self.input_fp16_nodes, "--input_fp16_nodes")

    def _validate_impl_flags(self) -> None:
        if self.op_select_implmode and self.op_select_implmode not in IMPL_MODES:
            raise invalid_param(self.op_select_implmode, "--op_select_implmode",
                                f"it must be one of {', '.join(IMPL_MODES)}.")
        if self.optypelist_for_implmode:
            if not self.op_select_implmode:
                raise AtcError("E10001", "Parameter [--optypelist_for_implmode] needs [--op_select_implmode].",
                               "Add --op_select_implmode=high_precision or high_performance.")
            if self.op_select_implmode.endswith("_for_all"):
                raise invalid_param(self.op_select_implmode, "--op_select_implmode",
                                    "with --optypelist_for_implmode it must be high_precision or high_performance.")
            types = [t.strip() for t in self.optypelist_for_implmode.split(",")]
            if not all(types):
                raise invalid_param(self.optypelist_for_implmode, "--optypelist_for_implmode",
                                    "it has an empty entry.", "Separate op types with single commas: Gelu,Sigmoid.")
        if self.op_precision_mode and (self.op_select_implmode or self.optypelist_for_implmode):
            self.warnings.append(AtcWarning("W10103", "[--op_precision_mode] is given: [--op_select_implmode] and "
                                            "[--optypelist_for_implmode] are ignored, as in ATC."))

    def _validate_dynamic_shapes(self) -> None:
        from atc_py.gears import parse_gears
        gears = parse_gears(self)                    # E10009 when combined with --input_shape_range
        if gears is not None:
            self.parsed["gears"] = gears
            return
        if self.input_shape_range:
            self.warnings.append(AtcWarning("W10105", "Option [--input_shape_range] is deprecated (as in GE): "
                                            "give ranges in --input_shape, e.g. \"x:1~8,3,224,224\"."))
            if self.input_shape:
                self.warnings.append(AtcWarning("W10103", "[--input_shape] is overridden by [--input_shape_range], "
                                                "as in GE."))
        if self.input_hint_shape:
            from ge.onnx_import import parse_input_hint_shape
            parse_input_hint_shape(self.input_hint_shape)

    @property
    def gears(self):
        """The GearSpec of --dynamic_batch_size/--dynamic_image_size/--dynamic_dims (after
        validate()), or None for a model of one static shape."""
        return self.parsed.get("gears")

    @property
    def om_path(self) -> str:
        return self.output + ".om"   # as ATC does: --output is a path without the suffix


def parse_config_files(options: AtcOptions) -> dict:
    """Parse every config file the options name (line-numbered E10001 on a mistake)."""
    from atc_py import precision_config as pc
    parsed = {}
    if options.keep_dtype:
        parsed["keep_dtype"] = pc.parse_keep_dtype(options.keep_dtype)
    if options.modify_mixlist:
        parsed["modify_mixlist"] = pc.parse_modify_mixlist(options.modify_mixlist)
    if options.customize_dtypes:
        parsed["customize_dtypes"] = pc.parse_customize_dtypes(options.customize_dtypes)
    if options.op_precision_mode:
        parsed["op_precision_mode"] = pc.parse_op_precision_mode(options.op_precision_mode)
    if options.insert_op_conf:
        from atc_py.aipp_config import parse_aipp_config
        parsed["aipp"] = parse_aipp_config(options.insert_op_conf)
    return parsed
