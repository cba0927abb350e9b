"""HardSigmoid: relu6(x + 3) / 6 -> HardSigmoid(x, alpha=1/6, beta=0.5).

timm's and older torchvision code write hard_sigmoid by hand: Add 3, Clip(0, 6) (ReLU6),
then Div by 6 or Mul by 1/6.  (torch's F.hardsigmoid exports as the op itself.)  Anchored
on the Clip.
"""
from __future__ import annotations

from fusion_passes.canonical.idioms import become, close, is_reciprocal_of, other, sole
from fusion_passes.canonical.rewrite import Rewrite


def relu6_of_shift(clip):
    """x when `clip` is Clip(x + 3, 0, 6), else None."""
    if not _bounds(clip, 0.0, 6.0):
        return None
    add = clip.inputs[0].producer
    if add is None or add.op_type != "Add":
        return None
    return next((v for v in add.inputs if close(other(add, v), 3.0) and not v.is_const), None)


def _bounds(clip, lo: float, hi: float) -> bool:
    if len([v for v in clip.inputs if v is not None]) != 1:
        return False
    bounds = [clip.attrs.get(k) for k in ("min", "max")]
    return all(b is not None for b in bounds) and [float(b) for b in bounds] == [lo, hi]


class HardSigmoid(Rewrite):
    name = "HardSigmoid"
    anchor_types = ("Clip",)

    def apply(self, graph, clip):
        x = relu6_of_shift(clip)
        div = sole(clip.outputs[0], "Div", "Mul")
        if x is None or div is None or not is_reciprocal_of(div, clip.outputs[0], 6.0):
            return False
        return become(graph, "HardSigmoid", x, {"alpha": 1.0 / 6.0, "beta": 0.5}, div.outputs[0],
                      [clip.inputs[0].producer, clip, div])
