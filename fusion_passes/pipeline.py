"""The ordered list of fusion passes, and the loop that runs them with switches.

Order matters: ConvBNReLU first so the head pattern (ConvPoolFC) can take a fused conv;
LayerNorm recognition before attention so MHA sees one LayerNorm op; MHA before
MatMulBiasAct so the Q/K/V projections go into the attention kernel; LayerNormMatMul after
MatMulBiasAct so it can absorb a fused GEMM; autofuse last, on whatever is left.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from ge.ir import Graph
from fusion_passes.base import FusionPass, Match, Miss
from fusion_passes.switches import FusionSwitches

PASSES: list = []   # filled in below, in order


def _load_passes() -> list:
    import importlib

    modules = [
        # (module, class) in the order they run
        ("conv_bn_relu", "ConvBNReluFusionPass"),
        ("conv_pool_fc", "ConvPoolFCFusionPass"),
        ("layer_norm", "LayerNormFusionPass"),
        ("multi_head_attention", "MultiHeadAttentionFusionPass"),
        ("matmul_bias_act", "MatMulBiasActFusionPass"),
        ("layer_norm_matmul", "LayerNormMatMulFusionPass"),
        ("autofuse", "AutoFusePass"),
    ]
    return [getattr(importlib.import_module(f"fusion_passes.{m}"), c)() for m, c in modules]


@dataclass
class PassStats:
    pattern_name: str
    pass_name: str
    match_times: int = 0
    effect_times: int = 0
    disabled_by: str = ""
    misses: list = field(default_factory=list)
    fused_nodes: list = field(default_factory=list)    # names of the nodes it created
    fused_types: dict = field(default_factory=dict)    # fused op type -> count

    def record_effect(self, node) -> None:
        """Count one rewrite that produced `node`."""
        self.effect_times += 1
        self.fused_nodes.append(node.name)
        self.fused_types[node.op_type] = self.fused_types.get(node.op_type, 0) + 1


def all_passes() -> list:
    if not PASSES:
        PASSES.extend(_load_passes())
    return PASSES


def known_names() -> tuple:
    passes = all_passes()
    return [p.pass_name for p in passes], sorted({op for p in passes for op in p.fused_ops})


def run_pass(graph: Graph, fpass: FusionPass, switches: FusionSwitches) -> PassStats:
    if hasattr(fpass, "run"):          # a pass with its own loop (autofuse); same PassStats contract
        return fpass.run(graph, switches)
    stats = PassStats(fpass.pattern_name, fpass.pass_name)
    pass_on = switches.pass_enabled(fpass.pass_name)
    if not pass_on:
        stats.disabled_by = "--fusion_switch_file"
    for anchor in list(graph.nodes):
        if anchor.graph is not graph or anchor.op_type not in fpass.anchor_types:
            continue
        result = fpass.match(graph, anchor)
        if result is None:
            continue
        stats.match_times += 1
        if isinstance(result, Miss):
            stats.misses.append(result)
            continue
        assert isinstance(result, Match)
        why = switches.why_disabled(fpass.pass_name, result.fused_op)
        if why:
            stats.disabled_by = why
            for node in result.nodes:       # later passes (autofuse) leave a switched-off pattern as it was
                node.provenance.setdefault("held_by", f"{fpass.pass_name} ({why})")
            continue
        stats.record_effect(fpass.rewrite(graph, result))
    graph.topological_sort()
    graph.verify()
    return stats


def run_fusion(graph: Graph, switches: FusionSwitches, passes=None) -> list:
    """Run every pass in order; returns one PassStats per pass."""
    return [run_pass(graph, fpass, switches) for fpass in (passes if passes is not None else all_passes())]
