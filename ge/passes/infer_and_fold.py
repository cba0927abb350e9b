"""Shape/dtype inference and constant folding in one topological walk.

For each node, in order: (1) move constant config inputs into attributes (canonical form,
see ge/ops/registry.py); (2) infer its output types with the op's shape rule (from the
constant values for ops whose shape depends on them); (3) if every data input is constant
-- or the node only reads static shape information (Shape, Size) -- and the outputs are
small, evaluate it with the op's numpy compute and turn its outputs into constants.
Folding Shape/Gather/Concat/Unsqueeze chains this way resolves the Reshape targets that
exporters compute at run time.

Dynamic shapes (ge.symbolic): a dim may be a symbolic expression.  The same chains then
hold expressions ([B, S, 12, 64], ge.shape_values): they are "known" to shape inference, a
config input known this way becomes an attribute holding the expressions, and its chain
dies once nothing reads it.  A config input neither constant nor known stays an input the
kernel reads at run time (ge.ops.runtime_shapes gives its output shape, with fresh
symbols for the dims its values decide).  A graph with no symbol left gets the property
`static_shapes`, and is checked and built exactly as before.

The size decides before anything is computed: a fold larger than `_MAX_FOLDED_BYTES` stays
a kernel, and every tensor must fit the chip's memory (the run's `ge.limits` budget,
E13023 naming the node) -- a 119-byte ConstantOfShape [30000, 30000] or a Range 0..2^40
never allocates on the host.
"""
from __future__ import annotations

import re
from typing import Optional

import numpy as np

from ge import shape_values
from ge.errors import AtcError, InternalError, InvalidNode, at_node
from ge.files import release_mapped
from ge.ir import Graph, Node, TensorDesc
from ge.limits import MAX_TENSOR_BYTES, Budget, current_budget, max_tensor_bytes, tensor_bytes, too_large
from ge.ops import runtime_shapes, symbolic_infer
from ge.ops.common import static_dims
from ge.ops.registry import OpDef, TensorType, get_op
from ge.passes.contract import CANONICAL, STATIC, TYPED, GraphPass, PassResult
from ge.symbolic import Dim, SymbolicDimError, provably
from om_format.attrs import om_holds

_SHAPE_ONLY_OPS = {"Shape", "Size"}
# Folding these would only copy large constants into the weights; keep them as kernels.
_MAX_FOLDED_BYTES = 64 << 20
# A fold that read this much of the (memory-mapped) weights drops their pages again, so a
# model whose every weight is transposed by a folded node holds each weight once.
_RELEASE_AFTER_BYTES = 16 << 20


def op_def_for(node: Node) -> OpDef:
    op = get_op(node.op_type)
    if op is None:
        raise AtcError("E16002", f"Node [{node.name}] has op type [{node.op_type}], which is not supported.",
                       "Replace the op in the model, or check the supported op list (atc --mode=3).")
    return op


def canonicalize(node: Node, op: OpDef, known: Optional[dict] = None) -> set:
    """Move config inputs into attributes: constant ones as values, ones known symbolically
    (`known`, ge.shape_values) as lists of ints and dims.  Returns the indices of the config
    inputs left for the kernel to read at run time."""
    known = known if known is not None else {}
    runtime, moved = set(), set()
    for index, attr in op.config_inputs:
        if index >= len(node.inputs) or node.inputs[index] is None:
            continue
        value = node.inputs[index]
        if value.is_const:
            node.attrs[attr] = value.const if op.array_config else value.const.tolist()
        elif id(value) in known and not op.array_config:
            node.attrs[attr] = known[id(value)].tolist()
        else:
            runtime.add(index)
            continue
        moved.add(index)
    for index in sorted(moved, reverse=True):
        node.set_input(index, None)
    while node.inputs and node.inputs[-1] is None and len(node.inputs) > _min_data_inputs(op):
        node.drop_inputs_from(len(node.inputs) - 1)
    if node.op_type == "Split" and "split" not in node.attrs and "num_outputs" not in node.attrs \
            and 1 not in runtime:
        node.attrs["num_outputs"] = len(node.outputs)
    if node.op_type == "Split" and 1 not in runtime:
        _check_split_outputs(node)
    return runtime


def _check_split_outputs(node: Node) -> None:
    """Split makes one output per size (or num_outputs of them): onnxruntime refuses a node
    with a different number of outputs, and the shape rule cannot see the node's outputs."""
    split = node.attrs.get("split")
    count = len(split) if split is not None and len(split) else int(node.attrs.get("num_outputs", 0))
    if count != len(node.outputs):
        raise at_node(InvalidNode(f"Split makes {count} pieces (split={split}, num_outputs="
                                  f"{node.attrs.get('num_outputs')}) but the node has {len(node.outputs)} outputs",
                                  "Give Split one output per piece."), node.name, node.op_type)


