"""The quantized view the int8 cube fusions share: what an int8 cube op reads and the chain
after it that its epilogue can take (codegen/fused/quant_cube.py runs the result).

Three forms reach here and end in the same plan:
- QDQ (onnxruntime's quantize_static): ``DequantizeLinear(x_q)`` and ``DequantizeLinear(W_q)``
  feed a float Conv/MatMul/Gemm, a ``DequantizeLinear`` of an int32 bias in the accumulator's
  scale is the int32 bias; what follows is float until a ``QuantizeLinear``;
- QOperator: ``QLinearConv``/``QLinearMatMul``/``QGemm`` (its scales are attributes); a
  ``QLinearAdd`` after it is a residual;
- AMCT deploy: an int8 Conv/Gemm/MatMul (int32 out, the input offset already in the bias)
  followed by ``AscendDequant`` (deq_scale, relu_flag), float after it until ``AscendQuant``.
The plan: the int8 operand with its zero point, the int8 weight [Cout, ...] (conv) or [K, N]
(matmul) with per-output-channel zero points, deq_scale = x_scale * w_scale, the int32 bias,
and the epilogue ops in order (`Step`s), each an ONNX/AMCT op on the running float value
`v` and possibly one extra kernel input (a residual, a float bias, a constant operand).
The walk follows single-consumer edges only; a rounding point the graph has (QuantizeLinear
-> DequantizeLinear) is kept as two steps, so the kernel rounds exactly where the graph does.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional, Union

import numpy as np

from fusion_passes import reasons
from fusion_passes.base import Match, fuse, producer, single_consumer
from codegen.fused import autofused
from codegen.fused.conv import CONV_ATTR_NAMES
from codegen.fused.quant_cube import EXTRA_SLOT
from ge.errors import InternalError
from ge.ir import Graph, Node, Value
from ge.ops.ascend_quant import deq_scale_values
from ge.ops.quant import F32, output_multiplier
from ge.ops.registry import TensorType, get_op

ACTIVATIONS = ("Relu", "LeakyRelu", "Sigmoid", "Tanh", "HardSwish", "Clip")
QUANTIZERS = ("QuantizeLinear", "AscendQuant")
DEQUANTIZERS = {"QuantizeLinear": "DequantizeLinear", "AscendQuant": "AscendAntiQuant"}
_QOPERATOR = {"QLinearConv": (3, 8), "QLinearMatMul": (3, None), "QGemm": (3, 6)}   # weight, bias slots
Problem = tuple      # (NF code, constraint in words, values)


@dataclass
class Step:
    op_type: str
    attrs: dict
    extra: Optional[Union[Value, np.ndarray]] = None    # the op's other operand (kernel input)
    extra_dequant: Optional[dict] = None                 # DequantizeLinear attrs applied to `extra`


@dataclass
class CubePlan:
    conv: bool
    cube: Node
    x: Value
    x_zero_point: Optional[np.ndarray]
    weight: np.ndarray
    w_zero_point: Optional[np.ndarray]
    deq_scale: np.ndarray
    bias_q: Optional[np.ndarray] = None
    nodes: list = field(default_factory=list)
    steps: list = field(default_factory=list)
    output: Optional[Value] = None
    attrs: dict = field(default_factory=dict)

    @property
    def activation(self) -> str:
        acts = [s.op_type for s in self.steps if s.op_type in ACTIVATIONS]
        return acts[0] if acts else ""


def is_int8(value: Optional[Value]) -> bool:
    return value is not None and np.dtype(value.desc.dtype) in (np.dtype(np.int8), np.dtype(np.uint8))


def _per_tensor(scale) -> bool:
    return scale is not None and np.asarray(scale).size == 1


def per_tensor_unblocked(node: Node) -> bool:
    """A QuantizeLinear / DequantizeLinear with one scale and no block_size: what the int8
    kernels take (each row, or tensor, quantized with one scale)."""
    scale = node.attrs.get("y_scale" if node.op_type == "QuantizeLinear" else "x_scale")
    return _per_tensor(scale) and not int(node.attrs.get("block_size", 0) or 0)


def dequant_source(value: Optional[Value]) -> Optional[Node]:
    """The DequantizeLinear (unblocked) that produces `value`, if any."""
    dq = producer(value, "DequantizeLinear")
    if dq is None or int(dq.attrs.get("block_size", 0) or 0):
        return None
    return dq


def _absorb(plan: CubePlan, node: Node) -> None:
    """A DequantizeLinear read only by the pattern joins it (else it stays for its other readers)."""
    if single_consumer(node.outputs[0]) is not None and node not in plan.nodes:
        plan.nodes.append(node)


def _channel_param(value, size: int, axis_ok: bool) -> Optional[np.ndarray]:
    """A per-output-channel parameter (scalar or `size` values), or None if it is per another axis."""
    if value is None:
        return None
    a = np.asarray(value)
    if a.size == 1:
        return a.reshape(())
    return a.reshape(-1) if axis_ok and a.size == size else None


# -- the cube op and its operands ---------------------------------------------------------------


def cube_plan(cube: Node, conv: bool):
    """A CubePlan up to the cube's dequantized output, a Problem, or None (not an int8 cube op)."""
    if cube.op_type in _QOPERATOR:
        return _qoperator_plan(cube, conv)
    data, weight = cube.inputs[0], cube.inputs[1]
    if cube.op_type == "Gemm" and (int(cube.attrs.get("transA", 0)) or float(cube.attrs.get("alpha", 1.0)) != 1.0
                                   or float(cube.attrs.get("beta", 1.0)) != 1.0):
        if is_int8(data) or dequant_source(data) is not None:
            return (reasons.UNSUPPORTED_ATTRIBUTE, "an int8 Gemm needs transA = 0 and alpha = beta = 1",
                    [data, weight])
        return None
    if is_int8(data):
        return _amct_plan(cube, conv)
    x_dq = dequant_source(data)
    if x_dq is None:
        return None
    if np.dtype(x_dq.inputs[0].desc.dtype).kind not in "iu":      # float8 data: no integer product
        return (reasons.UNSUPPORTED_VARIANT, f"the data is quantized to {np.dtype(x_dq.inputs[0].desc.dtype)}, "
                "not to an integer type", [data])
    if not _per_tensor(x_dq.attrs.get("x_scale")):
        return (reasons.UNSUPPORTED_VARIANT, "the data input must be quantized per tensor (one scale)", [data])
    w_dq = dequant_source(weight)
    if w_dq is None or not w_dq.inputs[0].is_const or not is_int8(w_dq.inputs[0]):
        return (reasons.NON_CONSTANT, "the weight must be DequantizeLinear of a constant int8 tensor (an "
                "activation x activation product is not an int8 weight GEMM)", [weight])
    w_q = w_dq.inputs[0].const
    transposed = cube.op_type == "Gemm" and int(cube.attrs.get("transB", 0))
    out_axis = 0 if conv or transposed else w_q.ndim - 1
    w_axis = int(w_dq.attrs.get("axis", 1)) % w_q.ndim
    cout = w_q.shape[out_axis]
    ws = _channel_param(w_dq.attrs["x_scale"], cout, w_axis == out_axis)
    wz = _channel_param(w_dq.attrs.get("x_zero_point"), cout, w_axis == out_axis)
    if ws is None or (w_dq.attrs.get("x_zero_point") is not None and wz is None):
        return (reasons.UNSUPPORTED_VARIANT, f"weight scales must be per tensor or per output channel "
                f"(axis {out_axis}), got axis {w_axis}", [weight])
    xs = np.asarray(x_dq.attrs["x_scale"], F32).reshape(())
    plan = CubePlan(conv, cube, x_dq.inputs[0], x_dq.attrs.get("x_zero_point"), w_q.T if transposed else w_q,
                    wz, (xs * np.asarray(ws, F32)).astype(F32))
    _absorb(plan, x_dq)
    _absorb(plan, w_dq)
    bias = cube.inputs[2] if len(cube.inputs) > 2 else None
    if bias is not None:
        problem = _take_bias(plan, bias)
        if problem:
            return problem
    plan.nodes.append(cube)
    plan.output = cube.outputs[0]
    plan.attrs = _cube_attrs(cube, conv)
    return plan


