"""Symbolic dims: tensor sizes known only at run time, as integer expressions over named symbols.

Why: a model compiled with `-1` dims or ranges (`--input_shape "x:1~8,3,224,224"`) still has
structure the compiler must see -- the hidden size is 768 whatever the sequence length, a
Reshape splits `B*S*768` into `B, S, 12, 64` -- so a dim is an exact expression, not "-1".
Shape rules compute with `Dim`s as with ints (`+ - * // %`, `max`/`min`), fusion passes
compare them (`==` is *provable* equality), and the simulator binds every symbol to the
sizes it sees and evaluates the rest.

A `Dim` is a polynomial with integer coefficients over atoms, in one normal form, so equal
expressions compare equal (`S*2 + 1 == 1 + 2*S`): an atom is a `Symbol` (a model input's
dim, or a size only a kernel's output tells, each with a range lo..hi, hi None when
unbounded), or an opaque `floor`/`mod`/`max`/`min` of expressions that did not simplify.
An expression with no symbol left is a plain `int`, so static shapes never hold a `Dim`.

What cannot be decided stays undecided: `S < 4` with S in 1..8 raises `SymbolicDimError`
(as does `int(S)`), which callers catch to say "this depends on a dynamic dim" -- a shape
rule falls back to a fresh symbol, a fusion pass records a miss, never a wrong answer.
"""
from __future__ import annotations

import math
import re
from typing import Mapping, Optional, Union

INF = float("inf")
# No tensor dim can reach this (a tensor of 2^62 elements overflows GE's int64 byte size):
# decisions about an unbounded symbol take it as its ceiling, so `S < 2^63 - 1` (an
# exporter's "to the end" slice bound) is decided, while ranges still report "unbounded".
DIM_LIMIT = 1 << 62


class SymbolicDimError(TypeError):
    """A concrete int (or a decision) was asked of a dim known only at run time."""


class Symbol:
    """A named unknown size with a range [lo, hi] (hi None: unbounded).  Equality is by name:
    the graph holds one Symbol per name (ge.ir.Graph.symbols).  `origin` says who tells its
    value at run time: "input" (a model input's dim) or "data" (a kernel's output)."""

    __slots__ = ("name", "lo", "hi", "origin")

    def __init__(self, name: str, lo: int = 0, hi: Optional[int] = None, origin: str = "input"):
        if not is_symbol_name(name):
            raise ValueError(f"symbol name {name!r} is not an identifier")
        self.name, self.lo, self.hi = name, int(lo), None if hi is None else int(hi)
        self.origin = origin

    def key(self) -> tuple:
        return (0, self.name)

    def bounds(self, cap=INF) -> tuple:
        return (self.lo, cap if self.hi is None else self.hi)

    def __eq__(self, other) -> bool:
        return isinstance(other, Symbol) and other.name == self.name

    def __hash__(self) -> int:
        return hash(("sym", self.name))

    def __repr__(self) -> str:
        return self.name


class Func:
    """An opaque atom: floor(a / b), a mod b, max(a, b), min(a, b) that did not simplify."""

    __slots__ = ("kind", "args", "_key")

    def __init__(self, kind: str, args: tuple):
        self.kind, self.args = kind, args
        self._key = (1, kind, tuple(_key_of(a) for a in args))

    def key(self) -> tuple:
        return self._key

    def bounds(self, cap=INF) -> tuple:
        a, b = (bounds(x, cap) for x in self.args)
        if self.kind == "max":
            return (max(a[0], b[0]), max(a[1], b[1]))
        if self.kind == "min":
            return (min(a[0], b[0]), min(a[1], b[1]))
        if self.kind == "mod":            # b > 0 whenever the model is valid
            hi = b[1] - 1
            return (0, min(hi, a[1]) if a[0] >= 0 else hi)
        return _floordiv_bounds(a, b)

    def __eq__(self, other) -> bool:
        return isinstance(other, Func) and other._key == self._key

    def __hash__(self) -> int:
        return hash(self._key)

    def __repr__(self) -> str:
        a, b = (_text(x) for x in self.args)
        if self.kind in ("max", "min"):
            return f"{self.kind}({a}, {b})"
        op = "//" if self.kind == "floordiv" else "%"
        return f"{_paren(self.args[0], a)}{op}{_paren(self.args[1], b)}"


