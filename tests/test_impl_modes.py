"""high_performance vs high_precision kernels: their own numerics (fast approximations with
intermediates in the data's dtype) and their own price, unfused and inside fused kernels,
and end to end through atc + atc-sim --compare."""
from __future__ import annotations

import math

import numpy as np
import pytest

from codegen.om_import import load_om_graph
from codegen.registry import kernel_of
from ge.ops.common import approx_reciprocal
from ge.ops.registry import TensorType, get_op
from simulator.cost_model import load_chip, price_kernel

import models_small
from helpers import run_ort
from test_atc_flags import atc, base, run_sim, work  # noqa: F401  (fixtures)

HP = {"op_impl_mode": "high_performance"}
RNG = np.random.default_rng(4)
X32 = (RNG.standard_normal(4096) * 3).astype(np.float32)


@pytest.mark.parametrize("dtype,bits", [(np.float16, 10), (np.float32, 23)])
def test_reciprocal_estimate_is_within_one_ulp_toward_zero(dtype, bits):
    d = (np.abs(RNG.standard_normal(10000)) * 50 + 0.01).astype(dtype)
    r = approx_reciprocal(d)
    exact = 1.0 / d.astype(np.float64)
    assert r.dtype == dtype
    assert np.all(r.astype(np.float64) <= exact * (1 + 1e-12))                  # toward zero
    assert np.max(np.abs(r - exact) / exact) <= 2.0 ** -bits
    assert np.any(r != (1.0 / d.astype(np.float64)).astype(dtype))               # not round-to-nearest


def test_fast_sigmoid_numerics():
    exact = 1 / (1 + np.exp(-X32.astype(np.float64)))
    sig = get_op("Sigmoid")
    for dtype, tol in ((np.float16, 2e-3), (np.float32, 2e-7)):
        x = X32.astype(dtype)
        fast = sig.compute([x], HP)[0]
        default = sig.compute([x], {})[0]
        assert fast.dtype == dtype and np.max(np.abs(fast - exact)) < tol
        assert np.any(fast != default)                                          # its own numerics


def test_fast_gelu_is_the_tanh_approximation_in_the_data_dtype():
    gelu = get_op("Gelu")
    x = X32
    c = math.sqrt(2 / math.pi)
    tanh_form = 0.5 * x * (1 + np.tanh(c * (x + 0.044715 * x ** 3)))
    np.testing.assert_allclose(gelu.compute([x], HP)[0], tanh_form, rtol=1e-5, atol=1e-6)
    erf_form = gelu.compute([x], {})[0]
    diff = np.max(np.abs(gelu.compute([x], HP)[0] - erf_form))
    assert 1e-5 < diff < 2e-3                                                   # close, but not the same
    h = x.astype(np.float16)
    assert gelu.compute([h], HP)[0].dtype == np.float16


def test_fast_softmax_numerics():
    x = (RNG.standard_normal((8, 64)) * 4).astype(np.float16)
    soft = get_op("Softmax")
    exact = np.exp(x.astype(np.float64) - x.max(-1, keepdims=True))
    exact /= exact.sum(-1, keepdims=True)
    fast = soft.compute([x], {**HP, "axis": -1})[0]
    assert fast.dtype == np.float16 and np.max(np.abs(fast - exact)) < 2e-3
    assert np.any(fast != soft.compute([x], {"axis": -1})[0])


@pytest.mark.parametrize("op_type,attrs", [("Sigmoid", {}), ("Softmax", {"axis": -1})])
def test_fast_kernels_are_priced_cheaper(op_type, attrs):
    chip = load_chip("Ascend910")
    t = TensorType(np.dtype(np.float16), (64, 1024))
    kernel = kernel_of(op_type)
    from simulator.cost_model import KernelSpec

    def cost(a):
        work = kernel.work([t], [t], a)
        spec = KernelSpec(name="k", op_type=op_type, work=work, input_bytes=t.nbytes, output_bytes=t.nbytes,
                          intermediate_bytes=0, compute_dtype=t.dtype, no_task=False, output_elements=t.size,
                          largest_input_bytes=t.nbytes)
        return price_kernel(chip, spec).vector_us
    assert cost({**attrs, **HP}) < cost(attrs)


