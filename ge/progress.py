"""Progress of a long run (stage and percent), reported to whatever display the front end set.

Why: compiling a model of billions of parameters takes minutes; the stages say how far it
is.  Stages call `current_progress().stage(name, total)` and `.update(done)`; the default
reporter does nothing, so the library and tests stay silent.  `atc` sets a terminal display
(atc_py/progress_display.py) for its run with `use_progress`, a context variable like the
resource budget (ge.limits), so threads and nested runs keep their own.
"""
from __future__ import annotations

import contextlib
import contextvars


class Progress:
    """The reporter interface; this base ignores everything."""

    def stage(self, name: str, total: int = 0) -> None:
        """A new stage begins; `total` is what `update` counts up to (0: no percent)."""

    def update(self, done: int, total: int = 0) -> None:
        """`done` of the stage's total (or of `total`, when given) are finished."""

    def close(self) -> None:
        """The run is over (successfully or not): leave the display clean."""


_PROGRESS: contextvars.ContextVar = contextvars.ContextVar("atc_py_progress", default=Progress())


def current_progress() -> Progress:
    return _PROGRESS.get()


@contextlib.contextmanager
def use_progress(progress: Progress):
    token = _PROGRESS.set(progress)
    try:
        yield progress
    finally:
        progress.close()
        _PROGRESS.reset(token)
