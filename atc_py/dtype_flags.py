"""`--output_type` and `--input_fp16_nodes`: the model's I/O dtypes, by inserted Casts.

Why Casts in the IR: GE does the same (a Cast before NetOutput, an fp16 Data feeding the
graph), so the .om records the dtypes in its Data/NetOutput descs, the simulator reads and
writes them without a special case, and the cost model prices the conversion kernels.

- `--output_type=FP16` casts every float output; `--output_type="node:0:FP16;node2:1:UINT8"`
  casts the named node outputs, which must be model outputs (name them in `--out_nodes`,
  as ATC requires).  An output already of the asked type is left alone.
- `--input_fp16_nodes="in1;in2"`: those graph inputs become float16; a Cast to the dtype
  the model declared follows each, so the rest of the graph is unchanged.

Unknown node or input: E10016.  Type not in ATC's list: E10001.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import numpy as np

from ge.errors import AtcError, invalid_param
from ge.ir import Graph, Node, TensorDesc, Value

# Output types ATC documents for --output_type and the numpy dtype each becomes.
OUTPUT_TYPES = {"FP32": "float32", "FP16": "float16", "UINT8": "uint8", "INT8": "int8", "UINT16": "uint16",
                "INT16": "int16", "UINT32": "uint32", "INT32": "int32", "UINT64": "uint64", "INT64": "int64",
                "DOUBLE": "float64"}
# numpy dtype -> ONNX TensorProto element type (Cast's `to` attribute)
_ONNX_TYPE = {np.dtype(np.float32): 1, np.dtype(np.uint8): 2, np.dtype(np.int8): 3, np.dtype(np.uint16): 4,
              np.dtype(np.int16): 5, np.dtype(np.int32): 6, np.dtype(np.int64): 7, np.dtype(np.float16): 10,
              np.dtype(np.float64): 11, np.dtype(np.uint32): 12, np.dtype(np.uint64): 13}
FLOATS = (np.dtype(np.float16), np.dtype(np.float32), np.dtype(np.float64))


@dataclass(frozen=True)
class OutputType:
    node: Optional[str]          # None: every float output
    index: int
    dtype: np.dtype
    text: str


def _dtype(text: str, item: str) -> np.dtype:
    name = text.strip().upper()
    if name not in OUTPUT_TYPES:
        raise invalid_param(item, "--output_type", f"[{text.strip()}] is not one of {', '.join(OUTPUT_TYPES)}.",
                            'Use --output_type=FP32 or --output_type="node:0:FP16".')
    return np.dtype(OUTPUT_TYPES[name])


def parse_output_type(spec: str) -> list:
    """`FP16` -> [OutputType(None, ...)]; `n1:0:FP16;n2:1:FP32` -> one entry per node output."""
    spec = spec.strip().strip('"')
    if ":" not in spec:
        return [OutputType(None, 0, _dtype(spec, spec), spec)]
    entries, seen = [], set()
    for item in (s.strip() for s in spec.split(";")):
        if not item:
            continue
        name, sep1, rest = item.rpartition(":")
        node, sep2, index = name.rpartition(":")
        if not sep1 or not sep2 or not node or not index.strip().isdigit():
            raise invalid_param(spec, "--output_type", f"[{item}] is not of the form node_name:output_index:TYPE.",
                                'Use --output_type="node1:0:FP16;node2:0:FP32".')
        if (node, int(index)) in seen:
            raise invalid_param(spec, "--output_type", f"[{node}:{index}] is named twice.", "Name each output once.")
        seen.add((node, int(index)))
        entries.append(OutputType(node, int(index), _dtype(rest, spec), item))
    if not entries:
        raise invalid_param(spec, "--output_type", "it names no output.", 'Use --output_type=FP16.')
    return entries


def parse_node_list(spec: str, param: str) -> list:
    """`"a;b"` -> ["a", "b"] (ATC's separator for node lists)."""
    names = [s.strip() for s in spec.strip().strip('"').split(";")]
    names = [n for n in names if n]
    if not names:
        raise invalid_param(spec, param, "it names no node.", f'Use {param}="name1;name2".')
    if len(set(names)) != len(names):
        raise invalid_param(spec, param, "a name is given twice.", "Name each node once.")
    return names


def _cast(graph: Graph, source: Value, dtype: np.dtype, name: str, out_name: Optional[str] = None) -> Value:
    """Insert Cast(source -> dtype); its output is named `out_name` (or a fresh name)."""
    out = Value(out_name or graph.unique_name(f"{name}:0"), TensorDesc(dtype, source.desc.shape, source.desc.format))
    out.graph = graph
    graph.reserve_names([out.name])
    node = Node("Cast", [source], [out], {"to": _ONNX_TYPE[np.dtype(dtype)]}, name=graph.unique_name(name),
                provenance={"origin": [], "inserted_by": "dtype_flags"})
    graph.add_node(node)
    return out


def apply_input_fp16_nodes(graph: Graph, spec: str, aipp_inputs: frozenset = frozenset()) -> list:
    """Make the named graph inputs float16; returns their names."""
    names = parse_node_list(spec, "--input_fp16_nodes")
    by_name = {v.name: v for v in graph.inputs}
    for name in names:
        value = by_name.get(name)
        if value is None:
            raise AtcError("E10016", f"Input parameter [--input_fp16_nodes]'s opname [{name}] does not exist in the "
                           f"model; its inputs are {list(by_name)}.", "Name graph inputs in --input_fp16_nodes.")
        if name in aipp_inputs:
            raise AtcError("E10034", f"This input op [{name}] is linked to aipp, can not be set to fp16.",
                           "Check --insert_op_conf and --input_fp16_nodes: an input takes one of them.")
        if np.dtype(value.desc.dtype) not in FLOATS:
            raise invalid_param(name, "--input_fp16_nodes", f"input [{name}] is {np.dtype(value.desc.dtype)}, "
                                "not a float tensor.", "Name float inputs only.")
        if np.dtype(value.desc.dtype) == np.float16:
            continue
        # the fp16 Data keeps the input's name; the model's own dtype comes back through a Cast
        old_name = value.name
        value.name = graph.unique_name(f"{old_name}_fp32")
        raw = Value(old_name, TensorDesc(np.dtype(np.float16), value.desc.shape, value.desc.format))
        raw.graph = graph
        graph.inputs = [raw if v is value else v for v in graph.inputs]
        cast = Node("Cast", [raw], [value], {"to": _ONNX_TYPE[np.dtype(value.desc.dtype)]},
                    name=graph.unique_name(f"{old_name}_fp16_cast"),
                    provenance={"origin": [], "inserted_by": "--input_fp16_nodes"})
        graph.add_node(cast, before=graph.nodes[0] if graph.nodes else None)
    return names


def apply_output_type(graph: Graph, spec: str) -> list:
    """Cast the chosen graph outputs; returns [(output name, dtype)] for what was cast."""
    entries = parse_output_type(spec)
    targets: dict = {}                     # position in graph.outputs -> dtype
    if entries[0].node is None:
        for i, value in enumerate(graph.outputs):
            if np.dtype(value.desc.dtype) in FLOATS:
                targets[i] = entries[0].dtype
    else:
        for entry in entries:
            node = graph.find_node(entry.node)
            if node is None:
                raise AtcError("E10016", f"Input parameter [--output_type]'s opname [{entry.node}] does not exist "
                               "in the model.", "Use node names of the ONNX graph in --output_type.")
            if entry.index >= len(node.outputs):
                raise AtcError("E10016", f"Node [{entry.node}] in [--output_type] has {len(node.outputs)} "
                               f"output(s); index {entry.index} does not exist.", "Use an output index of the node.")
            value = node.outputs[entry.index]
            position = next((i for i, v in enumerate(graph.outputs) if v is value), None)
            if position is None:
                raise invalid_param(entry.text, "--output_type", f"[{entry.node}:{entry.index}] is not a model "
                                    "output.", f'Name it in --out_nodes too: --out_nodes="{entry.node}:{entry.index}".')
            targets[position] = entry.dtype
    done = []
    for position, dtype in sorted(targets.items()):
        value = graph.outputs[position]
        if np.dtype(value.desc.dtype) == np.dtype(dtype):
            continue
        out_name = value.name
        if value.producer is not None:        # inputs and constants keep their names
            value.name = graph.unique_name(f"{out_name}_before_cast")
        else:
            out_name = graph.unique_name(f"{out_name}_cast")
        cast_out = _cast(graph, value, dtype, f"{out_name}_output_cast", out_name)
        graph.outputs[position] = cast_out
        done.append((out_name, str(np.dtype(dtype))))
    return done
