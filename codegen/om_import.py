"""Rebuild the IR graph from an .om file, so the simulator runs exactly what was compiled.

The inverse of om_builder.py, next to it: both read the kernel table (om type <-> op type)
and share the private attributes the writer adds.

Every reference inside the ModelDef is checked (unknown source op, output index out of
range, unknown op type, weights outside the partition): a damaged .om gives E10003, never
a KeyError.
"""
from __future__ import annotations

import os

from dataclasses import dataclass
from typing import Optional

import numpy as np

from codegen import dynamic_om
from codegen.registry import kernel_by_om_type
from ge.errors import AtcError, InternalError, om_format_error
from ge.ir import Graph, Node, TensorDesc, Value
from ge.files import check_input, map_input
from ge.limits import HOST_COPIES, MAX_TENSOR_BYTES, current_budget, too_large
from ge.ops.common import FLOAT_TYPES
from ge.ops.registry import OpDef, TensorType
from om_format import attrs as om_attrs
from om_format.container import OmFile, PartitionType, load_model_def, load_task_def, read_om
from om_format.errors import OmFormatError
from om_format.schema import ModelDef, ModelTaskDef

_PRIVATE_ATTRS = ("original_op_names", "_fusion_pass", "_compute_dtype", "_input_slots", "relu_flag",
                  "_super_kernel", "_batch_label", "mbatch-inserted-node")


def _bad(message: str) -> AtcError:
    return AtcError("E10003", message, "The file is not a valid .om model or is damaged: regenerate it with atc.")


@dataclass
class OpenedOm:
    """An .om file whose container and protobuf partitions parsed."""

    om: OmFile
    model_def: ModelDef
    task_def: Optional[ModelTaskDef]


def open_om(source, param: str = "--model") -> OpenedOm:
    """Read and parse an .om (path or bytes); anything wrong with the bytes is E10003.  A path
    must name a regular file (ge.files: E13026); it is memory-mapped, so the weights are
    never copied: the graph's constants are views of the map.  The protobuf partitions are
    parsed into memory, so they must fit the host budget."""
    where = "The .om data"
    mapped = None
    budget = current_budget()
    if not isinstance(source, (bytes, bytearray, memoryview)):
        where = f"File [{os.fspath(source)}]"
        budget.check_mapped(check_input(os.fspath(source), param, "E10003").st_size, f"Model [{os.fspath(source)}]")
        mapped = map_input(os.fspath(source), param, missing_code="E10003")
        source = mapped.buffer
    try:
        om = read_om(source, where=where, on_checked=mapped.release if mapped is not None else None)
        parsed = sum(len(data) for ptype, data in om.partitions.items() if ptype != PartitionType.WEIGHTS_DATA)
        budget.check_host(parsed * HOST_COPIES, f"The host memory to parse the model and task partitions of {where} "
                          f"(about {HOST_COPIES}x their {parsed} bytes)")
        return OpenedOm(om, load_model_def(om), load_task_def(om))
    except OmFormatError as exc:
        raise om_format_error(exc) from exc


@dataclass
class LoadedOm:
    om: OmFile
    graph: Graph
    compute_dtypes: dict      # node name -> np.dtype
    tasks: list               # node names in task order
    task_def: Optional[ModelTaskDef]
    soc_version: str
    precision_mode: str
    gears: Optional[object] = None   # codegen.gear_import.Gears of a gear model (graph = its gear 0)
    enable_small_channel: bool = False   # atc --enable_small_channel=1 (convs of <= 4 channels use C0 = 4)


def _desc(td, symbols: Optional[dict] = None) -> TensorDesc:
    try:
        dtype = om_attrs.desc_dtype(td)
    except OmFormatError as exc:
        raise _bad(f"Tensor [{td.name}] has an unknown data type {td.dtype}.") from exc
    dims = tuple(int(d) for d in td.shape.dim)
    if any(d < 0 for d in dims):
        if not symbols:
            raise _bad(f"Tensor [{td.name}] has a negative dim {list(dims)}.")
        dims = dynamic_om.read_shape(td, dims, symbols)
    if too_large([d for d in dims if isinstance(d, int)], dtype):
        raise _bad(f"Tensor [{td.name}] of shape {list(dims)} would take more than {MAX_TENSOR_BYTES} bytes.")
    return TensorDesc(dtype, dims, td.layout or "ND")


def _text(attrs: dict, key: str, where: str) -> str:
    value = attrs.get(key)
    if value is None:
        return ""
    if not isinstance(value, (str, int)) or isinstance(value, bool):
        raise _bad(f"Op [{where}] has attribute {key} of the wrong kind ({type(value).__name__}).")
    return str(value)


def _names(attrs: dict, key: str, where: str) -> list:
    value = attrs.get(key)
    if value is None:
        return []
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise _bad(f"Op [{where}] has attribute {key} of the wrong kind: expected a list of strings.")
    return list(value)


