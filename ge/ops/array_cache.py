"""Values derived from a constant array (Winograd U, packed GEMM weights), kept as long as
that array lives.

Why one class: numpy arrays are not hashable and `id()` is reused once an array dies, so an
entry is keyed by (id, tag), checked against a weak reference to the array on every hit, and
dropped when the array goes -- a rule two caches (ge/ops/winograd.py, ge/ops/native.py) each
wrote out before.
"""
from __future__ import annotations

import weakref


class ArrayCache:
    """(array, tag) -> value, for as long as the array lives."""

    def __init__(self) -> None:
        self._entries: dict = {}          # (id(array), tag) -> (weakref to it, value)

    def get(self, array, tag):
        """The value kept for `array` under `tag`, or None."""
        hit = self._entries.get((id(array), tag))
        return hit[1] if hit is not None and hit[0]() is array else None

    def put(self, array, tag, value):
        """Keep `value` for `array` under `tag` (not kept if the array cannot be weakly
        referenced: then it is computed again next time); returns `value`."""
        key = (id(array), tag)
        try:
            ref = weakref.ref(array, lambda _, key=key: self._entries.pop(key, None))
        except TypeError:
            return value
        self._entries[key] = (ref, value)
        return value

    def keys(self) -> set:
        """The (id(array), tag) pairs held now."""
        return set(self._entries)
