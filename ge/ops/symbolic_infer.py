"""Run an op's shape rule on symbolic shapes, with a fallback for rules that need ints.

Most rules compute with `ge.symbolic.Dim`s as with ints and give exact expressions.  A rule
that has to decide something the ranges do not (a ceil_mode window, a clamp) raises
`SymbolicDimError`; then the rule is evaluated on a few concrete instances of the symbols
(range ends and points inside, different for each symbol) and each output dim is
- an int when every instance gives the same one (both ends of a bounded range included:
  a dim that changes only near the high end is not taken for a constant),
- an input's symbolic dim when it takes that dim's value in every instance,
- else a fresh "data" symbol the simulator binds from the kernel's real output.
The executor checks every output against these shapes when it runs, so a wrong guess
cannot pass silently.
"""
from __future__ import annotations

from typing import Callable, Optional

import numpy as np

from ge.dynamic import instantiate
from ge.errors import AtcError, InvalidNode
from ge.ops.registry import OpDef, TensorType
from ge.symbolic import Dim, Symbol, SymbolicDimError, atoms_of, evaluate, free_symbols

_SAMPLES = 5


def _symbols_in(types, attrs) -> dict:
    found: dict = {}

    def visit(x):
        if isinstance(x, Dim):
            for atom in atoms_of(x):
                if isinstance(atom, Symbol):
                    found.setdefault(atom.name, atom)
                else:
                    for arg in atom.args:
                        visit(arg)
        elif isinstance(x, (list, tuple)):
            for v in x:
                visit(v)
        elif isinstance(x, np.ndarray) and x.dtype == object:
            for v in x.reshape(-1):
                visit(v)

    for t in types:
        if t is not None:
            visit(tuple(t.shape))
    for v in attrs.values():
        visit(v)
    return found


def _instances(symbols: dict) -> list:
    """Assignments of the symbols: the low end, the low end + 1, two irregular points (capped
    by the high end), shifted per symbol so two symbols rarely take equal values, and the
    high end (a farther irregular point when unbounded)."""
    out = []
    for k in range(_SAMPLES):
        values = {}
        for j, (name, atom) in enumerate(sorted(symbols.items())):
            lo, hi = atom.lo, atom.hi
            value = [lo, lo + 1, lo + 7 + 3 * j, lo + 29 + 5 * j, lo + 113 + 7 * j if hi is None else hi][k]
            values[name] = value if hi is None else min(value, hi)
        out.append(values)
    return out


def has_dims(types, attrs) -> bool:
    return bool(_symbols_in(types, attrs))


def infer(op: OpDef, types: list, attrs: dict, fresh: Callable[[int, Optional[int]], Dim]) -> list:
    """`op.infer` on possibly symbolic types and attributes (see the module doc)."""
    try:
        return op.infer(types, attrs)
    except SymbolicDimError:
        symbols = _symbols_in(types, attrs)
        if not symbols:
            raise
    results, first_error = [], None
    instances = _instances(symbols)
    for values in instances:
        concrete_types = [None if t is None else TensorType(t.dtype, instantiate(tuple(t.shape), values))
                          for t in types]
        try:
            results.append((values, op.infer(concrete_types, instantiate(dict(attrs), values))))
        except AtcError as err:          # an instance the model cannot take (a 0-size dim): skip it
            first_error = first_error or err
    if len(results) < 2:
        raise first_error or InvalidNode(f"{op.op_type}: the output shape cannot be inferred from dynamic dims")
    return _generalize(results, types, len(results) == len(instances), fresh)


def _generalize(results, types, all_instances: bool, fresh) -> list:
    candidates = []
    for t in types:
        if t is not None:
            candidates.extend(d for d in t.shape if isinstance(d, Dim) and d not in candidates)
    first = results[0][1]
    out = []
    for j, ttype in enumerate(first):
        ranks = {len(r[j].shape) for _, r in results}
        if len(ranks) != 1:
            raise InvalidNode("the output rank depends on dynamic dims")
        dims = []
        for k in range(len(ttype.shape)):
            seen = [int(r[j].shape[k]) for _, r in results]
            if all_instances and len(set(seen)) == 1:
                dims.append(seen[0])
                continue
            match = next((c for c in candidates
                          if all(_value(c, values) == s for (values, _), s in zip(results, seen))), None)
            dims.append(match if match is not None else fresh(0, None))
        out.append(TensorType(np.dtype(ttype.dtype), tuple(dims)))
    return out


def _value(dim, values) -> Optional[int]:
    try:
        return evaluate(dim, values) if free_symbols(dim) <= set(values) else None
    except Exception:
        return None
