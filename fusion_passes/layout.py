"""View algebra: what a chain of data-movement ops does to the elements of its source.

Why: exporters move attention heads around with every combination of Reshape, Transpose,
Squeeze/Unsqueeze/Flatten, Split/Slice/Gather (head selection, packed QKV), Expand/Tile
(grouped-query KV repeat) and back.  Instead of writing one pattern per combination, a
pass reads the chain as a `Layout` of the source -- for each axis of the result, the
(size, stride) pieces it walks in the source's row-major element order, plus an offset --
and then checks *what* the result addresses (this is CuTe's layout algebra, or torch's
strided views generalised to axes made of several strided pieces).  Two chains that move
elements the same way have the same layout, whatever ops they are written with.

A view that is not affine in the source (a Concat, a Gather of scattered indices, a
Reshape that splits a piece unevenly) raises `NotAffine`.
"""
from __future__ import annotations

import zlib
from dataclasses import dataclass
from math import prod
from typing import Optional, Sequence

import numpy as np

from ge.ir import Node, Value
from ge.ops.tensor import _slices
from ge.symbolic import Dim, dim_max, dim_min, evaluate, floordiv, free_symbols

# Ops that only move elements: their output's elements are elements of input 0.
VIEW_OPS = frozenset({"Reshape", "Transpose", "Squeeze", "Unsqueeze", "Flatten", "Identity", "Expand",
                      "Slice", "Split", "Gather", "Tile"})
MAX_INDEX_ELEMENTS = 1 << 24      # `indices()` refuses to build a bigger index array


def _dim(n):
    """A dim as the algebra holds it: an int, or a symbolic dim (ge.symbolic) kept as it is."""
    return n if isinstance(n, Dim) else int(n)


def probe(x):
    """`x` (a dim, or a tuple/array of them) with every symbol at its probe size.  Checks that
    enumerate elements (which head a batch index reads) run on the probe sizes: the layouts
    are the same polynomials at every size, and the probe sizes (> 1, different per symbol
    name, the same in every call) are generic, so a head structure found there is the one at
    every size -- as the tests check against onnxruntime at several sizes."""
    if isinstance(x, Dim):
        return evaluate(x, {name: 5 + zlib.crc32(name.encode()) % 23 for name in free_symbols(x)})
    if isinstance(x, tuple):
        return tuple(probe(v) for v in x)
    if isinstance(x, list):
        return [probe(v) for v in x]
    return x


def more_than_one(n) -> bool:
    """n > 1 for an int; for a symbolic dim, "not exactly 1" (a piece of size S stays a piece:
    at run time S may be 1, and a size-1 piece of any stride addresses the same elements)."""
    return n != 1 if isinstance(n, Dim) else n > 1


class NotAffine(Exception):
    """The view chain is not a strided layout of its source."""


Piece = tuple          # (size, stride)


def _coalesce(pieces: Sequence[Piece]) -> tuple:
    """Drop size-1 pieces and merge neighbours (a, s*b), (s, b) into (a*s, b)."""
    out: list = []
    for size, stride in pieces:
        if size == 1:
            continue
        if out and out[-1][1] == size * stride:
            out[-1] = (out[-1][0] * size, stride)
        else:
            out.append((size, stride))
    return tuple(out)


