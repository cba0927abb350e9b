"""What a kernel computes, for the cost model: `Work`, and the rules most ops share.

Contract of a work rule: ``work(inputs, outputs, attrs) -> Work`` on the kernel's input and
output `TensorType`s (in the dtype it computes in).  Memory traffic is not counted here: the
cost model derives it from the kernel's external tensors.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Optional, Sequence

import numpy as np

from ge.ops.common import fast_impl
from ge.ops.registry import TensorType

VECTOR_OP_CLASSES = ("alu", "div", "transcendental", "move")


@dataclass
class Work:
    """What a kernel computes.  `cube_macs`: multiply-accumulates on the cube unit.
    `vector_ops`: element operations on the vector unit by class -- ``alu`` (add, mul, max,
    compare, select, cast), ``div`` (div, sqrt, reciprocal), ``transcendental`` (exp, log,
    erf, tanh, pow), ``move`` (in-buffer data movement: transpose, gather, concat).  The chip
    data file gives the cost of each class.  `onchip_bytes`: bytes of intermediate tensors a
    fused kernel keeps on chip (the cost model checks they fit UB/L0, else charges a spill).
    `cube_dtype`: what the cube multiplies when it is not the kernel's compute dtype -- "int8"
    for int8 x int8 -> int32 kernels, which stay int8 under every precision mode."""

    cube_macs: int = 0
    vector_ops: dict = field(default_factory=dict)
    onchip_bytes: int = 0   # intermediates a fused kernel keeps in UB/L0 instead of global memory
    cube_dtype: str = ""    # "" = the kernel's compute dtype

    def add_vector(self, cls: str, count: int) -> "Work":
        if cls not in VECTOR_OP_CLASSES:
            raise ValueError(f"unknown vector op class {cls!r}; one of {VECTOR_OP_CLASSES}")
        self.vector_ops[cls] = self.vector_ops.get(cls, 0) + int(count)
        return self

    def __add__(self, other: "Work") -> "Work":
        total = Work(self.cube_macs + other.cube_macs, dict(self.vector_ops),
                     self.onchip_bytes + other.onchip_bytes, self.cube_dtype or other.cube_dtype)
        for cls, count in other.vector_ops.items():
            total.add_vector(cls, count)
        return total


WorkFn = Callable[[Sequence[Optional[TensorType]], Sequence[TensorType], dict], Work]


def per_element(**counts: int) -> WorkFn:
    """Work rule: the given vector-op counts (by class) per output element."""

    def work(inputs, outputs, attrs) -> Work:
        n = sum(t.size for t in outputs)
        w = Work()
        for cls, count in counts.items():
            w.add_vector(cls, count * n)
        return w

    return work


def cube_operand_dtype(*operands: Optional[TensorType]) -> str:
    """"int8" when the cube multiplies 8-bit integers (int8 x int8 -> int32), else ""."""
    dtypes = [np.dtype(t.dtype) for t in operands if t is not None]
    return "int8" if dtypes and all(d.kind in "iu" and d.itemsize == 1 for d in dtypes) else ""


def no_work(inputs, outputs, attrs) -> Work:
    return Work()


def by_impl(exact: WorkFn, fast: WorkFn) -> WorkFn:
    """Work rule of a kernel with two implementations (ge.ops.common.impl_mode): `fast` when
    the compiler chose high_performance for it, else `exact`."""
    def work(inputs, outputs, attrs) -> Work:
        return (fast if fast_impl(attrs) else exact)(inputs, outputs, attrs)

    return work
