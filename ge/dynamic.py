"""A dynamic-shape graph at one set of sizes: binding its symbols and making it static.

Why: every stage after the compiler -- the executor, the pricing, the budget -- was written
for static shapes, and should stay so.  A run binds the symbols from the inputs it is given
(and from the outputs of the kernels whose sizes depend on data), and `specialize` turns
the graph into the static graph of that run, which every static stage takes unchanged.
The report does the same at representative sizes (`representative_values`).
"""
from __future__ import annotations

from typing import Mapping, Optional

import numpy as np

from ge.errors import AtcError, InternalError
from ge.ir import Graph, TensorDesc
from ge.ops.registry import get_op
from ge.symbolic import Dim, UnboundSymbol, evaluate, free_symbols, solve, substitute


def instantiate(value, values: Mapping):
    """An attribute value (or a shape) with every symbolic dim evaluated under `values`."""
    if isinstance(value, Dim):
        return evaluate(value, values)
    if isinstance(value, list):
        return [instantiate(v, values) for v in value]
    if isinstance(value, tuple):
        return tuple(instantiate(v, values) for v in value)
    if isinstance(value, dict):
        return {k: instantiate(v, values) for k, v in value.items()}
    if isinstance(value, np.ndarray) and value.dtype == object:
        return np.array([instantiate(v, values) for v in value.reshape(-1)], dtype=np.int64).reshape(value.shape)
    return value


def has_dims(value) -> bool:
    if isinstance(value, Dim):
        return True
    if isinstance(value, (list, tuple)):
        return any(has_dims(v) for v in value)
    return False


def instantiate_attrs(attrs: dict, values: Mapping) -> dict:
    if not any(has_dims(v) for v in attrs.values()):
        return attrs
    return {k: instantiate(v, values) for k, v in attrs.items()}


def bind(expected: tuple, actual: tuple, values: dict, graph: Graph, defer: bool = False) -> Optional[str]:
    """Match a tensor's symbolic shape with the sizes it has in this run, binding the symbols
    it is the first to tell.  Returns why they do not match (None when they do).  `defer`:
    a dim of two symbols neither of which is known yet (P + S) is skipped, not a mismatch
    (another tensor may tell one of them first)."""
    if len(expected) != len(actual):
        return f"rank {len(actual)}, expected {len(expected)}"
    for axis, (dim, size) in enumerate(zip(expected, actual)):
        size = int(size)
        if not isinstance(dim, Dim):
            if dim != size:
                return f"dim {axis} is {size}, expected {dim}"
            continue
        try:
            want = evaluate(dim, values)
        except UnboundSymbol:
            solved = solve(dim, size, values)
            if solved is None:
                if defer:
                    continue
                return f"dim {axis} ({dim}) cannot be bound from size {size}"
            name, value = solved
            atom = graph.symbols.get(name)
            if atom is not None and (value < atom.lo or (atom.hi is not None and value > atom.hi)):
                return (f"dim {axis} ({dim}) is {size}, which makes {name} = {value}, outside its range "
                        f"[{atom.lo}, {atom.hi if atom.hi is not None else 'inf'}]")
            values[name] = value
            continue
        if want != size:
            return f"dim {axis} ({dim}) is {size}, but {dim} = {want} here"
    return None


def bind_inputs(graph: Graph, shapes: Mapping[str, tuple]) -> dict:
    """The symbol values the input shapes give; E10001 when a shape does not fit the model
    (a fixed dim, a dim outside its range, two inputs giving one symbol two sizes)."""
    values: dict = {}
    for value in graph.inputs:
        if value.name not in shapes:
            continue
        why = bind(tuple(value.desc.shape), tuple(shapes[value.name]), values, graph)
        if why is not None:
            raise AtcError("E10001", f"Input [{value.name}] has shape {list(shapes[value.name])}, which does not fit "
                           f"the model's {describe_shape(value.desc.shape, graph)}: {why}.",
                           "Give input shapes within the ranges the model was compiled with (atc --mode=6 shows "
                           "them).")
    return values


def describe_shape(shape, graph: Graph) -> str:
    """[B, S, 768] with the symbols' ranges: "[B (1~8), S (0~-1), 768]"."""
    parts = []
    for d in shape:
        if isinstance(d, Dim) and len(free_symbols(d)) == 1 and str(d) in graph.symbols:
            atom = graph.symbols[str(d)]
            parts.append(f"{d} ({atom.lo}~{atom.hi if atom.hi is not None else -1})")
        else:
            parts.append(str(d))
    return "[" + ", ".join(parts) + "]"


