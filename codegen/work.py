"""What a kernel computes, for the cost model: `Work`, and the rules most ops share.

Contract of a work rule: ``work(inputs, outputs, attrs) -> Work`` on the kernel's input and
output `TensorType`s (in the dtype it computes in), with the shape of every cube product
(`Gemm`) so the cost model can pad it and split it over cores.  Memory traffic is not counted here: the
cost model derives it from the kernel's external tensors.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Optional, Sequence

import numpy as np

from ge.ops.common import fast_impl
from ge.ops.registry import TensorType

VECTOR_OP_CLASSES = ("alu", "div", "transcendental", "move")


@dataclass(frozen=True)
class Gemm:
    """The geometry of one matrix product a kernel runs on the cube, unpadded, so the cost
    model can pad it to the chip's fractals and split it over cores: `batch` x `groups`
    independent products of [m, k] x [k, n].  `k_window` > 1 marks a convolution: k is
    (input channels per group) x k_window, and the channels are what C0 packing pads.
    `a_elements`: elements of the A operand per product as it sits in global memory (a conv
    reads its feature map, not the im2col matrix).  `shared_b`: B (weights) is the same for
    every batch entry.  `a_onchip` / `b_onchip`: the operand is produced inside the kernel
    (a fused kernel's normalised input, attention's Q, K, scores), not read from memory.
    `epilogue`: vector work on this product's outputs before the next product reads them
    (attention's softmax on Q.K^T's scores); the cost model splits it over the cores as it
    splits this product.  A kernel's vector work no product claims belongs to its last one."""

    batch: int
    m: int
    n: int
    k: int
    k_window: int = 1
    groups: int = 1
    a_elements: int = 0
    shared_b: bool = True
    a_onchip: bool = False
    b_onchip: bool = False
    epilogue: tuple = ()        # ((vector op class, count), ...) run on this product's outputs

    @property
    def macs(self) -> int:
        return self.batch * self.groups * self.m * self.n * self.k


@dataclass
class Work:
    """What a kernel computes.  `cube_macs`: multiply-accumulates on the cube unit.
    `gemms`: the shapes of those products (`Gemm`), for padding and the split over cores.
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
    gemms: tuple = ()
    sparse_inputs: tuple = ()   # inputs read only where indexed (Gather's table, Slice's source):
                                # the kernel reads as many of their bytes as it writes, not all

    @classmethod
    def of_gemms(cls, *gemms: Gemm, cube_dtype: str = "") -> "Work":
        """The work of these products, their epilogues counted in `vector_ops`."""
        work = cls(cube_macs=sum(g.macs for g in gemms), cube_dtype=cube_dtype, gemms=tuple(gemms))
        for gemm in gemms:
            for op_class, count in gemm.epilogue:
                work.add_vector(op_class, count)
        return work

    def add_vector(self, cls: str, count: int) -> "Work":
        if cls not in VECTOR_OP_CLASSES:
            raise ValueError(f"unknown vector op class {cls!r}; one of {VECTOR_OP_CLASSES}")
        self.vector_ops[cls] = self.vector_ops.get(cls, 0) + int(count)
        return self

    def __add__(self, other: "Work") -> "Work":
        # (sparse inputs are a property of one kernel's own inputs; a sum of members has none)
        total = Work(self.cube_macs + other.cube_macs, dict(self.vector_ops),
                     self.onchip_bytes + other.onchip_bytes, self.cube_dtype or other.cube_dtype,
                     self.gemms + other.gemms)
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


def reads_sparsely(rule: WorkFn, *indices: int) -> WorkFn:
    """Work rule `rule`, with inputs `indices` read only where indexed (see Work.sparse_inputs)."""

    def work(inputs, outputs, attrs) -> Work:
        w = rule(inputs, outputs, attrs)
        w.sparse_inputs = tuple(indices)
        return w

    return work


def no_work(inputs, outputs, attrs) -> Work:
    return Work()


def by_impl(exact: WorkFn, fast: WorkFn) -> WorkFn:
    """Work rule of a kernel with two implementations (ge.ops.common.impl_mode): `fast` when
    the compiler chose high_performance for it, else `exact`."""
    def work(inputs, outputs, attrs) -> Work:
        return (fast if fast_impl(attrs) else exact)(inputs, outputs, attrs)

    return work
