"""Which fusions are switched off: GE_FUSION_DISABLE_LIST and --fusion_switch_file.

GE_FUSION_DISABLE_LIST holds comma-separated fused-op names (ConvBNReluFusionOp, ...).
The switch file is ATC's JSON: {"Switch": {"GraphFusion": {"<PassName>": "on"|"off",
"ALL": "off"}, "UBFusion": {...}}}; a pass named individually overrides ALL.  Unknown
names are not errors (ATC ignores them too) but produce a warning listing the valid names.
"""
from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from typing import Optional

from ge.errors import AtcError


@dataclass
class FusionSwitches:
    disabled_ops: set = field(default_factory=set)
    pass_state: dict = field(default_factory=dict)   # pass name -> bool
    all_state: Optional[bool] = None
    warnings: list = field(default_factory=list)
    source: dict = field(default_factory=dict)        # what switched a name off, for the report

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


def _state(value, pass_name: str, path: str) -> bool:
    text = str(value).strip().lower()
    if text not in ("on", "off"):
        raise AtcError("E10001", f"Value [{value}] for [{pass_name}] in parameter [--fusion_switch_file] "
                       f"({path}) is invalid. Reason: it must be \"on\" or \"off\".",
                       'Write each switch as "PassName": "on" or "off".')
    return text == "on"


def load_switches(disable_list: Optional[str], switch_file: Optional[str],
                  known_passes: list, known_ops: list) -> FusionSwitches:
    switches = FusionSwitches()
    for name in filter(None, (part.strip() for part in (disable_list or "").split(","))):
        if name not in known_ops:
            switches.warnings.append(f"GE_FUSION_DISABLE_LIST names unknown fused op [{name}]; valid names: "
                                     f"{', '.join(sorted(known_ops))}.")
        switches.disabled_ops.add(name)
    if switch_file:
        if not os.path.isfile(switch_file):
            raise AtcError("E10001", f"Value [{switch_file}] for parameter [--fusion_switch_file] is invalid. "
                           "Reason: the file does not exist.", "Check the path of the fusion switch file.")
        try:
            with open(switch_file, "r", encoding="utf-8") as f:
                content = json.load(f)
        except (OSError, ValueError) as exc:
            raise AtcError("E10001", f"Value [{switch_file}] for parameter [--fusion_switch_file] is invalid. "
                           f"Reason: it is not valid JSON ({exc}).",
                           'Write {"Switch": {"GraphFusion": {"PassName": "off"}}}.')
        sections = content.get("Switch") if isinstance(content, dict) else None
        if not isinstance(sections, dict):
            raise AtcError("E10001", f"Value [{switch_file}] for parameter [--fusion_switch_file] is invalid. "
                           "Reason: no \"Switch\" object at the top level.",
                           'Write {"Switch": {"GraphFusion": {"PassName": "off"}}}.')
        for section in ("GraphFusion", "UBFusion"):
            entries = sections.get(section, {})
            if not isinstance(entries, dict):
                raise AtcError("E10001", f"Value [{switch_file}] for parameter [--fusion_switch_file] is invalid. "
                               f"Reason: \"{section}\" must be an object.", "See ATC's fusion switch file format.")
            for name, value in entries.items():
                state = _state(value, name, switch_file)
                if name == "ALL":
                    switches.all_state = state if switches.all_state is None else (switches.all_state and state)
                    continue
                if name not in known_passes:
                    switches.warnings.append(f"--fusion_switch_file names unknown fusion pass [{name}]; valid "
                                             f"names: ALL, {', '.join(sorted(known_passes))}.")
                switches.pass_state[name] = state
        for name in set(sections) - {"GraphFusion", "UBFusion"}:
            switches.warnings.append(f"--fusion_switch_file section [{name}] is unknown; valid: GraphFusion, UBFusion.")
    return switches