def _floor(x):
    return x if x in (INF, -INF) else math.floor(x)


def _floordiv_bounds(a: tuple, b: tuple) -> tuple:
    """Bounds of floor(a / b) for a divisor b >= 1 (what a valid model divides by)."""
    b0, b1 = max(b[0], 1), b[1]
    if a[0] >= 0:
        lo = 0 if b1 == INF else _floor(a[0] / b1)
    else:
        lo = _floor(a[0] / b0)
    if a[1] >= 0:
        hi = _floor(a[1] / b0)
    else:
        hi = -1                           # a negative a over b >= 1 floors to -1 or less
    return (lo, hi)


def _key_of(x) -> tuple:
    return (-1, x) if isinstance(x, int) else (2, x._key)


Monomial = tuple   # sorted tuple of atoms (with repetition: S*S is (S, S))


def _mono_key(mono: Monomial) -> tuple:
    return tuple(a.key() for a in mono)


class Dim:
    """An integer expression with at least one atom (a constant is a plain int).  Immutable."""

    __slots__ = ("terms", "_key", "_hash")

    def __init__(self, terms: tuple):
        self.terms = terms                          # ((monomial, coeff), ...) in normal order
        self._key = tuple((_mono_key(m), c) for m, c in terms)
        self._hash = hash(self._key)

    # -- construction ---------------------------------------------------------------
    @staticmethod
    def of_atom(atom) -> "Dim":
        return Dim((((atom,), 1),))

    # -- arithmetic -------------------------------------------------------------------
    def __add__(self, other):
        return _add(self, other)

    __radd__ = __add__

    def __sub__(self, other):
        return _add(self, _neg(other))

    def __rsub__(self, other):
        return _add(other, _neg(self))

    def __neg__(self):
        return _neg(self)

    def __pos__(self):
        return self

    def __mul__(self, other):
        return _mul(self, other)

    __rmul__ = __mul__

    def __floordiv__(self, other):
        return floordiv(self, other)

    def __rfloordiv__(self, other):
        return floordiv(other, self)

    def __mod__(self, other):
        return mod(self, other)

    def __rmod__(self, other):
        return mod(other, self)

    def __pow__(self, n):
        if not isinstance(n, int) or n < 0:
            raise SymbolicDimError(f"{self} ** {n}: only non-negative integer powers of a dynamic dim")
        out = 1
        for _ in range(n):
            out = _mul(out, self)
        return out

    def __truediv__(self, other):
        raise SymbolicDimError(f"{self} / {_text(other)} is not an integer expression")

    __rtruediv__ = __truediv__

    def __abs__(self):
        lo, _ = bounds(self)
        if lo >= 0:
            return self
        raise SymbolicDimError(f"abs({self}) depends on the run-time value")

    # -- what needs a concrete value ----------------------------------------------------
    def __int__(self):
        raise SymbolicDimError(f"the dim {self} is known only at run time")

    __index__ = __int__

    def __float__(self):
        raise SymbolicDimError(f"the dim {self} is known only at run time")

    def __bool__(self):
        lo, hi = bounds(self)
        if lo > 0 or hi < 0:
            return True
        if lo == hi == 0:
            return False
        raise SymbolicDimError(f"whether {self} is 0 depends on the run-time value")

    # -- comparisons: == is provable equality; order is decided by the ranges or refused --
    def __eq__(self, other) -> bool:
        return isinstance(other, Dim) and other._key == self._key

    def __ne__(self, other) -> bool:
        return not self.__eq__(other)

    def __hash__(self) -> int:
        return self._hash

    def __lt__(self, other):
        return _decide(self, other, "<")

    def __le__(self, other):
        return _decide(self, other, "<=")

    def __gt__(self, other):
        return _decide(self, other, ">")

    def __ge__(self, other):
        return _decide(self, other, ">=")

    def __repr__(self) -> str:
        return _format(self)

    __str__ = __repr__


