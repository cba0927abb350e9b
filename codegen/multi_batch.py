"""Lay out a gear model (--dynamic_batch_size / _image_size / _dims) as GE's multi-batch pass does.

GE (graph/passes/multi_batch_clone_pass.cc) turns the graph into a root graph that picks a
gear and one subgraph per gear; we write the same structure, each gear compiled (fused,
priced) on its own static shapes:

- root graph (ModelDef.graph[0]): one `Data` per model input at its largest gear (the gear
  whose dims hold the most elements) with `_mbatch_origin_input_dims` (the -1 dims),
  `_all_origin_gears_inputs` and `mbatch-switch-name`; the extra last input
  `ascend_mbatch_shape_data` (int32[k], k values a gear) that the runtime fills with the
  chosen gear; the Const `ascend_mbatch_shape_const` of every gear's values; `MapIndex`
  (`ascend_mbatch_shape_mapindex`) giving the gear's index; the `Case` op
  `ascend_mbatch_shape_case` (input 0 the index, then the Data ops; attrs `_batch_num`,
  `_pred_value_<i>`, `user_designate_shape_order`, `mbatch_dynamic_type`,
  `mbatch-inserted-node`; `subgraph_name` Batch_0..Batch_{n-1}); `NetOutput` reading the
  Case's outputs, with `_dynamic_output_dims` ("gear,output,dims...") as GE records it.
- subgraph Batch_i (ModelDef.graph[1 + i], the way GE serializes a root graph's subgraphs):
  that gear's compiled graph, every op named `<name>_ascend_mbatch_batch_<i>` and labelled
  `_batch_label = Batch_i`; its Data ops carry `_parent_node_index` (their Case input) and
  its NetOutput's inputs `_parent_node_index` (the Case output they fill).

Weights are shared: the gears' constants are the same bytes, stored once (WeightsBuilder
deduplicates).  The task list holds MapIndex, then each gear's kernels in order.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

import numpy as np

from codegen.map_index import MAP_INDEX
from codegen.om_builder import Lowering, OmPartitions, _kernel_type, lower_graph, new_model_def
from ge.ir import Graph, Node
from om_format import attrs as om_attrs
from om_format.schema import DataType, ModelTaskDef
from om_format.weights import WeightsBuilder

SHAPE_DATA = "ascend_mbatch_shape_data"
SHAPE_CONST = "ascend_mbatch_shape_const"
MAP_INDEX_NODE = "ascend_mbatch_shape_mapindex"
CASE_NODE = "ascend_mbatch_shape_case"
NODE_POSTFIX = "_ascend_mbatch_batch_"
INSERTED_BY_MBATCH = "mbatch-inserted-node"


# GE's mbatch_dynamic_type (framework/common/types.h DynamicInputType) and the atc flag of each.
DYNAMIC_BATCH, DYNAMIC_IMAGE, DYNAMIC_DIMS = 1, 2, 3
FLAG_OF_TYPE = {DYNAMIC_BATCH: "dynamic_batch_size", DYNAMIC_IMAGE: "dynamic_image_size", DYNAMIC_DIMS: "dynamic_dims"}


def subgraph_name(index: int) -> str:
    return f"Batch_{index}"


def fill_gear(dynamic_type: int, inputs: list, values) -> dict:
    """{input name: dims} of one gear: `inputs` are (name, dims with -1) in --input_shape order.
    A batch gear's one value is the batch of every dynamic input; an image gear's (h, w) fill
    each dynamic input's two -1s; a dims gear's values fill the -1s one after the other,
    across the inputs in order (GE's ParserDataToDynamicInfo)."""
    values = [int(v) for v in values]
    out, position = {}, 0
    for name, dims in inputs:
        filled = []
        for axis, d in enumerate(dims):
            if d != -1:
                filled.append(int(d))
            elif dynamic_type == DYNAMIC_BATCH:
                filled.append(values[0])
            elif dynamic_type == DYNAMIC_IMAGE:
                filled.append(values[sum(1 for x in dims[:axis] if x == -1)])
            else:
                filled.append(values[position])
                position += 1
        out[name] = filled
    return out


@dataclass
class GearGraph:
    """One gear: its values and its compiled graph with each kernel's compute dtype."""

    values: tuple
    graph: Graph
    dtype_of: Callable[[Node], np.dtype]


@dataclass
class GearLayout:
    dynamic_type: int            # GE's mbatch_dynamic_type: 1 batch, 2 image size, 3 dims
    shape_order: list            # input names in --input_shape order (user_designate_shape_order)
    origin_dims: dict            # input name -> dims with -1, for the inputs the gears change


def _largest(shapes: list) -> int:
    sizes = [math.prod(s) for s in shapes]
    return sizes.index(max(sizes))


def _ge_serial(dtype) -> str:
    """GE's DataType name (TypeUtils::DataTypeToSerialString), e.g. DT_FLOAT."""
    return DataType.Name(om_attrs.storage_type(dtype)[0])


def build_gear_partitions(gears: list, layout: GearLayout, model_name: str, soc_version: str,
                          precision_mode: str, extra_attrs: dict, super_kernel_scope: str = "") -> OmPartitions:
    model = new_model_def(model_name, soc_version, precision_mode, extra_attrs)
    weights = WeightsBuilder()
    tasks = ModelTaskDef(version="atc_py-1", soc_version=soc_version, precision_mode=precision_mode)
    first = gears[0].graph
    root = model.graph.add(name=first.name)
    n_inputs = len(first.inputs)
    width = len(gears[0].values)

    for j, value in enumerate(first.inputs):
        shapes = [tuple(g.graph.inputs[j].desc.shape) for g in gears]
        big = shapes[_largest(shapes)]
        op = root.op.add(name=value.name, type="Data", id=len(root.op))
        attrs = {"index": j}
        if value.name in layout.origin_dims:
            dims = list(layout.origin_dims[value.name])
            itemsize = np.dtype(value.desc.dtype).itemsize
            attrs.update({"_mbatch_origin_input_dims": dims, "mbatch-switch-name": CASE_NODE,
                          "_all_origin_gears_inputs": [
                              f"{value.desc.format}:{_ge_serial(value.desc.dtype)}:{value.name}:"
                              f"{math.prod(s) * itemsize}:{len(s)}:{','.join(map(str, s))}" for s in shapes]})
        om_attrs.set_attrs(op.attr, attrs)
        for descs in (op.input_desc, op.output_desc):
            descs.add().CopyFrom(om_attrs.tensor_desc(value.name, value.desc.dtype, big, value.desc.format))
        root.input.append(value.name)

    shape_desc = om_attrs.tensor_desc(SHAPE_DATA, np.int32, [width])
    op = root.op.add(name=SHAPE_DATA, type="Data", id=len(root.op))
    om_attrs.set_attrs(op.attr, {"index": n_inputs, INSERTED_BY_MBATCH: True})
    op.input_desc.add().CopyFrom(shape_desc)
    op.output_desc.add().CopyFrom(shape_desc)
    root.input.append(SHAPE_DATA)

    table = np.asarray([v for g in gears for v in g.values], dtype=np.int32)
    offset, size = weights.add(table)
    op = root.op.add(name=SHAPE_CONST, type="Const", id=len(root.op))
    tensor = om_attrs.tensor_def(table, SHAPE_CONST)
    tensor.data = b""
    tensor.desc.data_offset, tensor.desc.weight_size = offset, size
    op.attr["value"].t.CopyFrom(tensor)
    op.output_desc.add().CopyFrom(tensor.desc)

    index_desc = om_attrs.tensor_desc(f"{MAP_INDEX_NODE}:0", np.int32, [])
    op = root.op.add(name=MAP_INDEX_NODE, type=MAP_INDEX.op_type, id=len(root.op))
    op.input.extend([f"{SHAPE_DATA}:0", f"{SHAPE_CONST}:0"])
    op.input_desc.add().CopyFrom(shape_desc)
    op.input_desc.add().CopyFrom(tensor.desc)
    op.output_desc.add().CopyFrom(index_desc)
    om_attrs.set_attrs(op.attr, {INSERTED_BY_MBATCH: True, "_compute_dtype": "int32"})
    task = tasks.task.add(id=0, type=0, stream_id=0, op_name=MAP_INDEX_NODE, op_type=MAP_INDEX.op_type,
                          kernel_type=_kernel_type(MAP_INDEX.kind), compute_dtype=om_attrs.to_ge_dtype(np.int32))
    task.inputs.extend(op.input)
    task.outputs.append(f"{MAP_INDEX_NODE}:0")
    task.input_desc.extend(op.input_desc)
    task.output_desc.extend(op.output_desc)

    out_shapes = []
    for k, value in enumerate(first.outputs):
        shapes = [tuple(g.graph.outputs[k].desc.shape) for g in gears]
        out_shapes.append(shapes)
    case = root.op.add(name=CASE_NODE, type="Case", id=len(root.op))
    case.input.append(f"{MAP_INDEX_NODE}:0")
    case.input_desc.add().CopyFrom(index_desc)
    for j, value in enumerate(first.inputs):
        case.input.append(f"{value.name}:0")
        case.input_desc.add().CopyFrom(root.op[j].output_desc[0])
    for k, value in enumerate(first.outputs):
        big = out_shapes[k][_largest(out_shapes[k])]
        case.output_desc.add().CopyFrom(om_attrs.tensor_desc(value.name, value.desc.dtype, big, value.desc.format))
    case_attrs = {"_batch_num": len(gears), "user_designate_shape_order": list(layout.shape_order),
                  "mbatch_dynamic_type": layout.dynamic_type, INSERTED_BY_MBATCH: True}
    for i, gear in enumerate(gears):
        case_attrs[f"_pred_value_{i}"] = [int(v) for v in gear.values]
    om_attrs.set_attrs(case.attr, case_attrs)
    case.subgraph_name.extend(subgraph_name(i) for i in range(len(gears)))

    net = root.op.add(name="NetOutput", type="NetOutput", id=len(root.op))
    for k, value in enumerate(first.outputs):
        net.input.append(f"{CASE_NODE}:{k}")
        net.input_desc.add().CopyFrom(case.output_desc[k])
    om_attrs.set_attrs(net.attr, {
        "_output_names": [v.name for v in first.outputs],
        "_dynamic_output_dims": [f"{i},{k},{','.join(map(str, out_shapes[k][i]))}"
                                 for i in range(len(gears)) for k in range(len(first.outputs))]})
    root.output.extend(net.input)

    for i, gear in enumerate(gears):
        label = subgraph_name(i)

        def data_attrs(j, value, _i=i):
            attrs = {"_parent_node_index": j + 1}
            if value.name in layout.origin_dims:
                attrs["_mbatch_origin_input_dims"] = list(layout.origin_dims[value.name])
            return attrs

        how = Lowering(suffix=f"{NODE_POSTFIX}{i}", op_attrs={"_batch_label": label}, data_attrs=data_attrs,
                       output_attrs=lambda k, value: {"_parent_node_index": k})
        lower_graph(gear.graph, model.graph.add(name=label), weights, tasks, gear.dtype_of, super_kernel_scope, how)
    tasks.weight_size = weights.nbytes
    return OmPartitions(model, weights, tasks, len(tasks.task))
