"""`--profile DIR`: msprof-shaped views of the simulated run.

Why: users read NPU profiles in msprof's op_summary CSV and in Perfetto; giving them the
same shapes lets them see which kernels dominate and what fusion made, with the tools
they know.  Every number is the cost model's (simulator/COST_MODEL.md); what we do not
model is "N/A".  Each kernel also carries its roofline (arithmetic intensity, achieved vs peak
FLOP/s and DDR bandwidth, and the bound it hit), so a user sees why a model is slow.  A row / slice is a task of the .om (views without a task are not
kernels).  Task Duration includes the task's launch cost, so durations tile the stream
exactly (Task Wait Time 0) and add up to the simulated NPU_compute_time.
"""
from __future__ import annotations

import csv
import json
import os

import numpy as np

from codegen.registry import kernel_of
from om_format import attrs as om_attrs
from ge.files import Outputs
from simulator.runner import Model

NA = "N/A"
OP_SUMMARY_COLUMNS = [
    "Device_id", "Model ID", "Task ID", "Stream ID", "Op Name", "OP Type", "OP State", "Task Type",
    "Task Start Time(us)", "Task Duration(us)", "Task Wait Time(us)", "Block Dim", "Mix Block Dim",
    "HF32 Eligible", "Input Shapes", "Input Data Types", "Input Formats", "Output Shapes",
    "Output Data Types", "Output Formats", "Context ID", "aicore_time(us)", "aic_mac_ratio",
    "aic_mte2_ratio", "aiv_time(us)", "aiv_vec_ratio", "aiv_mte2_time(us)", "aiv_mte3_time(us)",
    # atc_py extras: what made the kernel and which ONNX nodes it covers
    "Fusion Pass", "Origin Ops",
    # ... and its roofline: why it takes the time it takes (COST_MODEL.md section 6)
    "Bound", "FLOPs", "Arithmetic Intensity(FLOP/B)", "Achieved GFLOPS", "Peak GFLOPS", "FLOPS Utilization",
    "GM Bytes", "DDR Bytes", "L2 Hit Bytes", "Achieved DDR GB/s", "Peak DDR GB/s", "DDR Utilization",
]
MODEL_ID = 1            # ais_bench / acl number the first loaded model 1
PIPE_THREADS = (("cube", "cube_us"), ("vector", "vector_us"), ("MTE2", "mte2_us"), ("MTE3", "mte3_us"))
FLOATS = (np.dtype(np.float32), np.dtype(np.float16), np.dtype(np.float64))


def _num(x: float) -> str:
    return f"{x:.3f}"


def _ratio(part: float, whole: float) -> str:
    return f"{part / whole:.3f}" if whole > 0 else NA


def _tensor_cols(values, dtype) -> tuple:
    """msprof style: shapes '1,3,8,8;64,3,3,3', GE dtype names, formats; floats in compute dtype."""
    shapes, dtypes, formats = [], [], []
    for v in values:
        if v is None:
            continue
        own = np.dtype(v.desc.dtype)
        shown = dtype if own in FLOATS else own
        shapes.append(",".join(str(d) for d in v.desc.shape))
        dtypes.append(om_attrs.DataType.Name(om_attrs.storage_type(shown)[0]))
        formats.append(v.desc.format or "ND")
    return ";".join(shapes), ";".join(dtypes), ";".join(formats)


def roofline(chip, cost, dtype) -> dict:
    """A kernel's place on the roofline: useful FLOPs (2 x cube MACs + vector element ops)
    over the bytes it moves in global memory, what it achieved against the peak of the unit
    it ran on (cube or vector) and against sustained DDR, and the bound the cost model found
    (cube, vector, memory, or launch when fixed overheads exceed the pipelined body)."""
    seconds = cost.total_us * 1e-6
    peak = chip.cube_peak_flops(dtype) if cost.cube_us > 0 else chip.vector_peak_ops(dtype)
    achieved = cost.flops / seconds if seconds > 0 else 0.0
    ddr = cost.ddr_bytes / seconds if seconds > 0 else 0.0
    ddr_peak = chip.ddr_bytes_per_us * 1e6
    return {
        "bound": cost.bound, "flops": cost.flops,
        "arithmetic_intensity": cost.flops / cost.memory_bytes if cost.memory_bytes > 0 else 0.0,
        "achieved_gflops": achieved / 1e9, "peak_gflops": peak / 1e9,
        "flops_utilization": achieved / peak if peak > 0 else 0.0,
        "gm_bytes": cost.memory_bytes, "ddr_bytes": cost.ddr_bytes, "l2_hit_bytes": cost.l2_bytes,
        "achieved_ddr_gbps": ddr / 1e9, "peak_ddr_gbps": ddr_peak / 1e9,
        "ddr_utilization": ddr / ddr_peak if ddr_peak > 0 else 0.0,
    }