def _take_bias(plan: CubePlan, bias: Value) -> Optional[Problem]:
    """An int32 bias in the accumulator's scale joins the accumulator; any other constant bias
    is added in float by the epilogue."""
    b_dq = dequant_source(bias)
    if b_dq is not None and b_dq.inputs[0].is_const:
        b_q = b_dq.inputs[0].const
        scale = np.asarray(b_dq.attrs["x_scale"], F32)
        zp = b_dq.attrs.get("x_zero_point")
        same = np.allclose(np.broadcast_to(scale.reshape(-1) if scale.size > 1 else scale, plan.deq_scale.shape),
                           plan.deq_scale, rtol=1e-6, atol=0)
        if b_q.dtype == np.int32 and same and (zp is None or not np.any(zp)):
            plan.bias_q = b_q.reshape(-1)
            _absorb(plan, b_dq)
            return None
        plan.steps.append(Step("Add", {}, _float_bias(get_op("DequantizeLinear").compute([b_q], b_dq.attrs)[0], plan)))
        _absorb(plan, b_dq)
        return None
    if not bias.is_const:
        return (reasons.NON_CONSTANT, "the bias must be a constant", [bias])
    plan.steps.append(Step("Add", {}, _float_bias(bias.const, plan)))
    return None


def _float_bias(b: np.ndarray, plan: CubePlan) -> np.ndarray:
    b = np.asarray(b, F32).reshape(-1)
    return b.reshape((-1,) + (1,) * (plan.weight.ndim - 2)) if plan.conv else b


