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
A group on dynamic shapes writes each symbolic dim (in a shape or an attr) as
{"__dim__": "batch*seq"} and adds "symbols": {name: [lo, hi|null]}; when the kernel runs
(or is priced) it binds the symbols from its inputs' real shapes and evaluates every dim,
so the group is checked at compile time to be bindable that way.

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
from ge import workspace
from ge.dynamic import bind, instantiate
from ge.errors import InternalError, InvalidNode
from ge.ops.common import FLOAT_TYPES, with_impl
from ge.ops.registry import OpDef, OpKind, TensorType
from ge.symbolic import Dim, Symbol, atoms_of, parse

OP_TYPE = "AutofusedKernel"


# -- attr <-> JSON ----------------------------------------------------------------------

def to_json(value: Any) -> Any:
    if isinstance(value, Dim):
        return {"__dim__": str(value)}
    if isinstance(value, np.ndarray) and value.dtype == object:      # a shape tensor of symbolic dims
        return {"__dims__": to_json(value.reshape(-1).tolist()), "shape": list(value.shape)}
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


def from_json(value: Any, symbols: Optional[dict] = None) -> Any:
    if isinstance(value, dict):
        if "__ndarray__" in value:
            return np.array(value["__ndarray__"], dtype=value["dtype"]).reshape(value["shape"])
        if "__bytes__" in value:
            return value["__bytes__"].encode("latin-1")
        if "__dim__" in value:
            return parse(value["__dim__"], symbols or {})
        if "__dims__" in value:
            dims = np.empty(len(value["__dims__"]), dtype=object)
            for k, v in enumerate(value["__dims__"]):
                dims[k] = from_json(v, symbols)
            return dims.reshape(value["shape"])
        return {k: from_json(v, symbols) for k, v in value.items()}
    if isinstance(value, list):
        return [from_json(v, symbols) for v in value]
    return value


def type_json(t: Optional[TensorType]) -> Optional[list]:
    return None if t is None else [str(np.dtype(t.dtype)), [to_json(d) if isinstance(d, Dim) else int(d)
                                                            for d in t.shape]]


def _symbols(value: Any, found: dict) -> None:
    """Every Symbol `value` (a dim, shape, type, attr) mentions, by name, into `found`."""
    if isinstance(value, Dim):
        for atom in atoms_of(value):
            if isinstance(atom, Symbol):
                found.setdefault(atom.name, atom)
            else:
                _symbols(list(atom.args), found)
    elif isinstance(value, TensorType):
        _symbols(tuple(value.shape), found)
    elif isinstance(value, (list, tuple)):
        for v in value:
            _symbols(v, found)
    elif isinstance(value, dict):
        _symbols(list(value.values()), found)
    elif isinstance(value, np.ndarray) and value.dtype == object:
        _symbols(value.reshape(-1).tolist(), found)


def encode_subgraph(inputs: Sequence, ops: Sequence, outputs: Sequence) -> str:
    """The canonical JSON string of a group.  `inputs`: TensorTypes; `ops`: (op_type, attrs,
    refs, output TensorTypes); `outputs`: refs.  Deterministic: sorted keys, no spaces."""
    doc = {"inputs": [type_json(t) for t in inputs],
           "ops": [[op_type, to_json(dict(attrs)), [list(r) if r is not None else None for r in refs],
                    [type_json(t) for t in outs]] for op_type, attrs, refs, outs in ops],
           "outputs": [list(r) for r in outputs]}
    found: dict = {}
    _symbols([list(inputs), [(dict(attrs), list(outs)) for _, attrs, _, outs in ops]], found)
    if found:                      # a static group's text (and hash) stays as it was
        doc["symbols"] = {name: [atom.lo, atom.hi] for name, atom in sorted(found.items())}
    return json.dumps(doc, sort_keys=True, separators=(",", ":"), allow_nan=True)


