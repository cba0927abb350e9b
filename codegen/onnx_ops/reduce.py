"""Kernels of Reduce* and ArgMax/ArgMin (ge/ops/reduce.py): .om type and work rule.

Work of a reduction: vector ops per INPUT element and per OUTPUT element, by class; a
reduction with no axes to reduce (noop_with_empty_axes) is a copy and does no arithmetic.
"""
from __future__ import annotations

from codegen.registry import register
from codegen.work import Work
from ge.ops.reduce import reduced_axes

_REDUCE_KERNELS = {
    #  op                 om type            per input                          per output
    "ReduceSum":       ("ReduceSum",       {"alu": 1},                        {}),
    "ReduceMean":      ("ReduceMean",      {"alu": 1},                        {"alu": 1}),
    "ReduceMax":       ("ReduceMax",       {"alu": 1},                        {}),
    "ReduceMin":       ("ReduceMin",       {"alu": 1},                        {}),
    "ReduceProd":      ("ReduceProd",      {"alu": 1},                        {}),
    "ReduceSumSquare": ("",                {"alu": 2},                        {}),
    "ReduceL1":        ("",                {"alu": 2},                        {}),
    "ReduceL2":        ("ReduceL2D",       {"alu": 2},                        {"div": 1}),
    "ReduceLogSum":    ("",                {"alu": 1},                        {"transcendental": 1}),
    # stable form: max-reduce, sub, exp, sum-reduce per element; log and add-back per output
    "ReduceLogSumExp": ("ReduceLogSumExp", {"alu": 3, "transcendental": 1}, {"alu": 1, "transcendental": 1}),
}


def _reduce_work(op_type: str, per_in: dict, per_out: dict):
    def work(inputs, outputs, attrs):
        if reduced_axes(op_type, attrs, len(inputs[0].shape)) is None:
            return Work()
        w = Work()
        for cls, count in per_in.items():
            w.add_vector(cls, count * inputs[0].size)
        for cls, count in per_out.items():
            w.add_vector(cls, count * outputs[0].size)
        return w

    return work


def _arg_work(inputs, outputs, attrs):
    return Work().add_vector("alu", 2 * inputs[0].size)   # compare + select index


for _op_type, (_om_type, _in, _out) in _REDUCE_KERNELS.items():
    register(_op_type, _reduce_work(_op_type, _in, _out), _om_type)
register("ArgMax", _arg_work)
register("ArgMin", _arg_work)