def _min_data_inputs(op: OpDef) -> int:
    return min((index for index, _ in op.config_inputs), default=1 << 30)


def input_types(node: Node) -> list:
    types = []
    for value in node.inputs:
        if value is None:
            types.append(None)
            continue
        desc = value.desc
        if desc.dtype is None or not desc.has_shape():
            raise InternalError(f"input [{value.name}] has no type: every input is typed after import",
                                node.name)
        types.append(TensorType(np.dtype(desc.dtype), tuple(desc.shape)))
    return types


def _foldable(node: Node, op: OpDef, runtime: set) -> bool:
    if not op.foldable or runtime:
        return False
    data = [v for v in node.inputs if v is not None]
    if node.op_type in _SHAPE_ONLY_OPS:
        return node.inputs[0].desc.is_static()
    return bool(data) and all(v.is_const for v in data) or (not data and node.op_type != "RandomNormal")


def _evaluate(node: Node, op: OpDef) -> list:
    if node.op_type in _SHAPE_ONLY_OPS:
        types = input_types(node)
        dummy = [np.broadcast_to(np.zeros((), t.dtype), t.shape) for t in types]
        return op.compute(dummy, node.attrs)
    return op.compute([v.const if v is not None else None for v in node.inputs], node.attrs)


def _output_types(node: Node, op: OpDef, foldable: bool, runtime: set, known: dict, graph: Graph) -> list:
    """The node's output types, without computing its outputs.  A rule says InvalidNode for
    the model's mistakes; any other exception out of it is a bug in the rule (E19999)."""
    try:
        if foldable and op.infer_values is not None:
            return op.infer_values([v.const if v is not None else None for v in node.inputs], node.attrs)
        types = input_types(node)
        fresh = _fresh_symbols(graph, node)
        if runtime or node.op_type in runtime_shapes.VALUE_DEPENDENT:
            values = [shape_values.value_of(v, known) for v in node.inputs]
            special = runtime_shapes.output_types(node.op_type, types, node.attrs, runtime, len(node.outputs),
                                                  values, fresh)
            if special is not None:
                return special
        return symbolic_infer.infer(op, types, node.attrs, fresh)
    except AtcError as err:
        raise at_node(err, node.name, node.op_type) from err
    except Exception as exc:
        raise InternalError(f"the shape rule of {node.op_type} failed on inputs {_describe(node)} and attributes "
                            f"{sorted(node.attrs)}: {type(exc).__name__}: {exc}", node.name) from exc


def _check_values(node: Node, op: OpDef) -> None:
    """What the node's constant inputs reveal (an index out of range, an integer divisor of 0):
    refused now, as onnxruntime refuses it, not left for the simulator to find."""
    if op.check_values is None or not any(v is not None and v.is_const for v in node.inputs):
        return
    try:
        op.check_values([v.const if v is not None and v.is_const else None for v in node.inputs],
                        input_types(node), node.attrs)
    except AtcError as err:
        raise at_node(err, node.name, node.op_type) from err
    except SymbolicDimError:          # a bound that is a dynamic dim: the kernel checks it when it runs
        return
    except Exception as exc:
        raise InternalError(f"the value check of {node.op_type} failed on inputs {_describe(node)}: "
                            f"{type(exc).__name__}: {exc}", node.name) from exc


def infer_and_fold(graph: Graph) -> int:
    """Canonicalize, type and (when small) fold every node in order; returns how many nodes
    were folded."""
    budget = current_budget()
    for value in graph.inputs:
        _check_budget(budget, value.desc.shape, value.desc.dtype,
                      f"Model input [{value.name}] of shape {list(value.desc.shape)}")
    folded = 0
    known: dict = {}          # id(value) -> object array: what a small int tensor holds symbolically
    for node in list(graph.nodes):
        op = op_def_for(node)
        runtime = canonicalize(node, op, known)
        foldable = _foldable(node, op, runtime)
        types = _output_types(node, op, foldable, runtime, known, graph)
        _check_values(node, op)
        if len(types) < len(node.outputs):
            raise InvalidNode(f"Node [{node.name}] ({node.op_type}) declares {len(node.outputs)} "
                              f"outputs but produces {len(types)}.", "Check the model.")
        for value, ttype in zip(node.outputs, types):
            _check_shape(node, value, ttype, budget)
        foldable = foldable and not any(isinstance(d, Dim) for t in types for d in t.shape)  # sized at run time
        if foldable and sum(tensor_bytes(t.shape, t.dtype) for t in types) <= _MAX_FOLDED_BYTES:
            try:
                results = _evaluate(node, op)
            except AtcError as err:
                raise at_node(err, node.name, node.op_type) from err
            except Exception as exc:   # its shape rule accepted these inputs: the kernel has a bug
                raise InternalError(f"constant folding of {node.op_type} failed on inputs {_describe(node)} "
                                    f"its shape rule accepts: {type(exc).__name__}: {exc}", node.name) from exc
            _fold(graph, node, results)
            folded += 1
            continue
        contents = None if runtime else shape_values.propagate(node, [t.shape for t in types], known)
        if contents is not None and not any(shape_values.has_symbols(c) for c in contents):
            _fold(graph, node, [shape_values.concrete(c, t.dtype) for c, t in zip(contents, types)])
            folded += 1
            continue
        for value, ttype in zip(node.outputs, types):
            fmt = value.desc.format if value.desc.format != "ND" else _format_of(node, len(ttype.shape))
            value.desc = TensorDesc(np.dtype(ttype.dtype), static_dims(ttype.shape), fmt)
        for value, content in zip(node.outputs, contents or ()):
            known[id(value)] = content
    return folded


