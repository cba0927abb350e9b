"""--compare on int8 outputs: the step rules, widened to twice onnxruntime's own spread
(its optimized execution against its plain one) where a deep model makes that larger."""
import numpy as np

from simulator.compare import SPREAD_FACTOR, Spread, compare_one

RNG = np.random.default_rng(11)


REF = RNG.uniform(-1, 1, 4096).astype(np.float32)        # a tanh output: scale 1


def _pair(drift):
    """The reference and a copy with 2% of its elements off by up to `drift` (a few steps
    flipped upstream, as a deep int8 model shows)."""
    ref = REF
    noise = np.zeros(ref.size, np.float32)
    hit = RNG.choice(ref.size, ref.size // 50, replace=False)
    noise[hit] = RNG.uniform(-drift, drift, hit.size)
    noise[hit[0]] = drift                              # the largest deviation, exactly
    return ref, ref + noise


def test_drift_within_twice_onnxruntimes_own_spread_passes():
    ref, got = _pair(0.3)                              # 0.3 > 0.1 x max|ref|: the plain rule fails
    assert not compare_one("y", "y", got, ref, "int8-fp16", step=0.02).passed
    _, optimized = _pair(0.2)
    spread = Spread.between(optimized, ref)
    check = compare_one("y", "y", got, ref, "int8-fp16", step=0.02, spread=spread)
    assert check.passed and "spread" in check.note
    assert check.tolerance * check.scale == SPREAD_FACTOR * spread.max_abs_error
    assert check.reference_spread["max_abs_error"] == spread.max_abs_error


def test_drift_beyond_twice_the_spread_fails():
    ref, got = _pair(0.5)
    _, optimized = _pair(0.2)
    check = compare_one("y", "y", got, ref, "int8", step=0.02, spread=Spread.between(optimized, ref))
    assert not check.passed


def test_a_wrong_kernel_fails_whatever_the_spread():
    ref, _ = _pair(0.01)
    _, optimized = _pair(0.3)
    wrong = -ref                                       # right magnitude, wrong direction
    check = compare_one("y", "y", wrong, ref, "int8-fp16", step=0.02, spread=Spread.between(optimized, ref))
    assert not check.passed and "cosine" in check.note


def test_within_one_step_needs_no_spread():
    ref = RNG.integers(-128, 128, 256).astype(np.int8)
    got = ref.copy()
    got[:3] += np.int8(1)
    check = compare_one("y", "y", got, ref, "int8", step=1.0)
    assert check.passed and check.note == "" and check.reference_spread is None


def test_compare_with_onnx_measures_the_spread_of_an_int8_model(tmp_path):
    import onnx
    from simulator.compare import compare_with_onnx
    from test_fusion_quant import qdq_conv_block
    from helpers import fuse_model, run_ir
    model = qdq_conv_block()
    path = str(tmp_path / "block.onnx")
    onnx.save(model, path)
    graph, _ = fuse_model(model)
    feeds = {"x": RNG.standard_normal((1, 4, 6, 6)).astype(np.float32),
             "res": RNG.standard_normal((1, 8, 6, 6)).astype(np.float32)}
    [check] = compare_with_onnx(path, graph, feeds, run_ir(graph, feeds), {})
    assert check.precision == "int8" and check.passed
    assert check.reference_spread is not None and check.reference_spread["max_abs_error"] >= 0