class SubGraph:
    """A decoded group: types as TensorTypes, attrs as the kernels expect them."""

    def __init__(self, text: str):
        doc = json.loads(text)
        self.symbols = {name: Symbol(name, lo, hi) for name, (lo, hi) in doc.get("symbols", {}).items()}
        as_type = lambda t: None if t is None else TensorType(np.dtype(t[0]), tuple(from_json(t[1], self.symbols)))  # noqa: E731
        self.inputs = [as_type(t) for t in doc["inputs"]]
        self.ops = [(op_type, from_json(attrs, self.symbols), [tuple(r) if r is not None else None for r in refs],
                     [as_type(t) for t in outs]) for op_type, attrs, refs, outs in doc["ops"]]
        self.outputs = [tuple(r) for r in doc["outputs"]]

    def bindings(self, shapes: Sequence) -> Optional[dict]:
        """The symbols' values told by the kernel's input shapes at one call (ints); None for
        a static group or when the shapes are still symbolic (compile time).  InternalError
        when they do not tell every symbol (the compiler checks `bindable` first)."""
        if not self.symbols or any(isinstance(d, Dim) for shape in shapes if shape is not None for d in shape):
            return None
        values: dict = {}
        pairs = [(stored, shape) for stored, shape in zip(self.inputs, shapes) if stored is not None and shape is not None]
        for last in [False] * len(pairs) + [True]:   # a dim like B*S (or P+S) binds once B (or S) is
            for stored, shape in pairs:              # known from another input, whatever their order
                why = bind(tuple(stored.shape), tuple(shape), values, self, defer=not last)
                if why is not None:
                    raise InternalError(f"autofused kernel input of shape {list(shape)} does not match "
                                        f"{list(stored.shape)}: {why}")
        missing = set(self.symbols) - set(values)
        if missing:
            raise InternalError(f"autofused kernel: its inputs do not tell the dims {sorted(missing)}")
        return values

    def bindable(self) -> bool:
        """Every symbol can be bound from the input shapes alone (tried at generic sizes)."""
        if not self.symbols:
            return True
        probe = {name: 3 + 2 * k for k, name in enumerate(sorted(self.symbols))}
        shapes = [None if t is None else instantiate(tuple(t.shape), probe) for t in self.inputs]
        try:
            return self.bindings(shapes) == probe
        except InternalError:
            return False

    def at(self, values: Optional[dict], value: Any) -> Any:
        """`value` (a type, attrs) with the symbols at `values` (unchanged for None)."""
        if values is None or value is None:
            return value
        if isinstance(value, TensorType):
            return TensorType(value.dtype, instantiate(tuple(value.shape), values))
        return instantiate(value, values)

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

def _shapes(inputs) -> list:
    return [None if x is None else tuple(np.shape(x) if isinstance(x, np.ndarray) else x.shape) for x in inputs]


def compute(inputs, attrs):
    sub = _subgraph(attrs)
    forced = _override(sub, inputs)
    values = sub.bindings(_shapes(inputs))
    results: list = []
    for index, (op_type, op_attrs, refs, _) in enumerate(sub.ops):
        dtype = forced or _member_dtype(sub, index)
        args = [None if r is None else _cast(inputs[r[1]] if r[0] == "i" else results[r[1]][r[2]], dtype)
                for r in refs]
        results.append([np.asarray(y) for y in kernel_of(op_type).op.compute(args, with_impl(attrs, sub.at(values, op_attrs)))])
    return [inputs[r[1]] if r[0] == "i" else results[r[1]][r[2]] for r in sub.outputs]


def infer(inputs, attrs):
    sub = _subgraph(attrs)
    forced = _override(sub, inputs)
    values = sub.bindings(_shapes(inputs))
    if all(isinstance(d, (int, np.integer)) for t in inputs if t is not None for d in t.shape):  # static sizes
        _check_members(sub, forced, values, attrs)
    return [_retype(sub.at(values, sub.stored_type(r)), forced) for r in sub.outputs]


def _check_members(sub: SubGraph, forced, values, attrs) -> None:
    """Each member's shape rule must accept its recorded input types and give its recorded
    output shapes: a damaged sub-graph in an .om is refused when it is loaded, not found by a
    kernel (or the pricing) at run time."""
    for (op_type, op_attrs, _, _), (ins, outs) in zip(sub.ops, member_types(sub, forced, values)):
        try:
            inferred = kernel_of(op_type).op.infer(ins, with_impl(attrs, sub.at(values, op_attrs)))
        except Exception as exc:      # noqa: BLE001 -- whatever a rule raises on types it never expected
            raise InvalidNode(f"autofused member {op_type} does not accept its recorded inputs: "
                              f"{type(exc).__name__}: {exc}", "Rebuild the .om with atc.") from exc
        if len(inferred) < len(outs) or any(tuple(i.shape) != tuple(o.shape) for i, o in zip(inferred, outs)):
            raise InvalidNode(f"autofused member {op_type} records outputs {[tuple(o.shape) for o in outs]}, its "
                              f"inputs give {[tuple(i.shape) for i in inferred]}", "Rebuild the .om with atc.")


