"""Kernels of the elementwise ONNX ops (ge/ops/elementwise.py): .om type and work rule.

Work: vector ops per output element, by class; a variadic op (Max, Min, Sum, Mean) does one
ALU op per extra input per element (Mean one more, for the division by the count).
"""
from __future__ import annotations

from codegen.registry import register
from codegen.work import Work, by_impl, no_work, per_element
from ge.ops.common import present


def _fold(extra_alu: int = 0):
    def work(inputs, outputs, attrs) -> Work:
        n = sum(t.size for t in outputs)
        return Work().add_vector("alu", (len(present(inputs)) - 1 + extra_alu) * n)

    return work


def _clip_work(inputs, outputs, attrs) -> Work:
    bounds = sum(attrs.get(k) is not None for k in ("min", "max"))
    return Work().add_vector("alu", bounds * outputs[0].size)


# op type: (work rule, .om type; "" = the op type)
KERNELS = {
    "Relu":            (per_element(alu=1), "Relu"),
    # high_performance: add, reciprocal estimate and a select/multiply instead of the division
    "Sigmoid":         (by_impl(per_element(transcendental=1, alu=1, div=1),
                                per_element(transcendental=1, alu=3)), "Sigmoid"),
    "Tanh":            (per_element(transcendental=1), ""),
    "Exp":             (per_element(transcendental=1), "Exp"),
    "Log":             (per_element(transcendental=1), "Log"),
    "Sqrt":            (per_element(div=1), "Sqrt"),
    "Reciprocal":      (per_element(div=1), "Reciprocal"),
    "Neg":             (per_element(alu=1), "Neg"),
    "Abs":             (per_element(alu=1), ""),
    "Erf":             (per_element(transcendental=1), "Erf"),
    "Floor":           (per_element(alu=1), "Floor"),
    "Ceil":            (per_element(alu=1), "Ceil"),
    "Round":           (per_element(alu=1), "Round"),
    "Sign":            (per_element(alu=1), "Sign"),
    "Softplus":        (per_element(transcendental=2, alu=1), ""),
    "LeakyRelu":       (per_element(alu=2), ""),
    "Elu":             (per_element(transcendental=1, alu=3), "Elu"),
    "Selu":            (per_element(transcendental=1, alu=4), ""),
    "HardSigmoid":     (per_element(alu=4), ""),
    "HardSwish":       (per_element(alu=5), "HardSwish"),
    "Gelu":            (per_element(transcendental=1, alu=7), ""),
    "Swish":           (per_element(transcendental=1, alu=2, div=1), "Swish"),   # Sigmoid + Mul
    "Mish":            (per_element(transcendental=3, alu=2), "Mish"),           # exp, log, tanh
    "Sin":             (per_element(transcendental=1), "Sin"),
    "Cos":             (per_element(transcendental=1), "Cos"),
    "Not":             (per_element(alu=1), "LogicalNot"),
    "IsNaN":           (per_element(alu=1), ""),
    "PRelu":           (per_element(alu=2), "PRelu"),
    "Add":             (per_element(alu=1), "Add"),
    "Sub":             (per_element(alu=1), "Sub"),
    "Mul":             (per_element(alu=1), "Mul"),
    "Div":             (per_element(div=1), "RealDiv"),
    "Pow":             (per_element(transcendental=2, alu=1), "Pow"),
    "Mod":             (per_element(div=1, alu=2), ""),
    "Max":             (_fold(), "Maximum"),
    "Min":             (_fold(), "Minimum"),
    "Sum":             (_fold(), ""),
    "Mean":            (_fold(1), ""),
    "Equal":           (per_element(alu=1), "Equal"),
    "Less":            (per_element(alu=1), "Less"),
    "Greater":         (per_element(alu=1), "Greater"),
    "LessOrEqual":     (per_element(alu=1), "LessEqual"),
    "GreaterOrEqual":  (per_element(alu=1), "GreaterEqual"),
    "And":             (per_element(alu=1), "LogicalAnd"),
    "Or":              (per_element(alu=1), "LogicalOr"),
    "Xor":             (per_element(alu=1), "LogicalXor"),
    "Cast":            (per_element(alu=1), "Cast"),
    "Clip":            (_clip_work, "ClipByValue"),
    "Where":           (per_element(alu=1), "Select"),
}

for _op_type, (_work, _om_type) in KERNELS.items():
    register(_op_type, _work, _om_type)
register("Identity", no_work, no_task=True)
register("Dropout", per_element(move=1), "Dropout")   # its mask is read: a copy and a fill
