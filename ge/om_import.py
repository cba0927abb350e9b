"""Rebuild the IR graph from an .om file, so the simulator runs exactly what was compiled.

Every reference inside the ModelDef is checked (unknown source op, output index out of
range, unknown op type, weights outside the partition): a damaged .om gives E10003, never
a KeyError.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from codegen.ops.registry import op_by_om_type
from ge.errors import AtcError
from ge.ir import Graph, Node, TensorDesc, Value
from om_format import attrs as om_attrs
from om_format.container import OmFile, PartitionType, load_model_def, load_task_def, read_om

_PRIVATE_ATTRS = ("original_op_names", "_fusion_pass", "_compute_dtype", "_input_slots", "relu_flag",
                  "_super_kernel")


def _bad(message: str) -> AtcError:
    return AtcError("E10003", message, "The file is not a valid .om model or is damaged: regenerate it with atc.")


@dataclass
class LoadedOm:
    om: OmFile
    graph: Graph
    compute_dtypes: dict      # node name -> np.dtype
    tasks: list               # node names in task order
    soc_version: str
    precision_mode: str


def _desc(td) -> TensorDesc:
    try:
        dtype = om_attrs.from_ge_dtype(td.dtype)
    except Exception:
        raise _bad(f"Tensor [{td.name}] has an unknown data type {td.dtype}.")
    dims = tuple(int(d) for d in td.shape.dim)
    if any(d < 0 for d in dims):
        raise _bad(f"Tensor [{td.name}] has a negative dim {list(dims)}.")
    return TensorDesc(dtype, dims, td.layout or "ND")


def load_om_graph(path) -> LoadedOm:
    om = read_om(path)
    model = load_model_def(om)
    if len(model.graph) != 1:
        raise _bad(f"Expected one graph in the model, found {len(model.graph)}.")
    weights = om.partitions.get(PartitionType.WEIGHTS_DATA, b"")
    model_attrs = om_attrs.get_attrs(model.attr)
    g = model.graph[0]
    graph = Graph(g.name or "graph")
    outputs: dict = {}       # "op:index" -> Value
    compute_dtypes: dict = {}

    def lookup(ref: str, where: str) -> Value:
        if ref not in outputs:
            raise _bad(f"Op [{where}] reads [{ref}], which no earlier op produces.")
        return outputs[ref]

    net_output = None
    for op in g.op:
        if op.type == "Data":
            if len(op.output_desc) != 1:
                raise _bad(f"Data op [{op.name}] must have one output_desc.")
            value = Value(op.name, _desc(op.output_desc[0]))
            value.graph = graph
            graph.inputs.append(value)
            outputs[f"{op.name}:0"] = value
        elif op.type == "Const":
            if "value" not in op.attr or not op.attr["value"].HasField("t"):
                raise _bad(f"Const op [{op.name}] has no tensor.")
            array = om_attrs.tensor_from_def(op.attr["value"].t, weights)
            value = Value(op.name, const=array)
            value.graph = graph
            outputs[f"{op.name}:0"] = value
        elif op.type == "NetOutput":
            net_output = op
        else:
            opdef = op_by_om_type(op.type)
            if opdef is None:
                raise _bad(f"Op [{op.name}] has type [{op.type}], which this simulator does not know.")
            attrs = om_attrs.get_attrs(op.attr, weights)
            slots = attrs.get("_input_slots")
            inputs = [lookup(ref, op.name) for ref in op.input]
            if slots:
                total, positions = -int(slots[-1]), [int(s) for s in slots[:-1]]
                if len(positions) != len(inputs) or total > 64 or any(not 0 <= p < total for p in positions):
                    raise _bad(f"Op [{op.name}] has malformed _input_slots {slots}.")
                placed = [None] * total
                for position, value in zip(positions, inputs):
                    placed[position] = value
                inputs = placed
            out_values = [Value(td.name or f"{op.name}:{i}", _desc(td)) for i, td in enumerate(op.output_desc)]
            provenance = {"origin": list(attrs.get("original_op_names") or [op.name])}
            if attrs.get("_fusion_pass"):
                provenance["pass"] = attrs["_fusion_pass"]
            if attrs.get("_super_kernel"):
                provenance["super_kernel"] = str(attrs["_super_kernel"])
            node_attrs = {k: v for k, v in attrs.items() if k not in _PRIVATE_ATTRS}
            node = Node(opdef.op_type, inputs, out_values, node_attrs, name=op.name, provenance=provenance)
            graph.add_node(node)
            try:
                compute_dtypes[op.name] = np.dtype(attrs.get("_compute_dtype") or out_values[0].desc.dtype)
            except TypeError:
                raise _bad(f"Op [{op.name}] has an invalid _compute_dtype.")
            for i, value in enumerate(out_values):
                outputs[f"{op.name}:{i}"] = value
    if net_output is None:
        raise _bad("The graph has no NetOutput op.")
    names = om_attrs.get_attrs(net_output.attr).get("_output_names") or []
    for i, ref in enumerate(net_output.input):
        value = lookup(ref, "NetOutput")
        graph.outputs.append(value)
    if names and len(names) == len(graph.outputs):
        for value, name in zip(graph.outputs, names):
            if value.producer is not None or value.is_const:
                value.name = name
    try:
        graph.verify(require_types=True)
    except AssertionError as exc:
        raise _bad(f"The model graph is inconsistent: {exc}.")
    task_def = load_task_def(om)
    tasks = [t.op_name for t in task_def.task] if task_def is not None else []
    known = {n.name for n in graph.nodes}
    if any(name not in known for name in tasks):
        raise _bad("The task list names an op that is not in the model.")
    return LoadedOm(om, graph, compute_dtypes, tasks, str(model_attrs.get("soc_version", "")),
                    str(model_attrs.get("precision_mode", "")))
