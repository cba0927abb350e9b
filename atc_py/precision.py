"""Per-kernel precision: the compute dtype and implementation mode of every kernel after fusion.

Why after fusion, through provenance: ATC matches --customize_dtypes and the other files
by operator name, and its own docs warn that a name stops matching once fusion renames the
operator.  Here every kernel knows the ONNX nodes it covers (`Node.origin`) and their op
types, so an entry naming an ONNX node or op type reaches the kernel that computes it,
fused or not.  A kernel computes all its float tensors in one dtype: when an entry names
one of the several ONNX nodes a fused kernel covers, the whole kernel follows it (the
report says so).

Order, as in ATC's docs: --customize_dtypes (by name, then by type) > --keep_dtype >
--modify_mixlist (allow_mix_precision only) > --precision_mode.  Implementation modes:
--op_precision_mode ([ByNodeName] > [ByOpType]) > --op_select_implmode (+
--optypelist_for_implmode).  Op types match the ONNX type, the Ascend IR type the .om uses
(Conv2D, SoftmaxV2, ...) and the documented aliases below, case-insensitively.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Optional

import numpy as np

from codegen.om_builder import compute_dtype
from codegen.registry import kernel_of
from ge.ops.common import FLOAT_TYPES
from ge.ops.registry import OpKind
from ge.errors import AtcWarning
from ge.ir import Graph, Node

# Ascend IR type -> other names users write for it (ATC docs and model-zoo scripts).
TYPE_ALIASES = {
    "BatchMatMul": ("MatMulV2", "BatchMatMulV2", "MatMul"),
    "GemmD": ("MatMulV2", "Gemm"),
    "MaxPoolV3": ("Pooling", "MaxPool"),
    "AvgPool": ("Pooling", "AvgPoolV2", "AveragePool"),
    "SoftmaxV2": ("Softmax",),
    "Conv2D": ("Convolution",),
    "LayerNorm": ("LayerNormalization",),
    "GatherV2D": ("GatherV2", "Gather"),
    "ConcatD": ("ConcatV2", "Concat"),
}
# Op types whose kernels have a high_performance and a high_precision implementation here
# (lower case).  Our built-in high_performance.ini / high_precision.ini list exactly these.
IMPL_TYPES = ("gelu", "sigmoid", "softmaxv2")
ACTIVATION_TYPES = {"Gelu": ("Gelu",), "FastGelu": ("Gelu", "FastGelu"), "Sigmoid": ("Sigmoid",),
                    "SiLU": ("Sigmoid", "Swish"), "Tanh": ("Tanh",)}
NUMERIC_MODES = {"high_precision": "high_precision", "high_performance": "high_performance",
                 "super_performance": "high_performance", "keep_fp16": "keep_fp16"}


def type_names(op_type: str) -> set:
    """The names an op type answers to: ONNX type, .om (Ascend IR) type, aliases."""
    names = {op_type}
    kernel = kernel_of(op_type)
    if kernel is not None:
        names.add(kernel.om_type)
    for name in list(names):
        names.update(TYPE_ALIASES.get(name, ()))
    return names


def covered_types(node: Node, origin_types: dict) -> set:
    """Lower-case op types a kernel computes: its own, those of the ONNX nodes it covers, and
    what its fused form implies (an epilogue activation, attention's softmax, ...)."""
    names = type_names(node.op_type)
    for origin in node.origin:
        if origin in origin_types:
            names |= type_names(origin_types[origin])
    activation = node.attrs.get("activation")
    if isinstance(activation, str):
        names.update(ACTIVATION_TYPES.get(activation, (activation,)))
    if node.op_type == "MultiHeadAttentionFusionOp":
        names.update(("SoftmaxV2", "Softmax"))
    if "LayerNorm" in node.op_type:
        names.update(("LayerNorm", "LayerNormalization"))
    return {n.lower() for n in names if n}


@dataclass
class KernelPrecision:
    base_dtype: np.dtype                 # what --precision_mode alone gives
    dtype: np.dtype                      # what the kernel computes in
    impl_mode: str = ""                  # "" = the kernel's default implementation
    reasons: list = field(default_factory=list)

    @property
    def changed(self) -> bool:
        return self.dtype != self.base_dtype or bool(self.impl_mode)


@dataclass
class PrecisionPlan:
    precision_mode: str
    kernels: dict = field(default_factory=dict)       # node name -> KernelPrecision
    warnings: list = field(default_factory=list)

    def dtype_of(self, node: Node) -> np.dtype:
        entry = self.kernels.get(node.name)
        return entry.dtype if entry is not None else compute_dtype(node, self.precision_mode)

    def overrides(self, graph: Graph) -> list:
        """Rows for the report: every kernel whose dtype or implementation a flag changed."""
        rows = []
        for node in graph.nodes:
            entry = self.kernels.get(node.name)
            if entry is None or not entry.changed:
                continue
            kernel = kernel_of(node.op_type)
            rows.append({"kernel": node.name, "op_type": kernel.om_type if kernel else node.op_type,
                         "dtype_before": str(entry.base_dtype), "dtype": str(entry.dtype),
                         "impl_mode": entry.impl_mode, "flags": list(entry.reasons),
                         "origin_ops": node.origin})
        return rows


def _is_float_kernel(node: Node) -> bool:
    return any(v is not None and np.dtype(v.desc.dtype) in FLOAT_TYPES for v in list(node.inputs) + node.outputs)


def _model_dtype(node: Node) -> np.dtype:
    """The dtype the model itself computes this kernel in (its first float tensor)."""
    return compute_dtype(node, "must_keep_origin_dtype")


class _Matcher:
    """Entries of one config naming ONNX nodes or op types, each with its line and value,
    and which of them matched a kernel (the rest get a W10102 warning)."""

    def __init__(self, flag: str, names: Optional[dict] = None, types: Optional[dict] = None):
        # names: {node: (line, value)}; types: {op type: (line, value)}
        self.flag = flag
        self.names = dict(names or {})
        self.types = {t.lower(): (t, line, value) for t, (line, value) in (types or {}).items()}
        self.used: set = set()
        self.without_effect: set = set()    # matched only kernels it cannot change

    def match(self, node: Node, types: set, effective: bool = True):
        """(description for the report, value) of the entry naming this kernel, or None.
        A node name wins over an op type.  `effective=False`: the entry matched a kernel it
        cannot change (it is reported, not applied)."""
        seen = self.used if effective else self.without_effect
        for origin in node.origin:
            if origin in self.names:
                seen.add(("name", origin))
                line, value = self.names[origin]
                return f"{self.flag} ({_where(line)}{origin})", value
        for lowered in sorted(types & set(self.types)):
            seen.add(("type", lowered))
            spelled, line, value = self.types[lowered]
            return f"{self.flag} ({_where(line)}OpType::{spelled})", value
        return None

    def unused(self) -> list:
        out = []
        for kind, key, shown in ([("name", n, f"node [{n}]") for n in self.names] +
                                 [("type", k, f"op type [{t}]") for k, (t, _, _) in self.types.items()]):
            if (kind, key) in self.used:
                continue
            if (kind, key) in self.without_effect:
                out.append(AtcWarning("W10102", f"{self.flag} names {shown}, but no kernel it names has a "
                                      f"high_performance/high_precision variant here (those are: "
                                      f"{', '.join(IMPL_TYPES)}); ignored."))
            else:
                out.append(AtcWarning("W10102", f"{self.flag} names {shown}, which no kernel of the model computes "
                                      "(not in the model, or folded away); ignored."))
        return out


def _where(line) -> str:
    return f"line {line}: " if isinstance(line, int) else ""


def _first(*hits):
    return next((h for h in hits if h), None)


def plan_precision(graph: Graph, origin_types: dict, options) -> PrecisionPlan:
    """Decide every kernel's compute dtype and implementation mode from the options."""
    parsed = options.parsed
    mode = options.precision_mode
    plan = PrecisionPlan(mode)
    keep, custom = parsed.get("keep_dtype"), parsed.get("customize_dtypes")
    mix, modes = parsed.get("modify_mixlist"), parsed.get("op_precision_mode")

    keep_m = None
    if keep:
        if mode == "must_keep_origin_dtype":
            plan.warnings.append(AtcWarning("W10103", "--keep_dtype has no effect with --precision_mode="
                                            "must_keep_origin_dtype: every kernel keeps the model's dtype already."))
        else:
            keep_m = _Matcher("--keep_dtype", {n: (line, None) for n, line in keep.names.items()},
                              {t: (line, None) for t, line in keep.types.items()})
    custom_m = None
    if custom:
        custom_m = _Matcher("--customize_dtypes", {n: (e.line, e.dtype) for n, e in custom.names.items()},
                            {t: (e.line, e.dtype) for t, e in custom.types.items()})
    mix_m = None
    if mix and mode != "allow_mix_precision":
        plan.warnings.append(AtcWarning("W10103", "--modify_mixlist has no effect without --precision_mode="
                                        "allow_mix_precision (or allow_mix_precision_fp16)."))
    elif mix:
        mix_m = {(name, action): _Matcher(f"--modify_mixlist {name}.{action}", None,
                                          {t: (None, None) for t in mix.get(name, action)})
                 for name in ("black-list", "white-list", "gray-list") for action in ("to-add", "to-remove")}
    impl_m, global_impl = None, ""
    if modes:
        impl_m = _Matcher("--op_precision_mode", {n: (e.line, e.mode) for n, e in modes.by_name.items()},
                          {t: (e.line, e.mode) for t, e in modes.by_type.items()})
        for key, entry in list(modes.by_name.items()) + list(modes.by_type.items()):
            if entry.mode not in NUMERIC_MODES:
                plan.warnings.append(AtcWarning("W10104", f"--op_precision_mode line {entry.line}: mode "
                                                f"[{entry.mode}] for [{key}] is accepted and changes nothing here "
                                                "(no index checks, HF32 or FP32-execution switch in the simulator)."))
    elif options.op_select_implmode:
        global_impl = options.op_select_implmode.replace("_for_all", "")
        if options.optypelist_for_implmode:
            impl_m = _Matcher("--optypelist_for_implmode", None,
                              {t.strip(): (None, global_impl) for t in options.optypelist_for_implmode.split(",")})

    for node in graph.nodes:
        if not _is_float_kernel(node) or kernel_of(node.op_type).no_task:
            continue
        types = covered_types(node, origin_types)
        base = compute_dtype(node, mode)
        if node.op_type == "Aipp":        # the AIPP unit writes float16 whatever the mode
            plan.kernels[node.name] = KernelPrecision(np.dtype(np.float16), np.dtype(np.float16))
            continue
        entry = KernelPrecision(base, base)
        if mix_m is not None:
            _apply_mixlist(node, types, entry, mix_m)
        hit = keep_m.match(node, types) if keep_m else None
        if hit:
            entry.dtype = _model_dtype(node)
            entry.reasons.append(hit[0])
        hit = custom_m.match(node, types) if custom_m else None
        if hit:
            entry.dtype = np.dtype(hit[1])
            entry.reasons.append(hit[0])
        _apply_impl(node, types, entry, impl_m, global_impl)
        plan.kernels[node.name] = entry
    matchers = [keep_m, custom_m, impl_m] + (list(mix_m.values()) if mix_m else [])
    for matcher in matchers:
        if matcher is not None:
            plan.warnings.extend(matcher.unused())
    return plan


def _apply_mixlist(node: Node, types: set, entry: KernelPrecision, lists: dict) -> None:
    """allow_mix_precision with --modify_mixlist: black-list to-add keeps the model dtype,
    white-list to-add computes fp16, white-list to-remove (or gray-list to-add) takes a cube
    kernel off the built-in trust list, so it keeps the model dtype.  Our built-in lists:
    trust = cube kernels (conv, matmul, fused GEMMs, windows), block = none, gray = the rest;
    so black-list/gray-list to-remove have nothing to remove (their entries warn W10102)."""
    black = lists[("black-list", "to-add")].match(node, types)
    white = lists[("white-list", "to-add")].match(node, types)
    off_white = _first(lists[("white-list", "to-remove")].match(node, types),
                       lists[("gray-list", "to-add")].match(node, types))
    if black:
        entry.dtype = _model_dtype(node)
        entry.reasons.append(black[0])
    elif white:
        entry.dtype = np.dtype(np.float16)
        entry.reasons.append(white[0])
    elif off_white and kernel_of(node.op_type).op.node_kind(node.attrs) == OpKind.OUT_EWISE_FUSABLE:
        entry.dtype = _model_dtype(node)
        entry.reasons.append(off_white[0])


def _apply_impl(node: Node, types: set, entry: KernelPrecision, matcher: Optional[_Matcher],
                global_impl: str) -> None:
    """The implementation mode a flag gives this kernel, if it has two implementations."""
    capable = bool(types & set(IMPL_TYPES))
    hit = matcher.match(node, types, effective=capable) if matcher is not None else None
    if hit is None and global_impl and matcher is None and capable:
        hit = ("--op_select_implmode", global_impl)
    if hit is None or not capable:
        return                       # kernels without two implementations: unused entries warn
    numeric = NUMERIC_MODES.get(hit[1])
    if numeric is None:
        return                       # W10104 already said this mode changes nothing
    entry.impl_mode = numeric
    entry.reasons.append(f"{hit[0]}: {hit[1]}")
