"""Run an IR graph numerically with each node's kernel (codegen.registry).

Each kernel sees its float inputs in the dtype it computes in (the .om records it per op)
and its outputs are stored in that dtype too, so an fp16 graph really passes fp16 tensors
between kernels; graph outputs are returned in the dtype the model declares.  `prepare`
does once what does not depend on the inputs (kernel lookup, constants in their kernel's
dtype, when each value dies), so repeated forwards pay only for the arithmetic.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Optional

import numpy as np

from codegen.registry import kernel_of
from ge import workspace
from ge.dynamic import bind, bind_inputs, instantiate_attrs
from ge.errors import AtcError, InternalError, at_node
from ge.ir import Graph, Node
from ge.files import release_mapped
from ge.limits import tensor_bytes
from ge.ops.common import FLOAT_TYPES
from ge.ops.registry import TensorType


def _converts(array: np.ndarray, dtype: Optional[np.dtype]) -> bool:
    """Whether a kernel computing in `dtype` sees `array` converted (floats only)."""
    return _converts_dtype(array.dtype, dtype)


def _converts_dtype(have, dtype: Optional[np.dtype]) -> bool:
    return dtype is not None and have in FLOAT_TYPES and np.dtype(dtype) in FLOAT_TYPES and have != dtype


def _to(array: np.ndarray, dtype: np.dtype) -> np.ndarray:
    """Float tensors in the kernel's compute dtype.  Values beyond float16's range become
    +-inf, as the hardware's conversion does (e.g. a -3.4e38 attention-mask fill)."""
    if _converts(array, dtype):
        with np.errstate(over="ignore"):
            return workspace.astype(array, dtype)      # in the model's workspace during a forward
    return array


def check_feeds(graph: Graph, feeds: dict) -> None:
    """Inputs must match the graph's inputs by name, shape and dtype; else E10001-style errors."""
    names = [v.name for v in graph.inputs]
    missing = [n for n in names if n not in feeds]
    extra = [n for n in feeds if n not in names]
    if missing or extra:
        raise AtcError("E10001", f"The model has inputs {names}; missing {missing}, unknown {extra}.",
                       "Give one input per model input, in the model's order.")
    if graph.is_dynamic:
        _check_dynamic_feeds(graph, feeds)
        return
    for value in graph.inputs:
        array = feeds[value.name]
        if tuple(array.shape) != tuple(value.desc.shape):
            raise AtcError("E10001", f"Input [{value.name}] has shape {list(array.shape)}, the model expects "
                           f"{list(value.desc.shape)}.", "Give inputs of the compiled shape.")
        if np.dtype(array.dtype) != np.dtype(value.desc.dtype):
            raise AtcError("E10001", f"Input [{value.name}] has dtype {array.dtype}, the model expects "
                           f"{np.dtype(value.desc.dtype)}.", "Give inputs of the compiled dtype.")


def _check_dynamic_feeds(graph: Graph, feeds: dict) -> None:
    for value in graph.inputs:
        if np.dtype(feeds[value.name].dtype) != np.dtype(value.desc.dtype):
            raise AtcError("E10001", f"Input [{value.name}] has dtype {feeds[value.name].dtype}, the model expects "
                           f"{np.dtype(value.desc.dtype)}.", "Give inputs of the compiled dtype.")
    bind_inputs(graph, {name: np.shape(array) for name, array in feeds.items()})


class DynamicRun:
    """What a run of a dynamic-shape graph saw: the symbols' values and the config inputs
    its kernels read at run time (node name -> {attr: value}) -- enough to specialize the
    graph to this run (ge.dynamic.specialize) and price it."""

    def __init__(self):
        self.values: dict = {}
        self.runtime_attrs: dict = {}


def _runtime_config(node: Node, op, args: list, attrs: dict, run: "DynamicRun") -> dict:
    """Config inputs computed at run time, moved into the attributes as canonicalization
    moves constant ones (the kernel's compute reads attributes only)."""
    moved = {}
    for index, attr in op.config_inputs:
        if index < len(args) and args[index] is not None:
            array = np.asarray(args[index])
            moved[attr] = array if op.array_config else array.tolist()
            args[index] = None
    if moved:
        run.runtime_attrs[node.name] = moved
        attrs = {**attrs, **moved}
        if node.op_type == "Split" and "split" not in attrs and "num_outputs" not in attrs:
            attrs["num_outputs"] = len(node.outputs)
    return attrs


