"""Named input slots of a fused kernel.

Why: a fused kernel's inputs are positional in the .om (ge.proto's op inputs), but which
ones are present depends on the match (a bias, a mask, rotary tables...).  A `Slots` spec
names each position once; the pass that builds the node packs its inputs by name and the
kernel reads them by name, so the two cannot disagree about the order.  Absent optional
inputs are None (the .om records which slots are present, om_builder's `_input_slots`).
A spec may end in a variadic slot (`rest`): any number of inputs after the named ones (the
other operands of a concatenation a conv writes into).
"""
from __future__ import annotations

from typing import Optional, Sequence


class Slots:
    def __init__(self, *names: str, required: Sequence[str] = (), rest: str = ""):
        self.names = tuple(names)
        self.required = tuple(required)
        self.rest = rest
        self._index = {name: i for i, name in enumerate(names)}

    def pack(self, **values) -> list:
        """The input list for values given by slot name (absent slots None, trailing ones
        dropped; the variadic slot takes a list)."""
        tail = list(values.pop(self.rest, None) or []) if self.rest else []
        unknown = set(values) - set(self.names)
        if unknown:
            raise ValueError(f"unknown input slot(s) {sorted(unknown)}; slots are {self.names}")
        missing = [n for n in self.required if values.get(n) is None]
        if missing:
            raise ValueError(f"required input slot(s) {missing} not given")
        inputs = [values.get(name) for name in self.names]
        if tail:
            return inputs + tail
        while inputs and inputs[-1] is None:
            inputs.pop()
        return inputs

    def read(self, inputs: Sequence) -> dict:
        """{slot name: input or None} of a node's (or a kernel call's) positional inputs; the
        variadic slot reads as the list of inputs past the named ones."""
        named = {name: (inputs[i] if i < len(inputs) else None) for i, name in enumerate(self.names)}
        if self.rest:
            named[self.rest] = list(inputs[len(self.names):])
        return named

    def index(self, name: str) -> int:
        return self._index[name]

    def get(self, inputs: Sequence, name: str) -> Optional[object]:
        i = self._index[name]
        return inputs[i] if i < len(inputs) else None
