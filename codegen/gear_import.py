"""Read a gear model (codegen/multi_batch.py's layout, GE's multi-batch form) back from an .om.

Nothing in the file is trusted: the root graph must hold exactly the model's Data ops, the
shape-data input, the Const of gears, MapIndex, one Case and NetOutput, wired as GE wires
them; the Case's `_pred_value_<i>` must be gears of one width with positive values, at most
MAX_GEARS of them, each naming a subgraph Batch_<i> of the file; every subgraph's inputs
and outputs must be the model's (names, dtypes) with the shapes its gear gives the -1 dims
of `_mbatch_origin_input_dims`.  Anything else is E10003.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import numpy as np

from codegen.map_index import MAP_INDEX, gear_table
from codegen.multi_batch import (FLAG_OF_TYPE, INSERTED_BY_MBATCH, NODE_POSTFIX, SHAPE_DATA, fill_gear,
                                 subgraph_name)
from codegen.om_import import LoadedOm, OpenedOm, _bad, _build_graph, _desc, graph_from_def, open_om
from ge.errors import om_format_error
from om_format.errors import OmFormatError
from ge.ir import Graph
from om_format import attrs as om_attrs
from om_format.container import PartitionType
from om_format.schema import GraphDef

MAX_GEARS = 100      # ATC's limit (E10036); a file claiming more is not one atc wrote


@dataclass
class GearBranch:
    """One gear: its values and its compiled subgraph (inputs named as the model's)."""

    values: tuple
    loaded: LoadedOm


@dataclass
class Gears:
    """What a gear model holds: the gears, the root graph's MapIndex step that picks one
    (index_graph: shape data -> MapIndex -> gear index), and each gear's subgraph."""

    dynamic_type: int
    shape_order: list            # input names in --input_shape order
    origin_dims: dict            # input name -> dims with -1 (the inputs the gears change)
    branches: list               # GearBranch per gear, in gear order
    index_graph: Graph
    index_dtypes: dict
    index_task: str              # MapIndex's task (its op name)
    shape_input: str             # ascend_mbatch_shape_data
    max_inputs: list             # TensorDesc of the root Data ops (largest gear)
    max_outputs: list            # TensorDesc of the Case outputs (largest gear)

    @property
    def flag(self) -> str:
        return FLAG_OF_TYPE[self.dynamic_type]

    @property
    def values(self) -> list:
        return [b.values for b in self.branches]

    def shapes(self, index: int) -> dict:
        return fill_gear(self.dynamic_type, [(n, self.origin_dims.get(n, ())) for n in self.shape_order
                                             if n in self.origin_dims], self.branches[index].values)

    def describe(self, index: int) -> str:
        shapes = "; ".join(f"{n}:{','.join(map(str, d))}" for n, d in self.shapes(index).items())
        return f"gear {index} ({','.join(map(str, self.branches[index].values))}): {shapes}"


def _int_list(attrs: dict, key: str, where: str) -> list:
    value = attrs.get(key)
    if not isinstance(value, list) or not all(isinstance(v, int) and not isinstance(v, bool) for v in value):
        raise _bad(f"Op [{where}] has no valid int list attribute {key}.")
    return value


def _root_ops(root) -> dict:
    """The root graph's ops by role, each checked to be where GE puts it."""
    roles: dict = {"data": [], "shape": None, "consts": [], "map_index": None, "case": None, "net": None}
    for op in root.op:
        attrs = om_attrs.get_attrs(op.attr) if op.type == "Data" else {}
        if op.type == "Data" and attrs.get(INSERTED_BY_MBATCH) is True:
            if roles["shape"] is not None:
                raise _bad("The gear model has two shape-data inputs.")
            roles["shape"] = op
        elif op.type == "Data":
            roles["data"].append(op)
        elif op.type == "Const":
            roles["consts"].append(op)
        elif op.type in (MAP_INDEX.op_type, "Case", "NetOutput"):
            key = {"MapIndex": "map_index", "Case": "case", "NetOutput": "net"}[op.type]
            if roles[key] is not None:
                raise _bad(f"The gear model's root graph has two {op.type} ops.")
            roles[key] = op
        else:
            raise _bad(f"The gear model's root graph holds op [{op.name}] of type [{op.type}]; only Data, Const, "
                       "MapIndex, Case and NetOutput belong there.")
    for key in ("shape", "map_index", "case", "net"):
        if roles[key] is None:
            raise _bad(f"The gear model's root graph has no {key.replace('_', ' ')} op.")
    return roles


def _index_step(root, roles: dict, weights: bytes) -> tuple:
    """The root's shape data -> MapIndex part as an IR graph of its own (checked by the same
    reader as any graph)."""
    part = GraphDef(name=root.name)
    for op in [roles["shape"], *roles["consts"], roles["map_index"]]:
        part.op.add().CopyFrom(op)
    net = part.op.add(name="NetOutput", type="NetOutput")
    net.input.append(f"{roles['map_index'].name}:0")
    graph, dtypes = graph_from_def(part, weights)
    node = graph.nodes[0] if len(graph.nodes) == 1 else None
    if node is None or node.inputs[0] is not graph.inputs[0] or not node.inputs[1].is_const:
        raise _bad("The gear model's MapIndex must read the shape-data input and the Const of gears.")
    shape = graph.inputs[0].desc
    if np.dtype(shape.dtype) != np.int32 or len(shape.shape) != 1:
        raise _bad(f"The gear model's shape-data input must be int32[k], not {np.dtype(shape.dtype)} "
                   f"{list(shape.shape)}.")
    return graph, dtypes, node


def load_om_model(path, param: str = "--model") -> LoadedOm:
    """Any .om atc writes: a model of one graph (codegen.om_import), or a gear model, whose
    LoadedOm shows gear 0 and holds every gear in `gears`.  E10003 when damaged."""
    opened = open_om(path, param)
    try:
        return load_gears(opened) if len(opened.model_def.graph) > 1 else _build_graph(opened)
    except OmFormatError as exc:       # a tensor or attribute the format layer cannot decode
        raise om_format_error(exc) from exc


def gear_summary(model) -> Optional[dict]:
    """What `atc --mode=6` and `--mode=1` say of a gear model's gears (None for a model
    without them), read from the root graph's Case op and Data ops without loading the graphs."""
    if len(model.graph) < 2:
        return None
    root = model.graph[0]
    cases = [op for op in root.op if op.type == "Case"]
    if len(cases) != 1:
        return None
    attrs = om_attrs.get_attrs(cases[0].attr)
    count, kind = attrs.get("_batch_num"), attrs.get("mbatch_dynamic_type")
    if not isinstance(count, int) or not 1 <= count <= MAX_GEARS or kind not in FLAG_OF_TYPE:
        raise _bad(f"The gear model's Case records {count!r} gears of type {kind!r}.")
    gears = [_int_list(attrs, f"_pred_value_{i}", cases[0].name) for i in range(count)]
    inputs = {}
    for op in root.op:
        if op.type == "Data" and op.name != SHAPE_DATA:
            dims = om_attrs.get_attrs(op.attr).get("_mbatch_origin_input_dims")
            if dims is not None:
                inputs[op.name] = _int_list({"d": dims}, "d", op.name)
    return {"flag": FLAG_OF_TYPE[kind], "mbatch_dynamic_type": kind, "gears": gears,
            "subgraphs": list(cases[0].subgraph_name), "dynamic_inputs": inputs}


def load_gears(opened: OpenedOm) -> LoadedOm:
    om, model = opened.om, opened.model_def
    weights = om.partitions.get(PartitionType.WEIGHTS_DATA, b"")
    model_attrs = om_attrs.get_attrs(model.attr)
    root = model.graph[0]
    roles = _root_ops(root)
    case, net = roles["case"], roles["net"]
    attrs = om_attrs.get_attrs(case.attr)
    count = attrs.get("_batch_num")
    if not isinstance(count, int) or isinstance(count, bool) or not 1 <= count <= MAX_GEARS:
        raise _bad(f"The gear model's Case records {count!r} gears; 1 to {MAX_GEARS} are possible.")
    dynamic_type = attrs.get("mbatch_dynamic_type")
    if dynamic_type not in FLAG_OF_TYPE:
        raise _bad(f"The gear model's Case has mbatch_dynamic_type {dynamic_type!r}, not one of "
                   f"{sorted(FLAG_OF_TYPE)}.")
    gears = [tuple(_int_list(attrs, f"_pred_value_{i}", case.name)) for i in range(count)]
    if len({len(g) for g in gears}) != 1 or not gears[0] or any(v <= 0 for g in gears for v in g):
        raise _bad(f"The gear model's gears {gears} are not positive values of one width.")
    if len(set(gears)) != len(gears):
        raise _bad(f"The gear model lists a gear twice: {gears}.")
    names = list(case.subgraph_name)
    if names != [subgraph_name(i) for i in range(count)]:
        raise _bad(f"The gear model's Case names subgraphs {names}, expected Batch_0..Batch_{count - 1}.")
    by_name = {g.name: g for g in model.graph[1:]}
    if len(by_name) != len(model.graph) - 1 or set(by_name) != set(names):
        raise _bad(f"The gear model's subgraphs are {sorted(by_name)}; its Case runs {names}.")

    index_graph, index_dtypes, map_node = _index_step(root, roles, weights)
    table = gear_table(np.asarray(map_node.inputs[1].const), len(gears[0]))
    if [tuple(int(v) for v in row) for row in table] != gears or index_graph.inputs[0].desc.shape != (len(gears[0]),):
        raise _bad("The gear model's Const of gears does not hold the Case's gears.")

    data_ops = sorted(roles["data"], key=lambda op: om_attrs.get_attrs(op.attr).get("index", -1))
    indices = [om_attrs.get_attrs(op.attr).get("index") for op in data_ops]
    shape_index = om_attrs.get_attrs(roles["shape"].attr).get("index")
    if indices != list(range(len(data_ops))) or shape_index != len(data_ops):
        raise _bad("The gear model's Data ops must be numbered 0..n-1 and the shape-data input n (last).")
    expected = [f"{roles['map_index'].name}:0"] + [f"{op.name}:0" for op in data_ops]
    if list(case.input) != expected:
        raise _bad(f"The gear model's Case reads {list(case.input)}, expected {expected}.")
    if list(net.input) != [f"{case.name}:{k}" for k in range(len(case.output_desc))]:
        raise _bad("The gear model's NetOutput must read the Case's outputs in order.")
    origin_dims = {}
    for op in data_ops:
        dims = om_attrs.get_attrs(op.attr).get("_mbatch_origin_input_dims")
        if dims is not None:
            origin_dims[op.name] = tuple(_int_list({"d": dims}, "d", op.name))
    order = attrs.get("user_designate_shape_order", [])
    if not isinstance(order, list) or not all(isinstance(n, str) for n in order) or \
            not set(origin_dims) <= set(order):
        raise _bad("The gear model's Case has no valid user_designate_shape_order for its dynamic inputs.")
    max_inputs = [_desc(op.output_desc[0]) for op in data_ops]
    max_outputs = [_desc(td) for td in case.output_desc]
    output_names = om_attrs.get_attrs(net.attr).get("_output_names")

    gear_info = Gears(dynamic_type, list(order), origin_dims, [], index_graph, index_dtypes, map_node.name,
                      index_graph.inputs[0].name, max_inputs, max_outputs)
    placed = {map_node.name: "root"}
    for i, values in enumerate(gears):
        suffix = f"{NODE_POSTFIX}{i}"

        def input_name(op, _suffix=suffix):
            if not op.name.endswith(_suffix):
                raise _bad(f"Data op [{op.name}] of a gear subgraph lacks the suffix {_suffix}.")
            return op.name[:-len(_suffix)]

        graph, dtypes = graph_from_def(by_name[subgraph_name(i)], weights, input_name)
        shapes = fill_gear(dynamic_type, [(n, origin_dims[n]) for n in order if n in origin_dims], values)
        _check_branch(graph, data_ops, max_outputs, output_names, shapes, i)
        for node in graph.nodes:
            if node.name in placed:
                raise _bad(f"Op [{node.name}] is in two graphs of the gear model.")
            placed[node.name] = i
        gear_info.branches.append(GearBranch(values, LoadedOm(om, graph, dtypes, [], None, "", "")))
    task_def = opened.task_def
    for task in (task_def.task if task_def is not None else []):
        where = placed.get(task.op_name)
        if where is None:
            raise _bad("The task list names an op that is not in the model.")
        if where != "root":
            gear_info.branches[where].loaded.tasks.append(task.op_name)
    soc, precision = str(model_attrs.get("soc_version", "")), str(model_attrs.get("precision_mode", ""))
    for branch in gear_info.branches:
        loaded = branch.loaded
        loaded.task_def, loaded.soc_version, loaded.precision_mode = task_def, soc, precision
    first = gear_info.branches[0].loaded
    return LoadedOm(om, first.graph, first.compute_dtypes, first.tasks, task_def, soc, precision, gear_info)


def _check_branch(graph: Graph, data_ops: list, max_outputs: list, output_names: Optional[list], shapes: dict,
                  index: int) -> None:
    where = f"Gear subgraph {subgraph_name(index)}"
    if [v.name for v in graph.inputs] != [op.name for op in data_ops]:
        raise _bad(f"{where} has inputs {[v.name for v in graph.inputs]}, the model "
                   f"{[op.name for op in data_ops]}.")
    for value, op in zip(graph.inputs, data_ops):
        root = _desc(op.output_desc[0])
        want = tuple(shapes.get(value.name, root.shape))
        if np.dtype(value.desc.dtype) != np.dtype(root.dtype) or tuple(value.desc.shape) != want:
            raise _bad(f"{where} takes input [{value.name}] as {np.dtype(value.desc.dtype)} "
                       f"{list(value.desc.shape)}; its gear gives {np.dtype(root.dtype)} {list(want)}.")
    if len(graph.outputs) != len(max_outputs):
        raise _bad(f"{where} has {len(graph.outputs)} outputs, the model {len(max_outputs)}.")
    for k, (value, desc) in enumerate(zip(graph.outputs, max_outputs)):
        if np.dtype(value.desc.dtype) != np.dtype(desc.dtype) or len(value.desc.shape) != len(desc.shape):
            raise _bad(f"{where} gives output {k} as {np.dtype(value.desc.dtype)} {list(value.desc.shape)}, "
                       f"the model {np.dtype(desc.dtype)} of rank {len(desc.shape)}.")
        if output_names and value.name != output_names[k]:
            raise _bad(f"{where} names output {k} [{value.name}], the model [{output_names[k]}].")
