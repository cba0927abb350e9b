"""From IR nodes to priced kernels: the glue between the kernel table and the cost model.

A kernel's global-memory traffic is its external tensors in the dtype it computes in
(float tensors take the compute dtype; index tensors keep theirs).  Its arithmetic comes
from the kernel's `work` rule, evaluated on those same compute-dtype types, so a fused
kernel's on-chip intermediates are sized in the dtype it really holds them in.

A fused kernel splits across cores over its largest stage: the elements it splits over are
the larger of its outputs and its on-chip intermediates (a conv+pool+FC head tiles the conv
output over every core and combines the pooled partial sums, as GE's atomic-add path does).
"""
from __future__ import annotations

from typing import Callable, Optional

import numpy as np

from codegen.registry import kernel_of
from ge.ir import Graph, Node, Value
from ge.ops.common import FLOAT_TYPES
from ge.ops.registry import TensorType
from simulator.cost_model import (Chip, KernelSpec, StreamCost, price_kernel, price_stream,
                                  price_super_kernel)


def _as_compute(value: Optional[Value], dtype: np.dtype) -> Optional[TensorType]:
    if value is None:
        return None
    own = np.dtype(value.desc.dtype)
    return TensorType(dtype if own in FLOAT_TYPES else own, tuple(value.desc.shape))


def kernel_spec(node: Node, dtype: np.dtype) -> KernelSpec:
    kernel = kernel_of(node.op_type)
    inputs = [_as_compute(v, dtype) for v in node.inputs]
    outputs = [_as_compute(v, dtype) for v in node.outputs]
    work = kernel.work(inputs, outputs, node.attrs)
    return KernelSpec(
        name=node.name, op_type=node.op_type, work=work,
        input_bytes=sum(t.nbytes for t in inputs if t is not None),
        output_bytes=sum(t.nbytes for t in outputs),
        intermediate_bytes=work.onchip_bytes,
        compute_dtype=dtype, no_task=kernel.no_task,
        output_elements=max(sum(t.size for t in outputs), work.onchip_bytes // np.dtype(dtype).itemsize),
        largest_input_bytes=max((t.nbytes for t in inputs if t is not None), default=0))


def graph_specs(graph: Graph, dtype_of: Callable[[Node], np.dtype]) -> list:
    """One KernelSpec per node, in the graph's (topological) order."""
    return [kernel_spec(node, dtype_of(node)) for node in graph.nodes]


def price_graph(graph: Graph, chip: Chip, dtype_of: Callable[[Node], np.dtype]) -> StreamCost:
    return price_stream(chip, graph_specs(graph, dtype_of))


def node_costs(graph: Graph, chip: Chip, dtype_of: Callable[[Node], np.dtype]) -> dict:
    """node name -> KernelCost."""
    return {node.name: price_kernel(chip, kernel_spec(node, dtype_of(node))) for node in graph.nodes}


def price_tasks(graph: Graph, chip: Chip, dtype_of: Callable[[Node], np.dtype],
                super_kernel_of: Optional[dict] = None) -> StreamCost:
    """The task stream in graph order, with runs that share a super kernel id priced as one
    super kernel (`super_kernel_of`: node name -> id; see codegen/super_kernel.py).
    `kernels` keeps one KernelCost per node; `launches` counts real launches."""
    super_kernel_of = super_kernel_of or {}
    specs = graph_specs(graph, dtype_of)
    kernels = [price_kernel(chip, spec) for spec in specs]
    total, launches, i = 0.0, 0, 0
    while i < len(specs):
        group = super_kernel_of.get(specs[i].name)
        j = i + 1
        while group is not None and j < len(specs) and (super_kernel_of.get(specs[j].name) == group
                                                         or specs[j].no_task):
            j += 1
        if group is not None and j - i > 1:
            sk = price_super_kernel(chip, specs[i:j])
            total += sk.total_us
            launches += sk.launches
        else:
            total += kernels[i].total_us
            launches += kernels[i].launches
            j = i + 1
        i = j
    return StreamCost(total, kernels, launches)
