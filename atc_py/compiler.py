"""The compile pipeline: ONNX file -> IR -> generic passes -> fusion -> .om partitions.

`compile_model` returns everything later stages need (the fused graph, the unfused graph
the report prices against, the fusion statistics); `atc_py.driver` writes the files.
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Optional

from atc_py.options import AtcOptions
from codegen.om_builder import OmPartitions, build_partitions
from fusion_passes import pipeline
from fusion_passes.switches import FusionSwitches, load_switches
from ge.errors import AtcError
from ge.ir import Graph
from ge.limits import Budget, use_budget
from ge.onnx_import import import_model, load_model, parse_input_shape
from ge.passes import run_generic
from ge.passes.contract import run_passes
from ge.passes.dead_code import remove_dead_nodes
from simulator.cost_model import load_chip


@dataclass
class CompileResult:
    graph: Graph                 # after fusion
    unfused: Graph               # after the generic passes, before fusion
    fusion_results: list         # a FusionResult per fusion pass, in pipeline order
    switches: FusionSwitches
    partitions: Optional[OmPartitions] = None
    generic_changes: dict = field(default_factory=dict)
    onnx_node_count: int = 0


def apply_out_nodes(graph: Graph, spec: str) -> None:
    """`--out_nodes "node:0;node2:1"`: make those node outputs the graph outputs."""
    if not spec:
        return
    outputs = []
    items = [s.strip() for s in spec.split(";") if s.strip()]
    if not items:
        raise AtcError("E10001", f"Value [{spec}] for parameter [--out_nodes] is invalid. Reason: it names no "
                       "node output.", 'Use --out_nodes="node1:0;node2:1", or leave it out.')
    for item in items:
        name, sep, index = item.rpartition(":")
        if not sep or not name or not index.strip().isdigit():
            raise AtcError("E10001", f"Value [{spec}] for parameter [--out_nodes] is invalid. Reason: [{item}] "
                           "is not of the form node_name:output_index.", 'Use --out_nodes="node1:0;node2:1".')
        node = graph.find_node(name)
        if node is None:
            raise AtcError("E10016", f"Input parameter [--out_nodes]'s opname [{name}] does not exist in the "
                           "model.", "Use node names of the ONNX graph in --out_nodes.")
        if int(index) >= len(node.outputs):
            raise AtcError("E10016", f"Node [{name}] in [--out_nodes] has {len(node.outputs)} output(s); "
                           f"index {index} does not exist.", "Use an output index of the node.")
        if any(v is node.outputs[int(index)] for v in outputs):
            raise AtcError("E10001", f"Value [{spec}] for parameter [--out_nodes] is invalid. Reason: [{item}] "
                           "is named twice.", "Name each node output once.")
        outputs.append(node.outputs[int(index)])
    graph.outputs = outputs
    remove_dead_nodes(graph)


def switches_from_env(options: AtcOptions) -> FusionSwitches:
    passes, ops = pipeline.known_names()
    return load_switches(os.environ.get("GE_FUSION_DISABLE_LIST"), options.fusion_switch_file or None,
                         passes, ops)


def prepare_graph(options: AtcOptions):
    """Load, import and run the generic passes; returns (graph, changes, onnx node count)."""
    model = load_model(options.model)
    shapes = parse_input_shape(options.input_shape) if options.input_shape else {}
    graph = import_model(model, shapes, options.input_format)
    apply_out_nodes(graph, options.out_nodes)
    changes = run_generic(graph)
    return graph, changes, len(model.graph.node)


def budget_for(soc_version: str) -> Budget:
    """The run's resource budget: what the host lets this process allocate, and no tensor
    larger than the chip's memory (simulator/chips/<soc>.json memory_size)."""
    budget = Budget.of_host()
    if soc_version:
        budget = budget.with_device(int(load_chip(soc_version).memory_size), soc_version)
    return budget


def compile_model(options: AtcOptions, build: bool = True) -> CompileResult:
    with use_budget(budget_for(options.soc_version)):
        return _compile(options, build)


def _compile(options: AtcOptions, build: bool) -> CompileResult:
    switches = switches_from_env(options)
    graph, changes, onnx_nodes = prepare_graph(options)
    unfused = graph.clone()
    results = run_passes(graph, pipeline.fusion_passes(switches))
    result = CompileResult(graph, unfused, results, switches, generic_changes=changes, onnx_node_count=onnx_nodes)
    if build:
        name = os.path.basename(options.output) or graph.name
        result.partitions = build_partitions(graph, name, options.soc_version, options.precision_mode,
                                             super_kernel_scope=options.super_kernel_scope)
    return result