def _roofline_cols(r: dict) -> dict:
    return {"Bound": r["bound"], "FLOPs": f"{r['flops']:.0f}",
            "Arithmetic Intensity(FLOP/B)": _num(r["arithmetic_intensity"]),
            "Achieved GFLOPS": _num(r["achieved_gflops"]), "Peak GFLOPS": _num(r["peak_gflops"]),
            "FLOPS Utilization": _num(r["flops_utilization"]), "GM Bytes": f"{r['gm_bytes']:.0f}",
            "DDR Bytes": f"{r['ddr_bytes']:.0f}", "L2 Hit Bytes": f"{r['l2_hit_bytes']:.0f}",
            "Achieved DDR GB/s": _num(r["achieved_ddr_gbps"]), "Peak DDR GB/s": _num(r["peak_ddr_gbps"]),
            "DDR Utilization": _num(r["ddr_utilization"])}


def op_summary_rows(model: Model, timings: list, graph=None) -> list:
    """One dict per task, keys = OP_SUMMARY_COLUMNS.  `graph`: a dynamic-shape model
    specialized to the run's sizes (what the timings priced), so shapes are the run's."""
    nodes = model.task_nodes()
    if graph is not None:
        nodes.update({n.name: n for n in graph.nodes})
    rows = []
    for t in timings:
        node = nodes[t.name]
        cost, dtype = t.cost, model.dtype_of(node)
        in_s, in_d, in_f = _tensor_cols(node.inputs, dtype)
        out_s, out_d, out_f = _tensor_cols(node.outputs, dtype)
        core = t.kernel_type == "AI_CORE"
        vec = t.kernel_type == "AI_VECTOR"
        row = {c: NA for c in OP_SUMMARY_COLUMNS}
        row.update({
            "Device_id": 0, "Model ID": MODEL_ID, "Task ID": t.task_id, "Stream ID": t.stream_id,
            "Op Name": t.name, "OP Type": _om_type(node),
            "Task Type": t.kernel_type, "Task Start Time(us)": _num(t.start_us),
            "Task Duration(us)": _num(t.duration_us), "Task Wait Time(us)": _num(0.0),
            "Block Dim": cost.cores_used, "Input Shapes": in_s, "Input Data Types": in_d, "Input Formats": in_f,
            "Output Shapes": out_s, "Output Data Types": out_d, "Output Formats": out_f,
            "Fusion Pass": node.provenance.get("pass", "") or NA, "Origin Ops": ";".join(node.origin),
        })
        row.update(_roofline_cols(roofline(model.chip, cost, dtype)))
        if core:
            row.update({"aicore_time(us)": _num(cost.total_us), "aic_mac_ratio": _ratio(cost.cube_us, cost.total_us),
                        "aic_mte2_ratio": _ratio(cost.mte2_us, cost.total_us)})
        if vec:
            row.update({"aiv_time(us)": _num(cost.total_us), "aiv_vec_ratio": _ratio(cost.vector_us, cost.total_us),
                        "aiv_mte2_time(us)": _num(cost.mte2_us), "aiv_mte3_time(us)": _num(cost.mte3_us)})
        rows.append(row)
    return rows


def _om_type(node) -> str:
    kernel = kernel_of(node.op_type)
    return kernel.om_type if kernel else node.op_type


def _write_csv(path: str, columns: list, rows: list, out: Outputs) -> None:
    with out.open(path, "--profile", text=True) as f:
        writer = csv.DictWriter(f, fieldnames=columns, lineterminator="\r\n")
        writer.writeheader()
        writer.writerows(rows)


def write_op_summary(path: str, rows: list, out: Outputs) -> None:
    _write_csv(path, OP_SUMMARY_COLUMNS, rows, out)


