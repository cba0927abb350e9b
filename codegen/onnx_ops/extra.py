"""Kernels of GatherND and CastLike (ge/ops/extra.py) and RotaryEmbedding (ge/ops/rotary.py):
data movement, conversion and the rotation on the vector unit, priced per output element
(the rotation: two multiplies and an add or subtract per element)."""
from __future__ import annotations

from codegen.registry import register
from codegen.work import per_element, reads_sparsely

register("GatherND", reads_sparsely(per_element(move=1), 0), "GatherNd")
register("CastLike", per_element(alu=1))
register("RotaryEmbedding", per_element(alu=3))