def _cube_attrs(cube: Node, conv: bool) -> dict:
    if not conv:
        return {}
    attrs = {k: cube.attrs[k] for k in CONV_ATTR_NAMES if k in cube.attrs}
    attrs["kernel_shape"] = [int(d) for d in cube.inputs[3 if cube.op_type == "QLinearConv" else 1].desc.shape[2:]]
    attrs.setdefault("group", 1)
    return attrs


def _amct_plan(cube: Node, conv: bool):
    """AMCT deploy: int8 cube op -> int32 -> AscendDequant."""
    data, weight = cube.inputs[0], cube.inputs[1]
    if not weight.is_const or not is_int8(weight):
        return (reasons.NON_CONSTANT, "the int8 weight must be a constant", [weight])
    deq = single_consumer(cube.outputs[0])
    if deq is None or deq.op_type != "AscendDequant":
        return (reasons.UNSUPPORTED_VARIANT, "the int32 result of an int8 cube op must feed one AscendDequant",
                [cube.outputs[0]])
    transposed = cube.op_type == "Gemm" and int(cube.attrs.get("transB", 0))
    w = weight.const.T if transposed else weight.const
    scale = deq_scale_values(deq.attrs["deq_scale"]).reshape(-1)
    if int(deq.attrs.get("sqrt_mode", 0)):
        scale = scale * scale
    plan = CubePlan(conv, cube, data, None, w, None, scale.reshape(()) if scale.size == 1 else scale)
    bias = cube.inputs[2] if len(cube.inputs) > 2 else None
    if bias is not None:
        if not bias.is_const or bias.const.dtype != np.int32:
            return (reasons.NON_CONSTANT, "the bias of an int8 cube op must be a constant int32 tensor", [bias])
        plan.bias_q = bias.const.reshape(-1)
    plan.nodes += [cube, deq]
    if int(deq.attrs.get("relu_flag", 0)):
        plan.steps.append(Step("Relu", {}))
    if np.dtype(deq.outputs[0].desc.dtype) == np.float16:      # AscendDequant dtype = 1
        plan.steps.append(Step("Cast", {"to": 10}))
    plan.output = deq.outputs[0]
    plan.attrs = _cube_attrs(cube, conv)
    return plan


