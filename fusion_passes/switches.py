"""Which fusions are switched off: GE_FUSION_DISABLE_LIST and --fusion_switch_file.

GE_FUSION_DISABLE_LIST holds comma-separated fused-op names (ConvBNReluFusionOp, ...).
The switch file comes in ATC's two documented forms: JSON {"Switch": {"GraphFusion":
{"<PassName>": "on"|"off", "ALL": "off"}, "UBFusion": {...}}}, or one `PassName:off` (or
`:on`) a line (the form of Huawei's own --fusion_switch_file example); a pass named
individually overrides ALL.  Huawei's pass names with an equivalent here are mapped to
ours (HUAWEI_PASS_EQUIVALENTS, sources in docs/FORMATS.md); other unknown names are not
errors (ATC ignores them too) but a W10101 warning says they have no equivalent and lists
the valid names.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Optional

from ge.errors import AtcError, AtcWarning
from ge.files import read_input

# Huawei GE/FE fusion pass -> our pass doing the same rewrite (docs/FORMATS.md gives the source
# of each name).  Several Huawei UB fusions of element-wise chains are what autofuse does.
HUAWEI_PASS_EQUIVALENTS = {
    "ConvBatchnormFusionPass": "ConvBNReluFusionPass",
    "MatMulBiasAddFusionPass": "MatMulBiasActFusionPass",
    "TbeMatmulElemwiseFusionPass": "MatMulBiasActFusionPass",
    "ATbeMatMulElemwiseFusionPass": "MatMulBiasActFusionPass",
    "TbeBatchMatmulElementWiseFusionPass": "MatMulBiasActFusionPass",
    "LayerNormONNXFusionPass": "LayerNormFusionPass",
    "FlashAttentionFusionPass": "MultiHeadAttentionFusionPass",
    "TbeEltwiseFusionPass": "AutoFusePass",
    "TbeMultiOutputFusionPass": "AutoFusePass",
    "TbeReduceElemwiseFusionPass": "AutoFusePass",
    "AutomaticUbFusion": "AutoFusePass",
}


@dataclass
class FusionSwitches:
    disabled_ops: set = field(default_factory=set)
    pass_state: dict = field(default_factory=dict)   # pass name -> bool
    all_state: Optional[bool] = None
    warnings: list = field(default_factory=list)
    source: dict = field(default_factory=dict)        # what switched a name off, for the report
    mapped: dict = field(default_factory=dict)        # Huawei pass name -> ours it was taken as

    def pass_enabled(self, pass_name: str) -> bool:
        if pass_name in self.pass_state:
            return self.pass_state[pass_name]
        return True if self.all_state is None else self.all_state

    def op_enabled(self, fused_op: str) -> bool:
        return fused_op not in self.disabled_ops

    def why_disabled(self, pass_name: str, fused_op: str = "") -> str:
        if fused_op and fused_op in self.disabled_ops:
            return "GE_FUSION_DISABLE_LIST"
        if not self.pass_enabled(pass_name):
            return "--fusion_switch_file"
        return ""


def parse_env_flags(text: str) -> dict:
    """AUTOFUSE_FLAGS / AUTOFUSE_DFX_FLAGS: "--k=v;--k2=v2" -> {k: v}."""
    flags = {}
    for item in filter(None, (s.strip() for s in (text or "").split(";"))):
        key, _, value = item.lstrip("-").partition("=")
        flags[key.strip()] = value.strip()
    return flags


def _state(value, pass_name: str, path: str, line: Optional[int] = None) -> bool:
    text = str(value).strip().lower()
    if text not in ("on", "off"):
        where = f", line {line}" if line is not None else ""
        raise AtcError("E10001", f"Value [{value}] for [{pass_name}] in parameter [--fusion_switch_file] "
                       f"({path}{where}) is invalid. Reason: it must be \"on\" or \"off\".",
                       'Write each switch as "PassName": "on" or "off" (JSON) or PassName:off (one a line).')
    return text == "on"


_MAX_SWITCH_FILE_BYTES = 4 << 20   # a switch file names a few dozen passes


def _file_error(path: str, reason: str) -> AtcError:
    return AtcError("E10001", f"Value [{path}] for parameter [--fusion_switch_file] is invalid. Reason: {reason}",
                    'Write {"Switch": {"GraphFusion": {"PassName": "off"}}}, or PassName:off one a line.')


def _read_switch_file(path: str) -> list:
    """[(section, name, value, line)] from either file form; line is None for JSON."""
    data = read_input(path, "--fusion_switch_file", max_bytes=_MAX_SWITCH_FILE_BYTES)   # a regular file
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise _file_error(path, f"it cannot be read as UTF-8 text ({exc}).")
    if text.lstrip().startswith("{"):
        return _json_entries(path, text)
    entries = []
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        name, sep, value = line.partition(":")
        if not sep or not name.strip() or not value.strip():
            raise _file_error(path, f"line {number}: [{line}] is not of the form PassName:off or PassName:on "
                              "(and the file does not start with '{', so it is not JSON).")
        entries.append(("GraphFusion", name.strip(), value.strip(), number))
    return entries


def _json_entries(path: str, text: str) -> list:
    try:
        content = json.loads(text)
    except (ValueError, RecursionError) as exc:
        raise _file_error(path, f"it is not valid JSON ({exc}).")
    sections = content.get("Switch") if isinstance(content, dict) else None
    if not isinstance(sections, dict):
        raise _file_error(path, "no \"Switch\" object at the top level.")
    entries = []
    for section, values in sections.items():
        if section not in ("GraphFusion", "UBFusion"):
            entries.append((section, None, None, None))
            continue
        if not isinstance(values, dict):
            raise _file_error(path, f"\"{section}\" must be an object.")
        entries.extend((section, name, value, None) for name, value in values.items())
    return entries


def load_switches(disable_list: Optional[str], switch_file: Optional[str],
                  known_passes: list, known_ops: list) -> FusionSwitches:
    switches = FusionSwitches()
    for name in filter(None, (part.strip() for part in (disable_list or "").split(","))):
        if name not in known_ops:
            switches.warnings.append(AtcWarning("W10101", f"GE_FUSION_DISABLE_LIST names unknown fused op "
                                                f"[{name}]: ignored; valid names: {', '.join(sorted(known_ops))}."))
        switches.disabled_ops.add(name)
    if switch_file:
        for section, name, value, line in _read_switch_file(switch_file):
            if name is None:
                switches.warnings.append(AtcWarning("W10101", f"--fusion_switch_file section [{section}] is "
                                                    "unknown; valid: GraphFusion, UBFusion."))
                continue
            state = _state(value, name, switch_file, line)
            if name == "ALL":
                switches.all_state = state if switches.all_state is None else (switches.all_state and state)
                continue
            ours = HUAWEI_PASS_EQUIVALENTS.get(name, name)
            if ours not in known_passes:
                switches.warnings.append(AtcWarning("W10101", f"--fusion_switch_file names unknown fusion pass "
                                                    f"[{name}]: no equivalent in atc_py, ignored; valid names: ALL, "
                                                    f"{', '.join(sorted(known_passes))}."))
                continue
            if ours != name:
                switches.mapped[name] = ours
            switches.pass_state[ours] = state if ours not in switches.pass_state else (
                switches.pass_state[ours] and state)
    return switches