def specialize(graph: Graph, values: Mapping, runtime_attrs: Optional[Mapping] = None) -> Graph:
    """A static copy of `graph` with every symbol at its value in `values`.  Config inputs a
    kernel read at run time (`runtime_attrs`: node name -> {attr: value} the run saw) become
    attributes, as canonicalization makes constant ones."""
    static = graph.clone()
    try:
        for value in static.values():
            if value.desc.shape is not None and value.desc.is_dynamic():
                value.desc = TensorDesc(value.desc.dtype, tuple(evaluate(d, values) if isinstance(d, Dim) else d
                                                                for d in value.desc.shape), value.desc.format)
        for node in static.nodes:
            node.attrs = dict(instantiate_attrs(node.attrs, values))
    except UnboundSymbol as exc:
        raise InternalError(f"specializing graph [{graph.name}]: symbol(s) {exc.args[0]} have no value") from exc
    for name, attrs in (runtime_attrs or {}).items():
        node = static.find_node(name)
        if node is None:
            continue
        node.attrs.update(attrs)
        op = get_op(node.op_type)
        if op is not None:
            for index, attr in op.config_inputs:
                if attr in attrs and index < len(node.inputs) and node.inputs[index] is not None:
                    node.set_input(index, None)
            first = min((index for index, _ in op.config_inputs), default=len(node.inputs))
            while node.inputs and node.inputs[-1] is None and len(node.inputs) > first:
                node.drop_inputs_from(len(node.inputs) - 1)
    static.symbols = {}
    return static


def representative_values(graph: Graph, hints: Optional[Mapping] = None) -> dict:
    """One size per symbol to price a dynamic graph at: the hint's when given, else the
    range's high end, else (unbounded) its low end but at least 1."""
    values = dict(hints or {})
    for name, atom in graph.symbols.items():
        if name not in values:
            values[name] = atom.hi if atom.hi is not None else max(atom.lo, 1)
    return values


def _input_symbols(value) -> set:
    names: set = set()
    for d in value.desc.shape:
        names |= free_symbols(d)
    return names


def decoder_roles(graph: Graph) -> Optional[tuple]:
    """(cache symbols, sequence symbols, mask symbols) of a decoder exported with
    past_key_values inputs: the dims only the *past* inputs have are the cache length; the
    other inputs' dims the past ones do not share are the new tokens -- except a mask's,
    which spans cache + new tokens.  None when no input is named like a past cache."""
    past = [v for v in graph.inputs if "past" in v.name.lower() and v.desc.is_dynamic()]
    if not past:
        return None
    rest = [v for v in graph.inputs if v not in past]
    in_past = set().union(*(_input_symbols(v) for v in past))
    masks = set().union(set(), *(_input_symbols(v) for v in rest if "mask" in v.name.lower())) - in_past
    others = set().union(set(), *(_input_symbols(v) for v in rest if "mask" not in v.name.lower()))
    cache = in_past - others
    seq = others - in_past
    if not cache or not seq:
        return None
    return cache, seq, masks - seq


def scenarios(graph: Graph, priced_at: Mapping) -> list:
    """(label, symbol values) to show a dynamic model's time at: for a decoder (see
    decoder_roles) the prefill of the priced-at prompt and one decode step after it; for any
    other model, the sizes priced at and the ranges' low ends."""
    roles = decoder_roles(graph)
    if roles is not None:
        cache, seq, masks = roles
        prompt = max(priced_at.get(s, 1) for s in seq)
        prefill = {**priced_at, **{s: 0 for s in cache}, **{s: prompt for s in seq}, **{s: prompt for s in masks}}
        step = {**priced_at, **{s: prompt for s in cache}, **{s: 1 for s in seq}, **{s: prompt + 1 for s in masks}}
        return [(f"prefill of {prompt} tokens", prefill), (f"decode step at cache {prompt}", step)]
    low = {name: max(atom.lo, 1) if atom.origin == "input" else priced_at[name]
           for name, atom in graph.symbols.items()}
    out = [("priced at", dict(priced_at))]
    if low != dict(priced_at):
        out.append(("ranges' low ends", {**priced_at, **low}))
    return out


def hint_values(graph: Graph, hints: Mapping[int, list]) -> dict:
    """Symbol values from `--input_hint_shape` (input index -> dims); E10014 when a hint does
    not fit its input."""
    values: dict = {}
    for index, dims in sorted(hints.items()):
        if index >= len(graph.inputs):
            raise AtcError("E10014", f"--input_hint_shape names input {index}; the model has {len(graph.inputs)}.",
                           "Give hints by input index, starting at 0.")
        value = graph.inputs[index]
        why = bind(tuple(value.desc.shape), tuple(dims), values, graph)
        if why is not None:
            raise AtcError("E10014", f"--input_hint_shape for input {index} [{value.name}] {list(dims)} does not fit "
                           f"its shape {describe_shape(value.desc.shape, graph)}: {why}.",
                           "Give a shape within the input's ranges.")
    return values


def shapes_at(graph: Graph, values: Mapping) -> dict:
    """{input name: concrete shape} under `values` (for inputs whose symbols all have one)."""
    out = {}
    for value in graph.inputs:
        try:
            out[value.name] = tuple(evaluate(d, values) if isinstance(d, Dim) else int(d) for d in value.desc.shape)
        except UnboundSymbol:
            continue
    return out


def substitute_shape(shape, values: Mapping) -> tuple:
    return tuple(substitute(d, values) if isinstance(d, Dim) else d for d in shape)