def live_bytes(graph: Graph) -> tuple:
    """(peak bytes of tensors alive at once, largest tensor) when `run_graph` runs the graph:
    inputs, then each kernel's outputs until their last reader is done.  Constants are not
    counted (they are in memory already)."""
    remaining: dict = {}
    for node in graph.nodes:
        for v in node.inputs:
            if v is not None and not v.is_const:
                remaining[id(v)] = remaining.get(id(v), 0) + 1
    keep = {id(v) for v in graph.outputs}
    size = {}
    for v in list(graph.inputs) + [o for n in graph.nodes for o in n.outputs]:
        size[id(v)] = tensor_bytes(v.desc.shape, v.desc.dtype)
    live = sum(size[id(v)] for v in graph.inputs)
    peak, largest = live, max(size.values(), default=0)
    for node in graph.nodes:
        made = sum(size[id(o)] for o in node.outputs)
        peak = max(peak, live + made)
        live += sum(size[id(o)] for o in node.outputs if remaining.get(id(o), 0) or id(o) in keep)
        for v in node.inputs:
            if v is not None and not v.is_const:
                remaining[id(v)] -= 1
                if remaining[id(v)] == 0 and id(v) not in keep:
                    live -= size[id(v)]
    return peak, largest


@dataclass
class Step:
    """One kernel of a prepared graph: its op and compute dtype, each argument either a
    constant already converted to that dtype or the id of a value computed earlier, which of
    its outputs a later kernel (or the caller) reads, and the values no later kernel reads
    (freed once it has run)."""

    node: Node
    op: object
    attrs: dict                 # the node's, plus "_outputs" for an op that skips unread optional outputs
    args: list                  # (True, array) for constants ready as they are, (None, array) for
                                # constants each forward converts, (False, value id) otherwise,
                                # None for absent
    dtype: Optional[np.dtype]
    kept: list = field(default_factory=list)     # per output: is it read later?
    frees: list = field(default_factory=list)


@dataclass
class Plan:
    graph: Graph
    steps: list
    outputs: list               # (name, const array or None, value id, declared dtype)
    workspace: Optional[workspace.Workspace] = None     # the forwards' memory (`reserve_workspace`)


def reserve_workspace(plan: Plan, ws: Optional[workspace.Workspace] = None) -> Optional[workspace.Workspace]:
    """Map and touch the memory a forward of this (static-shape) plan takes -- kernels'
    outputs and scratch, inputs converted to a kernel's dtype -- beyond what `ws` (a pool
    shared with other plans, e.g. a gear model's other gears) already holds, and have every
    later `execute` of it take from there (ge/workspace.py); once per plan."""
    if plan.workspace is None and not plan.graph.is_dynamic:
        ws = ws if ws is not None else workspace.Workspace()
        ws.reserve(workspace.plan_sizes(_workspace_steps(plan), ws.sizes()))
        plan.workspace = ws
    return plan.workspace


def _workspace_steps(plan: Plan) -> list:
    """plan_sizes' view of a plan: each kernel's declared takes (its inputs converted to its
    dtype first, as `execute` does), what it reads, and when its outputs die."""
    last_use: dict = {}
    for index, step in enumerate(plan.steps):
        for arg in step.args:
            if arg is not None and arg[0] is False:
                last_use[arg[1]] = index
    graph_outputs = {key for _, const, key, _ in plan.outputs if const is None}
    held: dict = {}                  # value id -> the dtype its array has at run time
    steps = []
    for index, step in enumerate(plan.steps):
        node, seen = step.node, []
        takes = []
        for arg, value in zip(step.args, node.inputs):
            if arg is None:
                seen.append(None)
            elif arg[0] is False:
                dtype = held.get(arg[1], np.dtype(value.desc.dtype))
                if step.dtype is not None and _converts_dtype(dtype, step.dtype):
                    dtype = np.dtype(step.dtype)
                    takes.append(workspace.Take(workspace.nbytes(value.desc.shape, dtype)))
                seen.append(TensorType(dtype, tuple(value.desc.shape)))
            elif arg[0] is None:           # a constant over the conversion cap: each forward converts it
                takes.append(workspace.Take(workspace.nbytes(arg[1].shape, step.dtype)))
                seen.append(TensorType(np.dtype(step.dtype), tuple(arg[1].shape)))
            else:
                seen.append(arg[1])
        declare = getattr(step.op, "workspace", None)
        declared = None
        if declare is not None:
            try:
                declared = declare(seen, step.attrs)       # None: the kernel cannot say (its outputs may be views)
            except Exception:          # only a forecast: the forward's kernel reports what is wrong
                declared = None
        takes += declared or []
        for v in node.outputs:          # a float kernel stores its outputs in its compute dtype (a Cast in its own)
            desc = np.dtype(v.desc.dtype)
            fits = step.dtype is not None and node.op_type != "Cast" and _converts_dtype(desc, step.dtype)
            held[id(v)] = np.dtype(step.dtype) if fits else desc
        outputs = [id(v) for v in node.outputs]
        ends = [None if id(v) in graph_outputs else last_use.get(id(v), index) if kept else index
                for v, kept in zip(node.outputs, step.kept)]
        inputs = [arg[1] for arg in step.args if arg is not None and arg[0] is False]
        steps.append((takes, inputs, outputs, ends, declared is not None))
    return steps


