"""The compile pipeline: ONNX file -> IR -> generic passes -> fusion -> .om partitions.

`compile_model` returns everything later stages need (the fused graph, the unfused graph
the report prices against, the fusion statistics); `atc_py.driver` writes the files.
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Optional

import numpy as np

from atc_py.options import AtcOptions
from atc_py.precision import PrecisionPlan, plan_precision
from codegen.om_builder import OmPartitions, build_partitions
from fusion_passes import pipeline
from fusion_passes.canonical import CanonicalizePass
from fusion_passes.switches import FusionSwitches, load_switches
from ge.dynamic import hint_values, representative_values
from ge.errors import AtcError
from ge.files import release_mapped
from ge.ir import Graph
from ge.limits import Budget, use_budget
from ge.onnx_import import (import_model, input_names, load_model, parse_input_hint_shape, parse_input_shape,
                            parse_input_shape_range)
from ge.passes import run_generic
from ge.passes.contract import run_passes
from ge.passes.dead_code import remove_dead_nodes
from ge.progress import current_progress
from simulator.cost_model import load_chip


@dataclass
class CompileResult:
    graph: Graph                 # after fusion
    unfused: Graph               # after the generic passes, before fusion
    fusion_results: list         # a PassResult per pipeline entry, in order (FusionResult for fusion passes)
    switches: FusionSwitches
    partitions: Optional[OmPartitions] = None
    generic_changes: dict = field(default_factory=dict)
    onnx_node_count: int = 0
    plan: Optional[PrecisionPlan] = None           # per-kernel dtype / impl mode of `graph`
    unfused_plan: Optional[PrecisionPlan] = None   # the same flags applied to `unfused`
    io: dict = field(default_factory=dict)         # what the dtype and AIPP flags did to the I/O
    warnings: list = field(default_factory=list)   # AtcWarnings of the build
    priced_at: dict = field(default_factory=dict)  # dynamic shapes: symbol -> the size the report prices at

    def dtype_of(self, node) -> np.dtype:
        return self.plan.dtype_of(node)


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
        if not sep or not name or not (index.strip().isascii() and index.strip().isdigit()):
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


def apply_io_flags(graph: Graph, options: AtcOptions) -> dict:
    """--input_fp16_nodes and --output_type on the imported graph, before the generic passes
    (so their Casts are folded, fused and priced like any other op)."""
    from atc_py import dtype_flags
    io: dict = {}
    aipp_inputs: frozenset = frozenset()
    if options.parsed.get("aipp"):
        from atc_py.aipp_insert import aipp_targets
        aipp_inputs = frozenset(aipp_targets(graph, options.parsed["aipp"]))
    if options.input_fp16_nodes:
        io["input_fp16_nodes"] = dtype_flags.apply_input_fp16_nodes(graph, options.input_fp16_nodes, aipp_inputs)
    if options.output_type:
        io["output_type"] = dtype_flags.apply_output_type(graph, options.output_type)
    return io


def prepare_graph(options: AtcOptions, model=None, input_shape: Optional[str] = None):
    """Load (unless `model` is given), import with `input_shape` (a gear's; default
    --input_shape or --input_shape_range), apply the I/O flags, run the generic passes and
    insert the Aipp ops; returns (graph, changes, onnx node count, io)."""
    current_progress().stage("Loading the model")
    model = model if model is not None else load_model(options.model)
    shapes = parse_input_shape(input_shape) if input_shape else input_shapes(options, model)
    current_progress().stage("Importing the graph")
    graph = import_model(model, shapes, options.input_format)
    onnx_nodes = len(model.proto.graph.node)
    del model                             # the parsed protobuf; the graph's weights stay mapped
    apply_out_nodes(graph, options.out_nodes)
    io = apply_io_flags(graph, options)
    changes = run_generic(graph)
    release_mapped()                      # folding read some weights: they need not stay resident
    if options.parsed.get("aipp"):        # after folding: AIPP feeds the model as it runs
        from atc_py.aipp_insert import insert_aipp_ops
        io["aipp"] = insert_aipp_ops(graph, options.parsed["aipp"], options.input_format)
    return graph, changes, onnx_nodes, io


def input_shapes(options: AtcOptions, model) -> dict:
    """What --input_shape (or, overriding it as GE does, --input_shape_range) gives each input."""
    if options.input_shape_range:
        return parse_input_shape_range(options.input_shape_range, input_names(model))
    return parse_input_shape(options.input_shape) if options.input_shape else {}


def model_attrs(options: AtcOptions, io: dict) -> dict:
    """What the .om records of the flags that shape its I/O and precision (ModelDef attrs)."""
    attrs = {}
    for name in ("output_type", "input_fp16_nodes", "op_select_implmode", "optypelist_for_implmode"):
        if getattr(options, name):
            attrs[name] = getattr(options, name)
    for name in ("insert_op_conf", "keep_dtype", "modify_mixlist", "customize_dtypes", "op_precision_mode"):
        if getattr(options, name):
            attrs[name] = os.path.basename(getattr(options, name))
    if options.enable_small_channel == "1":
        attrs["enable_small_channel"] = 1
    if io.get("aipp"):
        attrs["aipp_inputs"] = sorted(io["aipp"])
    return attrs


def budget_for(soc_version: str) -> Budget:
    """The run's resource budget: what the host lets this process allocate, and no tensor
    larger than the chip's memory (simulator/chips/<soc>.json memory_size)."""
    budget = Budget.of_host()
    if soc_version:
        budget = budget.with_device(int(load_chip(soc_version).memory_size), soc_version)
    return budget


