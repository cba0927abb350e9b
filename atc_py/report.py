"""The Graph Fusion Report, fusion_result.json and the failure dumps.

Speedups are priced by the simulator's cost model for `--soc_version`: a pattern's speedup
compares the unfused kernels of the ONNX nodes its fused kernels cover with those fused
kernels; the overall speedup compares the whole unfused graph with the whole fused graph.
"""
from __future__ import annotations

import os
import re
from dataclasses import dataclass, field

from google.protobuf import text_format

from codegen import super_kernel
from codegen.om_builder import build_partitions, compute_dtype
from codegen.registry import kernel_of
from fusion_passes.base import FusionResult
from fusion_passes.switches import parse_env_flags
from ge.dynamic import scenarios, shapes_at, specialize
from ge.files import Outputs
from om_format.container import build_om
from ge.ir import Graph
from simulator.cost_model import load_chip
from simulator.pricing import node_costs, price_tasks

FUSION_RESULT_FILE = "fusion_result.json"
UB_FUSION_PASSES = {"AutoFusePass"}   # autofuse's kernels are UB (buffer) fusions in GE's terms


@dataclass
class FusionReport:
    patterns: list                 # dicts: pattern, pass, matched (GE's match_times: every candidate),
                                   # effect (the fused ones), misses, fused_into, disabled_by, speedup
    ops_before: int
    ops_after: int
    kernels_before: int
    kernels_after: int
    time_before_us: float
    time_after_us: float
    misses: list = field(default_factory=list)
    super_kernels: list = field(default_factory=list)   # groups of node names
    launches_after: int = 0                               # with super kernels, if any
    precision_overrides: list = field(default_factory=list)  # kernels whose dtype/impl a flag changed
    canonical: dict = field(default_factory=dict)         # canonicalization: rewrite name -> changes
    dynamic: dict = field(default_factory=dict)           # dynamic shapes: what the figures were priced at

    @property
    def overall_speedup(self) -> float:
        return self.time_before_us / self.time_after_us if self.time_after_us > 0 else 1.0


def fusion_outcomes(result) -> list:
    """The FusionResults of the run's fusion passes (the pipeline's other stages, such as
    canonicalization, are not fusions: the report and fusion_result.json do not list them)."""
    return [r for r in result.fusion_results if isinstance(r, FusionResult)]


def canonical_changes(result) -> dict:
    """{rewrite name: changes} of the canonicalization stage(s) of the run."""
    changes: dict = {}
    for outcome in result.fusion_results:
        for name, count in getattr(outcome, "by_rewrite", {}).items():
            changes[name] = changes.get(name, 0) + count
    return changes


def _kernels(graph: Graph) -> int:
    return sum(1 for n in graph.nodes if not kernel_of(n.op_type).no_task)


def build_report(result, soc_version: str, precision_mode: str, super_kernel_scope: str = "",
                 small_channel: bool = False) -> FusionReport:
    chip = load_chip(soc_version)
    default = lambda node: compute_dtype(node, precision_mode)  # noqa: E731
    dtype_of = result.plan.dtype_of if result.plan is not None else default
    unfused_dtype_of = result.unfused_plan.dtype_of if result.unfused_plan is not None else default
    graph, unfused = result.graph, result.unfused
    if graph.is_dynamic:          # priced at one set of sizes (the ranges' maxima or --input_hint_shape)
        graph, unfused = specialize(graph, result.priced_at), specialize(unfused, result.priced_at)
    before = node_costs(unfused, chip, unfused_dtype_of, small_channel)
    launched = [n for n in graph.nodes if not kernel_of(n.op_type).no_task]
    groups = super_kernel.plan(launched, super_kernel_scope)
    group_of = {name: i for i, group in enumerate(groups) for name in group}
    stream = price_tasks(graph, chip, dtype_of, group_of, small_channel)
    # the task stream priced every node on its own as well (what node_costs gives): not twice
    after = {node.name: cost for node, cost in zip(graph.nodes, stream.kernels)}
    patterns = []
    for outcome in fusion_outcomes(result):
        if outcome.match_times == 0 and not outcome.effect_times:
            continue
        fused = [n for n in result.graph.nodes if n.provenance.get("pass") == outcome.pass_name]
        covered = {name for n in fused for name in n.origin}
        t_unfused = sum(before[name].total_us for name in covered if name in before)
        t_fused = sum(after[n.name].total_us for n in fused)
        patterns.append({
            "pattern": outcome.pattern_name, "pass": outcome.pass_name,
            "matched": outcome.match_times, "effect": outcome.effect_times,
            "fused_into": sorted({n.op_type for n in fused}) or sorted(outcome.fused_types),
            "disabled_by": outcome.disabled_by,
            "speedup": (t_unfused / t_fused) if t_fused > 0 else 1.0,
            "misses": len(outcome.misses), "rejected": outcome.rejected, "held": outcome.held,
        })
    misses = [m for outcome in fusion_outcomes(result) for m in outcome.misses]
    overrides = result.plan.overrides(result.graph) if result.plan is not None else []
    dynamic = {}
    if result.graph.is_dynamic:
        dynamic = dynamic_summary(result, chip, dtype_of, group_of)
    return FusionReport(patterns, len(result.unfused.nodes), len(result.graph.nodes),
                        _kernels(result.unfused), _kernels(result.graph),
                        sum(c.total_us for c in before.values()), stream.total_us,
                        misses, groups, stream.launches, overrides, canonical_changes(result), dynamic)


