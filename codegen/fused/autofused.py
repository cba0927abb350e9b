"""AutofusedKernel: one kernel that runs a group of ops found by autofuse.

Why one op type for every group: the group itself travels in the node's ``subgraph`` attr,
a JSON string (the .om attr encoder stores strings, Netron shows them), so the kernel can be
interpreted anywhere -- in the compiler, in the simulator, after an .om round trip.

The sub-graph JSON (``encode_subgraph`` / ``decode_subgraph``):
    {"inputs":  [[dtype, shape], ...],                       # the kernel's inputs, in order
     "ops":     [[op_type, attrs, [ref, ...], [[dtype, shape], ...]], ...]   # topological
     "outputs": [ref, ...]}                                  # the kernel's outputs, in order
A ref is ["i", k] (kernel input k), ["o", op, j] (output j of op number `op`) or null
(an omitted optional input).  Attrs are plain JSON; numpy arrays are tagged objects.
Node names are not in it, so identical blocks encode identically (autofuse hashes it).

Numerics: each member runs its own kernel's compute, in the dtype the executor would have
given it unfused (all floats in the kernel's compute dtype when the precision mode changed
them, else each member's own dtype); intermediates live only inside the call.
Pricing: the sum of the members' kernels' work; ``onchip_bytes`` adds the group's internal
intermediates (the tensors the unfused graph wrote to global memory and read back).
"""
from __future__ import annotations

import functools
import json
from typing import Any, Optional, Sequence

import numpy as np

from codegen.registry import kernel_of, register
from codegen.work import Work
from ge.ops.common import FLOAT_TYPES, with_impl
from ge.ops.registry import OpDef, OpKind, TensorType

OP_TYPE = "AutofusedKernel"


# -- attr <-> JSON ----------------------------------------------------------------------

def to_json(value: Any) -> Any:
    if isinstance(value, np.ndarray):
        return {"__ndarray__": to_json(value.tolist()), "dtype": str(value.dtype),
                "shape": list(value.shape)}
    if isinstance(value, (np.generic,)):
        return value.item()
    if isinstance(value, bytes):
        return {"__bytes__": value.decode("latin-1")}
    if isinstance(value, (list, tuple)):
        return [to_json(v) for v in value]
    if isinstance(value, dict):
        return {str(k): to_json(v) for k, v in value.items()}
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    raise TypeError(f"attr value {value!r} of type {type(value).__name__} cannot go into an autofused kernel")


def from_json(value: Any) -> Any:
    if isinstance(value, dict):
        if "__ndarray__" in value:
            return np.array(value["__ndarray__"], dtype=value["dtype"]).reshape(value["shape"])
        if "__bytes__" in value:
            return value["__bytes__"].encode("latin-1")
        return {k: from_json(v) for k, v in value.items()}
    if isinstance(value, list):
        return [from_json(v) for v in value]
    return value


def type_json(t: Optional[TensorType]) -> Optional[list]:
    return None if t is None else [str(np.dtype(t.dtype)), [int(d) for d in t.shape]]


def encode_subgraph(inputs: Sequence, ops: Sequence, outputs: Sequence) -> str:
    """The canonical JSON string of a group.  `inputs`: TensorTypes; `ops`: (op_type, attrs,
    refs, output TensorTypes); `outputs`: refs.  Deterministic: sorted keys, no spaces."""
    doc = {"inputs": [type_json(t) for t in inputs],
           "ops": [[op_type, to_json(dict(attrs)), [list(r) if r is not None else None for r in refs],
                    [type_json(t) for t in outs]] for op_type, attrs, refs, outs in ops],
           "outputs": [list(r) for r in outputs]}
    return json.dumps(doc, sort_keys=True, separators=(",", ":"), allow_nan=True)


class SubGraph:
    """A decoded group: types as TensorTypes, attrs as the kernels expect them."""

    def __init__(self, text: str):
        doc = json.loads(text)
        as_type = lambda t: None if t is None else TensorType(np.dtype(t[0]), tuple(t[1]))  # noqa: E731
        self.inputs = [as_type(t) for t in doc["inputs"]]
        self.ops = [(op_type, from_json(attrs), [tuple(r) if r is not None else None for r in refs],
                     [as_type(t) for t in outs]) for op_type, attrs, refs, outs in doc["ops"]]
        self.outputs = [tuple(r) for r in doc["outputs"]]

    def stored_type(self, ref) -> Optional[TensorType]:
        if ref is None:
            return None
        return self.inputs[ref[1]] if ref[0] == "i" else self.ops[ref[1]][3][ref[2]]