def _qoperator_plan(cube: Node, conv: bool):
    """QLinearConv / QLinearMatMul / QGemm: scales are attributes; the output is requantized."""
    w_slot, b_slot = _QOPERATOR[cube.op_type]
    a = cube.attrs
    names = ("x_scale", "x_zero_point", "w_scale", "w_zero_point", "y_scale", "y_zero_point") if conv else \
        ("a_scale", "a_zero_point", "b_scale", "b_zero_point", "y_scale", "y_zero_point")
    xs, xz, ws, wz, ys, yz = (a.get(n) for n in names)
    weight = cube.inputs[w_slot]
    if not weight.is_const:
        return (reasons.NON_CONSTANT, "the weight must be a constant int8 tensor", [weight])
    if cube.op_type == "QGemm" and int(a.get("transA", 0)):
        return (reasons.UNSUPPORTED_ATTRIBUTE, "QGemm with transA = 1 is not fused", [cube.inputs[0]])
    if not _per_tensor(xs):
        return (reasons.UNSUPPORTED_VARIANT, "the data input must be quantized per tensor", [cube.inputs[0]])
    transposed = cube.op_type == "QGemm" and int(a.get("transB", 0))
    w = weight.const.T if transposed else weight.const
    cout = w.shape[0] if conv else w.shape[-1]
    ws_c, wz_c = _channel_param(ws, cout, True), _channel_param(wz, cout, True)
    if ws_c is None or (wz is not None and wz_c is None):
        return (reasons.UNSUPPORTED_VARIANT, "weight scales must be per tensor or per output channel", [weight])
    x_scale = np.asarray(xs, F32).reshape(())
    if cube.op_type == "QGemm":
        x_scale = np.float32(a.get("alpha", 1.0)) * x_scale
    deq = (x_scale * np.asarray(ws_c, F32)).astype(F32)
    if ys is not None:
        # requantized as onnxruntime's kernel does it: float32(acc) * (scales / y_scale), one
        # multiplier per channel, then rounded -- not float32(acc) * scales / y_scale, whose
        # two roundings put some values on the other side of a .5 (one BERT-base GELU GEMM:
        # 1 of 393,216 outputs, which the GELU's QLinearMul doubles)
        deq = output_multiplier(x_scale, ws_c, ys)
    plan = CubePlan(conv, cube, cube.inputs[0], xz, w, wz_c, deq, nodes=[cube])
    bias = cube.inputs[b_slot] if b_slot is not None and len(cube.inputs) > b_slot else None
    if bias is not None:
        if not bias.is_const:
            return (reasons.NON_CONSTANT, "the bias must be a constant", [bias])
        plan.bias_q = bias.const.astype(np.int32).reshape(-1)
    if ys is not None:
        plan.steps.append(Step("QuantizeLinear", _q_attrs(np.float32(1.0), yz)))    # deq_scale has y_scale in it
    plan.output = cube.outputs[0]
    plan.attrs = _cube_attrs(cube, conv) if conv else {}
    return plan


def _q_attrs(scale, zero_point) -> dict:
    attrs = {"y_scale": np.asarray(scale, F32).reshape(())}
    if zero_point is not None:
        attrs["y_zero_point"] = np.asarray(zero_point).reshape(())
    return attrs


def _dq_attrs(scale, zero_point) -> dict:
    attrs = {"x_scale": np.asarray(scale, F32).reshape(())}
    if zero_point is not None:
        attrs["x_zero_point"] = np.asarray(zero_point).reshape(())
    return attrs


# -- the epilogue walk --------------------------------------------------------------------------


def _activation(node: Node) -> Optional[Step]:
    if node.op_type not in ACTIVATIONS:
        return None
    if node.op_type == "Clip":
        if len([v for v in node.inputs if v is not None]) != 1:
            return None
        return Step("Clip", {k: node.attrs[k] for k in ("min", "max") if node.attrs.get(k) is not None})
    return Step(node.op_type, dict(node.attrs))


def _other_operand(add: Node, value: Value) -> Optional[Value]:
    if len(add.inputs) != 2 or add.inputs[0] is add.inputs[1]:
        return None
    return add.inputs[1] if add.inputs[0] is value else add.inputs[0]


def _residual(plan: CubePlan, add: Node, value: Value) -> Optional[Step]:
    """The Add's other operand as a step: a constant, a dequantized int8 tensor (read as int8),
    or a float tensor; it must broadcast to the running value's shape."""
    other = _other_operand(add, value)
    if other is None or tuple(add.outputs[0].desc.shape) != tuple(value.desc.shape):
        return None
    if other.is_const:
        return Step("Add", {}, np.asarray(other.const, F32))
    dq = dequant_source(other)
    if dq is not None and _per_tensor(dq.attrs.get("x_scale")) and not dq.inputs[0].is_const:
        _absorb(plan, dq)
        return Step("Add", {}, dq.inputs[0], _dq_attrs(dq.attrs["x_scale"], dq.attrs.get("x_zero_point")))
    if np.dtype(other.desc.dtype).kind == "f":
        return Step("Add", {}, other)
    return None