def trace_events(model: Model, timings: list) -> list:
    """Chrome trace events (µs): process/thread names ("M"), one "X" slice per task on the
    stream thread, and sub-slices for the busy time of each pipe, starting after the task's
    launch and scalar prologue (the pipes overlap: that is the double buffering)."""
    pid = 0
    events = [{"ph": "M", "name": "process_name", "pid": pid, "tid": 0,
               "args": {"name": f"NPU 0 ({model.chip.soc_version}, simulated)"}}]
    streams = sorted({t.stream_id for t in timings}) or [0]
    for s in streams:
        events.append({"ph": "M", "name": "thread_name", "pid": pid, "tid": s, "args": {"name": f"Stream {s}"}})
    pipe_tid = {pipe: 1000 + i for i, (pipe, _) in enumerate(PIPE_THREADS)}
    for i, (pipe, _) in enumerate(PIPE_THREADS):
        events.append({"ph": "M", "name": "thread_name", "pid": pid, "tid": pipe_tid[pipe], "args": {"name": pipe}})
        events.append({"ph": "M", "name": "thread_sort_index", "pid": pid, "tid": pipe_tid[pipe],
                       "args": {"sort_index": 1000 + i}})
    nodes = model.task_nodes()
    for t in timings:
        node = nodes[t.name]
        cost = t.cost
        args = {"kernel": t.name, "op_type": _om_type(node), "task_type": t.kernel_type, "task_id": t.task_id,
                "fusion_pass": node.provenance.get("pass", ""), "origin_ops": node.origin,
                "compute_dtype": str(model.dtype_of(node)), "bound": cost.bound, "block_dim": cost.cores_used,
                "super_kernel": t.super_kernel, "roofline": roofline(model.chip, cost, model.dtype_of(node))}
        events.append({"ph": "X", "name": t.name, "cat": t.kernel_type, "pid": pid, "tid": t.stream_id,
                       "ts": t.start_us, "dur": t.duration_us, "args": args})
        # The pipes run at the end of the task's time: after its launch, scalar prologue and
        # first memory access, or, inside a super kernel, after the sync that replaces the launch.
        body = t.start_us + max(0.0, t.duration_us - cost.body_us)
        for pipe, attr in PIPE_THREADS:
            busy = getattr(cost, attr)
            if busy > 0:
                events.append({"ph": "X", "name": f"{t.name} [{pipe}]", "cat": pipe, "pid": pid,
                               "tid": pipe_tid[pipe], "ts": body, "dur": busy,
                               "args": {"kernel": t.name, "fusion_pass": args["fusion_pass"],
                                        "origin_ops": node.origin}})
    return events


# msprof's op_statistic_*.csv (CANN Profiling docs, "op_statistic"); Model Name is left out as
# msprof does by default.
OP_STATISTIC_COLUMNS = ["Device_id", "OP Type", "Core Type", "Count", "Total Time(us)", "Avg Time(us)",
                        "Min Time(us)", "Max Time(us)", "Ratio(%)"]
CORE_TYPES = {"AI_CORE": "AI_CORE", "AI_VECTOR": "AI_VECTOR_CORE"}


def op_statistic_rows(model: Model, timings: list) -> list:
    """One row per (op type, core type): how many tasks, their total/avg/min/max simulated
    time and their share of the whole stream; sorted by total time, largest first."""
    nodes = model.task_nodes()
    groups: dict = {}
    for t in timings:
        key = (_om_type(nodes[t.name]), CORE_TYPES.get(t.kernel_type, t.kernel_type))
        groups.setdefault(key, []).append(t.duration_us)
    total = sum(sum(v) for v in groups.values())
    rows = []
    for (op_type, core), durations in sorted(groups.items(), key=lambda kv: (-sum(kv[1]), kv[0])):
        rows.append({"Device_id": 0, "OP Type": op_type, "Core Type": core, "Count": len(durations),
                     "Total Time(us)": _num(sum(durations)), "Avg Time(us)": _num(sum(durations) / len(durations)),
                     "Min Time(us)": _num(min(durations)), "Max Time(us)": _num(max(durations)),
                     "Ratio(%)": f"{100.0 * sum(durations) / total:.3f}" if total > 0 else NA})
    return rows


def write_profile(model: Model, timings: list, directory: str, out: Outputs, suffix: str = "0",
                  graph=None) -> dict:
    """Write op_summary_<suffix>.csv, op_statistic_<suffix>.csv and msprof_<suffix>.json as
    part of the run's outputs `out`; returns their paths.  `graph`: see op_summary_rows."""
    out.make_folder(directory, "--profile")
    csv_path = os.path.join(directory, f"op_summary_{suffix}.csv")
    stat_path = os.path.join(directory, f"op_statistic_{suffix}.csv")
    json_path = os.path.join(directory, f"msprof_{suffix}.json")
    write_op_summary(csv_path, op_summary_rows(model, timings, graph), out)
    _write_csv(stat_path, OP_STATISTIC_COLUMNS, op_statistic_rows(model, timings), out)
    with out.open(json_path, "--profile", text=True) as f:
        json.dump(trace_events(model, timings), f)
    return {"op_summary": csv_path, "op_statistic": stat_path, "timeline": json_path}
