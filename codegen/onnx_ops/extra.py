"""Kernels of GatherND and CastLike (ge/ops/extra.py): data movement and conversion on the
vector unit, priced per output element."""
from __future__ import annotations

from codegen.registry import register
from codegen.work import per_element

register("GatherND", per_element(move=1), "GatherNd")
register("CastLike", per_element(alu=1))
