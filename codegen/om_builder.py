"""Lower an IR graph into the .om partitions: ModelDef, weights, task list.

Layout of partition 0 (ge.proto ModelDef, one GraphDef):
- one `Data` op per graph input (attr `index`), one `Const` op per constant (its tensor in
  the weights partition, `desc.data_offset`/`desc.weight_size`), one op per IR node with its
  GE type, ONNX attributes and `output_desc`s named after the IR values, then `NetOutput`.
- provenance attrs on every compute op: `original_op_names` (the ONNX nodes it covers; Netron
  hides this attr), `_fusion_pass`, `_compute_dtype`, `_super_kernel` (the super kernel a task
  is launched in, also in its TaskDef's attr); `relu_flag` when a fused kernel ends in
  ReLU (Netron draws it); `_input_slots` only when optional inputs leave gaps.
Partition 2 is our ModelTaskDef: one TaskDef per launched kernel, in execution order.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Optional

import numpy as np

from codegen import dynamic_om, super_kernel
from codegen.registry import kernel_of
from ge.ops.common import FLOAT_TYPES
from ge.ops.registry import OpKind
from ge.ir import Graph, Node, Value
from om_format import attrs as om_attrs
from om_format.container import PartitionType
from om_format.schema import ModelDef, ModelTaskDef, TensorDef
from om_format.weights import WeightsBuilder

# What each ATC precision mode makes a float kernel compute in (see ARCHITECTURE.md).
_PRECISION_RULES = {
    "force_fp16": lambda kind: np.dtype(np.float16),
    "force_fp32": lambda kind: np.dtype(np.float32),
    "must_keep_origin_dtype": lambda kind: None,
    "allow_fp32_to_fp16": lambda kind: None,     # every kernel here supports fp32: it stays fp32
    "allow_mix_precision": lambda kind: np.dtype(np.float16) if kind == OpKind.OUT_EWISE_FUSABLE else None,
}


def compute_dtype(node: Node, precision_mode: str) -> np.dtype:
    """The dtype a kernel computes its float tensors in under `precision_mode`."""
    floats = [np.dtype(v.desc.dtype) for v in list(node.inputs) + node.outputs
              if v is not None and np.dtype(v.desc.dtype) in FLOAT_TYPES]
    if not floats:
        return np.dtype(node.outputs[0].desc.dtype) if node.outputs else np.dtype(np.float32)
    kernel = kernel_of(node.op_type)
    chosen = _PRECISION_RULES[precision_mode](kernel.op.node_kind(node.attrs) if kernel else OpKind.OPAQUE)
    return chosen if chosen is not None else floats[0]


@dataclass
class OmPartitions:
    model_def: ModelDef
    weights: WeightsBuilder       # views of the constants, streamed into the .om (bytes() for a copy)
    tasks: ModelTaskDef
    kernel_count: int
    dynamic: bool = False          # some tensor size is known only at run time (header is_unknow_model)

    def as_dict(self) -> dict:
        return {PartitionType.MODEL_DEF: self.model_def.SerializeToString(deterministic=True),
                PartitionType.WEIGHTS_DATA: self.weights,
                PartitionType.TASK_INFO: self.tasks.SerializeToString(deterministic=True)}


def build_partitions(graph: Graph, model_name: str, soc_version: str, precision_mode: str,
                     extra_attrs: Optional[dict] = None, super_kernel_scope: str = "",
                     dtype_of: Optional[Callable[[Node], np.dtype]] = None) -> OmPartitions:
    """`dtype_of` gives each kernel's compute dtype (default: the rule of `precision_mode`;
    atc passes the per-kernel plan of atc_py.precision)."""
    dtype_of = dtype_of or (lambda node: compute_dtype(node, precision_mode))
    model = new_model_def(model_name, soc_version, precision_mode, {**(extra_attrs or {}),
                                                                    **dynamic_om.symbol_table(graph)})
    weights = WeightsBuilder()
    tasks = ModelTaskDef(version="atc_py-1", soc_version=soc_version, precision_mode=precision_mode)
    lower_graph(graph, model.graph.add(name=graph.name), weights, tasks, dtype_of, super_kernel_scope)
    tasks.weight_size = weights.nbytes
    return OmPartitions(model, weights, tasks, len(tasks.task), dynamic=graph.is_dynamic)


def new_model_def(model_name: str, soc_version: str, precision_mode: str, extra_attrs: Optional[dict]) -> ModelDef:
    model = ModelDef(name=model_name, version=1)
    om_attrs.set_attrs(model.attr, {"soc_version": soc_version, "precision_mode": precision_mode,
                                    "framework": "onnx", "producer": "atc_py", **(extra_attrs or {})})
    return model


@dataclass
class Lowering:
    """How one IR graph becomes one GraphDef: a suffix for every op name (GE's gear
    subgraphs rename their ops `<name>_ascend_mbatch_batch_<i>`), attributes every op gets
    (`_batch_label`), and the Data ops' own attributes."""

    suffix: str = ""
    op_attrs: Optional[dict] = None
    data_attrs: Optional[Callable[[int, Value], dict]] = None
    output_attrs: Optional[Callable[[int, Value], dict]] = None   # attrs of NetOutput's input i