def _fold_batch_norm(plan: CubePlan, bn: Node) -> bool:
    """BatchNormalization right after the cube folds into deq_scale and a float bias."""
    if plan.steps and any(s.op_type != "Add" or not isinstance(s.extra, np.ndarray) for s in plan.steps):
        return False
    params = bn.inputs[1:5]
    if any(v is None or not v.is_const for v in params) or int(bn.attrs.get("training_mode", 0)):
        return False
    scale, beta, mean, var = (v.const.astype(np.float64).reshape(-1) for v in params)
    cout = plan.weight.shape[0] if plan.conv else plan.weight.shape[-1]
    if any(p.size != cout for p in (scale, beta, mean, var)):
        return False
    s = scale / np.sqrt(var + float(bn.attrs.get("epsilon", 1e-5)))
    bias = np.zeros(cout)
    if plan.bias_q is not None:
        bias += plan.bias_q.astype(np.float64) * np.broadcast_to(plan.deq_scale, (cout,))
        plan.bias_q = None
    for step in plan.steps:
        bias += np.broadcast_to(step.extra.reshape(-1), (cout,))
    plan.steps = [Step("Add", {}, _float_bias(((bias - mean) * s + beta).astype(F32), plan))]
    plan.deq_scale = (np.broadcast_to(plan.deq_scale, (cout,)) * s).astype(F32)
    return True


def walk_epilogue(plan: CubePlan) -> CubePlan:
    """Extend the plan downstream along single-consumer edges (see the module docstring)."""
    cur = plan.output
    while True:
        node = single_consumer(cur)
        if node is None:
            break
        if np.dtype(cur.desc.dtype).kind == "f":
            step = None
            if node.op_type == "BatchNormalization" and node.inputs[0] is cur and _fold_batch_norm(plan, node):
                plan.nodes.append(node)
                cur = node.outputs[0]
                continue
            if node.op_type == "Add":
                step = _residual(plan, node, cur)
            elif node.op_type in QUANTIZERS:
                if node.op_type == "QuantizeLinear" and not per_tensor_unblocked(node):
                    break
                step = Step(node.op_type, dict(node.attrs))
            else:
                step = _activation(node)
            if step is None:
                break
            plan.steps.append(step)
            plan.nodes.append(node)
            cur = node.outputs[0]
            continue
        # a quantized value: continue only through a rounding point into more epilogue work
        nxt = _through_rounding(plan, node, cur)
        if nxt is None:
            break
        cur = nxt
    plan.output = cur
    return plan


def _through_rounding(plan: CubePlan, node: Node, cur: Value) -> Optional[Value]:
    """cur (int8) -> DequantizeLinear/AscendAntiQuant -> (Add | activation), or QLinearAdd:
    the steps that continue the epilogue, and the new running value; None to stop."""
    if node.op_type == "QLinearAdd":
        a = node.attrs
        mine, theirs = ("A", "B") if node.inputs[0] is cur else ("B", "A")
        other = node.inputs[3] if mine == "A" else node.inputs[0]
        if other is cur or any(np.asarray(a[f"{k}_scale"]).size != 1 for k in "ABC"):
            return None
        plan.steps += [Step("DequantizeLinear", _dq_attrs(a[f"{mine}_scale"], a.get(f"{mine}_zero_point"))),
                       Step("Add", {}, other, _dq_attrs(a[f"{theirs}_scale"], a.get(f"{theirs}_zero_point"))),
                       Step("QuantizeLinear", _q_attrs(a["C_scale"], a.get("C_zero_point")))]
        plan.nodes.append(node)
        return node.outputs[0]
    last = plan.steps[-1].op_type if plan.steps else ""
    if node.op_type != DEQUANTIZERS.get(last) or (node.op_type == "DequantizeLinear" and
                                                  not per_tensor_unblocked(node)):
        return None
    follower = single_consumer(node.outputs[0])
    if follower is None:
        return None
    if follower.op_type == "Add":
        step = _residual(plan, follower, node.outputs[0])
    else:
        step = _activation(follower)
    if step is None:
        return None
    plan.steps += [Step(node.op_type, dict(node.attrs)), step]
    plan.nodes += [node, follower]
    return follower.outputs[0]