DimLike = Union[int, Dim]


def is_dynamic(x) -> bool:
    return isinstance(x, Dim)


def symbol(name: str, lo: int = 0, hi: Optional[int] = None) -> Dim:
    """A dim that is the symbol `name` with range [lo, hi]."""
    return Dim.of_atom(Symbol(name, lo, hi))


def is_symbol_name(name: str) -> bool:
    return isinstance(name, str) and re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name) is not None \
        and name not in ("max", "min")


# -- normal form ------------------------------------------------------------------------------

def _poly(x) -> dict:
    if isinstance(x, Dim):
        return {m: c for m, c in x.terms}
    if isinstance(x, bool) or not isinstance(x, int):
        try:
            x = _as_int(x)
        except TypeError:
            raise SymbolicDimError(f"{x!r} is not an integer dim") from None
    return {(): x} if x else {}


def _as_int(x) -> int:
    import numbers
    if isinstance(x, numbers.Integral):
        return int(x)
    raise TypeError(x)


def _make(poly: dict):
    items = [(m, c) for m, c in poly.items() if c]
    if not items:
        return 0
    if len(items) == 1 and items[0][0] == ():
        return items[0][1]
    items.sort(key=lambda mc: (-len(mc[0]), _mono_key(mc[0])))
    return Dim(tuple(items))


def _add(a, b):
    pa, pb = _poly(a), _poly(b)
    for m, c in pb.items():
        pa[m] = pa.get(m, 0) + c
    return _make(pa)


def _neg(a):
    return _make({m: -c for m, c in _poly(a).items()})


def _mul(a, b):
    out: dict = {}
    for ma, ca in _poly(a).items():
        for mb, cb in _poly(b).items():
            mono = tuple(sorted(ma + mb, key=lambda atom: atom.key()))
            out[mono] = out.get(mono, 0) + ca * cb
    return _make(out)


def _exact_quotient(a, b):
    """a / b when b divides a exactly as polynomials (e.g. 32*B*(P + S) / (8*P + 8*S) = 4*B),
    else None."""
    pa, pb = _poly(a), _poly(b)
    if len(pb) != 1:
        return _long_division(pa, pb)
    (mb, cb), = pb.items()
    out = {}
    for ma, ca in pa.items():
        rest = list(ma)
        for atom in mb:
            if atom not in rest:
                return None
            rest.remove(atom)
        if ca % cb:
            return None
        out[tuple(rest)] = ca // cb
    return _make(out)


def _long_division(pa: dict, pb: dict):
    """Exact multivariate division (graded lexicographic order over the atoms); None when
    some remainder term is left or a coefficient does not divide."""
    if not pb:
        return None
    atoms = sorted({atom for poly in (pa, pb) for mono in poly for atom in mono}, key=lambda atom: atom.key())
    index = {atom.key(): i for i, atom in enumerate(atoms)}

    def order(mono):
        exps = [0] * len(atoms)
        for atom in mono:
            exps[index[atom.key()]] += 1
        return (len(mono), exps)

    lead_b = max(pb, key=order)
    coeff_b = pb[lead_b]
    rest, quotient = dict(pa), {}
    for _ in range(10000):
        rest = {m: c for m, c in rest.items() if c}
        if not rest:
            return _make(quotient)
        lead = max(rest, key=order)
        remaining = list(lead)
        for atom in lead_b:
            if atom not in remaining:
                return None
            remaining.remove(atom)
        if rest[lead] % coeff_b:
            return None
        term_mono, term_coeff = tuple(remaining), rest[lead] // coeff_b
        quotient[term_mono] = quotient.get(term_mono, 0) + term_coeff
        for mono, coeff in pb.items():
            product = tuple(sorted(term_mono + mono, key=lambda atom: atom.key()))
            rest[product] = rest.get(product, 0) - term_coeff * coeff
    return None