def test_gelu_costs_the_same_in_both_modes():
    """The cost model prices tanh and erf as one transcendental op class, and float32
    intermediates at the kernel's width: the tanh approximation saves nothing here."""
    t = TensorType(np.dtype(np.float16), (64, 1024))
    kernel = kernel_of("Gelu")
    assert kernel.work([t], [t], HP).vector_ops == kernel.work([t], [t], {}).vector_ops


def test_fused_epilogues_follow_the_mode():
    x = (RNG.standard_normal((4, 16)) * 2).astype(np.float16)
    w = (RNG.standard_normal((16, 16)) * 0.5).astype(np.float16)
    b = RNG.standard_normal(16).astype(np.float16)
    op = kernel_of("MatMulBiasSigmoidFusionOp").op
    default = op.compute([x, w, b], {"activation": "Sigmoid"})[0]
    fast = op.compute([x, w, b], {"activation": "Sigmoid", **HP})[0]
    assert np.any(fast != default) and np.max(np.abs(fast.astype(np.float32) - default)) < 4e-3
    t16 = TensorType(np.dtype(np.float16), (4, 16))
    work = kernel_of("MatMulBiasSigmoidFusionOp").work
    args = ([t16, TensorType(np.dtype(np.float16), (16, 16)), TensorType(np.dtype(np.float16), (16,))], [t16])
    assert "div" in work(*args, {"activation": "Sigmoid"}).vector_ops
    assert "div" not in work(*args, {"activation": "Sigmoid", **HP}).vector_ops


def _kernels(om):
    loaded = load_om_graph(str(om))
    return loaded, {n.name: n for n in loaded.graph.nodes}


def test_high_performance_end_to_end(work, capsys):
    mlp = models_small.save(models_small.mlp(), work / "mlp.onnx")
    assert atc(capsys, *base(mlp, work / "exact"))[0] == 0
    rc, text = atc(capsys, *base(mlp, work / "fast"), "--op_select_implmode=high_performance_for_all")
    assert rc == 0, text
    _, nodes = _kernels(work / "fast.om")
    assert {n.attrs.get("op_impl_mode") for n in nodes.values()} == {"high_performance"}
    x = RNG.standard_normal((4, 16)).astype(np.float32)
    np.save(work / "x.npy", x)
    outs, times = {}, {}
    for name in ("exact", "fast"):
        rc, text = run_sim(capsys, "--model", work / f"{name}.om", "--input", work / "x.npy", "--output",
                           work / name, "--compare", mlp)
        assert rc == 0 and "compare PASS" in text, text
        outs[name] = np.load(work / name / "y.npy")
        times[name] = float(text.split("NPU_compute_time (ms): min = ")[1].split(",")[0])
    assert np.any(outs["exact"] != outs["fast"])
    ref = run_ort(models_small.mlp(), {"x": x})["y"]
    assert np.max(np.abs(outs["fast"] - ref)) < 2e-2
    assert times["fast"] < times["exact"]                       # the sigmoid and softmax divisions are gone


def test_high_performance_under_force_fp32_is_judged_as_an_approximation(work, capsys):
    mlp = models_small.save(models_small.mlp(), work / "mlp.onnx")
    rc, text = atc(capsys, *base(mlp, work / "m"), "--precision_mode=force_fp32",
                   "--op_select_implmode=high_performance", "--optypelist_for_implmode=Gelu")
    assert rc == 0, text
    rc, text = run_sim(capsys, "--model", work / "m.om", "--compare", mlp)
    assert rc == 0 and "(fp16) PASS" in text, text               # tanh-GELU: judged at the fp16 tolerance