def _compute_dtype(node: Node, recorded) -> np.dtype:
    """The dtype the kernel computes in: a float type whenever the kernel touches floats
    (what om_builder writes); anything else would make numpy kernels fail at run time."""
    if recorded is not None and not isinstance(recorded, (str, np.dtype)):
        raise _bad(f"Op [{node.name}] has an invalid _compute_dtype {recorded!r}.")
    try:
        dtype = np.dtype(recorded or (node.outputs[0].desc.dtype if node.outputs else np.float32))
    except (TypeError, ValueError):   # not a dtype name numpy knows
        raise _bad(f"Op [{node.name}] has an invalid _compute_dtype {recorded!r}.")
    tensors = [v for v in list(node.inputs) + node.outputs if v is not None]
    if any(np.dtype(v.desc.dtype) in FLOAT_TYPES for v in tensors) and dtype not in FLOAT_TYPES:
        raise _bad(f"Op [{node.name}] computes float tensors in {dtype}, which is not a float type.")
    return dtype


def _check_types(node: Node, op: OpDef, graph: Graph) -> None:
    """Re-run the registry's shape rule: the recorded attributes and input types must give
    exactly the recorded output types, else a kernel would fail (or lie) at run time.  In a
    dynamic model, a dim the rule leaves to the run (a fresh symbol) matches any recorded dim
    whose symbols a kernel's output tells: the executor checks those when it runs."""
    if not node.outputs:
        raise _bad(f"Op [{node.name}] ({node.op_type}) has no output_desc.")
    types = [None if v is None else TensorType(np.dtype(v.desc.dtype), tuple(v.desc.shape)) for v in node.inputs]
    values_known = all(v is None or v.is_const for v in node.inputs)
    # config inputs a kernel reads at run time leave dims open, in static models too (a
    # Reshape to a 1-D target from a graph input)
    read_at_run_time = any(i < len(node.inputs) and node.inputs[i] is not None for i, _ in op.config_inputs)
    open_dims = graph.is_dynamic or read_at_run_time
    try:
        if op.infer_values is not None and values_known:   # a value-dependent op kept as a kernel
            inferred = op.infer_values([None if v is None else v.const for v in node.inputs], node.attrs)
        elif open_dims:
            inferred = _dynamic_types(node, op, types, graph)
        else:
            inferred = op.infer(types, node.attrs)
    except Exception as exc:   # AtcError or whatever a rule raises on attributes it never expected
        message = exc.message if isinstance(exc, AtcError) else f"{type(exc).__name__}: {exc}"
        raise _bad(f"Op [{node.name}] ({node.op_type}) does not accept its recorded inputs and "
                   f"attributes: {message}") from exc
    if len(inferred) < len(node.outputs):
        raise _bad(f"Op [{node.name}] ({node.op_type}) records {len(node.outputs)} outputs, "
                   f"the kernel produces {len(inferred)}.")
    for value, ttype in zip(node.outputs, inferred):
        if ttype is None:      # a (damaged) autofused sub-graph that types no output
            raise _bad(f"Op [{node.name}] ({node.op_type}) gives no type for output [{value.name}].")
        if open_dims:
            ttype = TensorType(ttype.dtype, _recorded_where_open(tuple(ttype.shape), tuple(value.desc.shape), graph))
        if np.dtype(ttype.dtype) != np.dtype(value.desc.dtype) or tuple(ttype.shape) != tuple(value.desc.shape):
            raise _bad(f"Op [{node.name}] ({node.op_type}) records output [{value.name}] as "
                       f"{np.dtype(value.desc.dtype)} {list(value.desc.shape)}, but its inputs and "
                       f"attributes give {np.dtype(ttype.dtype)} {list(ttype.shape)}.")


_OPEN = "_open_"     # prefix of the placeholder symbols a rule makes for dims left to the run


def _dynamic_types(node: Node, op: OpDef, types: list, graph: Graph) -> list:
    from ge.ops import runtime_shapes, symbolic_infer
    from ge.symbolic import Symbol, Dim
    counter = iter(range(1 << 30))

    def fresh(lo=0, hi=None):
        return Dim.of_atom(Symbol(f"{_OPEN}{next(counter)}", lo, hi, "data"))

    runtime = {i for i, _ in op.config_inputs if i < len(node.inputs) and node.inputs[i] is not None}
    if runtime or node.op_type in runtime_shapes.VALUE_DEPENDENT:
        special = runtime_shapes.output_types(node.op_type, types, node.attrs, runtime, len(node.outputs),
                                              [None] * len(node.inputs), fresh)
        if special is not None:
            return special
    return symbolic_infer.infer(op, types, node.attrs, fresh)


def _recorded_where_open(inferred: tuple, recorded: tuple, graph: Graph) -> tuple:
    """The inferred shape with each dim the rule left open (it depends on values a kernel
    computes) replaced by the recorded one: the compiler knew more (what the values were
    symbolically), and the executor checks every such dim against the real output."""
    from ge.symbolic import Dim, free_symbols
    if len(inferred) != len(recorded):
        return inferred
    return tuple(kept if isinstance(got, Dim) and any(n.startswith(_OPEN) for n in free_symbols(got)) else got
                 for got, kept in zip(inferred, recorded))


