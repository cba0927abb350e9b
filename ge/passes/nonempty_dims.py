"""Dims the graph proves non-zero: a Reshape that infers a `-1` needs the rest of its target
to hold at least one element.

Why: `-1` in --input_shape means any size from 0 (GE's range [0, -1]), so a check such as
"this mask's [1, 1, S, P+S] elements outnumber its [1, 1, 1, P+S] row" cannot be proved:
at S = 0 it is false.  But a model that runs at all tells more: onnxruntime (and the ONNX
spec: the -1 is inferred from the other dims) refuses a Reshape whose target has a -1 when
the product of its other dims is 0 ("The input tensor cannot be reshaped to the requested
shape").  Every node of the (live, top-level) graph runs on every inference, so for each
such Reshape every factor of that product is >= 1 on every input the model accepts.  A
factor that is one symbol (or a product of symbols) raises their low ends to 1; a sum (the
cache plus the new tokens) proves nothing about its terms and is left alone.  Exact, not
a guess: what is raised here is what onnxruntime would refuse anyway, and the runner then
refuses such an input with E10001 instead of running a model that cannot run.
"""
from __future__ import annotations

from ge.ir import Graph
from ge.passes.contract import TYPED, GraphPass, PassResult
from ge.symbolic import Dim, Symbol


def _factors_nonzero(dims) -> list:
    """Symbols that must be >= 1 for the product of `dims` to be non-zero."""
    out = []
    for d in dims:
        if not isinstance(d, Dim) or len(d.terms) != 1:
            continue                                  # a constant, or a sum: nothing per symbol
        mono, coeff = d.terms[0]
        if coeff == 0:
            continue
        out.extend(atom for atom in mono if isinstance(atom, Symbol))
    return out


def nonzero_symbols(graph: Graph) -> list:
    """The symbols some live Reshape with a -1 target proves >= 1, in graph order."""
    found: list = []
    for node in graph.nodes:
        if node.op_type != "Reshape" or node.inputs[0] is None or node.inputs[0].desc.shape is None:
            continue
        target = node.attrs.get("shape")
        if target is None or not any(isinstance(d, int) and d == -1 for d in target):
            continue
        source = tuple(node.inputs[0].desc.shape)
        allowzero = int(node.attrs.get("allowzero", 0))
        others = [source[i] if (isinstance(d, int) and d == 0 and not allowzero and i < len(source)) else d
                  for i, d in enumerate(target) if not (isinstance(d, int) and d == -1)]
        for atom in _factors_nonzero(others):
            if atom not in found:
                found.append(atom)
    return found


class NonEmptyDims(GraphPass):
    """Raise to 1 the low end of every symbol `nonzero_symbols` proves non-zero."""

    name = "NonEmptyDims"
    requires = frozenset({TYPED})

    def run(self, graph: Graph) -> PassResult:
        changed = 0
        for atom in nonzero_symbols(graph):
            symbol = graph.symbols.get(atom.name)
            if symbol is not None and symbol.lo < 1 and (symbol.hi is None or symbol.hi >= 1):
                symbol.lo = 1
                atom.lo = 1
                changed += 1
        return PassResult(self.name, changed)
