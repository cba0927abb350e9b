"""Shape/dtype inference and constant folding in one topological walk.

For each node, in order: (1) move constant config inputs into attributes (canonical form,
see ge/ops/registry.py); (2) infer its output types with the op's shape rule (from the
constant values for ops whose shape depends on them); (3) if every data input is constant
-- or the node only reads static shape information (Shape, Size) -- and the outputs are
small, evaluate it with the op's numpy compute and turn its outputs into constants.
Folding Shape/Gather/Concat/Unsqueeze chains this way resolves the Reshape targets that
exporters compute at run time.

The size decides before anything is computed: a fold larger than `_MAX_FOLDED_BYTES` stays
a kernel, and every tensor must fit the chip's memory (the run's `ge.limits` budget,
E13023 naming the node) -- a 119-byte ConstantOfShape [30000, 30000] or a Range 0..2^40
never allocates on the host.
"""
from __future__ import annotations

import numpy as np

from ge.errors import AtcError, InternalError, InvalidNode, at_node
from ge.ir import Graph, Node, TensorDesc
from ge.limits import MAX_TENSOR_BYTES, Budget, current_budget, tensor_bytes, too_large
from ge.ops.registry import OpDef, TensorType, get_op
from ge.passes.contract import CANONICAL, TYPED, GraphPass, PassResult

_SHAPE_ONLY_OPS = {"Shape", "Size"}
# Folding these would only copy large constants into the weights; keep them as kernels.
_MAX_FOLDED_BYTES = 64 << 20


def op_def_for(node: Node) -> OpDef:
    op = get_op(node.op_type)
    if op is None:
        raise AtcError("E16002", f"Node [{node.name}] has op type [{node.op_type}], which is not supported.",
                       "Replace the op in the model, or check the supported op list (atc --mode=3).")
    return op


def canonicalize(node: Node, op: OpDef) -> None:
    """Move constant config inputs into attributes; error if one is computed at run time."""
    for index, attr in op.config_inputs:
        if index >= len(node.inputs) or node.inputs[index] is None:
            continue
        value = node.inputs[index]
        if not value.is_const:
            raise AtcError("E16002", f"Input {index} ({attr}) of node [{node.name}] ({node.op_type}) is "
                           "computed at run time; only constant values are supported.",
                           "Give the model static shapes (--input_shape) so it can be folded.")
        node.attrs[attr] = value.const if op.array_config else value.const.tolist()
    for index, _ in sorted(op.config_inputs, reverse=True):
        if index < len(node.inputs):
            node.set_input(index, None)
    while node.inputs and node.inputs[-1] is None and len(node.inputs) > _min_data_inputs(op):
        node.drop_inputs_from(len(node.inputs) - 1)
    if node.op_type == "Split" and "split" not in node.attrs and "num_outputs" not in node.attrs:
        node.attrs["num_outputs"] = len(node.outputs)


def _min_data_inputs(op: OpDef) -> int:
    return min((index for index, _ in op.config_inputs), default=1 << 30)


def input_types(node: Node) -> list:
    types = []
    for value in node.inputs:
        if value is None:
            types.append(None)
            continue
        desc = value.desc
        if desc.dtype is None or not desc.is_static():
            raise InternalError(f"input [{value.name}] has no static type: every input is typed after import",
                                node.name)
        types.append(TensorType(np.dtype(desc.dtype), tuple(desc.shape)))
    return types


def _foldable(node: Node, op: OpDef) -> bool:
    if not op.foldable:
        return False
    data = [v for v in node.inputs if v is not None]
    if node.op_type in _SHAPE_ONLY_OPS:
        return True
    return bool(data) and all(v.is_const for v in data) or (not data and node.op_type != "RandomNormal")


def _evaluate(node: Node, op: OpDef) -> list:
    if node.op_type in _SHAPE_ONLY_OPS:
        types = input_types(node)
        dummy = [np.broadcast_to(np.zeros((), t.dtype), t.shape) for t in types]
        return op.compute(dummy, node.attrs)
    return op.compute([v.const if v is not None else None for v in node.inputs], node.attrs)