def _fold(graph: Graph, node: Node, results: list) -> None:
    """Turn the node's outputs into constants holding `results` and drop the node."""
    for value, result in zip(node.outputs, results):
        value.producer = None
        value.set_const(np.require(result, requirements="C"))  # keeps 0-d arrays 0-d
    read = sum(v.const.nbytes for v in node.inputs if v is not None and v.is_const)
    node.outputs = []
    node.detach()
    graph.nodes.remove(node)
    if read >= _RELEASE_AFTER_BYTES:   # a weight folded (a Transpose): its mapped pages need not stay
        release_mapped()


def _fresh_symbols(graph: Graph, node: Node):
    """fresh(lo, hi): a new "data" symbol for a dim of one of `node`'s outputs."""
    base = re.sub(r"\W", "_", node.name, flags=re.ASCII).strip("_") or "dim"
    if base[0].isdigit():
        base = "d_" + base

    def fresh(lo: int = 0, hi: Optional[int] = None) -> Dim:
        return graph.new_symbol(base, lo, hi, origin="data")

    return fresh


class InferShapesAndFoldConstants(GraphPass):
    name = "InferShapesAndFoldConstants"
    ensures = frozenset({TYPED, CANONICAL})

    def run(self, graph: Graph) -> PassResult:
        folded = infer_and_fold(graph)
        if not graph.is_dynamic:
            graph.properties.add(STATIC)
        return PassResult(self.name, folded)


def _describe(node: Node) -> list:
    return [None if v is None else f"{np.dtype(v.desc.dtype)}{list(v.desc.shape or ())}" for v in node.inputs]


def _check_shape(node: Node, value, ttype: TensorType, budget: Budget) -> None:
    """A shape rule fed odd attributes (negative pads, huge repeats) may give a negative dim or
    a tensor no int64 can size; that is the model's problem, not an internal error.  A
    tensor larger than the chip's memory can never run on it (E13023)."""
    if not om_holds(ttype.dtype):
        raise AtcError("E16002", f"Node [{node.name}] ({node.op_type}) gives output [{value.name}] the element type "
                       f"{np.dtype(ttype.dtype)}, which an .om cannot hold (no ge DataType, and no storage type "
                       "for it).", "Use float, integer, bool, string, bfloat16, float8 or int4/uint4 tensors.")
    shape = list(static_dims(ttype.shape))
    largest = max_tensor_bytes(shape, ttype.dtype)
    if any(provably(d, "<", 0) for d in shape) or (largest is not None and largest > MAX_TENSOR_BYTES):
        raise InvalidNode(f"Node [{node.name}] ({node.op_type}) gives output [{value.name}] the shape "
                          f"{shape} (a negative dim, or more than {MAX_TENSOR_BYTES} bytes).")
    _check_budget(budget, shape, ttype.dtype, f"Output [{value.name}] of node [{node.name}] "
                  f"({node.op_type}), shape {shape} {np.dtype(ttype.dtype)},")


def _check_budget(budget: Budget, shape, dtype, what: str) -> None:
    """A tensor must fit the chip's memory; a dynamic one at its largest (the ranges' maxima:
    unbounded dims are checked when the model runs)."""
    largest = max_tensor_bytes(shape, dtype)
    if largest is not None:
        budget.check_tensor(largest, what)


def _format_of(node: Node, rank: int) -> str:
    """4-D values downstream of an NCHW input stay NCHW; everything else is ND."""
    if rank != 4:
        return "ND"
    return "NCHW" if any(v is not None and v.desc.format == "NCHW" for v in node.inputs) else "ND"
