"""ATC-style log output: level from --log, else from ASCEND_GLOBAL_LOG_LEVEL.

Levels: debug 0, info 1, warning 2, error 3, null (nothing but errors ATC always prints).
The Graph Fusion Report prints at info, or when GE_GRAPH_FUSION_LOG=1 is set together with
ASCEND_GLOBAL_LOG_LEVEL <= 1 (as in the seeds).
"""
from __future__ import annotations

import os
import re
import sys
from dataclasses import dataclass

from ge.errors import AtcError

_LEVELS = {"debug": 0, "info": 1, "warning": 2, "error": 3, "null": 4}


@dataclass
class Logger:
    level: int = 4
    fusion_log: bool = False
    quiet: bool = False          # the Python API: print nothing, the caller gets the data

    @classmethod
    def from_options(cls, options) -> "Logger":
        level = _LEVELS.get(options.log, 4)
        env = os.environ.get("ASCEND_GLOBAL_LOG_LEVEL", "").strip()
        if env and not re.fullmatch(r"[0-9]+", env):   # str.isdigit() also takes '²', which int() refuses
            raise AtcError("E13024", f"Value [{env}] for environment variable [ASCEND_GLOBAL_LOG_LEVEL] is invalid. "
                           "Reason: it must be 0 (debug), 1 (info), 2 (warning), 3 (error) or 4 (null).",
                           "Set ASCEND_GLOBAL_LOG_LEVEL to a digit from 0 to 4, or unset it.")
        if options.log == "null" and env:
            level = min(int(env), 4)
        fusion_log = os.environ.get("GE_GRAPH_FUSION_LOG", "").strip() == "1" and level <= 1
        return cls(level, fusion_log or level <= 1)

    def _emit(self, tag: str, text: str) -> None:
        if not self.quiet:
            print(f"[{tag}] {text}", file=sys.stdout)

    def debug(self, text: str) -> None:
        if self.level <= 0:
            self._emit("DEBUG", text)

    def info(self, text: str) -> None:
        if self.level <= 1:
            self._emit("INFO", text)

    def warning(self, text: str) -> None:
        if self.level <= 2 or self.level == 4:   # ATC shows warnings about switches even at null
            self._emit("WARNING", text)

    def ge(self, text: str) -> None:
        """A line of GE's fusion log, printed when the fusion report is on."""
        if self.fusion_log and not self.quiet:
            print(f"[GE] {text}".rstrip(), file=sys.stdout)
