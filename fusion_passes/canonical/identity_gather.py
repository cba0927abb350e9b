"""A Gather or GatherND whose constant indices enumerate the data in order -> a Reshape.

transformers build a decoder's padding mask by indexing the [B, S] attention mask with
positions computed from the shapes alone (`mask[:, cache_position]`); after folding, the
TorchScript export is `Gather(Flatten(mask), arange(S) viewed [1,1,1,S], axis=0)` and the
dynamo export `GatherND(mask, [[0, 0], [0, 1], ...])`: every element once, in order.  That
is a view of the same bytes (a Reshape to the gather's output shape), not a kernel, and once
it is a view the mask chain around it is elementwise and autofuse takes it whole.

Exact: Gather(x, idx, axis) equals x reshaped to x.shape[:axis] + idx.shape +
x.shape[axis+1:] when idx, flattened (negative values taken modulo the axis), is
0, 1, ..., x.shape[axis] - 1; GatherND (batch_dims 0) likewise when its index tuples are the
positions of x's first k axes in row-major order.
"""
from __future__ import annotations

import numpy as np

from fusion_passes.canonical.rewrite import Rewrite, add_node, replace_value


def _enumerates(indices: np.ndarray, dims: tuple) -> bool:
    """True when `indices` [..., len(dims)] lists every position of `dims` once, in order."""
    k = len(dims)
    if indices.ndim < 1 or indices.shape[-1] != k or int(np.prod(indices.shape[:-1])) != int(np.prod(dims)):
        return False
    flat, bound = indices.reshape(-1, k).astype(np.int64), np.asarray(dims, np.int64)
    if np.any(flat < -bound) or np.any(flat >= bound):
        return False                    # out of range: the op refuses it, a Reshape would not
    flat = flat % bound
    return bool(np.array_equal(np.ravel_multi_index(flat.T, dims), np.arange(flat.shape[0])))


class IdentityGather(Rewrite):
    name = "IdentityGather"
    anchor_types = ("Gather", "GatherND")

    def apply(self, graph, node):
        x, idx = node.inputs[0], node.inputs[1]
        if x.is_const or not idx.is_const or x.desc.shape is None:
            return False
        shape = tuple(int(d) for d in x.desc.shape)
        if node.op_type == "Gather":
            axis = int(node.attrs.get("axis", 0)) % max(len(shape), 1)
            if not _enumerates(idx.const[..., None], (shape[axis],)):
                return False
        else:
            k = idx.const.shape[-1] if idx.const.ndim else 0
            if int(node.attrs.get("batch_dims", 0)) or not 0 < k <= len(shape) or \
                    not _enumerates(idx.const, shape[:k]):
                return False
        out = node.outputs[0]
        view = add_node(graph, "Reshape", [x], {"shape": [int(d) for d in out.desc.shape]},
                        f"{node.name}/Reshape", [node], before=node)
        replace_value(graph, out, view.outputs[0])
        return True