def dynamic_summary(result, chip, dtype_of, group_of) -> dict:
    """What a dynamic-shape report adds: the symbols and their ranges, the sizes the figures
    were priced at, how many matches each pattern checked on symbolic dims, and the
    simulated time of the fused graph at each scenario (ge.dynamic.scenarios: the ranges'
    ends; a decoder's prefill and one decode step)."""
    graph = result.graph
    symbols = {name: [s.lo, s.hi if s.hi is not None else -1, s.origin] for name, s in sorted(graph.symbols.items())}
    symbolic = {o.pattern_name: o.symbolic_matches for o in fusion_outcomes(result) if o.symbolic_matches}
    times = []
    for label, values in scenarios(graph, result.priced_at):
        static = specialize(graph, values)
        times.append({"scenario": label, "inputs": {k: list(v) for k, v in shapes_at(graph, values).items()},
                      "time_us": price_tasks(static, chip, dtype_of, group_of).total_us})
    return {"symbols": symbols, "priced_at": {k: list(v) for k, v in shapes_at(graph, result.priced_at).items()},
            "symbolic_matches": symbolic, "scenarios": times}


def report_lines(report: FusionReport) -> list:
    """The report in the seeds' exact line format (without the [GE] prefix)."""
    lines = ["Graph Fusion Report:", ""]
    for p in report.patterns:
        # "Matched" counts the matches that were fused (GE's effect_times); candidates a check
        # refused, and candidates a switch held, are counted on their own lines.
        lines.append(f"Pattern: {p['pattern']}")
        lines.append(f"Matched: {p['effect']} times")
        if p["rejected"]:
            lines.append(f"Rejected: {p['rejected']} candidate(s) failed a check (--log=debug shows why)")
        if p["held"]:
            lines.append(f"Switched off: {p['held']} candidate(s) (disabled by {p['disabled_by']})")
        if p["effect"]:
            lines.append(f"Fused into: {', '.join(p['fused_into'])}")
            lines.append(f"Estimated speedup: {p['speedup']:.2f}x")
        else:
            lines.append("Fused into: none")
            lines.append("Estimated speedup: 1.00x")
        lines.append("")
    lines.append(f"Total operators before fusion: {report.ops_before}")
    lines.append(f"Total operators after fusion: {report.ops_after}")
    lines.append(f"Kernel launches before fusion: {report.kernels_before}")
    lines.append(f"Kernel launches after fusion: {report.kernels_after}")
    if report.super_kernels:
        covered = sum(len(g) for g in report.super_kernels)
        lines.append(f"Super kernels formed: {len(report.super_kernels)} (covering {covered} kernels)")
        lines.append(f"Kernel launches with super kernels: {report.launches_after}")
    lines.append(f"Overall speedup: {report.overall_speedup:.2f}x")
    if report.dynamic:
        lines.extend(dynamic_lines(report.dynamic))
    return lines


