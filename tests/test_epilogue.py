"""The cube kernels' one epilogue (codegen/fused/epilogue.py): bias, residual before or after
the activation, any canonical activation by its own op, the float16 rule, and its work."""
from __future__ import annotations

import numpy as np
import pytest

from codegen.fused import epilogue
from codegen.registry import kernel_of
from ge.errors import AtcError
from ge.ops.registry import TensorType, get_op

RNG = np.random.default_rng(3)


@pytest.mark.parametrize("op,attrs", [("Relu", {}), ("Gelu", {"approximate": "tanh"}), ("Swish", {"alpha": 1.702}),
                                      ("Clip", {"min": -0.5, "max": 0.5}), ("HardSigmoid", {"alpha": 0.25}),
                                      ("Mish", {}), ("LeakyRelu", {"alpha": 0.3})])
@pytest.mark.parametrize("after", [0, 1])
def test_epilogue_is_bias_residual_and_the_activation_op_itself(op, attrs, after):
    acc = RNG.standard_normal((2, 3, 4)).astype(np.float32)
    bias, residual = RNG.standard_normal(4).astype(np.float32), RNG.standard_normal((2, 3, 4)).astype(np.float32)
    kernel_attrs = {"activation": op, "residual_after_act": after, **{f"act_{k}": v for k, v in attrs.items()}}
    got = epilogue.apply(acc, kernel_attrs, bias, residual)
    act = lambda v: get_op(op).compute([v], attrs)[0]              # noqa: E731
    want = act(acc + bias) + residual if after else act(acc + bias + residual)
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)


def test_float16_data_accumulates_in_float32_and_rounds_once():
    assert epilogue.accumulate_dtype(np.float16) == np.float32 and epilogue.accumulate_dtype(np.float32) == np.float32
    acc = (RNG.standard_normal(64) * 8).astype(np.float32)
    got = epilogue.apply(acc, {"activation": "Gelu"}, data_dtype=np.float16)
    assert got.dtype == np.float32                                   # the kernel rounds at its output
    np.testing.assert_allclose(got, get_op("Gelu").compute([acc], {})[0], rtol=1e-6)


def test_an_unknown_activation_is_refused():
    with pytest.raises(AtcError) as info:
        epilogue.apply(np.zeros(2, np.float32), {"activation": "Softmax"})
    assert info.value.code == "E16004"


def test_work_counts_each_stage_and_its_on_chip_tile():
    out = TensorType(np.float16, (4, 8))
    attrs = {"activation": "Swish"}
    work = epilogue.work(out, attrs, bias=True, residual=True, bias_is_a_stage=True)
    swish = kernel_of("Swish").work([out], [out], {})
    assert work.vector_ops["alu"] == 2 * out.size + swish.vector_ops["alu"]
    assert work.onchip_bytes == 3 * out.nbytes                   # bias, residual, activation outputs
    conv = epilogue.work(out, {}, bias=True, residual=False, bias_is_a_stage=False, min_stages=1)
    assert conv.onchip_bytes == out.nbytes and conv.vector_ops == {"alu": out.size}