def lower_graph(graph: Graph, g, weights: WeightsBuilder, tasks: ModelTaskDef,
                dtype_of: Callable[[Node], np.dtype], super_kernel_scope: str = "",
                how: Optional[Lowering] = None) -> dict:
    """Append `graph`'s ops to the GraphDef `g` (Data, Const, one op per node, NetOutput) and
    its kernels to `tasks`; returns {id(value): "opName:index"} of the values it defined."""
    how = how or Lowering()
    suffix, common = how.suffix, dict(how.op_attrs or {})
    tensor_desc = dynamic_om.tensor_desc     # GE's -1 dims and shape_range for symbolic shapes
    graph.topological_sort()
    launched = [n for n in graph.nodes if not kernel_of(n.op_type).no_task]
    super_kernel_of = {name: f"sk_{i}{suffix}" for i, group in enumerate(super_kernel.plan(launched, super_kernel_scope))
                       for name in group}
    refs: dict = {}   # id(value) -> "opName:index"

    for index, value in enumerate(graph.inputs):
        op = g.op.add(name=value.name + suffix, type="Data", id=len(g.op))
        data_attrs = {"index": index, **common, **(how.data_attrs(index, value) if how.data_attrs else {})}
        om_attrs.set_attrs(op.attr, data_attrs)
        op.input_desc.add().CopyFrom(tensor_desc(value.name, value.desc.dtype, value.desc.shape,
                                                          value.desc.format))
        op.output_desc.add().CopyFrom(tensor_desc(value.name, value.desc.dtype, value.desc.shape,
                                                           value.desc.format))
        refs[id(value)] = f"{value.name}{suffix}:0"
        g.input.append(value.name + suffix)

    def const_ref(value: Value) -> str:
        if id(value) not in refs:
            array = value.stored_const               # a deferred one stays so: computed while it is written
            offset, size = weights.add(array)        # a view: the bytes are streamed when the .om is written
            op = g.op.add(name=value.name + suffix, type="Const", id=len(g.op))
            tensor = TensorDef()
            tensor.desc.CopyFrom(om_attrs.tensor_desc(value.name, array.dtype, array.shape))
            tensor.desc.data_offset, tensor.desc.weight_size = offset, size
            op.attr["value"].t.CopyFrom(tensor)
            if common:
                om_attrs.set_attrs(op.attr, common)
            out = op.output_desc.add()
            out.CopyFrom(tensor.desc)
            refs[id(value)] = f"{value.name}{suffix}:0"
        return refs[id(value)]

    for node in graph.nodes:
        kernel = kernel_of(node.op_type)
        name = node.name + suffix
        inputs = [(i, v) for i, v in enumerate(node.inputs) if v is not None]
        in_refs = [const_ref(v) if v.is_const else refs[id(v)] for _, v in inputs]
        op = g.op.add(name=name, type=kernel.om_type, id=len(g.op))
        op.input.extend(in_refs)
        for _, v in inputs:
            op.input_desc.add().CopyFrom(tensor_desc(v.name, v.desc.dtype, v.desc.shape, v.desc.format))
        for i, v in enumerate(node.outputs):
            op.output_desc.add().CopyFrom(tensor_desc(v.name, v.desc.dtype, v.desc.shape, v.desc.format))
            refs[id(v)] = f"{name}:{i}"
        dtype = dtype_of(node)
        attrs = dict(node.attrs)
        attrs["original_op_names"] = node.origin
        attrs["_fusion_pass"] = node.provenance.get("pass", "")
        attrs["_compute_dtype"] = str(dtype)
        if len(inputs) != len(node.inputs):
            attrs["_input_slots"] = [i for i, _ in inputs] + [-len(node.inputs)]
        if node.attrs.get("activation") == "Relu":
            attrs["relu_flag"] = True
        if node.name in super_kernel_of:
            attrs["_super_kernel"] = super_kernel_of[node.name]
        attrs.update(common)
        om_attrs.set_attrs(op.attr, dynamic_om.split_attrs(attrs, node.name) if graph.symbols else attrs)
        if not kernel.no_task:
            task = tasks.task.add(id=len(tasks.task), type=0, stream_id=0, op_name=name,
                                  op_type=kernel.om_type, kernel_type=_kernel_type(kernel.op.kind),
                                  fusion_pass=node.provenance.get("pass", ""),
                                  compute_dtype=om_attrs.storage_type(dtype)[0])
            task.inputs.extend(in_refs)
            task.outputs.extend(f"{name}:{i}" for i in range(len(node.outputs)))
            task.origin_op_names.extend(node.origin)
            task.input_desc.extend(op.input_desc)
            if node.name in super_kernel_of:
                task.attr["super_kernel"].CopyFrom(om_attrs.to_attr(super_kernel_of[node.name]))
            task.output_desc.extend(op.output_desc)

    net = g.op.add(name="NetOutput" + suffix, type="NetOutput", id=len(g.op))
    for i, value in enumerate(graph.outputs):
        net.input.append(const_ref(value) if value.is_const else refs[id(value)])
        desc = net.input_desc.add()
        desc.CopyFrom(tensor_desc(value.name, value.desc.dtype, value.desc.shape, value.desc.format))
        if how.output_attrs:
            om_attrs.set_attrs(desc.attr, how.output_attrs(i, value))
    om_attrs.set_attrs(net.attr, {"_output_names": [v.name for v in graph.outputs], **common})
    g.output.extend(net.input)
    return refs


def _kernel_type(kind: OpKind) -> str:
    return "AI_CORE" if kind == OpKind.OUT_EWISE_FUSABLE else "AI_VECTOR"
