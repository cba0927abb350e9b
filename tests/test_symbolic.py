"""ge.symbolic: dims as exact integer expressions -- one normal form, decisions only where the
ranges make them, text that reads back to the same expression."""
from __future__ import annotations

import itertools

import pytest

from ge.symbolic import (Dim, Symbol, SymbolicDimError, bounds, dim_max, dim_min, evaluate, floordiv, mod, parse,
                         provably, solve, substitute, symbol, upper_bound)

B, S, P = symbol("B", 1, 8), symbol("S", 0, None), symbol("P", 0, 128)
ATOMS = {"B": Symbol("B", 1, 8), "S": Symbol("S", 0, None), "P": Symbol("P", 0, 128)}


def test_equal_expressions_have_one_normal_form_and_constants_are_ints():
    assert 2 * S + 1 == 1 + S * 2 and hash(2 * S + 1) == hash(1 + S * 2)
    assert (S + P) - S == P
    assert (S + 3) - S == 3 and isinstance((S + 3) - S, int)
    assert S * B * 768 == 768 * B * S and S != P and S != 3


def test_division_is_exact_where_the_polynomials_divide():
    assert (B * S * 768) // (B * S) == 768
    assert (768 * B * S) // 12 == 64 * B * S
    assert (32 * B * (P + S)) // (8 * P + 8 * S) == 4 * B           # a multi-term divisor (dynamo's reshapes)
    assert mod(32 * B * (P + S), 8 * P + 8 * S) == 0
    assert (2 * S + 1) // 2 == S                                      # the remainder 1 // 2 is 0
    assert mod(2 * S + 1, 2) == 1
    rest = (S + 1) // 2
    assert isinstance(rest, Dim) and str(rest) == "(S + 1)//2"


def test_order_is_decided_by_the_ranges_or_refused():
    assert B >= 1 and B <= 8 and not (B > 8) and S >= 0
    with pytest.raises(SymbolicDimError):
        _ = B < 4
    with pytest.raises(SymbolicDimError):
        int(B)
    assert provably(B, ">", 0) and not provably(B, "<", 4)
    assert dim_max(B, 1) == B and dim_min(S, P + S) == S
    assert str(dim_max(S, P)) == "max(P, S)"
    assert bounds(B * 2 + P) == (2, 144) and upper_bound(S) is None and upper_bound(B * P) == 1024


@pytest.mark.parametrize("expr", [B, 2 * S + 1, (S + 1) // 2 * B - 3, mod(S + 1, 4), dim_max(S, P) + 2 * B,
                                  dim_min(S, 16) * P, -S + 3, B * S * 768])
def test_text_reads_back_to_the_same_expression(expr):
    assert parse(str(expr), ATOMS) == expr


def test_evaluation_substitution_and_solving():
    e = (S + 1) // 2 * B
    for s, b in itertools.product(range(0, 9), range(1, 4)):
        assert evaluate(e, {"S": s, "B": b}) == (s + 1) // 2 * b
    assert substitute(S + P, {"P": 4}) == S + 4
    assert solve(S + P, 9, {"P": 4}) == ("S", 5)
    assert solve(2 * S + 1, 8, {}) is None                 # no integer S gives 8
    with pytest.raises(KeyError):
        evaluate(S + P, {"S": 1})


def test_parse_refuses_unknown_symbols_and_bad_text():
    for text in ("Q + 1", "S +", "S ** 2", "max(S)"):
        with pytest.raises(ValueError):
            parse(text, ATOMS)


def test_sizes_compared_through_an_exact_quotient():
    """a >= b when a = q*b with q >= 1 and b >= 0, where the ranges of a - b alone do not
    decide it (a decoder mask [1,1,S,P+S] against its row [1,1,1,P+S]); and only then."""
    from ge.symbolic import provably
    past, seq, batch = (Dim.of_atom(Symbol(n, lo)) for n, lo in (("past", 0), ("seq", 1), ("batch", 1)))
    maybe_empty = Dim.of_atom(Symbol("s0", 0))
    assert provably(past * seq + seq * seq, ">=", past + seq)
    assert provably(past + seq, "<=", past * seq + seq * seq)
    assert provably(batch * past + batch * seq, ">=", batch)            # q = P + S >= 1
    assert not provably(past * maybe_empty + maybe_empty * maybe_empty, ">=", past + maybe_empty)   # S = 0
    assert not provably(past, ">=", past + seq)
    assert not provably(past * seq, ">=", seq)                          # q = P may be 0
    with pytest.raises(SymbolicDimError):
        _ = (past + maybe_empty) <= past * maybe_empty + maybe_empty * maybe_empty
