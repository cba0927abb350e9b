"""What small integer tensors hold when it depends on dynamic dims.

Exporters compute Reshape targets, Expand shapes, Slice bounds and mask sizes at run time:
`Shape(x) -> Gather -> Concat -> Reshape`.  With static shapes constant folding turns such a
chain into constants; with a dynamic dim the chain holds expressions instead -- [B, S, 12,
64] -- which is all a shape rule needs.  `propagate` evaluates one node of such a chain on
numpy object arrays of ints and `ge.symbolic.Dim`s (what onnxruntime's symbolic shape
inference calls data propagation).  A result with no symbol left is a constant the caller
folds; one with symbols is "known" to shape inference while the node stays a kernel that
computes the real values at run time (and usually dies once its readers took the values as
attributes).  Anything it cannot do exactly -- a float cast, a comparison the ranges do not
decide -- returns None: the value is then simply unknown.
"""
from __future__ import annotations

from typing import Callable, Optional

import numpy as np

from ge.ir import Node, Value
from ge.ops.reduce import flag
from ge.symbolic import Dim, SymbolicDimError, bounds, dim_max, dim_min, floordiv, mod

MAX_ELEMENTS = 64           # only shape-sized tensors are tracked


def as_objects(array: np.ndarray) -> np.ndarray:
    """An int array as an object array of Python ints."""
    return np.asarray(array).astype(object)


def has_symbols(array: np.ndarray) -> bool:
    return any(isinstance(v, Dim) for v in np.asarray(array, dtype=object).reshape(-1))


def concrete(array: np.ndarray, dtype) -> np.ndarray:
    """An object array with no symbol left, as a real constant of `dtype`."""
    return np.asarray(array.tolist() if array.ndim else array.item(), dtype=dtype).reshape(array.shape)


def value_of(value: Optional[Value], known: dict) -> Optional[np.ndarray]:
    """What `value` holds: a constant integer tensor (as objects) or a known symbolic one."""
    if value is None:
        return None
    if value.is_const:
        const = value.const
        if const.dtype.kind in "iub" and const.size <= MAX_ELEMENTS:
            return as_objects(const)
        return None
    return known.get(id(value))


def propagate(node: Node, out_shapes: list, known: dict) -> Optional[list]:
    """Object arrays of what `node`'s outputs hold, or None when that is not known.  The
    data inputs must be constant or known; `out_shapes` are the inferred output shapes."""
    rule = _RULES.get(node.op_type)
    if rule is None or any(not isinstance(d, int) for s in out_shapes for d in s) \
            or any(int(np.prod(s, dtype=np.int64)) > MAX_ELEMENTS for s in out_shapes):
        return None
    if node.op_type in ("Shape", "Size"):
        args = [node.inputs[0]]
    else:
        args = [value_of(v, known) for v in node.inputs]
        if any(a is None for a, v in zip(args, node.inputs) if v is not None):
            return None
    try:
        result = rule(args, node.attrs, out_shapes)
    except (SymbolicDimError, ValueError, IndexError, TypeError, ZeroDivisionError):
        return None
    if result is None:
        return None
    return [np.asarray(r, dtype=object).reshape(s) for r, s in zip(result, out_shapes)]


# -- rules ---------------------------------------------------------------------------------------


def _shape(args, attrs, out):
    shape = tuple(args[0].desc.shape)
    rank = len(shape)
    start, end = int(attrs.get("start", 0)), attrs.get("end")
    end = rank if end is None else int(end)
    start = min(max(start + rank if start < 0 else start, 0), rank)
    end = min(max(end + rank if end < 0 else end, 0), rank)
    return [np.array(list(shape[start:end]), dtype=object).reshape(-1)]


def _size(args, attrs, out):
    size = 1
    for d in args[0].desc.shape:
        size = size * d
    return [np.array(size, dtype=object)]


def _view(args, attrs, out):
    return [args[0].reshape(out[0])]


def _transpose(args, attrs, out):
    perm = attrs.get("perm")
    return [np.transpose(args[0], None if perm is None or len(perm) == 0 else [int(p) for p in perm])]


def _gather(args, attrs, out):
    data, indices = args
    axis = int(attrs.get("axis", 0)) % max(data.ndim, 1)
    idx = np.asarray(indices.tolist(), dtype=np.int64) if indices.ndim else np.int64(indices.item())
    idx = np.where(idx < 0, idx + data.shape[axis], idx)
    return [np.take(data, idx, axis=axis)]


def _concat(args, attrs, out):
    xs = [a for a in args if a is not None]
    return [np.concatenate(xs, axis=int(attrs.get("axis", 0)))]


def _slice(args, attrs, out):
    from ge.ops.tensor import _slices
    return [args[0][_slices(args[0].shape, attrs)]]


def _expand(args, attrs, out):
    return [np.broadcast_to(args[0], out[0])]


