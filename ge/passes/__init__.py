"""Generic graph passes, run after import on every model.  Each is a `GraphPass`
(ge/passes/contract.py); `GENERIC_PASSES` is the order they run in.
"""
from ge.passes.contract import run_passes
from ge.passes.dead_code import DeadCodeElimination
from ge.passes.eliminate_identity import EliminateIdentity
from ge.passes.infer_and_fold import InferShapesAndFoldConstants
from ge.passes.nonempty_dims import NonEmptyDims

GENERIC_PASSES = (
    EliminateIdentity(),
    InferShapesAndFoldConstants(),
    EliminateIdentity(),          # folding can expose Cast-to-same-type
    DeadCodeElimination(),
    NonEmptyDims(),               # sizes a live Reshape's inferred -1 proves >= 1
)


def run_generic(graph) -> dict:
    """Run the generic passes in order; returns {pass name: changes} (summed by name)."""
    changes: dict = {}
    for result in run_passes(graph, GENERIC_PASSES, stage="Shapes and constants"):
        changes[result.pass_name] = changes.get(result.pass_name, 0) + result.changes
    return changes