def dynamic_lines(dynamic: dict) -> list:
    """The dynamic-shape section of the report (absent for static models)."""
    lines = ["", "Dynamic shapes: " + ", ".join(f"{name} in [{lo}, {'inf' if hi == -1 else hi}]"
                                                 + (" (from kernel outputs)" if origin == "data" else "")
                                                 for name, (lo, hi, origin) in dynamic["symbols"].items())]
    lines.append("Priced at: " + "; ".join(f"{name} {shape}" for name, shape in dynamic["priced_at"].items()))
    checked = dynamic["symbolic_matches"]
    lines.append("Patterns checked on symbolic dims: " + (", ".join(f"{p} {n}" for p, n in checked.items())
                                                          if checked else "none"))
    for row in dynamic["scenarios"]:
        shapes = "; ".join(f"{name} {shape}" for name, shape in row["inputs"].items())
        lines.append(f"Simulated time ({row['scenario']}): {row['time_us']:.1f} us  [{shapes}]")
    return lines


def fusion_result_json(result) -> dict:
    """ATC's fusion_result.json: counts as strings, graph_fusion vs ub_fusion."""
    graph_fusion, ub_fusion = {}, {}
    for outcome in fusion_outcomes(result):
        if outcome.match_times == 0:
            continue
        entry = {"effect_times": str(outcome.effect_times), "match_times": str(outcome.match_times)}
        if outcome.pass_name in UB_FUSION_PASSES:
            entry["repository_hit_times"] = "0"
            ub_fusion[outcome.pass_name] = entry
        else:
            graph_fusion[outcome.pass_name] = entry
    session = {}
    if graph_fusion:
        session["graph_fusion"] = graph_fusion
    if ub_fusion:
        session["ub_fusion"] = ub_fusion
    return {"session_and_graph_id_0_0": session}


def gear_title(spec, index: int) -> str:
    """The line naming a gear before its part of the report."""
    shapes = "; ".join(f"{name}:{','.join(map(str, dims))}" for name, dims in spec.shapes(index).items())
    return f"Gear {index} of {len(spec.gears)} (--{spec.flag} {','.join(map(str, spec.gears[index]))}): {shapes}"


def gear_fusion_result_json(geared) -> dict:
    """fusion_result.json of a gear model: GE fuses the root graph with its gear subgraphs
    as one graph, so each pass's counts are summed over the gears."""
    totals: dict = {}
    for result in geared.gears:
        for section, passes in fusion_result_json(result).get("session_and_graph_id_0_0", {}).items():
            for name, entry in passes.items():
                into = totals.setdefault(section, {}).setdefault(name, {k: "0" for k in entry})
                for key, count in entry.items():
                    into[key] = str(int(into.get(key, "0")) + int(count))
    return {"session_and_graph_id_0_0": totals}


