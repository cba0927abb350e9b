"""Kernels of ScatterND and ScatterElements (ge/ops/scatter.py): the copy of `data` plus one
write (move) or one combine (alu) per update, on the vector unit."""
from __future__ import annotations

from codegen.registry import register
from codegen.work import Work


def _scatter_work(inputs, outputs, attrs) -> Work:
    reduction = attrs.get("reduction", "none")
    reduction = reduction.decode() if isinstance(reduction, bytes) else reduction
    work = Work().add_vector("move", outputs[0].size)
    return work.add_vector("move" if reduction == "none" else "alu", inputs[2].size)


register("ScatterND", _scatter_work, "ScatterNd")
register("ScatterElements", _scatter_work, "ScatterElements")
