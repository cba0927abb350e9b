"""`atc`'s progress display: stage and percent on one line of stderr, for long compiles.

Why these rules: ATC's own output (the start and success lines, logs, the fusion report)
goes to stdout and scripts read it, so progress never touches stdout.  It appears only when
stderr is a terminal (a log file or a pipe gets nothing, as with pip or curl) and only once
the run has taken `delay` seconds, so short compiles print exactly what they printed
before; the line is rewritten in place, at most `interval` apart, and erased at the end.
"""
from __future__ import annotations

import sys
import time
from typing import Callable, Optional, TextIO

from ge.progress import Progress

DELAY_SECONDS = 3.0
INTERVAL_SECONDS = 0.2


class TerminalProgress(Progress):
    def __init__(self, stream: TextIO, delay: Optional[float] = None, interval: Optional[float] = None,
                 clock: Callable[[], float] = time.monotonic):
        self.stream, self.clock = stream, clock
        self.delay = DELAY_SECONDS if delay is None else delay
        self.interval = INTERVAL_SECONDS if interval is None else interval
        self.started = clock()
        self.name, self.total, self.done = "", 0, 0
        self._shown = 0            # characters of the line on screen
        self._last = None          # when it was last drawn

    @classmethod
    def for_stderr(cls) -> Progress:
        """A display on stderr when it is a terminal; otherwise a reporter that ignores everything."""
        stream = sys.stderr
        isatty = getattr(stream, "isatty", None)
        return cls(stream) if isatty is not None and isatty() else Progress()

    def stage(self, name: str, total: int = 0) -> None:
        self.name, self.total, self.done = name, total, 0
        self._draw(force=True)

    def update(self, done: int, total: int = 0) -> None:
        self.done = done
        if total:
            self.total = total
        self._draw()

    def line(self) -> str:
        if self.total > 0:
            return f"{self.name}: {min(100, 100 * self.done // self.total):3d}%"
        return f"{self.name}..."

    def _draw(self, force: bool = False) -> None:
        now = self.clock()
        if now - self.started < self.delay:
            return
        if not force and self._last is not None and now - self._last < self.interval:
            return
        text = self.line()
        self.stream.write("\r" + text + " " * max(0, self._shown - len(text)))
        self.stream.flush()
        self._shown, self._last = len(text), now

    def close(self) -> None:
        """Erase the line (before anything else is printed, and at the end); a later stage
        draws it again."""
        if self._shown:
            self.stream.write("\r" + " " * self._shown + "\r")
            self.stream.flush()
            self._shown = 0