def _safe(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", name).strip("_") or "node"


def _unique(stem: str, taken: set) -> str:
    """`stem`, or `stem_2`, `stem_3`...: two node names may give the same safe file name."""
    candidate, n = stem, 1
    while candidate in taken:
        n += 1
        candidate = f"{stem}_{n}"
    taken.add(candidate)
    return candidate


def write_debug_dumps(result, directory: str, with_subgraphs: bool, soc_version: str, precision_mode: str,
                      out: Outputs) -> list:
    """Failure dumps (one JSON per miss) and, with codegen_compile_debug, per fused kernel the
    unfused subgraph it replaced as a protobuf-text ModelDef (.pbtxt, GE's dump format) and as
    an .om that Netron opens.  Returns the files written (at `out`'s commit)."""
    param = "AUTOFUSE_DFX_FLAGS --debug_dir"
    out.make_folder(directory, param)
    written, stems = [], set()
    index = 0
    for outcome in fusion_outcomes(result):
        for miss in outcome.misses:
            path = os.path.join(directory, f"fusion_failure_{index:04d}_{_safe(miss.pass_name)}.json")
            written.append(out.write_json(path, miss.to_json(), param))
            index += 1
    if with_subgraphs:
        for node in result.graph.nodes:
            if not node.provenance.get("pass"):
                continue
            covered = set(node.origin)
            view = result.unfused.subgraph([n for n in result.unfused.nodes if n.name in covered], node.name)
            parts = build_partitions(view, node.name, soc_version, precision_mode,
                                     extra_attrs={"fused_kernel": node.op_type,
                                                  "fusion_pass": node.provenance["pass"]})
            stem = _unique(_safe(node.name), stems)
            path = os.path.join(directory, f"{stem}.pbtxt")
            with out.open(path, param, text=True) as f:
                f.write(text_format.MessageToString(parts.model_def))
            written.append(path)
            # Netron reads ge.proto only inside an .om container, so the same subgraph goes
            # next to the text dump as an .om it can open.
            om_path = os.path.join(directory, f"{stem}.om")
            written.append(out.write_bytes(om_path, build_om(parts.as_dict(), name=node.op_type, ops=len(view.nodes),
                                                             platform_version=soc_version), param))
    return written


def precision_lines(report: FusionReport) -> list:
    """One line per kernel whose compute dtype or implementation a precision flag changed."""
    lines = []
    for row in report.precision_overrides:
        change = (f"{row['dtype_before']} -> {row['dtype']}" if row["dtype"] != row["dtype_before"]
                  else f"{row['dtype']} (unchanged)")
        impl = f", impl {row['impl_mode']}" if row["impl_mode"] else ""
        lines.append(f"Precision override: {row['kernel']} ({row['op_type']}): dtype {change}{impl}; by "
                     f"{'; '.join(row['flags'])}")
    return lines


def print_report(report: FusionReport, log) -> None:
    """The Graph Fusion Report (when the log level asks for it), the precision overrides
    (info) and, at debug, every miss."""
    for line in report_lines(report):
        log.ge(line)
    for line in precision_lines(report):
        log.info(line)
    if report.canonical:
        log.debug("[GE] canonicalization: " + ", ".join(f"{name} {count}" for name, count in report.canonical.items()))
    for miss in report.misses:
        log.debug(f"[GE] fusion miss {miss.code} {miss.reason_name}: pass {miss.pass_name}, anchor "
                  f"{miss.anchor}, ops {[t for _, t in miss.nodes]}: {miss.constraint}; tensors {miss.tensors}")


def write_gear_companions(geared, options, log, out: Outputs) -> list:
    """fusion_result.json (summed over the gears) and each gear's AUTOFUSE_DFX_FLAGS dumps in
    a folder of its own (gear_<i>)."""
    written = [out.write_json(FUSION_RESULT_FILE, gear_fusion_result_json(geared),
                              f"the fusion result ({FUSION_RESULT_FILE} in the working folder)")]
    flags = parse_env_flags(os.environ.get("AUTOFUSE_DFX_FLAGS", ""))
    if flags.get("debug_dir"):
        for index, result in enumerate(geared.gears):
            files = write_debug_dumps(result, os.path.join(flags["debug_dir"], f"gear_{index}"),
                                      flags.get("codegen_compile_debug") == "true", options.soc_version,
                                      options.precision_mode, out)
            written.extend(files)
        log.info(f"Wrote {len(written) - 1} fusion debug file(s) to {flags['debug_dir']}.")
    return written


def write_companions(result, options, log, out: Outputs) -> list:
    """fusion_result.json in the working directory, and the AUTOFUSE_DFX_FLAGS dumps, as part
    of the run's outputs `out` (written with the .om, or not at all)."""
    written = [out.write_json(FUSION_RESULT_FILE, fusion_result_json(result),
                                  f"the fusion result ({FUSION_RESULT_FILE} in the working folder)")]
    flags = parse_env_flags(os.environ.get("AUTOFUSE_DFX_FLAGS", ""))
    if flags.get("debug_dir"):
        files = write_debug_dumps(result, flags["debug_dir"], flags.get("codegen_compile_debug") == "true",
                                  options.soc_version, options.precision_mode, out)
        log.info(f"Wrote {len(files)} fusion debug file(s) to {flags['debug_dir']}.")
        written.extend(files)
    return written
