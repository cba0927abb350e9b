"""The one table from op type to kernel: the op's semantics plus what codegen adds to them.

A `Kernel` holds the op's `OpDef` (compute, infer, kind: `ge.ops` for ONNX ops, the kernel's
own module for fused ops) and adds the layer above: its type name in the .om (Netron's
om-metadata names where one fits), whether it launches a task (views do not) and its work
rule for the cost model.  One entry per op type, read by every stage: the .om writer and
reader, the simulator, the cost model and autofuse.

Registration is explicit: `codegen/__init__.py` imports `codegen.onnx_ops` (one kernel per
ONNX op of `ge.ops`) and `codegen.fused`, so the table is complete once `codegen` is imported.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Union

from codegen.work import WorkFn
from ge.ops.registry import OpDef, get_op


@dataclass(frozen=True)
class Kernel:
    op: OpDef            # what it computes: numpy compute, shape rule, kind
    work: WorkFn         # arithmetic it performs, for the cost model
    om_type: str         # its type name in the .om
    no_task: bool = False   # a view (Reshape, Flatten, Squeeze...): no kernel is launched

    @property
    def op_type(self) -> str:
        return self.op.op_type


_KERNELS: dict[str, Kernel] = {}
_BY_OM_TYPE: dict[str, Kernel] = {}


def register(op: Union[OpDef, str], work: WorkFn, om_type: str = "", no_task: bool = False) -> Kernel:
    """Register the kernel of `op` (an OpDef, or the type of an ONNX op in `ge.ops`)."""
    if isinstance(op, str):
        semantics = get_op(op)
        if semantics is None:
            raise ValueError(f"kernel for {op}, which ge.ops does not define")
        op = semantics
    kernel = Kernel(op, work, om_type or op.op_type, no_task)
    if kernel.op_type in _KERNELS:
        raise ValueError(f"kernel {kernel.op_type} registered twice")
    if kernel.om_type in _BY_OM_TYPE:
        raise ValueError(f"om type {kernel.om_type} of {kernel.op_type} already used by "
                         f"{_BY_OM_TYPE[kernel.om_type].op_type}")
    _KERNELS[kernel.op_type] = kernel
    _BY_OM_TYPE[kernel.om_type] = kernel
    return kernel


def kernel_of(op_type: str) -> Optional[Kernel]:
    return _KERNELS.get(op_type)


def kernel_by_om_type(om_type: str) -> Optional[Kernel]:
    """Reverse lookup used when an .om is read back."""
    return _BY_OM_TYPE.get(om_type)


def all_kernels() -> dict[str, Kernel]:
    return dict(_KERNELS)