def load_om_graph(path, param: str = "--model") -> LoadedOm:
    """The IR graph of an .om, every reference and type checked (E10003 when damaged)."""
    opened = open_om(path, param)
    try:
        return _build_graph(opened)
    except OmFormatError as exc:       # a tensor or attribute the format layer cannot decode
        raise om_format_error(exc) from exc


def _build_graph(opened: OpenedOm) -> LoadedOm:
    om, model = opened.om, opened.model_def
    if len(model.graph) != 1:        # a gear model (root + subgraphs) is codegen.gear_import's
        raise _bad(f"Expected one graph in the model, found {len(model.graph)}.")
    weights = om.partitions.get(PartitionType.WEIGHTS_DATA, b"")
    model_attrs = om_attrs.get_attrs(model.attr)
    graph, compute_dtypes = graph_from_def(model.graph[0], weights, symbols=dynamic_om.read_symbols(model_attrs))
    task_def = opened.task_def
    tasks = [t.op_name for t in task_def.task] if task_def is not None else []
    known = {n.name for n in graph.nodes}
    if any(name not in known for name in tasks):
        raise _bad("The task list names an op that is not in the model.")
    return LoadedOm(om, graph, compute_dtypes, tasks, task_def, str(model_attrs.get("soc_version", "")),
                    str(model_attrs.get("precision_mode", "")),
                    enable_small_channel=str(model_attrs.get("enable_small_channel", "0")) == "1")


def graph_from_def(g, weights: bytes, input_name=lambda op: op.name, symbols: Optional[dict] = None) -> tuple:
    """(IR graph, {node name: compute dtype}) of one GraphDef; `input_name` names the graph
    input of each Data op (a gear subgraph's Data ops carry a suffix its inputs do not);
    `symbols` are the model's dynamic-dim symbols (codegen/dynamic_om.py)."""
    graph = Graph(g.name or "graph")
    symbols = symbols or {}
    graph.symbols = dict(symbols)
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
            value = Value(input_name(op), _desc(op.output_desc[0], symbols))
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
            kernel = kernel_by_om_type(op.type)
            if kernel is None:
                raise _bad(f"Op [{op.name}] has type [{op.type}], which this simulator does not know.")
            attrs = om_attrs.get_attrs(op.attr, weights)
            if symbols:
                attrs = dynamic_om.join_attrs(attrs, symbols, op.name)
            slots = attrs.get("_input_slots")
            inputs = [lookup(ref, op.name) for ref in op.input]
            if slots:
                if not isinstance(slots, list) or not all(isinstance(s, int) for s in slots):
                    raise _bad(f"Op [{op.name}] has malformed _input_slots {slots}.")
                total, positions = -int(slots[-1]), [int(s) for s in slots[:-1]]
                if len(positions) != len(inputs) or total > 64 or any(not 0 <= p < total for p in positions):
                    raise _bad(f"Op [{op.name}] has malformed _input_slots {slots}.")
                placed = [None] * total
                for position, value in zip(positions, inputs):
                    placed[position] = value
                inputs = placed
            out_values = [Value(td.name or f"{op.name}:{i}", _desc(td, symbols)) for i, td in enumerate(op.output_desc)]
            provenance = {"origin": _names(attrs, "original_op_names", op.name) or [op.name]}
            for key, field in (("_fusion_pass", "pass"), ("_super_kernel", "super_kernel")):
                if _text(attrs, key, op.name):
                    provenance[field] = _text(attrs, key, op.name)
            node_attrs = {k: v for k, v in attrs.items() if k not in _PRIVATE_ATTRS}
            node = Node(kernel.op_type, inputs, out_values, node_attrs, name=op.name, provenance=provenance)
            graph.add_node(node)
            compute_dtypes[op.name] = _compute_dtype(node, attrs.get("_compute_dtype"))
            _check_types(node, kernel.op, graph)
            for i, value in enumerate(out_values):
                outputs[f"{op.name}:{i}"] = value
    if net_output is None:
        raise _bad(f"The graph [{graph.name}] has no NetOutput op.")
    names = _names(om_attrs.get_attrs(net_output.attr), "_output_names", net_output.name)
    for i, ref in enumerate(net_output.input):
        value = lookup(ref, net_output.name)
        graph.outputs.append(value)
    if names and len(names) == len(graph.outputs):
        for value, name in zip(graph.outputs, names):
            if value.producer is not None or value.is_const:
                value.name = name
    try:
        graph.verify(require_types=True)
    except InternalError as exc:       # for a graph read from a file, a broken invariant is the file's
        raise _bad(f"The model graph is inconsistent: {exc.message}.") from exc
    return graph, compute_dtypes