def compile_model(options: AtcOptions, build: bool = True, skip_passes: tuple = ()) -> CompileResult:
    """Compile a model of static shapes (a gear model: `compile_gears`).  `skip_passes`: names
    of fusion passes or canonical rewrites to leave out of the pipeline -- for benches that
    rebuild the graph another compiler produced; users switch passes off with the switch file
    instead."""
    with use_budget(budget_for(options.soc_version)):
        return _compile(options, build, skip_passes=skip_passes)


@dataclass
class GearedCompileResult:
    """A gear model: one CompileResult per gear (same order as the flag gives them) and the
    .om partitions holding them all (codegen/multi_batch.py)."""

    spec: object                 # atc_py.gears.GearSpec
    gears: list                  # CompileResult per gear
    partitions: Optional[OmPartitions] = None

    @property
    def warnings(self) -> list:
        seen, out = set(), []
        for result in self.gears:            # the same flag warnings come from every gear: once
            for warning in result.warnings:
                if str(warning) not in seen:
                    seen.add(str(warning))
                    out.append(warning)
        return out

    @property
    def switches(self) -> FusionSwitches:
        return self.gears[0].switches

    @property
    def op_count(self) -> int:
        return sum(len(r.graph.nodes) for r in self.gears)


def compile_gears(options: AtcOptions, build: bool = True) -> GearedCompileResult:
    """Compile every gear of --dynamic_batch_size / --dynamic_image_size / --dynamic_dims on
    its own static shapes (each fused and priced on its shapes), then lay them out as GE's
    multi-batch model."""
    spec = options.gears
    with use_budget(budget_for(options.soc_version)):
        model = load_model(options.model)
        results = [_compile(options, build=False, model=model, input_shape=spec.input_shape(i))
                   for i in range(len(spec.gears))]
    geared = GearedCompileResult(spec, results)
    if build:
        from codegen.multi_batch import GearGraph, GearLayout, build_gear_partitions
        layout = GearLayout(spec.dynamic_type, [name for name, _ in spec.inputs],
                            {name: dims for name, dims in spec.inputs if -1 in dims})
        attrs = {**model_attrs(options, results[0].io), "input_shape": options.input_shape, spec.flag: spec.text}
        name = os.path.basename(options.output) or results[0].graph.name
        geared.partitions = build_gear_partitions(
            [GearGraph(gear, r.graph, r.plan.dtype_of) for gear, r in zip(spec.gears, results)], layout, name,
            options.soc_version, options.precision_mode, attrs, options.super_kernel_scope)
    return geared


def _compile(options: AtcOptions, build: bool, model=None, input_shape: Optional[str] = None,
             skip_passes: tuple = ()) -> CompileResult:
    switches = switches_from_env(options)
    graph, changes, onnx_nodes, io = prepare_graph(options, model, input_shape)
    unfused = graph.clone()
    passes = [p for p in pipeline.fusion_passes(switches) if getattr(p, "pass_name", "") not in skip_passes]
    for p in passes:
        if skip_passes and isinstance(p, CanonicalizePass):     # the canonical stage's own rewrites
            p.rewrites = tuple(r for r in p.rewrites if r.name not in skip_passes)
    results = run_passes(graph, passes, stage="Fusion passes")
    release_mapped()                      # fusions that repack weights read them
    origin_types = {n.name: n.op_type for n in unfused.nodes}
    plan = plan_precision(graph, origin_types, options)
    unfused_plan = plan_precision(unfused, origin_types, options)
    for node in graph.nodes:                   # the kernels read their implementation mode
        entry = plan.kernels.get(node.name)
        if entry is not None and entry.impl_mode:
            node.attrs["op_impl_mode"] = entry.impl_mode
    for node in unfused.nodes:
        entry = unfused_plan.kernels.get(node.name)
        if entry is not None and entry.impl_mode:
            node.attrs["op_impl_mode"] = entry.impl_mode
    result = CompileResult(graph, unfused, results, switches, generic_changes=changes, onnx_node_count=onnx_nodes,
                           plan=plan, unfused_plan=unfused_plan, io=io,
                           warnings=list(options.warnings) + list(switches.warnings) + plan.warnings)
    if graph.is_dynamic:
        hints = parse_input_hint_shape(options.input_hint_shape) if options.input_hint_shape else {}
        result.priced_at = representative_values(graph, hint_values(graph, hints))
    if build:
        current_progress().stage("Building the model")
        name = os.path.basename(options.output) or graph.name
        result.partitions = build_partitions(graph, name, options.soc_version, options.precision_mode,
                                             extra_attrs=model_attrs(options, io),
                                             super_kernel_scope=options.super_kernel_scope, dtype_of=plan.dtype_of)
    return result