def member_types(sub: SubGraph, forced: Optional[np.dtype], values: Optional[dict] = None) -> list:
    """(input types, output types) of every member, as the kernel holds them (with the
    symbols at `values`, the sizes of one call)."""
    out = []
    for op_type, _, refs, outs in sub.ops:
        out.append(([_retype(sub.at(values, sub.stored_type(r)), forced) for r in refs],
                    [_retype(sub.at(values, t), forced) for t in outs]))
    return out


def work(inputs, outputs, attrs):
    """Sum of the members' kernels' work; on chip: each member's own intermediates plus every
    internal tensor (not a kernel output) a launching member produces."""
    sub = _subgraph(attrs)
    forced = _override(sub, inputs)
    values = sub.bindings(_shapes(inputs))
    exported = {tuple(r) for r in sub.outputs}
    total = Work()
    internal = 0
    for index, ((op_type, op_attrs, _, _), (ins, outs)) in enumerate(zip(sub.ops, member_types(sub, forced, values))):
        kernel = kernel_of(op_type)
        total = total + kernel.work(ins, outs, with_impl(attrs, sub.at(values, op_attrs)))
        if not kernel.no_task:
            internal += sum(t.nbytes for j, t in enumerate(outs) if ("o", index, j) not in exported)
    total.onchip_bytes += internal
    return total


def workspace_takes(inputs, attrs) -> list:
    """The Takes of `compute` (ge/workspace.py): its members' declared ones in order, all held
    until the group returns; a take holds the group's output if it holds a member output the
    group exports.  A view member (a Reshape: `no_task`) returns views of its inputs, so its
    outputs are held by whatever holds them; another that declares nothing makes arrays of
    its own.  None (nothing declared: the executor then keeps the group's inputs alive with
    its outputs) when an output may be one of the group's inputs or a view of one."""
    sub = _subgraph(attrs)
    forced = _override(sub, inputs)
    values = sub.bindings(_shapes(inputs))
    takes: list = []
    holders: dict = {("i", k): [-1] for k in range(len(inputs))}    # ref -> the takes that may hold it (-1: an input)
    for index, ((op_type, op_attrs, refs, _), (ins, outs)) in enumerate(zip(sub.ops, member_types(sub, forced, values))):
        dtype = forced or _member_dtype(sub, index)
        kernel = kernel_of(op_type)
        declare = kernel.op.workspace
        if declare is None:
            held = sorted({k for r in refs if r is not None for k in holders.get(tuple(r), ())}) if kernel.no_task else []
        else:
            member = declare([_retype(t, dtype) for t in ins], with_impl(attrs, sub.at(values, op_attrs)))
            held = [len(takes) + k for k, take in enumerate(member) if take.output]
            takes += member
        for j in range(len(outs)):
            holders[("o", index, j)] = held
    exported = {k for r in sub.outputs for k in holders[tuple(r)]}
    if -1 in exported:
        return None
    return [workspace.Take(take.nbytes, k in exported) for k, take in enumerate(takes)]


def kind_of(attrs: dict) -> OpKind:
    """A group that holds a conv/matmul anchor is a cube kernel (its precision follows the
    cube's under allow_mix_precision); a pointwise/reduce group is not."""
    anchored = any(kernel_of(op_type).op.node_kind(op_attrs) == OpKind.OUT_EWISE_FUSABLE
                   for op_type, op_attrs, _, _ in _subgraph(attrs).ops)
    return OpKind.OUT_EWISE_FUSABLE if anchored else OpKind.OPAQUE


register(OpDef(OP_TYPE, OpKind.OPAQUE, compute, infer, kind_of=kind_of, workspace=workspace_takes), work)