# Constants converted to their kernel's compute dtype once, at load, up to this many bytes
# of converted copies in all; beyond it a constant is converted as each forward reaches it
# (as before `prepare` existed).  Why a cap: an .om's weights are a view of the mapped file
# (never copied), and converting them all at load (fp32 weights, fp16 kernels) held a second
# copy of them -- 6.6 GB for a 4.4 GB 1.1B-parameter decoder; small models keep the fast path.
PREPARED_CONVERSION_BYTES = 256 << 20
# The mapped pages a conversion read are dropped this often (they would otherwise all be
# resident at the end of preparing, the converted copies on top).
_RELEASE_EVERY_BYTES = 32 << 20


def prepare(graph: Graph, dtype_of: Optional[Callable[[Node], np.dtype]] = None) -> Plan:
    """Everything about a forward that does not depend on the inputs, done once: each kernel
    looked up, each constant converted to its kernel's compute dtype (up to
    PREPARED_CONVERSION_BYTES in all), what a kernel derives from its constants alone
    (`OpDef.prepare`), which outputs are read, the point where each value can be freed."""
    last_use: dict = {}
    for index, node in enumerate(graph.nodes):
        for v in node.inputs:
            if v is not None and not v.is_const:
                last_use[id(v)] = index
    keep = {id(v) for v in graph.outputs}
    steps = []
    converted: dict = {}
    room = PREPARED_CONVERSION_BYTES
    unreleased = 0
    for index, node in enumerate(graph.nodes):
        dtype = dtype_of(node) if dtype_of else None
        args = []
        for v in node.inputs:
            if v is None:
                args.append(None)
            elif v.is_const:
                key = (id(v), dtype)
                if key not in converted:
                    if not _converts(v.const, dtype):
                        converted[key] = (True, v.const)              # as it is: a view of the .om
                    elif v.const.size * np.dtype(dtype).itemsize <= room:
                        converted[key] = (True, _to(v.const, dtype))
                        room -= converted[key][1].nbytes
                        unreleased += v.const.nbytes
                        if unreleased >= _RELEASE_EVERY_BYTES:
                            release_mapped()
                            unreleased = 0
                    else:
                        converted[key] = (None, v.const)              # converted by each forward
                args.append(converted[key])
            else:
                args.append((False, id(v)))
        kept = [id(o) in last_use or id(o) in keep for o in node.outputs]   # an unread output is dropped
        frees = sorted({id(v) for v in node.inputs if v is not None and not v.is_const
                        and last_use[id(v)] == index and id(v) not in keep})
        op = kernel_of(node.op_type).op
        attrs = {**node.attrs, "_outputs": len(node.outputs)} if getattr(op, "sized_outputs", False) else node.attrs
        if getattr(op, "prepare", None) is not None:     # e.g. a conv's Winograd weights, from its constant
            try:
                op.prepare([arg[1] if arg is not None and arg[0] else (v.desc if v is not None else None)
                            for arg, v in zip(args, node.inputs)], attrs)
            except Exception:      # only an early start: the forward's kernel reports what is wrong
                pass
            # what it read of the mapped weights (a conv packing them for its GEMM) need not stay resident
            unreleased += sum(arg[1].nbytes for arg in args if arg is not None and arg[0]
                              and isinstance(arg[1], np.ndarray) and arg[1].base is not None)
            if unreleased >= _RELEASE_EVERY_BYTES:
                release_mapped()
                unreleased = 0
        steps.append(Step(node, op, attrs, args, dtype, kept, frees))
    outputs = [(v.name, v.const if v.is_const else None, id(v), np.dtype(v.desc.dtype)) for v in graph.outputs]
    release_mapped()           # the mapped pages the conversions read need not stay resident
    return Plan(graph, steps, outputs)


