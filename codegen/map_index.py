"""`MapIndex`: the op GE's multi-batch pass inserts to pick a gear (graph/passes/multi_batch_clone_pass.cc).

It reads the gear the runtime was given -- the model input `ascend_mbatch_shape_data`
(int32[k], k values per gear) -- and the Const of every gear's values (int32[n * k], gear
after gear), and returns the index of the matching gear as an int32 scalar, which the
`Case` op uses to run that gear's subgraph.  A value that matches no gear is the caller's
mistake: ACL refuses such a shape before the model runs, and so does InvalidNode here.
"""
from __future__ import annotations

import numpy as np

from codegen.registry import register
from codegen.work import Work
from ge.errors import InvalidNode
from ge.ops.registry import OpDef, OpKind, TensorType

OP_TYPE = "MapIndex"


def gear_table(data_seq: np.ndarray, width: int) -> np.ndarray:
    """The Const of gears as a [gears, width] table."""
    if width <= 0 or data_seq.ndim != 1 or data_seq.size % width:
        raise InvalidNode(f"MapIndex: {data_seq.size} gear values do not split into gears of {width}.")
    return data_seq.reshape(-1, width)


def _compute(inputs, attrs):
    x, data_seq = (np.asarray(a) for a in inputs[:2])
    table = gear_table(data_seq.astype(np.int64), x.size)
    hits = np.flatnonzero(np.all(table == x.astype(np.int64).reshape(1, -1), axis=1))
    if hits.size == 0:
        gears = "; ".join(",".join(str(int(v)) for v in row) for row in table)
        raise InvalidNode(f"MapIndex: shape data {[int(v) for v in x.reshape(-1)]} matches no gear; the gears "
                          f"are {gears}.", "Pick one of the gears the model was compiled with.")
    return [np.asarray(hits[0], dtype=np.int32)]


def _infer(inputs, attrs):
    x, data_seq = inputs[:2]
    if x is None or data_seq is None or len(x.shape) != 1 or len(data_seq.shape) != 1:
        raise InvalidNode("MapIndex takes a 1-D shape data input and a 1-D Const of gears.")
    if x.shape[0] == 0 or data_seq.shape[0] % x.shape[0]:
        raise InvalidNode(f"MapIndex: {data_seq.shape[0]} gear values do not split into gears of {x.shape[0]}.")
    return [TensorType(np.dtype(np.int32), ())]


def _work(inputs, outputs, attrs):
    """One compare per gear value, and the row reduction."""
    n = inputs[1].size if inputs[1] is not None else 0
    return Work().add_vector("alu", 2 * n)


MAP_INDEX = OpDef(op_type=OP_TYPE, kind=OpKind.OPAQUE, compute=_compute, infer=_infer)
register(MAP_INDEX, _work, om_type="MapIndex")