def _output_types(node: Node, op: OpDef, foldable: bool) -> list:
    """The node's output types, without computing its outputs.  A rule says InvalidNode for
    the model's mistakes; any other exception out of it is a bug in the rule (E19999)."""
    try:
        if foldable and op.infer_values is not None:
            return op.infer_values([v.const if v is not None else None for v in node.inputs], node.attrs)
        return op.infer(input_types(node), node.attrs)
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
    except Exception as exc:
        raise InternalError(f"the value check of {node.op_type} failed on inputs {_describe(node)}: "
                            f"{type(exc).__name__}: {exc}", node.name) from exc


def infer_and_fold(graph: Graph) -> int:
    """Canonicalize, type and (when small) fold every node in order; returns how many nodes
    were folded."""
    budget = current_budget()
    for value in graph.inputs:
        budget.check_tensor(tensor_bytes(value.desc.shape, value.desc.dtype),
                            f"Model input [{value.name}] of shape {list(value.desc.shape)}")
    folded = 0
    for node in list(graph.nodes):
        op = op_def_for(node)
        canonicalize(node, op)
        foldable = _foldable(node, op)
        types = _output_types(node, op, foldable)
        _check_values(node, op)
        if len(types) < len(node.outputs):
            raise InvalidNode(f"Node [{node.name}] ({node.op_type}) declares {len(node.outputs)} "
                              f"outputs but produces {len(types)}.", "Check the model.")
        for value, ttype in zip(node.outputs, types):
            _check_shape(node, value, ttype, budget)
        if foldable and sum(tensor_bytes(t.shape, t.dtype) for t in types) <= _MAX_FOLDED_BYTES:
            try:
                results = _evaluate(node, op)
            except AtcError as err:
                raise at_node(err, node.name, node.op_type) from err
            except Exception as exc:   # its shape rule accepted these inputs: the kernel has a bug
                raise InternalError(f"constant folding of {node.op_type} failed on inputs {_describe(node)} "
                                    f"its shape rule accepts: {type(exc).__name__}: {exc}", node.name) from exc
            for value, result in zip(node.outputs, results):
                value.producer = None
                value.set_const(np.require(result, requirements="C"))  # keeps 0-d arrays 0-d
            node.outputs = []
            node.detach()
            graph.nodes.remove(node)
            folded += 1
            continue
        for value, ttype in zip(node.outputs, types):
            fmt = value.desc.format if value.desc.format != "ND" else _format_of(node, len(ttype.shape))
            value.desc = TensorDesc(np.dtype(ttype.dtype), tuple(int(d) for d in ttype.shape), fmt)
    return folded


class InferShapesAndFoldConstants(GraphPass):
    name = "InferShapesAndFoldConstants"
    ensures = frozenset({TYPED, CANONICAL})

    def run(self, graph: Graph) -> PassResult:
        return PassResult(self.name, infer_and_fold(graph))


def _describe(node: Node) -> list:
    return [None if v is None else f"{np.dtype(v.desc.dtype)}{list(v.desc.shape or ())}" for v in node.inputs]


def _check_shape(node: Node, value, ttype: TensorType, budget: Budget) -> None:
    """A shape rule fed odd attributes (negative pads, huge repeats) may give a negative dim or
    a tensor no int64 can size; that is the model's problem, not an internal error.  A
    tensor larger than the chip's memory can never run on it (E13023)."""
    shape = [int(d) for d in ttype.shape]
    if any(d < 0 for d in shape) or too_large(shape, ttype.dtype):
        raise InvalidNode(f"Node [{node.name}] ({node.op_type}) gives output [{value.name}] the shape "
                          f"{shape} (a negative dim, or more than {MAX_TENSOR_BYTES} bytes).")
    budget.check_tensor(tensor_bytes(shape, ttype.dtype), f"Output [{value.name}] of node [{node.name}] "
                        f"({node.op_type}), shape {shape} {np.dtype(ttype.dtype)},")


def _format_of(node: Node, rank: int) -> str:
    """4-D values downstream of an NCHW input stay NCHW; everything else is ND."""
    if rank != 4:
        return "ND"
    return "NCHW" if any(v is not None and v.desc.format == "NCHW" for v in node.inputs) else "ND"
