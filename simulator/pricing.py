"""From IR nodes to priced kernels: the glue between the kernel table and the cost model.

A kernel's global-memory traffic is its external tensors in the dtype it computes in
(float tensors take the compute dtype; index tensors keep theirs).  Its arithmetic comes
from the kernel's `work` rule, evaluated on those same compute-dtype types, so a fused
kernel's on-chip intermediates are sized in the dtype it really holds them in.

A fused kernel splits across cores over its largest stage: the elements it splits over are
the larger of its outputs and its on-chip intermediates (a conv+pool+FC head tiles the conv
output over every core and combines the pooled partial sums, as GE's atomic-add path does).

Where each tensor sits is a property of the stream, not of one kernel: `stream_specs` walks
the kernels in task order and keeps L2 as a least-recently-used store of what was written
and read (COST_MODEL.md section 4).  A kernel's input hits L2 for the bytes still there; an
output is written back to DDR only for the bytes evicted before a reader came (or when it is
a graph output, which the host copies out of DDR).
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

DtypeOf = Callable[[Node], np.dtype]


def _as_compute(value: Optional[Value], dtype: np.dtype) -> Optional[TensorType]:
    if value is None:
        return None
    own = np.dtype(value.desc.dtype)
    return TensorType(dtype if own in FLOAT_TYPES else own, tuple(value.desc.shape))


def _read_bytes(t: Optional[TensorType], index: int, work, written: int) -> int:
    """Bytes a kernel reads of one input: all of it, or for a sparsely read input (Gather's
    table, Slice's source) at most as many as the kernel writes."""
    if t is None:
        return 0
    return min(t.nbytes, written) if index in work.sparse_inputs else t.nbytes


def kernel_spec(node: Node, dtype: np.dtype, small_channel: bool = False) -> KernelSpec:
    """The kernel as if it ran alone: every input from DDR, every output to DDR."""
    kernel = kernel_of(node.op_type)
    inputs = [_as_compute(v, dtype) for v in node.inputs]
    outputs = [_as_compute(v, dtype) for v in node.outputs]
    work = kernel.work(inputs, outputs, node.attrs)
    written = sum(t.nbytes for t in outputs)
    out_elements = sum(t.size for t in outputs)
    read = [(v, _read_bytes(t, i, work, written)) for i, (v, t) in enumerate(zip(node.inputs, inputs))]
    return KernelSpec(
        name=node.name, op_type=node.op_type, work=work,
        input_bytes=sum(b for _, b in read),
        output_bytes=sum(t.nbytes for t in outputs),
        intermediate_bytes=work.onchip_bytes,
        compute_dtype=dtype, no_task=kernel.no_task,
        output_elements=max(sum(t.size for t in outputs), work.onchip_bytes // np.dtype(dtype).itemsize),
        largest_input_bytes=max((b for _, b in read), default=0),
        weight_bytes=sum(b for v, b in read if v is not None and v.is_const),
        # a constant smaller than the output broadcasts over it (LayerNorm's gamma, a bias)
        broadcast_bytes=sum(b for i, (v, b) in enumerate(read) if v is not None and v.is_const
                            and i not in work.sparse_inputs and inputs[i].size < out_elements),
        small_channel=small_channel)


def apply_l2_residency(graph: Graph, specs: list, chip: Chip) -> None:
    """Set each spec's `l2_input_bytes` / `l2_output_bytes` from an LRU model of L2 over the
    stream (COST_MODEL.md section 4).  `clock` counts the bytes brought into L2 so far
    (outputs written, weights and missed inputs read); a tensor last touched at `stamp` still
    has min(size, capacity - (clock - stamp)) bytes in L2.  Views alias their input."""
    capacity = chip.l2_capacity
    root: dict = {}
    stamp: dict = {}
    evicted: dict = {}
    clock = 0.0
    for node, spec in zip(graph.nodes, specs):
        if spec.no_task:
            source = next((v for v in node.inputs if v is not None and not v.is_const), None)
            for out in node.outputs:
                root[id(out)] = root.get(id(source), id(source)) if source is not None else id(out)
            continue
        hits = 0.0
        for index, value in enumerate(node.inputs):
            if value is None or value.is_const:
                continue
            key = root.get(id(value), id(value))
            size = _as_compute(value, spec.compute_dtype).nbytes
            if index in spec.work.sparse_inputs:
                size = min(size, spec.output_bytes)
            resident = size if key in stamp and (clock - stamp[key]) + size <= capacity else 0.0
            if key in stamp:
                evicted[key] = max(evicted.get(key, 0.0), size - resident)
            hits += resident
            clock += size - resident
            stamp[key] = clock
        spec.l2_input_bytes = int(min(hits, spec.input_bytes - spec.weight_bytes))
        clock += spec.weight_bytes
        for out in node.outputs:
            root[id(out)] = id(out)
            clock += _as_compute(out, spec.compute_dtype).nbytes
            stamp[id(out)] = clock
    graph_outputs = {root.get(id(v), id(v)) for v in graph.outputs}
    for node, spec in zip(graph.nodes, specs):
        if spec.no_task:
            continue
        kept = 0.0
        for out in node.outputs:
            if id(out) not in graph_outputs:
                kept += _as_compute(out, spec.compute_dtype).nbytes - evicted.get(id(out), 0.0)
        spec.l2_output_bytes = int(min(max(kept, 0.0), spec.output_bytes))


def stream_specs(graph: Graph, chip: Chip, dtype_of: DtypeOf, small_channel: bool = False) -> list:
    """One KernelSpec per node in the graph's (task) order, with L2 residency applied."""
    specs = [kernel_spec(node, dtype_of(node), small_channel) for node in graph.nodes]
    apply_l2_residency(graph, specs, chip)
    return specs


def graph_specs(graph: Graph, dtype_of: DtypeOf, chip: Optional[Chip] = None, small_channel: bool = False) -> list:
    """One KernelSpec per node, in the graph's (topological) order; with a chip, the L2
    residency of the stream is applied (as every pricing of a whole graph does)."""
    if chip is not None:
        return stream_specs(graph, chip, dtype_of, small_channel)
    return [kernel_spec(node, dtype_of(node), small_channel) for node in graph.nodes]


def price_graph(graph: Graph, chip: Chip, dtype_of: DtypeOf, small_channel: bool = False) -> StreamCost:
    return price_stream(chip, stream_specs(graph, chip, dtype_of, small_channel))


def node_costs(graph: Graph, chip: Chip, dtype_of: DtypeOf, small_channel: bool = False) -> dict:
    """node name -> KernelCost, priced in stream order."""
    specs = stream_specs(graph, chip, dtype_of, small_channel)
    return {node.name: price_kernel(chip, spec) for node, spec in zip(graph.nodes, specs)}


def price_tasks(graph: Graph, chip: Chip, dtype_of: DtypeOf,
                super_kernel_of: Optional[dict] = None, small_channel: bool = False) -> StreamCost:
    """The task stream in graph order, with runs that share a super kernel id priced as one
    super kernel (`super_kernel_of`: node name -> id; see codegen/super_kernel.py).
    `kernels` keeps one KernelCost per node; `launches` counts real launches."""
    super_kernel_of = super_kernel_of or {}
    specs = stream_specs(graph, chip, dtype_of, small_channel)
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
