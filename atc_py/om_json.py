"""`--mode=1` (the model as JSON) and `--mode=6` (model info) on an existing .om."""
from __future__ import annotations

from collections import Counter
from dataclasses import asdict

from google.protobuf import json_format

from codegen.gear_import import gear_summary
from codegen.om_import import open_om
from om_format.container import PartitionType


def _header_dict(header) -> dict:
    out = {}
    for key, value in asdict(header).items():
        out[key] = value.hex() if isinstance(value, (bytes, bytearray)) else value
    return out


def om_to_dict(path: str) -> dict:
    """Header fields, partition table and the ModelDef (protobuf JSON mapping) of an .om."""
    opened = open_om(path, "--om")
    om, model, tasks = opened.om, opened.model_def, opened.task_def
    content = {
        "header": _header_dict(om.header),
        "partitions": [{"type": PartitionType(t).name, "size": len(data)} for t, data in sorted(om.partitions.items())],
        "model_def": json_format.MessageToDict(model, preserving_proto_field_name=True),
    }
    if tasks is not None:
        content["task_info"] = json_format.MessageToDict(tasks, preserving_proto_field_name=True)
    gears = gear_summary(model)
    if gears is not None:
        content["gears"] = gears
    return content


def model_info(path: str) -> str:
    """Human-readable summary like ATC's --mode=6: header, partition sizes, op counts by type."""
    opened = open_om(path, "--om")
    om, model, tasks = opened.om, opened.model_def, opened.task_def
    h = om.header
    lines = ["============ Display Model Info start ============",
             f"Model name: {h.name}", f"Platform version: {h.platform_version}",
             f"Header version: 0x{h.version:08X}", f"Model length: {h.model_length} bytes",
             f"Is dynamic: {bool(h.is_unknow_model)}", f"Op count (header): {h.ops}", "Partitions:"]
    for ptype, data in sorted(om.partitions.items()):
        lines.append(f"  {PartitionType(ptype).name:<16} {len(data):>12} bytes")
    gears = gear_summary(model)
    if gears is not None:
        lines.append(f"Dynamic gears (--{gears['flag']}): {len(gears['gears'])}, in subgraphs "
                     f"{gears['subgraphs'][0]}..{gears['subgraphs'][-1]}")
        for name, dims in gears["dynamic_inputs"].items():
            lines.append(f"  input {name}: {','.join(map(str, dims))}")
        for i, values in enumerate(gears["gears"]):
            lines.append(f"  gear {i}: {','.join(map(str, values))}")
    counts = Counter(op.type for graph in model.graph for op in graph.op)
    lines.append("Op counts by type:")
    for op_type, count in sorted(counts.items()):
        lines.append(f"  {op_type:<32} {count}")
    if tasks is not None:
        lines.append(f"Kernel tasks: {len(tasks.task)}")
        fused = Counter(t.fusion_pass for t in tasks.task if t.fusion_pass)
        for name, count in sorted(fused.items()):
            lines.append(f"  fused by {name}: {count}")
    lines.append("============ Display Model Info end ============")
    return "\n".join(lines)

