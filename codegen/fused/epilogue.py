"""The epilogue every cube kernel runs on its accumulator -- bias, residual, activation --
written once for the conv kernels (codegen/fused/conv.py) and the GEMM kernels (gemm.py,
layer_norm.py).

Why one module: a conv block and a linear layer end the same way while the output tile is
still on chip; with one table of activations and one float16 rule they cannot drift apart,
and a new activation (the canonical stage's, fusion_passes/canonical/) reaches every cube
kernel at once.

Kernel attributes (the same names on every cube kernel):
- ``activation``: "" or the ONNX op type of a canonical activation (ACTIVATIONS), with that
  op's own attributes prefixed ``act_`` (``act_alpha``, ``act_beta``, ``act_min``,
  ``act_max``, ``act_approximate``); the kernel runs that op's own compute, so fused and
  unfused activations are one function.
- ``residual_after_act``: 1 when the residual Add follows the activation (a transformer's
  ``x + act(W·y + b)``); otherwise the Add comes first (ResNet's ``relu(conv + x)``).
- ``gate``: 1 for a gated linear unit (SwiGLU, GeGLU, ReGLU: a decoder's gated MLP).  The
  accumulator's last axis holds two halves [g | u] (the gate and up projections packed into
  one weight, each with its half of the bias); the epilogue writes ``act(g) * u``, half as
  wide, and the residual (if any) after it.

Float16 rule (the cube's): float16 data is widened to float32 once; the product accumulates
in float32 and bias, residual and activation run on that float32 accumulator; the kernel
rounds to the data dtype once, where the unfused graph rounds after every op.  Under
--op_select_implmode high_performance (or keep_fp16) the activation runs in the data dtype
instead (`ge.ops.common.own_dtype_inside`), as that mode's vector kernels do.
"""
from __future__ import annotations

from typing import Optional

import numpy as np

from codegen.registry import kernel_of
from codegen.work import Work
from ge.errors import invalid_attr
from ge.ops.common import own_dtype_inside, with_impl
from ge.ops.registry import TensorType, get_op

# The activations a cube kernel applies, as the ONNX ops the canonical stage leaves.
ACTIVATIONS = ("Relu", "LeakyRelu", "Clip", "Sigmoid", "Tanh", "HardSigmoid", "HardSwish", "Gelu", "Swish",
               "Mish", "Elu")
ACT_PREFIX = "act_"
EPILOGUE_ATTRS = ("activation", "residual_after_act", "gate")     # and every ACT_PREFIX attr
# a gated unit's name by its activation's (as codegen/fused/gemm.py names activations)
GLU_NAMES = {"Swish": "SwiGlu", "Gelu": "GeGlu", "FastGelu": "FastGeGlu", "Relu": "ReGlu", "Sigmoid": "Glu",
             "": "Bilinear"}


def accumulate_dtype(dtype) -> np.dtype:
    """The on-chip dtype: float16 widens to float32 (the cube's accumulator), others stay."""
    return np.dtype(np.float32) if np.dtype(dtype) == np.float16 else np.dtype(dtype)


def is_activation(node) -> bool:
    """A node the epilogue can take: a canonical activation with constant configuration
    (Clip's bounds are attributes, not inputs)."""
    return node.op_type in ACTIVATIONS and len([v for v in node.inputs if v is not None]) == 1


def activation_attrs(node) -> dict:
    """The kernel attributes standing for activation `node` (see the module docstring)."""
    attrs = {"activation": node.op_type}
    for key, value in sorted(node.attrs.items()):
        if value is not None:
            attrs[ACT_PREFIX + key] = value.item() if isinstance(value, np.generic) else value
    return attrs


def activation_of(attrs: dict, op_type: str = "cube kernel") -> Optional[tuple]:
    """(ONNX op type, its attributes) of a kernel's activation, or None."""
    act = attrs.get("activation", "")
    act = act.decode() if isinstance(act, bytes) else str(act)
    if not act:
        return None
    if act not in ACTIVATIONS:
        raise invalid_attr(op_type, "activation", act, f"it must be one of {list(ACTIVATIONS)} or empty.",
                           "Recompile the model with this version of atc_py.")
    op_attrs = {k[len(ACT_PREFIX):]: v for k, v in attrs.items() if k.startswith(ACT_PREFIX)}
    return act, with_impl(attrs, op_attrs)