@dataclass(frozen=True)
class Layout:
    """`axes[k]` lists the pieces of result axis k, outermost first: the element at result
    index (i0, i1, ...) is source element `offset + sum(digit * stride)` over the mixed-radix
    digits of each i_k in its pieces' sizes."""

    offset: int
    axes: tuple

    @staticmethod
    def of_shape(shape: Sequence[int]) -> "Layout":
        strides, step = [], 1
        for n in reversed(shape):
            strides.insert(0, step)
            step *= _dim(n)
        return Layout(0, tuple(((_dim(n), s),) if n != 1 else ((1, 0),) for n, s in zip(shape, strides)))

    @property
    def shape(self) -> tuple:
        return tuple(prod(size for size, _ in axis) for axis in self.axes)

    def axis(self, k: int) -> tuple:
        """Axis k's pieces, coalesced (size-1 pieces dropped)."""
        return _coalesce(self.axes[k])

    def flat(self) -> tuple:
        """All pieces in row-major order, coalesced: two layouts of the same number of
        elements with equal `flat()` address the same source elements in the same order."""
        return _coalesce([p for axis in self.axes for p in axis])

    # -- the view ops ----------------------------------------------------------------------
    def reshape(self, shape: Sequence[int]) -> "Layout":
        pieces = list(self.flat())
        if prod(shape) != prod(self.shape):
            raise NotAffine(f"reshape {list(self.shape)} -> {list(shape)} changes the element count")
        axes = []
        for n in shape:
            n, taken = _dim(n), []
            while more_than_one(n):
                if not pieces:
                    raise NotAffine("reshape ran out of pieces")
                size, stride = pieces[0]
                if n % size == 0:
                    taken.append(pieces.pop(0))
                    n //= size
                elif size % n == 0:
                    taken.append((n, stride * (size // n)))
                    pieces[0] = (size // n, stride)
                    n = 1
                else:
                    raise NotAffine(f"reshape {list(self.shape)} -> {list(shape)} splits a strided piece "
                                    f"of {size} elements unevenly")
            axes.append(tuple(taken) or ((1, 0),))
        return Layout(self.offset, tuple(axes))

    def transpose(self, perm: Sequence[int]) -> "Layout":
        return Layout(self.offset, tuple(self.axes[int(p)] for p in perm))

    def slice(self, k: int, start: int, stop: int, step: int = 1) -> "Layout":
        """Elements start:stop:step of axis k (already clamped to the axis)."""
        pieces = self.axis(k)
        count = dim_max(0, -floordiv(-(stop - start), step))
        if count == self.shape[k] and step == 1:
            return self
        if not pieces:
            return self
        if len(pieces) == 1:
            (size, stride), = pieces
            new = ((count, stride * step),)
            return Layout(self.offset + start * stride, self.axes[:k] + (new,) + self.axes[k + 1:])
        outer_size, outer_stride = pieces[0]
        inner = prod(size for size, _ in pieces[1:])
        if step == 1 and start % inner == 0 and (stop - start) % inner == 0:
            new = ((count // inner, outer_stride),) + pieces[1:]
            return Layout(self.offset + (start // inner) * outer_stride,
                          self.axes[:k] + (new,) + self.axes[k + 1:])
        if count == 1:
            return self.select(k, start).unsqueeze_at(k)
        raise NotAffine(f"slice {start}:{stop}:{step} cuts across the strided pieces of axis {k}")

    def select(self, k: int, index: int) -> "Layout":
        """Axis k removed, its element `index` kept (Gather of one index)."""
        offset = self.offset
        for size, stride in reversed(self.axes[k]):
            offset += (index % size) * stride
            index //= size
        return Layout(offset, self.axes[:k] + self.axes[k + 1:])

    def unsqueeze_at(self, k: int) -> "Layout":
        return Layout(self.offset, self.axes[:k] + (((1, 0),),) + self.axes[k:])

    def expand(self, shape: Sequence[int]) -> "Layout":
        """numpy broadcasting to `shape`: new leading axes and size-1 axes repeat (stride 0)."""
        shape = [_dim(n) for n in shape]
        axes = (((1, 0),),) * (len(shape) - len(self.axes)) + self.axes
        out = []
        for axis, n in zip(axes, shape):
            size = prod(s for s, _ in axis)
            if size == n or n == 1:
                out.append(axis)
            elif size == 1:
                out.append(((n, 0),))
            else:
                raise NotAffine(f"expand of an axis of {size} to {n}")
        return Layout(self.offset, tuple(out))

    def tile(self, repeats: Sequence[int]) -> "Layout":
        """Tile: each axis repeated whole, `repeats[k]` times (an outer stride-0 piece)."""
        return Layout(self.offset, tuple((((_dim(r), 0),) if more_than_one(_dim(r)) else ()) + axis
                                         for axis, r in zip(self.axes, repeats)))

    # -- reading it ------------------------------------------------------------------------
    def indices(self) -> np.ndarray:
        """The source element index of every result element (int64, the result's shape); a
        layout with symbolic sizes is enumerated at its probe sizes (see `probe`)."""
        shape = probe(self.shape)
        if prod(shape) > MAX_INDEX_ELEMENTS:
            raise NotAffine(f"a view of {prod(shape)} elements is too large to enumerate")
        pieces = [probe(p) for axis in self.axes for p in axis]
        total = np.full((), probe(self.offset), dtype=np.int64)
        for size, stride in pieces:
            total = total[..., None] + np.arange(size, dtype=np.int64) * stride
        return total.reshape(shape)


# -- reading a chain of view ops off the graph ---------------------------------------------
def apply(layout: Layout, node: Node, value: Value) -> Layout:
    """The layout of `value` (an output of view op `node`) from the layout of node's input 0."""
    op, shape_in = node.op_type, tuple(node.inputs[0].desc.shape)
    out_shape = tuple(value.desc.shape)
    rank = len(shape_in)
    if op in ("Reshape", "Squeeze", "Unsqueeze", "Flatten", "Identity"):
        return layout.reshape(out_shape)
    if op == "Transpose":
        perm = node.attrs.get("perm") or list(range(rank))[::-1]
        return layout.transpose([int(p) for p in perm])
    if op == "Expand":
        return layout.expand(out_shape)
    if op == "Tile":
        repeats = node.attrs.get("repeats")
        if repeats is None:
            raise NotAffine(f"Tile {node.name} has no constant repeats")
        return layout.tile(repeats)
    if op == "Slice":
        starts, ends = list(node.attrs.get("starts", [])), list(node.attrs.get("ends", []))
        axes = list(node.attrs.get("axes") or range(len(starts)))
        steps = list(node.attrs.get("steps") or [1] * len(starts))
        for start, end, axis, step in zip(starts, ends, axes, steps):
            axis = int(axis) % rank
            if int(step) < 1:
                raise NotAffine(f"Slice {node.name} steps backwards")
            clamped = _slices(layout.shape, {"starts": [start], "ends": [end], "axes": [axis], "steps": [step]})[axis]
            layout = layout.slice(axis, clamped.start, clamped.stop, clamped.step)
        return layout
    if op == "Split":
        axis = int(node.attrs.get("axis", 0)) % rank
        sizes = split_sizes(node)
        start = sum(sizes[:value.index])
        return layout.slice(axis, start, start + sizes[value.index])
    if op == "Gather":
        indices = node.inputs[1]
        if indices is None or not indices.is_const:
            raise NotAffine(f"Gather {node.name} has computed indices")
        axis = int(node.attrs.get("axis", 0)) % rank
        idx = np.asarray(indices.const).astype(np.int64) % shape_in[axis]
        if idx.ndim == 0:
            return layout.select(axis, int(idx))
        flat = idx.reshape(-1)
        step = int(flat[1] - flat[0]) if flat.size > 1 else 1
        if step < 1 or np.any(np.diff(flat) != step):
            raise NotAffine(f"Gather {node.name} takes indices that are not an arithmetic progression")
        sliced = layout.slice(axis, int(flat[0]), int(flat[0]) + step * flat.size, step)
        return sliced.reshape(out_shape)
    raise NotAffine(f"{op} {node.name} is not a view")


def split_sizes(node: Node) -> list:
    """The sizes of a (canonical) Split's outputs along its axis."""
    shape = node.inputs[0].desc.shape
    axis = int(node.attrs.get("axis", 0)) % len(shape)
    split = node.attrs.get("split")
    if split:
        return [int(s) for s in split]
    n = len(node.outputs)
    chunk = -floordiv(-shape[axis], n)
    return [dim_min(chunk, dim_max(shape[axis] - i * chunk, 0)) for i in range(n)]


def is_view(node: Optional[Node]) -> bool:
    if node is None or node.op_type not in VIEW_OPS:
        return False
    return node.op_type != "Gather" or (len(node.inputs) > 1 and node.inputs[1] is not None
                                        and node.inputs[1].is_const)


@dataclass
class ViewChain:
    """The end of the chain is `layout` of `source`, through `nodes` (in graph order, source
    side first); `outputs[k]` is the output of `nodes[k]` the chain goes through."""

    source: Value
    layout: Layout
    nodes: list
    outputs: list

    def replay(self, layout: Layout) -> Layout:
        """The chain's views applied to `layout` (the layout of its source)."""
        for node, out in zip(self.nodes, self.outputs):
            layout = apply(layout, node, out)
        return layout


def trace_up(value: Value, stop=None) -> ViewChain:
    """Walk up from `value` through view ops to the first value that is not a view's output
    (or for which `stop(value)` holds); its layout as seen from there."""
    chain = []
    while is_view(value.producer) and not (stop is not None and stop(value)):
        chain.append(value)
        value = value.producer.inputs[0]
    outputs = chain[::-1]
    found = ViewChain(value, Layout.of_shape(value.desc.shape), [v.producer for v in outputs], outputs)
    return ViewChain(value, found.replay(found.layout), found.nodes, outputs)


def trace_down(value: Value, stop) -> ViewChain:
    """Walk down from `value` through sole-reader view ops until `stop(node)` holds for the
    next reader (or it is not a sole-reader view, or not a strided view any more); `source`
    is the value reached (an exception to the naming: the end, not the start), `layout` is
    it as a view of `value`."""
    layout, nodes = Layout.of_shape(value.desc.shape), []
    current = value
    while len(current.uses) == 1 and not current.is_graph_output:
        user = current.uses[0][0]
        if not is_view(user) or stop(user) or len(user.outputs) != 1:
            break
        try:
            layout = apply(layout, user, user.outputs[0])
        except NotAffine:
            break
        nodes.append(user)
        current = user.outputs[0]
    return ViewChain(current, layout, nodes, [n.outputs[0] for n in nodes])
