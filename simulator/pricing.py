"""From IR nodes to priced kernels: the glue between the op registry and the cost model.

A kernel's global-memory traffic is its external tensors in the dtype it computes in
(float tensors take the compute dtype; index tensors keep theirs).  Its arithmetic comes
from the registry's `work` rule, evaluated on those same compute-dtype types, so a fused
kernel's on-chip intermediates are sized in the dtype it really holds them in.
"""
from __future__ import annotations

from typing import Callable, Optional

import numpy as np

from codegen.ops.registry import TensorType, get_op
from ge.ir import Graph, Node, Value
from simulator.cost_model import Chip, KernelCost, KernelSpec, StreamCost, price_kernel, price_stream

FLOAT_TYPES = (np.dtype(np.float32), np.dtype(np.float16), np.dtype(np.float64))


def _as_compute(value: Optional[Value], dtype: np.dtype) -> Optional[TensorType]:
    if value is None:
        return None
    own = np.dtype(value.desc.dtype)
    return TensorType(dtype if own in FLOAT_TYPES else own, tuple(value.desc.shape))


def kernel_spec(node: Node, dtype: np.dtype) -> KernelSpec:
    op = get_op(node.op_type)
    inputs = [_as_compute(v, dtype) for v in node.inputs]
    outputs = [_as_compute(v, dtype) for v in node.outputs]
    work = op.work(inputs, outputs, node.attrs)
    return KernelSpec(
        name=node.name, op_type=node.op_type, work=work,
        input_bytes=sum(t.nbytes for t in inputs if t is not None),
        output_bytes=sum(t.nbytes for t in outputs),
        intermediate_bytes=work.onchip_bytes,
        compute_dtype=dtype, no_task=op.no_task,
        output_elements=sum(t.size for t in outputs))


def graph_specs(graph: Graph, dtype_of: Callable[[Node], np.dtype]) -> list:
    """One KernelSpec per node, in the graph's (topological) order."""
    return [kernel_spec(node, dtype_of(node)) for node in graph.nodes]


def price_graph(graph: Graph, chip: Chip, dtype_of: Callable[[Node], np.dtype]) -> StreamCost:
    return price_stream(chip, graph_specs(graph, dtype_of))


def node_costs(graph: Graph, chip: Chip, dtype_of: Callable[[Node], np.dtype]) -> dict:
    """node name -> KernelCost."""
    return {node.name: price_kernel(chip, kernel_spec(node, dtype_of(node))) for node in graph.nodes}
