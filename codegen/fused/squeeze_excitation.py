"""SqueezeExcitationFusionOp: a squeeze-excite block's gate in one kernel -- global average
pool, the reducing 1x1 conv (+ its activation), the expanding 1x1 conv (+ the gate
activation) -- and, when nothing else can take it, the final channel scaling x * gate.

Why: as separate kernels the SE branch is four launches on tensors of [N, C, 1, 1] (the
pool, two tiny GEMMs, the Mul), each a round trip through global memory for a few hundred
bytes.  In one kernel the pooled vector and both GEMMs stay on chip.  The scaling is left to
the conv that reads it when there is one (a conv block's input scale, codegen/fused/conv.py:
EfficientNet's, MobileNetV3's and RegNet's projection convs), so x * gate is never written.

Input slots (SLOTS): x [N, C, *spatial], w1 [Cr, C, 1...], b1 [Cr] | None, w2 [C, Cr, 1...],
b2 [C] | None.
Attributes: ``pool`` (the ONNX pooling op), ``fc1_`` and ``fc2_`` + each 1x1 conv's epilogue
attributes (``fc1_activation``, ``fc1_act_alpha``, ...: codegen/fused/epilogue.py),
``scale_input`` (1: the output is x * gate, [N, C, *spatial]; 0: the gate, [N, C, 1...]).
Numerics: the epilogue's float16 rule; the pool, both GEMMs, their epilogues and the
scaling run in float32 on chip, one rounding at the end.
"""
from __future__ import annotations

import numpy as np

from codegen.fused import epilogue
from codegen.fused.slots import Slots
from codegen.registry import kernel_of, register
from codegen.work import Work
from ge.errors import InvalidNode
from ge.ops.common import IMPL_MODE_ATTR
from ge.ops.registry import OpDef, OpKind, TensorType, get_op

OP_TYPE = "SqueezeExcitationFusionOp"
SLOTS = Slots("x", "w1", "b1", "w2", "b2", required=("x", "w1", "w2"))


def stage_attrs(attrs: dict, prefix: str) -> dict:
    """The epilogue attributes of one 1x1 conv (`fc1_` or `fc2_`), unprefixed."""
    own = {k[len(prefix):]: v for k, v in attrs.items() if k.startswith(prefix)}
    if IMPL_MODE_ATTR in attrs:
        own[IMPL_MODE_ATTR] = attrs[IMPL_MODE_ATTR]
    return own


def _fc(v: np.ndarray, w: np.ndarray, b, attrs: dict, data_dtype) -> np.ndarray:
    """One 1x1 conv on the pooled [N, C, 1...] vector, with its epilogue, in v's dtype."""
    y = np.einsum("nc...,oc...->no...", v, w.astype(v.dtype, copy=False).reshape(w.shape[0], w.shape[1]))
    bias = b.reshape((-1,) + (1,) * (y.ndim - 2)) if b is not None else None
    return epilogue.apply(np.ascontiguousarray(y), attrs, bias, None, data_dtype)


def _compute(inputs, attrs):
    s = SLOTS.read(inputs)
    x = s["x"]
    acc = epilogue.accumulate_dtype(x.dtype)
    xa = x.astype(acc, copy=False)
    pooled = np.mean(xa, axis=tuple(range(2, x.ndim)), keepdims=True, dtype=acc)
    hidden = _fc(pooled, s["w1"], s["b1"], stage_attrs(attrs, "fc1_"), x.dtype)
    gate = _fc(hidden, s["w2"], s["b2"], stage_attrs(attrs, "fc2_"), x.dtype)
    out = get_op("Mul").compute([xa, gate], {})[0] if int(attrs.get("scale_input", 0)) else gate
    return [out.astype(x.dtype, copy=False)]


def _types(inputs, attrs):
    s = SLOTS.read(inputs)
    x, w1, w2 = s["x"], s["w1"], s["w2"]
    n, c = int(x.shape[0]), int(x.shape[1])
    ones = (1,) * (len(x.shape) - 2)
    if len(w1.shape) != len(x.shape) or len(w2.shape) != len(x.shape) or any(d != 1 for d in
                                                                              tuple(w1.shape[2:]) + tuple(w2.shape[2:])):
        raise InvalidNode(f"{OP_TYPE}: the SE convs must be 1x1 of the input's rank, got {list(w1.shape)} and "
                          f"{list(w2.shape)} for x {list(x.shape)}", "Recompile the model with this version of atc_py.")
    if int(w1.shape[1]) != c or int(w2.shape[1]) != int(w1.shape[0]) or int(w2.shape[0]) != c:
        raise InvalidNode(f"{OP_TYPE}: weights {list(w1.shape)} and {list(w2.shape)} do not take {c} channels "
                          f"back to {c}", "Recompile the model with this version of atc_py.")
    pooled = TensorType(np.dtype(x.dtype), (n, c) + ones)
    hidden = TensorType(np.dtype(x.dtype), (n, int(w1.shape[0])) + ones)
    return pooled, hidden


def _infer(inputs, attrs):
    x = inputs[0]
    pooled, _ = _types(inputs, attrs)
    return [TensorType(np.dtype(x.dtype), tuple(x.shape)) if int(attrs.get("scale_input", 0)) else pooled]


def _work(inputs, outputs, attrs):
    """Pool (one add per element of x, one divide per channel), two small GEMMs and their
    epilogues, the scaling; on chip: the pooled and hidden vectors, and x itself while the
    gate is computed when the kernel scales it (a block of x that does not fit spills).
    The GEMMs multiply one vector per sample (GEMV): they run on the vector unit, a multiply
    and an add per weight and sample, not as one-row passes of the cube -- so the kernel is a
    vector kernel, split over the cores like the pooling that dominates it."""
    s = SLOTS.read(inputs)
    x = s["x"]
    pooled, hidden = _types(inputs, attrs)
    pooled, hidden = (TensorType(outputs[0].dtype, t.shape) for t in (pooled, hidden))
    work = Work().add_vector("alu", x.size + 2 * hidden.size * int(pooled.shape[1]) * 2)
    work.add_vector("div", pooled.size)
    work = work + epilogue.work(hidden, stage_attrs(attrs, "fc1_"), s["b1"] is not None, False, False) \
        + epilogue.work(pooled, stage_attrs(attrs, "fc2_"), s["b2"] is not None, False, False)
    held = 0
    if int(attrs.get("scale_input", 0)):
        work = work + kernel_of("Mul").work([x, pooled], [x], {})
        held = TensorType(outputs[0].dtype, tuple(x.shape)).nbytes
    work.onchip_bytes = pooled.nbytes + hidden.nbytes + held
    return work


register(OpDef(OP_TYPE, OpKind.OUT_EWISE_FUSABLE, _compute, _infer), _work)
