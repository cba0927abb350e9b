"""The one table from ONNX op type to its semantics: numpy compute, shape rule, kind.

Every ONNX op the IR accepts (in canonical form) registers an `OpDef` here.  The same
entry serves constant folding (compute), shape inference (infer), autofuse's grouping
(kind) and -- through the kernel that codegen builds on it (`codegen.registry.Kernel`, which
adds the .om type and the work rule) -- the simulator and the cost model, so folding,
shapes, numerics and pricing can never disagree about what an op is.  Fused ops have an
`OpDef` too, made by their kernel module in codegen/fused; they are not in this table,
which holds what an ONNX model may contain.

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
- ``infer_values(inputs, attrs) -> list[TensorType]``: only for ops whose output shape
  depends on input *values* (ConstantOfShape, Range, NonZero): the output types from
  constant inputs, computed without building the output, so folding can decide from the
  size before it allocates (a 119-byte ConstantOfShape may ask for gigabytes).
- ``check_values(values, types, attrs)``: what only constant inputs reveal (a Gather index
  out of range, an integer divisor that is 0); ``values[i]`` is input i's constant or None,
  ``types[i]`` its TensorType.  Raises
  InvalidNode, so atc refuses the model as onnxruntime does instead of leaving it for the
  simulator to find.
"""
from __future__ import annotations

import enum
from dataclasses import dataclass
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


Compute = Callable[[Sequence[Optional[np.ndarray]], dict], list]
Infer = Callable[[Sequence[Optional[TensorType]], dict], list]


@dataclass(frozen=True)
class OpDef:
    op_type: str
    kind: OpKind
    compute: Compute
    infer: Infer
    config_inputs: tuple = ()         # ((input index, attr name), ...) moved to attrs when constant
    infer_values: Optional[Callable[[Sequence[Optional[np.ndarray]], dict], list]] = None
    check_values: Optional[Callable[[Sequence[Optional[np.ndarray]], Sequence[Optional[TensorType]], dict],
                                    None]] = None
    kind_of: Optional[Callable[[dict], OpKind]] = None   # kind of one node, for kernels whose kind
                                                         # depends on what they hold (autofused groups)
    domain: str = ""                  # ONNX domain the op comes from ("" = ai.onnx; "com.microsoft")
    array_config: bool = False        # config inputs become numpy attrs, not lists: their dtype and
                                      # shape carry meaning (a zero point's dtype is the output's)
    foldable: bool = True             # False: never constant-folded (DequantizeLinear keeps int8
                                      # weights visible to the quantized fusions)
    sized_outputs: bool = False       # compute reads attrs["_outputs"], how many outputs the node has,
                                      # to skip optional ones nobody asked for (MaxPool's Indices)
    prepare: Optional[Callable[[Sequence[object], dict], None]] = None
                                      # once at load (simulator/executor.py): each input the constant
                                      # array compute will get, or its TensorDesc; precomputes what
                                      # depends on constants alone (a conv's Winograd weights)
    workspace: Optional[Callable[[Sequence[object], dict], list]] = None
                                      # at load (ge/workspace.py): from each input as compute sees
                                      # it (array or type), the ge.workspace.Takes compute makes,
                                      # in order, so the model's memory is mapped before a forward
                                      # (None: it cannot say, e.g. an output may be an input's view)

    def node_kind(self, attrs: dict) -> OpKind:
        return self.kind_of(attrs) if self.kind_of is not None else self.kind


_REGISTRY: dict[str, OpDef] = {}


def register(op: OpDef) -> OpDef:
    if op.op_type in _REGISTRY:
        raise ValueError(f"op {op.op_type} registered twice")
    _REGISTRY[op.op_type] = op
    return op


def get_op(op_type: str) -> Optional[OpDef]:
    """The semantics of ONNX op `op_type`, or None if the IR does not accept it."""
    return _REGISTRY.get(op_type)


def all_ops() -> dict[str, OpDef]:
    return dict(_REGISTRY)