def floordiv(a, b):
    """floor(a / b) (Python's //), simplified where the range allows."""
    if isinstance(a, int) and isinstance(b, int):
        return a // b
    if isinstance(b, int):
        if b == 0:
            raise ZeroDivisionError("dim // 0")
        if b < 0:
            return floordiv(_neg(a), -b)
        quotient, remainder = {}, {}
        for m, c in _poly(a).items():
            quotient[m], remainder[m] = c // b, c % b
        q, r = _make(quotient), _make(remainder)
        lo, hi = bounds(r)
        if 0 <= lo and hi < b:
            return q
        return _add(q, Dim.of_atom(Func("floordiv", (r, b))))
    if _key_of(a) == _key_of(b):
        return 1
    exact = _exact_quotient(a, b)
    if exact is not None:
        return exact
    return Dim.of_atom(Func("floordiv", (a, b)))


def mod(a, b):
    """a mod b (Python's %, b > 0), simplified where the range allows."""
    if isinstance(a, int) and isinstance(b, int):
        return a % b
    if isinstance(b, int):
        if b <= 0:
            raise SymbolicDimError(f"{_text(a)} % {b}: only a positive divisor")
        r = _make({m: c % b for m, c in _poly(a).items()})
        lo, hi = bounds(r)
        if 0 <= lo and hi < b:
            return r
        return Dim.of_atom(Func("mod", (r, b)))
    if _key_of(a) == _key_of(b) or _exact_quotient(a, b) is not None:
        return 0
    return Dim.of_atom(Func("mod", (a, b)))


def dim_max(a, b):
    return _extreme("max", a, b)


def dim_min(a, b):
    return _extreme("min", a, b)


def _extreme(kind: str, a, b):
    if isinstance(a, int) and isinstance(b, int):
        return max(a, b) if kind == "max" else min(a, b)
    if _key_of(a) == _key_of(b):
        return a
    other = "min" if kind == "max" else "max"
    for x, y in ((a, b), (b, a)):      # max(x, min(x, c)) = x and min(x, max(x, c)) = x
        atom = _single_atom(y)
        if isinstance(atom, Func) and atom.kind == other and any(_key_of(arg) == _key_of(x) for arg in atom.args):
            return x
    lo, hi = bounds(_add(a, _neg(b)), DIM_LIMIT)
    if lo >= 0:
        return a if kind == "max" else b
    if hi <= 0:
        return b if kind == "max" else a
    args = tuple(sorted((a, b), key=_key_of))
    return Dim.of_atom(Func(kind, args))


# -- ranges ------------------------------------------------------------------------------------

def _single_atom(x):
    """The atom `x` is (coefficient 1, one factor), else None."""
    if isinstance(x, Dim) and len(x.terms) == 1 and x.terms[0][1] == 1 and len(x.terms[0][0]) == 1:
        return x.terms[0][0][0]
    return None


def _imul(x: tuple, y: tuple) -> tuple:
    products = []
    for p in x:
        for q in y:
            products.append(0 if p == 0 or q == 0 else p * q)
    return (min(products), max(products))


def bounds(x, cap=INF) -> tuple:
    """(lo, hi) every value of `x` lies in; float +-inf where unbounded (with `cap`, an
    unbounded symbol is taken to be at most `cap`)."""
    if not isinstance(x, Dim):
        return (x, x)
    lo = hi = 0
    for mono, coeff in x.terms:
        interval = (1, 1)
        for atom in mono:
            interval = _imul(interval, atom.bounds(cap))
        interval = _imul(interval, (coeff, coeff))
        lo, hi = lo + interval[0], hi + interval[1]
    return (lo, hi)


def upper_bound(x) -> Optional[int]:
    """The largest value `x` can take, or None when unbounded."""
    hi = bounds(x)[1]
    return None if hi == INF else int(hi)