def _elementwise(fn: Callable):
    def rule(args, attrs, out):
        xs = [a for a in args if a is not None]
        shape = np.broadcast_shapes(*[x.shape for x in xs])
        xs = [np.broadcast_to(x, shape).reshape(-1) for x in xs]
        return [np.array([fn(*vals) for vals in zip(*xs)], dtype=object).reshape(shape)]
    return rule


def _fold(fn: Callable):
    def apply(*vals):
        acc = vals[0]
        for v in vals[1:]:
            acc = fn(acc, v)
        return acc
    return _elementwise(apply)


def _nonneg(x) -> bool:
    return bounds(x)[0] >= 0


def _div(a, b):
    if not (_nonneg(a) and isinstance(b, int) and b > 0 or _nonneg(a) and _nonneg(b) and isinstance(b, Dim)):
        raise SymbolicDimError("truncating division of values that may be negative")
    return floordiv(a, b)


def _mod(a, b):
    if not (isinstance(b, int) and b > 0 or isinstance(b, Dim) and bounds(b)[0] > 0):
        raise SymbolicDimError("mod by a value that may be negative")
    return mod(a, b)


def _compare(op: str):
    def fn(a, b):
        if isinstance(a, int) and isinstance(b, int):
            return {"==": a == b, "<": a < b, ">": a > b, "<=": a <= b, ">=": a >= b}[op]
        if op == "==":
            if a == b:
                return True
            lo, hi = bounds(a - b)
            if lo > 0 or hi < 0:
                return False
            raise SymbolicDimError("undecided equality")
        return {"<": lambda: a < b, ">": lambda: a > b, "<=": lambda: a <= b, ">=": lambda: a >= b}[op]()
    return fn


def _cast(args, attrs, out):
    from ge.ops.elementwise import ONNX_TO_NUMPY
    target = np.dtype(ONNX_TO_NUMPY.get(attrs.get("to"), np.float32))
    if target.kind not in "iu" and has_symbols(args[0]):
        return None                 # a dim as a float or a bool is not an integer expression
    if target.kind == "b":
        return [np.vectorize(bool, otypes=[object])(args[0])]
    return [args[0]]


def _where(args, attrs, out):
    cond, x, y = args
    if has_symbols(cond):
        return None
    return [np.where(np.asarray(cond.tolist(), dtype=bool), x, y)]


def _reduce(fn):
    def rule(args, attrs, out):
        x = args[0]
        axes = attrs.get("axes")
        if (axes is None or len(axes) == 0) and flag(attrs, "noop_with_empty_axes", 0):
            return [x]
        axes = tuple(range(x.ndim)) if axes is None or len(axes) == 0 else tuple({int(a) % x.ndim for a in axes})
        keep = flag(attrs, "keepdims", 1)
        result = x
        for axis in sorted(axes, reverse=True):
            parts = [np.take(result, i, axis=axis) for i in range(result.shape[axis])]
            acc = parts[0] if parts else np.zeros(np.delete(result.shape, axis), dtype=object) + \
                (1 if fn is _mul else 0)
            for p in parts[1:]:
                acc = fn(acc, p)
            result = np.expand_dims(acc, axis) if keep else acc
        return [result]
    return rule


def _mul(a, b):
    return a * b


def _add(a, b):
    return a + b


def _neg(args, attrs, out):
    return [-args[0]]


def _abs(args, attrs, out):
    return [np.vectorize(abs, otypes=[object])(args[0])]


def _range(args, attrs, out):
    start, limit, delta = (a.item() for a in args[:3])
    n = out[0][0]
    return [np.array([start + i * delta for i in range(n)], dtype=object)]


def _constant_of_shape(args, attrs, out):
    value = attrs.get("value")
    fill = 0 if value is None else np.asarray(value).reshape(-1)[0].item()
    if not isinstance(fill, int):
        return None
    return [np.full(out[0], fill, dtype=object)]


_RULES = {
    "Shape": _shape, "Size": _size,
    "Reshape": _view, "Flatten": _view, "Squeeze": _view, "Unsqueeze": _view, "Identity": _view,
    "Transpose": _transpose, "Gather": _gather, "Concat": _concat, "Slice": _slice, "Expand": _expand,
    "Cast": _cast, "Where": _where, "Neg": _neg, "Abs": _abs, "Range": _range, "ConstantOfShape": _constant_of_shape,
    "Add": _elementwise(lambda a, b: a + b), "Sub": _elementwise(lambda a, b: a - b),
    "Mul": _elementwise(lambda a, b: a * b), "Div": _elementwise(_div), "Mod": _elementwise(_mod),
    "Max": _fold(dim_max), "Min": _fold(dim_min), "Sum": _fold(lambda a, b: a + b),
    "Equal": _elementwise(_compare("==")), "Less": _elementwise(_compare("<")),
    "Greater": _elementwise(_compare(">")), "LessOrEqual": _elementwise(_compare("<=")),
    "GreaterOrEqual": _elementwise(_compare(">=")),
    "ReduceProd": _reduce(_mul), "ReduceSum": _reduce(_add),
}
