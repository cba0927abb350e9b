"""How an .om records dynamic shapes (ge.symbolic), written by om_builder, read by om_import.

GE's own record, which Netron and GE tools read: a dim known only at run time is -1 in the
TensorDescriptor's shape, its `shape_range` attribute lists [lo, hi] per dim (hi -1 when
unbounded; a fixed dim is [d, d]), and the file header says `is_unknow_model` = 1.  GE
stops there; the simulator needs the expressions themselves (a Reshape output is B*S, not
"-1 in 1..64"), so three private attributes carry them:
- `_symbolic_shape` on a TensorDescriptor: each dim's expression (`str(Dim)`, ints as digits);
- `_symbolic_attrs` on an op: for each attribute holding symbolic dims, the expressions of
  its elements (the attribute itself holds -1 there, as GE writes unknown values);
- `_dim_symbols` on the ModelDef: every symbol as "name:lo:hi:origin" (hi -1 when unbounded;
  origin `input` for a model input's dim, `data` for a size a kernel's output tells).
Static models carry none of these, so their bytes do not change.
"""
from __future__ import annotations

from ge.errors import AtcError, InternalError
from ge.symbolic import Dim, Symbol, bounds, parse
from om_format import attrs as om_attrs

SYMBOLS_ATTR = "_dim_symbols"
SHAPE_ATTR = "_symbolic_shape"
RANGE_ATTR = "shape_range"
ATTRS_ATTR = "_symbolic_attrs"


def _bad(message: str) -> AtcError:
    return AtcError("E10003", message, "The file is not a valid .om model or is damaged: regenerate it with atc.")


# -- writing ------------------------------------------------------------------------------------

def tensor_desc(name: str, dtype, shape, layout: str):
    """om_attrs.tensor_desc, with GE's -1 dims and shape_range (plus our expressions) when
    the shape is symbolic."""
    if not any(isinstance(d, Dim) for d in shape):
        return om_attrs.tensor_desc(name, dtype, shape, layout)
    desc = om_attrs.tensor_desc(name, dtype, [-1 if isinstance(d, Dim) else int(d) for d in shape], layout)
    ranges = []
    for d in shape:
        lo, hi = bounds(d)
        ranges.append([max(int(lo), 0), -1 if hi == float("inf") else int(hi)])
    om_attrs.set_attrs(desc.attr, {RANGE_ATTR: ranges, SHAPE_ATTR: [str(d) for d in shape]})
    return desc


def split_attrs(attrs: dict, where: str) -> dict:
    """`attrs` as the file stores them: symbolic elements as -1, their expressions under
    `_symbolic_attrs` (only when some attribute holds one)."""
    symbolic, out = {}, dict(attrs)
    for key, value in attrs.items():
        if isinstance(value, Dim):
            symbolic[key] = [str(value)]
            out[key] = -1
        elif isinstance(value, (list, tuple)) and any(isinstance(v, Dim) for v in value):
            if any(isinstance(v, (list, tuple)) for v in value):
                raise InternalError(f"attribute [{key}] nests symbolic dims in lists; the .om cannot record it", where)
            symbolic[key] = [str(v) for v in value]
            out[key] = [-1 if isinstance(v, Dim) else v for v in value]
    if symbolic:
        out[ATTRS_ATTR] = symbolic
    return out


def symbol_table(graph) -> dict:
    """The ModelDef attribute listing the graph's symbols (empty for a static graph)."""
    if not graph.symbols:
        return {}
    return {SYMBOLS_ATTR: [f"{s.name}:{s.lo}:{-1 if s.hi is None else s.hi}:{s.origin}"
                           for _, s in sorted(graph.symbols.items())]}


# -- reading ------------------------------------------------------------------------------------

def read_symbols(model_attrs: dict) -> dict:
    """{name: Symbol} from the ModelDef's `_dim_symbols` (E10003 when malformed)."""
    entries = model_attrs.get(SYMBOLS_ATTR)
    if entries is None:
        return {}
    if not isinstance(entries, list) or not all(isinstance(e, str) for e in entries):
        raise _bad(f"The model's {SYMBOLS_ATTR} is not a list of strings.")
    symbols = {}
    for entry in entries:
        parts = entry.split(":")
        try:
            name, lo, hi, origin = parts
            symbol = Symbol(name, int(lo), None if int(hi) == -1 else int(hi), origin)
        except ValueError:
            raise _bad(f"The model's symbol [{entry}] is not name:lo:hi:origin.") from None
        if symbol.lo < 0 or (symbol.hi is not None and symbol.hi < symbol.lo) or origin not in ("input", "data") \
                or name in symbols:
            raise _bad(f"The model's symbol [{entry}] has an invalid range, origin or name.")
        symbols[name] = symbol
    return symbols


def _expr(text, symbols: dict, where: str):
    if not isinstance(text, str) or len(text) > 4096:
        raise _bad(f"{where} records a symbolic dim that is not a short string.")
    try:
        return parse(text, symbols)
    except (ValueError, ZeroDivisionError, TypeError) as exc:
        raise _bad(f"{where} records the dim [{text}], which is not valid: {exc}.") from None


def read_shape(td, dims: tuple, symbols: dict) -> tuple:
    """The shape a TensorDescriptor records: its dims, -1 ones read from `_symbolic_shape`."""
    if not any(d < 0 for d in dims):
        return dims
    where = f"Tensor [{td.name}]"
    if SHAPE_ATTR not in td.attr:
        raise _bad(f"{where} has a negative dim {list(dims)} and no symbolic shape.")
    texts = om_attrs.from_attr(td.attr[SHAPE_ATTR])
    if not isinstance(texts, list) or len(texts) != len(dims):
        raise _bad(f"{where} records a symbolic shape of the wrong rank.")
    shape = []
    for d, text in zip(dims, texts):
        value = _expr(text, symbols, where)
        if d >= 0 and value != d or d < 0 and not isinstance(value, Dim):
            raise _bad(f"{where} records dim {d} as [{text}].")
        shape.append(value)
    return tuple(shape)


def join_attrs(attrs: dict, symbols: dict, where: str) -> dict:
    """The attributes as the IR holds them: `_symbolic_attrs` put back into place."""
    symbolic = attrs.pop(ATTRS_ATTR, None)
    if symbolic is None:
        return attrs
    if not isinstance(symbolic, dict):
        raise _bad(f"Op [{where}] has a malformed {ATTRS_ATTR}.")
    for key, texts in symbolic.items():
        stored = attrs.get(key)
        if not isinstance(texts, list) or not texts:
            raise _bad(f"Op [{where}] has a malformed {ATTRS_ATTR} entry [{key}].")
        values = [_expr(t, symbols, f"Op [{where}]") for t in texts]
        if isinstance(stored, int) and len(values) == 1:
            attrs[key] = values[0]
        elif isinstance(stored, list) and len(stored) == len(values):
            attrs[key] = values
        else:
            raise _bad(f"Op [{where}] has a {ATTRS_ATTR} entry [{key}] that does not fit the attribute.")
    return attrs