def _ratio_decides(a, b) -> Optional[bool]:
    """a >= b decided through an exact quotient when the ranges of a - b alone cannot: with
    a = q*b, a - b = (q - 1)*b, so q >= 1 and b >= 0 prove a >= b (and q <= 1, b >= 0 that
    a <= b: False for a >= b only if q < 1 and b > 0).  Element counts of a broadcast need
    it: [1, 1, S, P+S] has (P+S)*S elements, S times its [1, 1, 1, P+S] row, and
    (P+S)*S - (P+S) is not provably >= 0 term by term even when S >= 1."""
    for num, den, flip in ((a, b, False), (b, a, True)):
        if not isinstance(num, Dim) and not isinstance(den, Dim):
            continue
        q = _exact_quotient(num, den)
        if q is None or bounds(den, DIM_LIMIT)[0] < 0:
            continue
        q_lo, q_hi = bounds(q, DIM_LIMIT)
        if not flip and q_lo >= 1 or flip and q_hi <= 1:
            return True
    return None


def _decide(a, b, op: str) -> bool:
    try:
        return _decide_interval(a, b, op)
    except SymbolicDimError:
        if op in (">=", "<=") and _ratio_decides(*((a, b) if op == ">=" else (b, a))):
            return True
        raise


def _decide_interval(a, b, op: str) -> bool:
    lo, hi = bounds(_add(a, _neg(b)), DIM_LIMIT)
    if op == "<":
        if hi < 0:
            return True
        if lo >= 0:
            return False
    elif op == "<=":
        if hi <= 0:
            return True
        if lo > 0:
            return False
    elif op == ">":
        if lo > 0:
            return True
        if hi <= 0:
            return False
    elif op == ">=":
        if lo >= 0:
            return True
        if hi < 0:
            return False
    raise SymbolicDimError(f"whether {_text(a)} {op} {_text(b)} depends on the run-time value")


def provably(a, op: str, b) -> bool:
    """`a op b` when the ranges decide it, else False (for checks that must only fire on a
    certain violation: a dim that may be fine at run time is left to the kernel)."""
    try:
        return bool(_decide(a, b, op)) if isinstance(a, Dim) or isinstance(b, Dim) else \
            {"<": a < b, "<=": a <= b, ">": a > b, ">=": a >= b}[op]
    except SymbolicDimError:
        return False


# -- symbols, substitution, evaluation --------------------------------------------------------

def atoms_of(x) -> list:
    out = []
    if isinstance(x, Dim):
        for mono, _ in x.terms:
            for atom in mono:
                if atom not in out:
                    out.append(atom)
    return out


def free_symbols(x) -> set:
    """Names of the symbols `x` depends on."""
    names: set = set()
    for atom in atoms_of(x):
        if isinstance(atom, Symbol):
            names.add(atom.name)
        else:
            for arg in atom.args:
                names |= free_symbols(arg)
    return names


class UnboundSymbol(KeyError):
    """evaluate() met a symbol the bindings do not give."""


def substitute(x, values: Mapping):
    """`x` with every symbol named in `values` replaced by its value (int or Dim)."""
    if not isinstance(x, Dim):
        return x
    total = 0
    for mono, coeff in x.terms:
        term = coeff
        for atom in mono:
            if isinstance(atom, Symbol):
                term = _mul(term, values[atom.name] if atom.name in values else Dim.of_atom(atom))
            else:
                a, b = (substitute(arg, values) for arg in atom.args)
                term = _mul(term, {"floordiv": floordiv, "mod": mod, "max": dim_max, "min": dim_min}[atom.kind](a, b))
        total = _add(total, term)
    return total


def evaluate(x, values: Mapping) -> int:
    """The int `x` is under `values` (name -> int); UnboundSymbol if a symbol is missing."""
    result = substitute(x, values)
    if isinstance(result, Dim):
        raise UnboundSymbol(sorted(free_symbols(result)))
    return result


def solve(x, value: int, values: Mapping) -> Optional[tuple]:
    """If `x` under `values` is `c * U + k` for one unbound symbol U, the (name, int) that
    makes it equal `value` (None when no integer does, or x is not of that form)."""
    rest = substitute(x, values)
    if not isinstance(rest, Dim):
        return None
    unbound = [a for a in atoms_of(rest) if isinstance(a, Symbol)]
    if len(unbound) != 1 or len(atoms_of(rest)) != 1:
        return None
    u = unbound[0]
    poly = _poly(rest)
    coeff, const = poly.get((u,), 0), poly.get((), 0)
    if set(poly) - {(u,), ()} or coeff == 0 or (value - const) % coeff:
        return None
    return u.name, (value - const) // coeff


