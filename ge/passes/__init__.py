"""Generic graph passes.  Each pass is `run(graph) -> int`: how many things it changed.

`GENERIC_PASSES` is the order the driver runs them in after import.
"""
from ge.passes import dead_code, eliminate_identity, infer_and_fold

GENERIC_PASSES = [
    ("EliminateIdentity", eliminate_identity.run),
    ("InferShapesAndFoldConstants", infer_and_fold.run),
    ("EliminateIdentity", eliminate_identity.run),   # folding can expose Cast-to-same-type
    ("DeadCodeElimination", dead_code.run),
]


def run_generic(graph) -> dict:
    """Run the generic passes in order; returns {pass name: changes} (summed by name)."""
    changes: dict = {}
    for name, run in GENERIC_PASSES:
        changes[name] = changes.get(name, 0) + run(graph)
    graph.topological_sort()
    graph.verify()
    return changes