@functools.lru_cache(maxsize=256)
def decode_subgraph(text: str) -> SubGraph:
    return SubGraph(text)


def _subgraph(attrs: dict) -> SubGraph:
    return decode_subgraph(attrs["subgraph"])


# -- dtype rule (the executor's, replayed inside the kernel) ------------------------------

def _override(sub: SubGraph, given: Sequence[Optional[Any]]) -> Optional[np.dtype]:
    """The float dtype every member computes in, when the precision mode moved the kernel's
    float inputs away from their stored dtypes; None when every member keeps its own."""
    for stored, got in zip(sub.inputs, given):
        if stored is None or got is None:
            continue
        got_dtype = np.dtype(got.dtype)
        if np.dtype(stored.dtype) in FLOAT_TYPES and got_dtype in FLOAT_TYPES and got_dtype != np.dtype(stored.dtype):
            return got_dtype
    return None


def _retype(t: Optional[TensorType], dtype: Optional[np.dtype]) -> Optional[TensorType]:
    if t is None or dtype is None or np.dtype(t.dtype) not in FLOAT_TYPES:
        return t
    return TensorType(dtype, t.shape)


def _member_dtype(sub: SubGraph, index: int) -> Optional[np.dtype]:
    """What compute_dtype gives a member kept in its origin dtype: its first float tensor."""
    _, _, refs, outs = sub.ops[index]
    for t in [sub.stored_type(r) for r in refs] + list(outs):
        if t is not None and np.dtype(t.dtype) in FLOAT_TYPES:
            return np.dtype(t.dtype)
    return None


def _cast(array: Optional[np.ndarray], dtype: Optional[np.dtype]):
    if array is None or dtype is None or array.dtype not in FLOAT_TYPES or array.dtype == dtype:
        return array
    return array.astype(dtype)


# -- the kernel ---------------------------------------------------------------------------

def compute(inputs, attrs):
    sub = _subgraph(attrs)
    forced = _override(sub, inputs)
    results: list = []
    for index, (op_type, op_attrs, refs, _) in enumerate(sub.ops):
        dtype = forced or _member_dtype(sub, index)
        args = [None if r is None else _cast(inputs[r[1]] if r[0] == "i" else results[r[1]][r[2]], dtype)
                for r in refs]
        results.append([np.asarray(y) for y in kernel_of(op_type).op.compute(args, with_impl(attrs, op_attrs))])
    return [inputs[r[1]] if r[0] == "i" else results[r[1]][r[2]] for r in sub.outputs]


def infer(inputs, attrs):
    sub = _subgraph(attrs)
    forced = _override(sub, inputs)
    return [_retype(sub.stored_type(r), forced) for r in sub.outputs]


def member_types(sub: SubGraph, forced: Optional[np.dtype]) -> list:
    """(input types, output types) of every member, as the kernel holds them."""
    out = []
    for op_type, _, refs, outs in sub.ops:
        out.append(([_retype(sub.stored_type(r), forced) for r in refs], [_retype(t, forced) for t in outs]))
    return out


def work(inputs, outputs, attrs):
    """Sum of the members' kernels' work; on chip: each member's own intermediates plus every
    internal tensor (not a kernel output) a launching member produces."""
    sub = _subgraph(attrs)
    forced = _override(sub, inputs)
    exported = {tuple(r) for r in sub.outputs}
    total = Work()
    internal = 0
    for index, ((op_type, op_attrs, _, _), (ins, outs)) in enumerate(zip(sub.ops, member_types(sub, forced))):
        kernel = kernel_of(op_type)
        total = total + kernel.work(ins, outs, with_impl(attrs, op_attrs))
        if not kernel.no_task:
            internal += sum(t.nbytes for j, t in enumerate(outs) if ("o", index, j) not in exported)
    total.onchip_bytes += internal
    return total


def kind_of(attrs: dict) -> OpKind:
    """A group that holds a conv/matmul anchor is a cube kernel (its precision follows the
    cube's under allow_mix_precision); a pointwise/reduce group is not."""
    anchored = any(kernel_of(op_type).op.node_kind(op_attrs) == OpKind.OUT_EWISE_FUSABLE
                   for op_type, op_attrs, _, _ in _subgraph(attrs).ops)
    return OpKind.OUT_EWISE_FUSABLE if anchored else OpKind.OPAQUE


register(OpDef(OP_TYPE, OpKind.OPAQUE, compute, infer, kind_of=kind_of), work)
