"""Helpers shared by the op modules: broadcasting, axis normalization, dtype rules."""
from __future__ import annotations

from typing import Optional, Sequence

import numpy as np

from ge.errors import InvalidNode, invalid_attr
from ge.ops.registry import TensorType
from ge.symbolic import Dim, SymbolicDimError, bounds, dim_max

# The float dtypes a precision mode may move a tensor between (the compute dtype of a kernel
# applies to these; index and mask tensors keep their own dtype).
FLOAT_TYPES = (np.dtype(np.float32), np.dtype(np.float16), np.dtype(np.float64))


def broadcast_shape(*shapes: Sequence[int]) -> tuple:
    """Numpy/ONNX multidirectional broadcasting (of symbolic dims too: see broadcast_dim)."""
    if any(isinstance(d, Dim) for s in shapes for d in s):
        rank = max((len(s) for s in shapes), default=0)
        out = [1] * rank
        try:
            for s in shapes:
                for i, d in enumerate(s, rank - len(s)):
                    out[i] = broadcast_dim(out[i], d)
        except InvalidNode:
            raise InvalidNode(f"input shapes {[list(s) for s in shapes]} do not broadcast to one shape",
                              "Check the shapes of the node's inputs.") from None
        return tuple(out)
    try:
        return tuple(int(d) for d in np.broadcast_shapes(*[tuple(s) for s in shapes]))
    except ValueError:
        raise InvalidNode(f"input shapes {[list(s) for s in shapes]} do not broadcast to one shape",
                          "Check the shapes of the node's inputs.") from None


def broadcast_dim(a, b):
    """One broadcast dim.  A symbolic dim against 1 stays; against an int n > 1 it must be n
    at run time (the executor checks), so n; two different symbolic dims give max(a, b),
    which is exact whenever they broadcast (equal, or one of them 1)."""
    if a == b or b == 1:
        return a
    if a == 1:
        return b
    if not isinstance(a, Dim) and not isinstance(b, Dim):
        raise InvalidNode(f"dims {a} and {b} do not broadcast")
    if isinstance(a, Dim) and isinstance(b, Dim):
        return dim_max(a, b)
    sym, n = (a, b) if isinstance(a, Dim) else (b, a)
    lo, hi = bounds(sym)
    if not (lo <= n <= hi or lo <= 1):
        raise InvalidNode(f"dims {a} and {b} do not broadcast")
    return n


def dims_match(a, b) -> bool:
    """False only when dims `a` and `b` provably differ; a symbolic dim that may equal the
    other is taken to match (the kernel checks the real sizes at run time)."""
    if a == b:
        return True
    if not isinstance(a, Dim) and not isinstance(b, Dim):
        return False
    lo, hi = bounds(a - b)
    return lo <= 0 <= hi


def static_dims(shape) -> tuple:
    """A shape's dims as ints, symbolic dims kept (what shape rules return)."""
    return tuple(d if isinstance(d, Dim) else int(d) for d in shape)


def normalize_axis(axis: int, rank: int) -> int:
    if not -rank <= axis < max(rank, 1):
        raise ValueError(f"axis {axis} out of range for rank {rank}")
    return axis + rank if axis < 0 else axis


def axis_attr(op_type: str, attrs: dict, rank: int, default: int) -> int:
    """The node's `axis` attribute, normalized; an out-of-range axis is the model's mistake."""
    axis = int(attrs.get("axis", default))
    try:
        return normalize_axis(axis, rank)
    except ValueError as err:
        raise invalid_attr(op_type, "axis", axis, str(err), f"Use an axis in [-{rank}, {rank - 1}].") from err


def normalize_axes(axes: Optional[Sequence[int]], rank: int) -> list:
    return sorted(normalize_axis(int(a), rank) for a in (axes or []))


def check_one_value(op_type: str, name: str, shape) -> None:
    """An input that holds one number (CumSum's axis, Range's bounds) as onnxruntime takes it:
    a scalar or a 1-D tensor of one value."""
    shape = tuple(shape)
    if shape not in ((), (1,)):
        raise InvalidNode(f"{op_type}: {name} must be a scalar or a 1-D tensor of one value, got shape {list(shape)}",
                          "Check the node's inputs.")


def present(inputs: Sequence) -> list:
    """The inputs that are not omitted (ONNX optional inputs are None here)."""
    return [x for x in inputs if x is not None]


def same_as_input(inputs: Sequence[Optional[TensorType]], attrs: dict, index: int = 0) -> list:
    """Shape rule of unary elementwise ops."""
    return [TensorType(np.dtype(inputs[index].dtype), tuple(inputs[index].shape))]


def broadcast_result(inputs: Sequence[Optional[TensorType]], attrs: dict, dtype=None) -> list:
    """Shape rule of broadcasting ops: dtype of the first input unless given."""
    shapes = [t.shape for t in present(inputs)]
    out_dtype = np.dtype(dtype) if dtype is not None else np.dtype(present(inputs)[0].dtype)
    return [TensorType(out_dtype, broadcast_shape(*shapes))]


# -- implementation modes (--op_select_implmode / --op_precision_mode) -----------------------
# A kernel with two implementations reads the attribute `op_impl_mode` the compiler sets:
# ""/"high_precision": the exact formula, float16 data computed with float32 intermediates;
# "high_performance": the fast approximation, intermediates in the data's own dtype, divisions
# replaced by an approximate reciprocal; "keep_fp16": the exact formula in the data's dtype.
IMPL_MODE_ATTR = "op_impl_mode"


def impl_mode(attrs: dict) -> str:
    mode = attrs.get(IMPL_MODE_ATTR, "") if attrs else ""
    return mode.decode() if isinstance(mode, bytes) else str(mode)


def fast_impl(attrs: dict) -> bool:
    return impl_mode(attrs) == "high_performance"


def own_dtype_inside(attrs: dict) -> bool:
    """Intermediates stay in the data's dtype (no float32 upcast for float16 data)."""
    return impl_mode(attrs) in ("high_performance", "keep_fp16")


def with_impl(attrs: dict, member_attrs: dict) -> dict:
    """A member op's attributes carrying the enclosing kernel's implementation mode."""
    mode = impl_mode(attrs)
    return {**member_attrs, IMPL_MODE_ATTR: mode} if mode else dict(member_attrs)


def approx_reciprocal(d: np.ndarray) -> np.ndarray:
    """1/d as the vector unit's reciprocal estimate gives it: within one unit in the last
    place of d's dtype, rounded toward zero (not to nearest) -- the cheap instruction the
    high_performance kernels use instead of a division."""
    d = np.asarray(d)
    if d.dtype == np.float16:
        r = (np.float32(1.0) / d.astype(np.float32)).view(np.uint32) & np.uint32(~((1 << 13) - 1) & 0xFFFFFFFF)
        return r.view(np.float32).astype(np.float16)
    if d.dtype == np.float32:
        r = (1.0 / d.astype(np.float64)).view(np.uint64) & np.uint64(~((1 << 29) - 1) & 0xFFFFFFFFFFFFFFFF)
        return r.view(np.float64).astype(np.float32)
    return 1.0 / d