def gated(attrs: dict) -> bool:
    return bool(int(attrs.get("gate", 0)))


def residual_first(attrs: dict) -> bool:
    """Whether the residual is added before the activation (ResNet's relu(conv + x)), i.e.
    straight onto the accumulator."""
    return not (int(attrs.get("residual_after_act", 0)) or gated(attrs))


def relu_first(attrs: dict, residual: bool) -> bool:
    """Whether the epilogue's first stage is a plain ReLU on the accumulator -- a Relu
    activation with no residual added before it and no gate -- so the conv can apply it in
    the pass that writes its output (ge.ops.nn.conv_forward's `relu`) and the epilogue runs
    `without_activation`.  ReLU commutes with the float16 rounding, so the dtype rule holds."""
    act = activation_of(attrs)
    return act is not None and act[0] == "Relu" and not gated(attrs) and (not residual or not residual_first(attrs))


def without_activation(attrs: dict) -> dict:
    """The attrs with the activation already applied (see `relu_first`)."""
    return {**attrs, "activation": ""}


def apply(acc: np.ndarray, attrs: dict, bias: Optional[np.ndarray] = None,
          residual: Optional[np.ndarray] = None, data_dtype=None, owned: bool = False) -> np.ndarray:
    """bias, residual and activation (and the gate) on the accumulator `acc` (in its dtype);
    `bias` must already broadcast on it (a conv's per-channel vector reshaped by the caller).
    `owned`: the caller made `acc` and reads it no more, so the stages write into it instead
    of allocating a tensor each (the same arithmetic: one add or max per element, in place)."""
    ct = acc.dtype
    if bias is not None:
        acc = _add(acc, bias.astype(ct, copy=False), owned)
        owned = True
    gate = gated(attrs)
    after = not residual_first(attrs)
    if residual is not None and not after:
        acc = _add(acc, residual.astype(ct, copy=False), owned)
        owned = True
    up = None
    if gate:
        half = acc.shape[-1] // 2
        acc, up = acc[..., :half], acc[..., half:]
        owned = False
    act = activation_of(attrs)
    if act is not None:
        op_type, op_attrs = act
        narrowed = data_dtype is not None and own_dtype_inside(op_attrs)
        if op_type == "Relu" and owned and not narrowed and acc.flags.writeable:
            np.maximum(acc, 0, out=acc)         # what the Relu op computes, without a new tensor
        else:
            x = acc.astype(data_dtype, copy=False) if narrowed else acc
            acc = get_op(op_type).compute([x], op_attrs)[0].astype(ct, copy=False)
            owned = acc is not x
    if up is not None:
        acc = acc * up
        owned = True
    if residual is not None and after:
        acc = _add(acc, residual.astype(ct, copy=False), owned)
    return acc


def _add(acc: np.ndarray, other: np.ndarray, in_place: bool) -> np.ndarray:
    if in_place and acc.flags.writeable and np.broadcast_shapes(acc.shape, other.shape) == acc.shape:
        acc += other
        return acc
    return acc + other


def work(out: TensorType, attrs: dict, bias: bool, residual: bool, bias_is_a_stage: bool,
         min_stages: int = 0) -> Work:
    """Vector work of the epilogue on an output of type `out`, and the on-chip bytes of the
    intermediates the unfused graph would have written: one output-sized tile per epilogue
    stage (the bias when it was its own op -- MatMul + Add, not Conv or Gemm --, the
    residual Add, the activation; a gate's two halves and their product), at least
    `min_stages` (a conv block keeps its accumulator tile on chip whatever follows).  A
    gated epilogue's accumulator is twice `out` wide: its bias runs on both halves."""
    w = Work()
    stages = 0
    halves = 2 if gated(attrs) else 1
    if bias:
        w.add_vector("alu", halves * out.size)
        stages += halves * int(bias_is_a_stage)
    if halves == 2:
        w.add_vector("alu", out.size)             # act(g) * u
        stages += 2                               # the g and u halves the two GEMMs wrote
    if residual:
        w.add_vector("alu", out.size)
        stages += 1
    act = activation_of(attrs)
    if act is not None:
        w = w + kernel_of(act[0]).work([out], [out], act[1])
        stages += 1
    w.onchip_bytes = max(min_stages, stages) * out.nbytes
    return w
