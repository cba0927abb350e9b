"""The one pass contract, and the loop that runs an ordered list of passes.

Every pass -- generic cleanup, canonicalization, named fusion, autofuse -- is a `GraphPass`:
a `name`, the graph properties it `requires` and the ones it `ensures`, and
`run(graph) -> PassResult` that says what it changed.  `run_passes` runs a list in order:
it checks each pass's requirements against what the graph is known to satisfy
(`Graph.properties`), and after each pass restores topological order and checks the IR's
invariants (`Graph.verify`) and, on a typed graph, that the graph outputs kept their names,
dtypes and shapes, so a pass never has to and a broken pass is caught where it broke.  A
missing requirement or a broken invariant is an InternalError (E19999): it is a bug in the
pass order or in a pass, never the user's model.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Sequence

from ge.errors import AtcError, InternalError
from ge.ir import Graph
from ge.progress import current_progress

# Graph properties passes may require and ensure.
TYPED = "typed"            # every value has a dtype and a shape (dims: ints or ge.symbolic.Dim)
CANONICAL = "canonical"    # config inputs known at compile time are attributes (see ge/ops/registry.py)
STATIC = "static_shapes"   # every dim is an int: no symbol (ge.symbolic) anywhere in the graph


@dataclass
class PassResult:
    """What one run of a pass changed: `changes` counts the nodes it removed, folded or
    replaced (fusion passes say more: fusion_passes.base.FusionResult)."""

    pass_name: str
    changes: int = 0


class GraphPass:
    """Base of every pass.  Subclasses set `name`, `requires`, `ensures` and implement `run`."""

    name = ""
    requires: frozenset = frozenset()
    ensures: frozenset = frozenset()

    def run(self, graph: Graph) -> PassResult:
        raise NotImplementedError

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"


def check_order(passes: Sequence[GraphPass], given: Iterable[str] = ()) -> None:
    """Raise InternalError if some pass requires a property that neither `given` nor an
    earlier pass of the list ensures (a mistake in the list, found before any graph runs)."""
    have = set(given)
    for fpass in passes:
        missing = set(fpass.requires) - have
        if missing:
            raise InternalError(f"pass {fpass.name} requires {sorted(missing)}, which no earlier pass ensures")
        have |= set(fpass.ensures)


def run_passes(graph: Graph, passes: Sequence[GraphPass], stage: str = "") -> list:
    """Run `passes` in order on `graph`; returns their PassResults.  With a `stage` name, the
    run's progress reporter (ge.progress) counts the passes done."""
    check_order(passes, graph.properties)
    progress = current_progress()
    if stage:
        progress.stage(stage, len(passes))
    results = []
    for done, fpass in enumerate(passes, 1):
        before = _output_types(graph) if TYPED in graph.properties else None
        try:
            result = fpass.run(graph)
        except AtcError:
            raise
        except Exception as exc:   # a pass's own bug: say which pass, keep the cause
            raise InternalError(f"pass {fpass.name} failed: {type(exc).__name__}: {exc}") from exc
        graph.properties.update(fpass.ensures)
        try:
            graph.topological_sort()
        except AtcError as exc:   # the graph was acyclic before the pass: the pass made the cycle
            raise InternalError(f"pass {fpass.name} left a cycle in the graph: {exc.message}") from exc
        graph.verify(require_types=TYPED in graph.properties, require_static=STATIC in graph.properties)
        if before is not None and _output_types(graph) != before:
            raise InternalError(f"pass {fpass.name} changed the graph outputs' types from {before} to "
                                f"{_output_types(graph)}")
        results.append(result)
        if stage:
            progress.update(done)
    return results


def _output_types(graph: Graph) -> list:
    """What a pass on a typed graph must keep: the outputs' names, dtypes and shapes (a pass
    changes how the graph computes them, never what the model returns)."""
    return [(v.name, str(v.desc.dtype), tuple(v.desc.shape)) for v in graph.outputs]