# -- the epilogue as a sub-graph ------------------------------------------------------------------


def epilogue_ops(plan: CubePlan, acc: TensorType) -> tuple:
    """(ops, extras, output ref) in autofuse's sub-graph form; input 0 is the dequantized
    accumulator, inputs 1.. are the extras in order."""
    ops, extras = [], []
    types = {("i", 0): TensorType(F32, tuple(acc.shape))}
    cur = ("i", 0)

    def add(op_type, attrs, refs):
        ins = [types[r] for r in refs]
        outs = get_op(op_type).infer(ins, attrs)
        ref = ("o", len(ops), 0)
        ops.append((op_type, attrs, refs, outs[:1]))
        types[ref] = outs[0]
        return ref

    for step in plan.steps:
        refs = [cur]
        if step.extra is not None:
            extras.append(step.extra)
            r = ("i", len(extras))
            t = step.extra
            types[r] = TensorType(np.dtype(t.dtype) if isinstance(t, np.ndarray) else np.dtype(t.desc.dtype),
                                  tuple(t.shape) if isinstance(t, np.ndarray) else tuple(t.desc.shape))
            if step.extra_dequant is not None:
                r = add("DequantizeLinear", step.extra_dequant, [r])
            refs.append(r)
        cur = add(step.op_type, step.attrs, refs)
    return ops, extras, cur, [types[("i", i)] for i in range(len(extras) + 1)]


# -- the rewrite both passes share -------------------------------------------------------------------


@dataclass
class QuantMatch(Match):
    plan: Optional[CubePlan] = None


def match_plan(fpass, cube: Node, conv: bool, fused_op: str):
    """The pass's answer for one anchor: None, a Miss, or a QuantMatch."""
    found = cube_plan(cube, conv)
    if found is None:
        return None
    if isinstance(found, tuple):
        code, constraint, values = found
        return fpass.miss(code, cube, [cube], constraint, values)
    plan = walk_epilogue(found)
    return QuantMatch(plan.nodes, fused_op, [plan.output], plan=plan)


def rewrite_plan(graph: Graph, match: QuantMatch, pass_name: str) -> Node:
    """One int8 cube kernel for the plan (codegen/fused/quant_cube.py)."""
    plan = match.plan
    acc_shape = plan.cube.outputs[0].desc.shape
    ops, extras, out_ref, input_types = epilogue_ops(plan, TensorType(np.dtype(np.int32), tuple(acc_shape)))
    epilogue = autofused.encode_subgraph(input_types, ops, [out_ref])
    name = plan.cube.name
    weight = graph.constant(f"{name}/weight_int8", np.ascontiguousarray(plan.weight))
    bias = graph.constant(f"{name}/bias_int32", plan.bias_q.astype(np.int32)) if plan.bias_q is not None else None
    extra_values = [e if isinstance(e, Value) else graph.constant(f"{name}/epilogue_const", e) for e in extras]
    inputs = [plan.x, weight, bias] + extra_values
    if len(inputs) - len(extra_values) != EXTRA_SLOT:
        raise InternalError(f"quantized cube kernel has {len(inputs) - len(extra_values)} fixed inputs, "
                            f"its kernel reads the epilogue's from slot {EXTRA_SLOT}", node=name)
    attrs = dict(plan.attrs)
    attrs.update(deq_scale=np.asarray(plan.deq_scale, F32), epilogue=epilogue)
    if plan.x_zero_point is not None:
        attrs["x_zero_point"] = np.asarray(plan.x_zero_point).reshape(())
    if plan.w_zero_point is not None:
        attrs["w_zero_point"] = np.asarray(plan.w_zero_point)
    if plan.activation:
        attrs["activation"] = plan.activation
    return fuse(graph, match.nodes, match.fused_op, inputs, match.outputs, attrs, pass_name)
