"""The ordered list of fusion passes, and the loop that runs them with switches.

Order matters: ConvBNReLU first so the head pattern (ConvPoolFC) can take a fused conv;
LayerNorm recognition before attention so MHA sees one LayerNorm op; MHA before
MatMulBiasAct so the Q/K/V projections go into the attention kernel; LayerNormMatMul after
MatMulBiasAct so it can absorb a fused GEMM; autofuse last, on whatever is left.
"""
from __future__ import annotations

from fusion_passes.autofuse import AutoFusePass
from fusion_passes.base import FusionPass, Match, Miss, PassStats
from fusion_passes.conv_bn_relu import ConvBNReluFusionPass
from fusion_passes.conv_pool_fc import ConvPoolFCFusionPass
from fusion_passes.layer_norm import LayerNormFusionPass
from fusion_passes.layer_norm_matmul import LayerNormMatMulFusionPass
from fusion_passes.matmul_bias_act import MatMulBiasActFusionPass
from fusion_passes.multi_head_attention import MultiHeadAttentionFusionPass
from fusion_passes.switches import FusionSwitches
from ge.ir import Graph

PASSES: list = [      # in the order they run
    ConvBNReluFusionPass(),
    ConvPoolFCFusionPass(),
    LayerNormFusionPass(),
    MultiHeadAttentionFusionPass(),
    MatMulBiasActFusionPass(),
    LayerNormMatMulFusionPass(),
    AutoFusePass(),
]


def all_passes() -> list:
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
