"""The one registry from op type to implementation, shape rule and work count.

Every op the IR accepts -- ONNX ops in canonical form and fused ops alike -- registers an
`OpDef` here.  The same entry serves constant folding (compute), shape inference (infer),
the simulator (compute) and the cost model (work), so numerics and pricing can never
disagree about what an op is.

Canonical form: an ONNX input that only configures an op (Reduce* axes, Squeeze/Unsqueeze
axes, Split sizes, Clip bounds, Pad pads, Reshape/Expand shape, Slice starts/ends/axes/steps,
Tile repeats, ...) is moved into the attribute of the same name (the name older opsets use)
once it is constant.  `OpDef.config_inputs` lists those inputs; `ge.passes` does the move.

Contracts:
- ``compute(inputs, attrs) -> list[np.ndarray]``: ONNX semantics of the latest opset, on
  numpy arrays in the dtype the kernel computes in.  Matrix work on float16 inputs
  accumulates in float32 (as the cube unit does) and returns float16.  No Python loops over
  elements: use numpy/BLAS.
- ``infer(inputs, attrs) -> list[TensorType]``: output dtypes and static shapes.
- ``work(inputs, outputs, attrs) -> Work``: the arithmetic the kernel performs.  Memory
  traffic is not counted here: the cost model derives it from the kernel's external tensors.
"""
from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Callable, NamedTuple, Optional, Sequence

import numpy as np


class OpKind(enum.IntEnum):
    """TVM-style pattern kinds, the basis of autofuse's grouping rules."""

    ELEMWISE = 0            # one output element from the same-index input elements
    BROADCAST = 1           # elementwise with numpy broadcasting
    INJECTIVE = 2           # pure data movement: reshape, transpose, slice, gather, concat
    REDUCE = 3              # reduces one or more axes
    OUT_EWISE_FUSABLE = 4   # conv, matmul, fused kernels: may absorb an elementwise tail
    OPAQUE = 8              # never fused by autofuse


class TensorType(NamedTuple):
    dtype: np.dtype
    shape: tuple

    @property
    def size(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64))

    @property
    def nbytes(self) -> int:
        return self.size * np.dtype(self.dtype).itemsize


VECTOR_OP_CLASSES = ("alu", "div", "transcendental", "move")


@dataclass
class Work:
    """What a kernel computes.  `cube_macs`: multiply-accumulates on the cube unit.
    `vector_ops`: element operations on the vector unit by class -- ``alu`` (add, mul, max,
    compare, select, cast), ``div`` (div, sqrt, reciprocal), ``transcendental`` (exp, log,
    erf, tanh, pow), ``move`` (in-buffer data movement: transpose, gather, concat).  The chip
    data file gives the cost of each class.  `onchip_bytes`: bytes of intermediate tensors a
    fused kernel keeps on chip (the cost model checks they fit UB/L0, else charges a spill)."""

    cube_macs: int = 0
    vector_ops: dict = field(default_factory=dict)
    onchip_bytes: int = 0   # intermediates a fused kernel keeps in UB/L0 instead of global memory

    def add_vector(self, cls: str, count: int) -> "Work":
        assert cls in VECTOR_OP_CLASSES, cls
        self.vector_ops[cls] = self.vector_ops.get(cls, 0) + int(count)
        return self

    def __add__(self, other: "Work") -> "Work":
        total = Work(self.cube_macs + other.cube_macs, dict(self.vector_ops),
                     self.onchip_bytes + other.onchip_bytes)
        for cls, count in other.vector_ops.items():
            total.add_vector(cls, count)
        return total


Compute = Callable[[Sequence[Optional[np.ndarray]], dict], list]
Infer = Callable[[Sequence[Optional[TensorType]], dict], list]
WorkFn = Callable[[Sequence[Optional[TensorType]], Sequence[TensorType], dict], Work]


@dataclass(frozen=True)
class OpDef:
    op_type: str
    kind: OpKind
    compute: Compute
    infer: Infer
    work: WorkFn
    ge_type: str = ""                 # type name in the .om (Netron's om-metadata names where one fits)
    config_inputs: tuple = ()         # ((input index, attr name), ...) moved to attrs when constant
    no_task: bool = False             # a view (Reshape, Flatten, Squeeze...): no kernel is launched
    kind_of: Optional[Callable[[dict], OpKind]] = None   # kind of one node, for kernels whose kind
                                                         # depends on what they hold (autofused groups)

    @property
    def om_type(self) -> str:
        return self.ge_type or self.op_type

    def node_kind(self, attrs: dict) -> OpKind:
        return self.kind_of(attrs) if self.kind_of is not None else self.kind


_REGISTRY: dict[str, OpDef] = {}


def register(op: OpDef) -> OpDef:
    if op.op_type in _REGISTRY:
        raise ValueError(f"op {op.op_type} registered twice")
    clash = next((o.op_type for o in _REGISTRY.values() if o.om_type == op.om_type), None)
    if clash:
        raise ValueError(f"om type {op.om_type} of {op.op_type} already used by {clash}")
    _REGISTRY[op.op_type] = op
    return op


def _load_all() -> None:
    # Importing the packages registers every op module (see their __init__.py).
    import codegen.ops  # noqa: F401
    import codegen.fused  # noqa: F401  (registers the fused kernels)


def get_op(op_type: str) -> Optional[OpDef]:
    _load_all()
    return _REGISTRY.get(op_type)


def all_ops() -> dict[str, OpDef]:
    _load_all()
    return dict(_REGISTRY)


def op_by_om_type(om_type: str) -> Optional[OpDef]:
    """Reverse lookup used when the simulator reads an .om."""
    _load_all()
    for op in _REGISTRY.values():
        if op.om_type == om_type:
            return op
    return None