def execute(plan: Plan, feeds: dict, on_kernel: Optional[Callable[[Node], None]] = None,
            run: Optional[DynamicRun] = None) -> dict:
    """One forward of a prepared graph; returns {graph output name: array}.  A dynamic-shape
    graph binds its symbols from the inputs and from each kernel's outputs (into `run`),
    instantiates symbolic attributes and checks every output against its symbolic shape."""
    graph = plan.graph
    check_feeds(graph, feeds)
    dynamic = graph.is_dynamic
    run = run if run is not None else DynamicRun()
    if dynamic:
        run.values.update(bind_inputs(graph, {v.name: np.shape(feeds[v.name]) for v in graph.inputs}))
    env: dict = {id(v): np.asarray(feeds[v.name]) for v in graph.inputs}
    ws = plan.workspace if not dynamic else None
    if ws is None:
        for step in plan.steps:
            _run_step(step, env, graph, run, on_kernel)
        return _outputs(plan, env, None)
    with ws.active():
        for step in plan.steps:
            _run_step(step, env, graph, run, on_kernel)
            ws.release_held()          # what the kernel took and no longer refers to is free again
        return _outputs(plan, env, ws)


def _run_step(step: Step, env: dict, graph: Graph, run: DynamicRun, on_kernel) -> None:
    """One kernel: its arguments, its compute, its outputs checked into `env`, what no later
    kernel reads dropped.  (A function of its own, so nothing it made outlives it but `env`.)"""
    node, dynamic = step.node, graph.is_dynamic
    args = []
    for arg in step.args:
        if arg is None:
            args.append(None)
        elif arg[0]:
            args.append(arg[1])
        elif arg[0] is None:     # a constant over the conversion cap
            args.append(_to(arg[1], step.dtype))
        else:
            array = env[arg[1]]
            args.append(_to(array, step.dtype) if step.dtype is not None else array)
    attrs = step.attrs
    if dynamic:
        attrs = instantiate_attrs(attrs, run.values)
    attrs = _runtime_config(node, step.op, args, attrs, run)     # static shapes may have them too (Clip's min)
    try:
        results = step.op.compute(args, attrs)
    except AtcError as err:
        raise at_node(err, node.name, node.op_type) from err
    except Exception as exc:   # a kernel says InvalidNode for the model's mistakes: this is ours
        raise InternalError(f"Kernel [{node.name}] ({node.op_type}) failed: {type(exc).__name__}: {exc}",
                            node.name) from exc
    if on_kernel is not None:
        on_kernel(node)
    for value, result, kept in zip(node.outputs, results, step.kept):
        result = np.asarray(result)
        if dynamic:
            why = bind(tuple(value.desc.shape), tuple(result.shape), run.values, graph)
            if why is not None:
                raise InternalError(f"Kernel [{node.name}] ({node.op_type}) produced shape {list(result.shape)} "
                                    f"for [{value.name}]: {why}.", node.name)
        elif tuple(result.shape) != tuple(value.desc.shape):
            raise InternalError(f"Kernel [{node.name}] ({node.op_type}) produced shape {list(result.shape)} "
                                f"for [{value.name}], expected {list(value.desc.shape)}.", node.name)
        if kept:
            env[id(value)] = result
    for key in step.frees:          # free what no later kernel reads
        env.pop(key, None)


def _outputs(plan: Plan, env: dict, ws) -> dict:
    """The graph's outputs in their declared dtypes; a copy of any held in the workspace (the
    caller may keep them while the next forward reuses its buffers)."""
    out = {}
    for name, const, key, dtype in plan.outputs:
        array = const if const is not None else env[key]
        if array.dtype != dtype:
            out[name] = array.astype(dtype)
        else:
            out[name] = np.array(array) if ws is not None and ws.owns(array) else array
    return out


def run_graph(graph: Graph, feeds: dict, dtype_of: Optional[Callable[[Node], np.dtype]] = None,
              on_kernel: Optional[Callable[[Node], None]] = None, run: Optional[DynamicRun] = None) -> dict:
    """Execute every node in order; returns {graph output name: array}.  (Prepare once with
    `prepare` and call `execute` to run a graph many times.)"""
    return execute(prepare(graph, dtype_of), feeds, on_kernel, run)