# -- text --------------------------------------------------------------------------------------

def _text(x) -> str:
    return str(x)


def _paren(x, text: str) -> str:
    return f"({text})" if isinstance(x, Dim) and (len(x.terms) > 1 or x.terms[0][1] != 1
                                                  or len(x.terms[0][0]) > 1) else text


def _format(d: Dim) -> str:
    out = ""
    for i, (mono, coeff) in enumerate(d.terms):
        wrap = len(mono) > 1 or abs(coeff) != 1
        factors = [f"({a!r})" if wrap and isinstance(a, Func) and a.kind not in ("max", "min") else repr(a)
                   for a in mono]
        magnitude = abs(coeff)
        body = "*".join(([str(magnitude)] if magnitude != 1 or not factors else []) + factors)
        if i == 0:
            out = ("-" if coeff < 0 else "") + body
        else:
            out += (" - " if coeff < 0 else " + ") + body
    return out


_TOKEN = re.compile(r"\s*(?:(\d+)|([A-Za-z_][A-Za-z0-9_]*)|(//|[-+*%(),]))")


def parse(text: str, symbols: Mapping[str, Symbol]):
    """The dim `text` (as `str(dim)` writes it) over the given symbols; ValueError if malformed
    or if it names a symbol that is not given."""
    tokens, pos = [], 0
    text = str(text)
    while pos < len(text):
        if text[pos:].strip() == "":
            break
        m = _TOKEN.match(text, pos)
        if not m:
            raise ValueError(f"bad dim expression {text!r} at {pos}")
        tokens.append(m.group(1) and ("int", int(m.group(1))) or m.group(2) and ("name", m.group(2))
                      or ("op", m.group(3)))
        pos = m.end()
    parser = _Parser(tokens, symbols, text)
    value = parser.expr()
    if parser.i != len(tokens):
        raise ValueError(f"bad dim expression {text!r}")
    return value


class _Parser:
    def __init__(self, tokens, symbols, text):
        self.tokens, self.symbols, self.text, self.i = tokens, symbols, text, 0

    def peek(self):
        return self.tokens[self.i] if self.i < len(self.tokens) else (None, None)

    def take(self, op):
        if self.peek() != ("op", op):
            raise ValueError(f"bad dim expression {self.text!r}: expected {op!r}")
        self.i += 1

    def expr(self):
        value = self.term()
        while self.peek() in (("op", "+"), ("op", "-")):
            op = self.peek()[1]
            self.i += 1
            rhs = self.term()
            value = _add(value, rhs if op == "+" else _neg(rhs))
        return value

    def term(self):
        value = self.unary()
        while self.peek() in (("op", "*"), ("op", "//"), ("op", "%")):
            op = self.peek()[1]
            self.i += 1
            rhs = self.unary()
            value = _mul(value, rhs) if op == "*" else floordiv(value, rhs) if op == "//" else mod(value, rhs)
        return value

    def unary(self):
        if self.peek() == ("op", "-"):
            self.i += 1
            return _neg(self.unary())
        return self.atom()

    def atom(self):
        kind, value = self.peek()
        self.i += 1
        if kind == "int":
            return value
        if kind == "name" and value in ("max", "min"):
            self.take("(")
            a = self.expr()
            self.take(",")
            b = self.expr()
            self.take(")")
            return dim_max(a, b) if value == "max" else dim_min(a, b)
        if kind == "name":
            if value not in self.symbols:
                raise ValueError(f"dim expression {self.text!r} names unknown symbol {value!r}")
            return Dim.of_atom(self.symbols[value])
        if (kind, value) == ("op", "("):
            inner = self.expr()
            self.take(")")
            return inner
        raise ValueError(f"bad dim expression {self.text!r}")
