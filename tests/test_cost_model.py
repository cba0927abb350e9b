"""Chip data files and the cost model: loading through design files, derived peaks, and the
behaviour the calibration rests on -- padding to fractals and C0, the split over cores, batch
scaling up to saturation, memory- vs compute- vs launch-bound kernels, L2 residency across a
stream, fusion savings, spills, views, SuperKernel terms.  Expected values are computed here
from the data files' primitives, never copied from the model; `golden/cost_model_cases.json`
pins the priced totals of a few reference kernels so a change cannot move them silently:

    python tests/test_cost_model.py --update      # after a deliberate change; say why in the commit
"""
import json
import os
import sys
from dataclasses import replace

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if REPO not in sys.path:
    sys.path.insert(0, REPO)

from codegen.registry import kernel_of  # noqa: E402
from codegen.work import Gemm, Work  # noqa: E402
from ge.errors import AtcError  # noqa: E402
from ge.ops.registry import TensorType  # noqa: E402
from simulator import cost_model as cm  # noqa: E402
from simulator.cost_model import (KernelSpec, available_socs, load_chip, plan_gemm,  # noqa: E402
                                  price_kernel, price_stream, price_super_kernel)

SOCS = ("Ascend910", "Ascend910B2", "Ascend310P3")
FP16 = np.dtype(np.float16)
GOLDEN = os.path.join(REPO, "tests", "golden", "cost_model_cases.json")
CHIP_KEYS = {"ai_core_cnt", "vector_core_cnt", "cube_freq", "vec_freq", "memory_size", "hbm_bandwidth", "l2_size"}


def elementwise(name, n, n_inputs=1, ops=1, cls="alu", inter=0):
    """A kernel reading `n_inputs` fp16 tensors of n elements and writing one."""
    return KernelSpec(name, name, Work().add_vector(cls, ops * n), input_bytes=n_inputs * n * 2,
                      output_bytes=n * 2, intermediate_bytes=inter, compute_dtype=FP16)


def matmul(name, m, k, n, dtype=FP16, batch=1):
    """[batch*m, k] x [k, n] with a weight B."""
    size = np.dtype(dtype).itemsize
    gemm = Gemm(batch=1, m=batch * m, n=n, k=k, a_elements=batch * m * k)
    return KernelSpec(name, "MatMul", Work.of_gemms(gemm), input_bytes=(batch * m * k + k * n) * size,
                      output_bytes=batch * m * n * size, compute_dtype=dtype, weight_bytes=k * n * size)


def conv(name, images, cin, cout, hw, k=3, groups=1, small_channel=False):
    """A stride-1 'same' conv on fp16 NCHW."""
    window = k * k
    gemm = Gemm(batch=images, groups=groups, m=hw * hw, n=cout // groups, k=cin // groups * window,
                k_window=window, a_elements=cin // groups * hw * hw)
    return KernelSpec(name, "Conv", Work.of_gemms(gemm), input_bytes=2 * (images * cin * hw * hw + cout * cin // groups * window),
                      output_bytes=2 * images * cout * hw * hw, compute_dtype=FP16,
                      weight_bytes=2 * cout * cin // groups * window, small_channel=small_channel)


# ---------------------------------------------------------------- chip data

@pytest.mark.parametrize("soc", available_socs())
def test_each_chip_resolves_every_parameter_with_its_source(soc):
    assert soc in available_socs()
    chip = load_chip(soc)
    assert chip.soc_version == soc and chip.design
    for key in cm._PARAM_FIELDS:
        entry = chip.sources[key]
        assert set(entry) == cm.ENTRY_KEYS | {"file"}, key
        assert entry["confidence"] in cm.CONFIDENCE_LEVELS and entry["source"] and entry["unit"], key
        assert getattr(chip, key) == float(entry["value"])
    # A chip file holds what is the chip's own; everything else comes from its design files.
    own = json.loads((cm.CHIP_DIR / f"{soc}.json").read_text())["params"]
    assert set(own) <= CHIP_KEYS
    assert {chip.sources[k]["file"] for k in own} == {f"{soc}.json"}
    assert any(chip.sources[k]["file"] == f"designs/{chip.design}.json" for k in cm._PARAM_FIELDS)


def _chip_file(tmp_path, name, design, params=None):
    base = json.loads((cm.CHIP_DIR / "Ascend310P3.json").read_text())
    doc = {"soc_version": name, "description": "test", "design": design, "params": dict(base["params"])}
    doc["params"].update(params or {})
    path = tmp_path / f"{name}.json"
    path.write_text(json.dumps(doc))
    return path


def test_a_chip_of_a_known_design_reuses_its_parameters_without_copying(tmp_path):
    ref = load_chip("Ascend310P3")
    other = cm._parse_chip(_chip_file(tmp_path, "AscendTwin", ref.design))
    for key in cm._PARAM_FIELDS:
        assert getattr(other, key) == getattr(ref, key)
        assert other.sources[key]["file"].startswith("designs/") == (key not in CHIP_KEYS)


def test_a_chip_overrides_what_differs_from_its_design(tmp_path):
    entry = {"value": 0.5, "unit": "fraction", "source": "test", "confidence": "unconfirmed"}
    chip = cm._parse_chip(_chip_file(tmp_path, "AscendOverride", "m200", {"l2_usable_fraction": entry}))
    assert chip.l2_usable_fraction == 0.5 and chip.sources["l2_usable_fraction"]["file"].endswith("AscendOverride.json")


@pytest.mark.parametrize("design,params,needle", [
    ("nosuchdesign", None, "nosuchdesign"),
    ("../m200", None, "design reference"),
    ("m200", {"bogus_key": {"value": 1, "unit": "x", "source": "x", "confidence": "primary"}}, "bogus_key"),
    ("m200", {"l2_size": {"value": 1, "unit": "x", "source": "x", "confidence": "guess"}}, "confidence"),
    ("m200", {"l2_size": {"value": -1, "unit": "x", "source": "x", "confidence": "primary"}}, "l2_size"),
    ("m200", {"l2_size": {"value": 1}}, "l2_size"),
])
def test_broken_data_files_are_internal_errors(tmp_path, design, params, needle):
    with pytest.raises(AtcError) as err:
        cm._parse_chip(_chip_file(tmp_path, "Bad", design, params))
    assert err.value.code == "E19999" and needle in err.value.message


def test_missing_parameters_and_design_cycles_are_reported(tmp_path, monkeypatch):
    monkeypatch.setattr(cm, "DESIGN_DIR", tmp_path)
    (tmp_path / "a.json").write_text(json.dumps({"design": "a", "base": "b", "params": {}}))
    (tmp_path / "b.json").write_text(json.dumps({"design": "b", "base": "a", "params": {}}))
    path = tmp_path / "Chip.json"
    path.write_text(json.dumps({"soc_version": "Chip", "design": "a", "params": {}}))
    with pytest.raises(AtcError) as err:
        cm._parse_chip(path)
    assert "cyclic" in err.value.message
    (tmp_path / "b.json").write_text(json.dumps({"design": "b", "params": {}}))
    with pytest.raises(AtcError) as err:
        cm._parse_chip(path)
    assert "missing" in err.value.message and "ub_size" in err.value.message


CHIPS_WITH_DEFAULTS = {"Ascend910A": "Ascend910", "Ascend910B1": "Ascend910B2", "Ascend910B3": "Ascend910B2",
                       "Ascend910B4": "Ascend910B2"}


def test_chips_of_other_architectures_get_their_own_design_not_the_310p3_fit():
    """Ascend310 (ARCH_M100) and 310B (ARCH_M300) are not 310P (ARCH_M200): they share the
    DaVinci base, and the calibration fit reaches them only as an unconfirmed default."""
    for soc, design in (("Ascend310", "m100"), ("Ascend310B1", "m300"), ("Ascend310P3", "m200"),
                        ("Ascend910B4", "c220"), ("Ascend910A", "c100")):
        assert load_chip(soc).design == design
    for soc in ("Ascend310", "Ascend310B1", "Ascend910", "Ascend910B2"):
        assert "fitted" not in {load_chip(soc).confidence(k) for k in cm._PARAM_FIELDS}, soc


@pytest.mark.parametrize("soc,base", sorted(CHIPS_WITH_DEFAULTS.items()))
def test_chips_listing_only_what_differs_take_the_rest_from_their_base(soc, base):
    doc = json.loads((cm.CHIP_DIR / f"{soc}.json").read_text())
    assert doc["defaults_from"] == base and doc["defaults_reason"]
    chip, parent = load_chip(soc), load_chip(base)
    assert chip.soc_version == soc
    for key in cm._PARAM_FIELDS:
        entry = doc["params"].get(key)
        if entry is not None:           # its own value, with its own source
            assert set(entry) == {"value", "unit", "source", "confidence"} and entry["source"], key
            assert getattr(chip, key) == float(entry["value"]) and chip.confidence(key) == entry["confidence"]
        else:                           # the base's value, the source saying so
            assert getattr(chip, key) == getattr(parent, key), key
            assert chip.sources[key]["source"].startswith(f"as {base} ("), key


def test_the_new_chips_differ_where_the_sources_say():
    b2, b4 = load_chip("Ascend910B2"), load_chip("Ascend910B4")
    assert (b4.ai_core_cnt, b4.vector_core_cnt, b4.cube_freq) == (20, 40, 1500) and b4.memory_size == 32 << 30
    assert b4.cube_peak_flops(np.float16) == pytest.approx(245.76e12)      # 20 x 4096 x 2 x 1.5 GHz
    assert b4.ub_size == b2.ub_size == 192 << 10                           # one AIC-C-220 buffer spec
    assert load_chip("Ascend910B3").ai_core_cnt == 20 and load_chip("Ascend910B1").ai_core_cnt == 24
    assert load_chip("Ascend310").cube_peak_flops(np.float16) == pytest.approx(8e12, rel=0.01)  # the launch figure
    assert load_chip("Ascend310B1").cube_peak_flops(np.float16) == pytest.approx(4e12, rel=0.01)
    assert load_chip("Ascend910A").cube_peak_flops(np.float16) == load_chip("Ascend910").cube_peak_flops(np.float16)


def test_defaults_from_an_unknown_chip_is_an_internal_error(tmp_path):
    path = tmp_path / "Bad.json"
    path.write_text(json.dumps({"soc_version": "Bad", "defaults_from": "Nope", "params": {}}))
    with pytest.raises(AtcError) as err:
        cm._parse_chip(path)
    assert err.value.code == "E19999" and "Nope" in err.value.message


def test_unknown_soc_lists_valid_ones():
    with pytest.raises(AtcError) as err:
        load_chip("Ascend999")
    assert err.value.code == "E10001"
    for soc in SOCS:
        assert soc in err.value.message
    assert "davinci" not in err.value.message        # design files are not chips


@pytest.mark.parametrize("soc", SOCS)
def test_peaks_are_derived_from_primitives(soc):
    chip = load_chip(soc)
    macs = chip.cube_m_size * chip.cube_n_size * chip.cube_k_size
    fp16 = chip.ai_core_cnt * macs * 2 * chip.cube_freq * 1e6
    assert chip.cube_peak_flops(np.float16) == pytest.approx(fp16)
    assert chip.cube_peak_flops(np.int8) == pytest.approx(fp16 * chip.cube_k_size_int8 / chip.cube_k_size)
    assert chip.ddr_bytes_per_us == pytest.approx(chip.hbm_bandwidth * 1e3 * chip.ddr_efficiency)


def test_ascend910_fp16_peak_matches_the_quoted_order():
    # 32 cores x 4096 MAC x 2 x 1 GHz = 262 TFLOPS; Huawei quotes 256.
    assert 250e12 < load_chip("Ascend910").cube_peak_flops(np.float16) < 270e12


def test_the_310p3_calibration_is_recorded_as_fitted():
    chip = load_chip("Ascend310P3")
    fitted = [k for k in cm._PARAM_FIELDS if chip.confidence(k) == "fitted"]
    assert fitted
    for key in fitted:
        assert "npu-throughput-calibration.csv" in chip.sources[key]["source"]
        assert chip.sources[key]["file"] == f"designs/{chip.design}.json"


# ---------------------------------------------------------------- padding and the split over cores

def test_fractal_padding_rounds_m_n_k_up_to_16():
    chip = load_chip("Ascend310P3")
    cycles = {n: plan_gemm(chip, Gemm(1, 256, n, 256), FP16).cycles for n in (16, 17, 32)}
    assert cycles[17] == cycles[32] > cycles[16]
    k = {kk: plan_gemm(chip, Gemm(1, 256, 256, kk), FP16).cycles for kk in (16, 17, 32)}
    assert k[17] == k[32] > k[16]
    assert plan_gemm(chip, Gemm(1, 256, 17, 256), FP16).padded_macs == 256 * 32 * 256


def test_conv_channels_pad_to_c0_unless_small_channel_packs_them_in_four():
    chip = load_chip("Ascend310P3")
    rgb, c16 = conv("rgb", 1, 3, 64, 56, k=7), conv("c16", 1, 16, 64, 56, k=7)
    plan = lambda spec: plan_gemm(chip, spec.work.gemms[0], FP16, spec.small_channel)  # noqa: E731
    assert plan(rgb).cycles == plan(c16).cycles                # 3 channels cost as much as 16
    small = plan(replace(rgb, small_channel=True))
    c4 = plan(conv("c4", 1, 4, 64, 56, k=7))
    assert small.cycles < plan(rgb).cycles
    # K = 7 x 7 x 4 = 196 -> 208 (13 fractals) instead of 7 x 7 x 16 = 784 (49)
    assert small.cycles / plan(rgb).cycles == pytest.approx(13 / 49)
    assert c4.cycles == plan(c16).cycles                      # without the flag, C0 stays 16


def test_depthwise_conv_packs_channels_into_one_fractal():
    chip = load_chip("Ascend310P3")
    dw = plan_gemm(chip, conv("dw", 1, 64, 64, 28, k=3, groups=64).work.gemms[0], FP16)
    real = 28 * 28 * 64 * 9
    assert dw.padded_macs == 16 * real          # block-diagonal 16 x 16 weights, not 256x


def test_small_products_use_few_cores_and_large_ones_all():
    chip = load_chip("Ascend910")
    assert plan_gemm(chip, Gemm(1, 16, 16, 64), FP16).cores == 1
    assert plan_gemm(chip, Gemm(1, 16, 48, 64), FP16).cores == 3
    assert plan_gemm(chip, Gemm(1, 2048, 2048, 64), FP16).cores == chip.ai_core_cnt


@pytest.mark.parametrize("soc", SOCS)
def test_per_sample_cube_time_falls_with_batch_until_every_core_has_work(soc):
    """A 7x7 conv layer (ResNet's last stage): one image is 4 x 32 output fractals, so small
    batches leave cores idle or unevenly loaded; the per-image cube time never rises with
    batch, and once the cores are full it stays at the padded-MAC rate."""
    chip = load_chip(soc)
    per_image = []
    for batch in (1, 2, 4, 8, 16, 32, 64):
        cost = price_kernel(chip, conv("c", batch, 512, 512, 7))
        per_image.append(cost.cube_us / batch)
    assert all(b <= a * (1 + 1e-9) for a, b in zip(per_image, per_image[1:])), per_image
    full = plan_gemm(chip, conv("c", 64, 512, 512, 7).work.gemms[0], FP16)
    ideal = full.padded_macs / (chip.cube_macs_per_cycle(FP16) * chip.ai_core_cnt) / chip.cube_freq
    assert per_image[-1] * 64 == pytest.approx(ideal, rel=0.05)


# ---------------------------------------------------------------- bounds

@pytest.mark.parametrize("soc", SOCS)
def test_more_bytes_or_more_macs_never_cost_less(soc):
    chip = load_chip(soc)
    n = 1 << 20
    times = []
    for extra in (0, n, 4 * n, 16 * n):
        spec = elementwise("add", n, n_inputs=2)
        spec.input_bytes += extra
        times.append(price_kernel(chip, spec).total_us)
    assert all(a < b for a, b in zip(times, times[1:])), times
    mms = [price_kernel(chip, matmul("mm", m, 512, 512)).total_us for m in (512, 1024, 4096)]
    assert all(a < b for a, b in zip(mms, mms[1:])), mms


def test_large_matmul_is_cube_bound_at_the_derived_peak():
    chip = load_chip("Ascend910")
    spec = matmul("mm", 4096, 2048, 2048)
    cost = price_kernel(chip, spec)
    assert cost.bound == "cube" and cost.cores_used == chip.ai_core_cnt
    # The cube pipe runs at the chip's peak when all cores get equal blocks (no padding here).
    assert cost.cube_us * 1e-6 * chip.cube_peak_flops(np.float16) == pytest.approx(2 * spec.work.cube_macs)
    assert cost.total_us >= cost.cube_us + cost.overhead_us


@pytest.mark.parametrize("soc", SOCS)
def test_elementwise_is_memory_bound_and_respects_the_ddr_floor(soc):
    chip = load_chip(soc)
    spec = elementwise("add", 1 << 24, n_inputs=2)
    cost = price_kernel(chip, spec)
    assert cost.bound == "memory"
    floor = (spec.input_bytes + spec.output_bytes) / chip.ddr_bytes_per_us
    assert cost.hbm_us == pytest.approx(floor)
    assert cost.total_us >= floor + chip.task_launch_overhead_us


@pytest.mark.parametrize("soc", SOCS)
def test_memory_bound_and_compute_bound_kernels_cross_at_the_ridge(soc):
    """Same bytes, growing arithmetic: the kernel stays at its memory time while memory-bound,
    then its time grows with the cube work; the bound flips from memory to cube."""
    chip = load_chip(soc)
    bounds, times = [], []
    for k in (16, 64, 256, 1024, 4096):       # arithmetic intensity grows with K
        cost = price_kernel(chip, matmul("mm", 16, k, 8192))
        bounds.append(cost.bound)
        times.append(cost.total_us)
    assert bounds[0] in ("memory", "launch") and bounds[-1] in ("cube", "memory")
    thin, fat = (price_kernel(chip, matmul("mm", m, 4096, 4096)) for m in (16, 8192))
    assert thin.bound == "memory" and thin.cube_us < 0.2 * thin.steady_us     # streams the weight
    # A big GEMM keeps the cube at least 80% busy (on 910B2 the L2->L1 feed of 128x128 L0C
    # tiles, 128 B/cycle, slightly exceeds the 110 B/cycle port: MTE2 just wins).
    assert fat.bound in ("cube", "memory") and fat.cube_us >= 0.8 * fat.steady_us
    assert all(a <= b for a, b in zip(times, times[1:]))


def test_a_tiny_kernel_is_launch_bound():
    chip = load_chip("Ascend310P3")
    cost = price_kernel(chip, elementwise("relu", 256))
    assert cost.bound == "launch" and cost.cores_used == 1
    assert cost.total_us == pytest.approx(cost.overhead_us + cost.body_us)


def test_transcendental_costs_more_than_alu():
    chip = load_chip("Ascend910")
    alu = price_kernel(chip, elementwise("x", 1 << 20, ops=8, cls="alu"))
    exp = price_kernel(chip, elementwise("x", 1 << 20, ops=8, cls="transcendental"))
    assert exp.vector_us == pytest.approx(alu.vector_us * chip.vector_cycles_transcendental / chip.vector_cycles_alu)


def test_l2_resident_inputs_are_cheaper():
    chip = load_chip("Ascend310P3")
    cold = elementwise("add", 1 << 22, n_inputs=2)
    warm = replace(cold, l2_input_bytes=cold.input_bytes, l2_output_bytes=cold.output_bytes)
    assert price_kernel(chip, warm).total_us < price_kernel(chip, cold).total_us
    assert price_kernel(chip, warm).ddr_bytes == 0


def test_work_rule_prices():
    kernel = kernel_of("Relu")
    t = TensorType(FP16, (64, 1024))
    spec = KernelSpec("relu", "Relu", kernel.work([t], [t], {}), t.nbytes, t.nbytes, compute_dtype=FP16)
    cost = price_kernel(load_chip("Ascend910"), spec)
    assert cost.vector_us > 0 and cost.total_us > cost.launch_us


def test_every_cube_kernel_of_the_zoo_gives_its_product_shapes():
    from atc_py import zoo
    from simulator.pricing import kernel_spec
    from tests.helpers import fuse_model

    for name in ("resnet50", "bert_base", "efficientnet_b4", "vit_base", "densenet121"):
        graph, _ = fuse_model(zoo.build(name, small=True))
        for node in graph.nodes:
            work = kernel_spec(node, FP16).work
            if work.gemms:
                assert work.cube_macs == sum(g.macs for g in work.gemms), node.name


# ---------------------------------------------------------------- streams: L2 and batch scaling

def _mlp(batch, hidden=512, layers=4):
    """x[batch, hidden] -> (MatMul W_i -> Relu) x layers, fp32 weights."""
    rng = np.random.default_rng(0)
    nodes, inits, x = [], [], "x"
    for i in range(layers):
        w = numpy_helper.from_array(rng.standard_normal((hidden, hidden)).astype(np.float32), f"w{i}")
        inits.append(w)
        nodes.append(helper.make_node("MatMul", [x, f"w{i}"], [f"m{i}"], name=f"mm{i}"))
        nodes.append(helper.make_node("Relu", [f"m{i}"], [f"r{i}"], name=f"relu{i}"))
        x = f"r{i}"
    graph = helper.make_graph(nodes, "mlp", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch, hidden])],
                              [helper.make_tensor_value_info(x, TensorProto.FLOAT, [batch, hidden])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _stream(batch, chip, hidden=512):
    from simulator.pricing import node_costs, stream_specs
    from tests.helpers import lower

    graph = lower(_mlp(batch, hidden))
    specs = stream_specs(graph, chip, lambda n: FP16)
    costs = node_costs(graph, chip, lambda n: FP16)
    return graph, specs, sum(c.total_us for c in costs.values())


def test_l2_keeps_what_the_next_kernel_reads_and_writes_back_only_what_it_must():
    chip = load_chip("Ascend310P3")
    graph, specs, _ = _stream(64, chip)
    by_name = {n.name: s for n, s in zip(graph.nodes, specs)}
    # The graph input comes from DDR; each layer's output is read by the next kernel from L2.
    assert by_name["mm0"].l2_input_bytes == 0
    for i in range(4):
        assert by_name[f"relu{i}"].l2_input_bytes == by_name[f"relu{i}"].input_bytes
        assert by_name[f"mm{i}"].l2_output_bytes == by_name[f"mm{i}"].output_bytes   # never written back
    assert by_name["relu3"].l2_output_bytes == 0          # a graph output goes to DDR for the host
    # An activation larger than L2 can stay: it misses and is written back.
    big, _, _ = _stream(4096, chip, hidden=1024)
    spec = {n.name: s for n, s in zip(big.nodes, _stream(4096, chip, hidden=1024)[1])}
    assert 4096 * 1024 * 2 > chip.l2_capacity
    assert spec["relu1"].l2_input_bytes == 0 and spec["mm1"].l2_output_bytes == 0


def test_throughput_rises_with_batch_until_activations_leave_l2_then_falls():
    """The calibration's shape on a small case: weights amortise as the batch grows, so
    throughput rises while each layer's activations fit L2; past that they go to DDR and
    throughput drops.  Pinned on the 310P3 parameters."""
    chip = load_chip("Ascend310P3")
    hidden = 1024
    fits = [b for b in (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096)
            if 2 * b * hidden * 2 <= chip.l2_capacity]        # output + next layer's read window
    fps = {b: b / _stream(b, chip, hidden)[2] for b in (1, 4, 16, 64, 256, 1024, 4096)}
    rising = [b for b in sorted(fps) if b <= fits[-1]]
    assert all(fps[a] < fps[b] for a, b in zip(rising, rising[1:])), fps
    after = [b for b in sorted(fps) if b > fits[-1]]
    assert after and fps[after[-1]] < fps[rising[-1]], fps


# ---------------------------------------------------------------- fusion, spill, views, gather

@pytest.mark.parametrize("soc", SOCS)
def test_fused_memory_bound_chain_costs_less_than_its_parts(soc):
    """y = relu(x * a + b): three kernels unfused, one kernel with two on-chip intermediates."""
    chip = load_chip(soc)
    n = 1 << 22
    unfused = [elementwise("mul", n, 2), elementwise("add", n, 2), elementwise("relu", n, 1)]
    fused = KernelSpec("mul_add_relu", "FusedElemwise", Work().add_vector("alu", 3 * n),
                       input_bytes=3 * n * 2, output_bytes=n * 2, intermediate_bytes=2 * n * 2,
                       compute_dtype=FP16)
    parts = price_stream(chip, unfused)
    whole = price_kernel(chip, fused)
    assert all(k.bound == "memory" for k in parts.kernels)
    assert whole.spill_bytes == 0
    assert whole.total_us < parts.total_us
    assert parts.total_us - whole.total_us > 2 * chip.task_launch_overhead_us


def test_intermediates_exceeding_ub_spill():
    chip = load_chip("Ascend910")
    n = 4096   # small output: one block, so the whole intermediate is one block's working set

    def spec(inter):
        return KernelSpec("red", "FusedReduce", Work().add_vector("alu", n), input_bytes=n * 2,
                          output_bytes=64, intermediate_bytes=inter, compute_dtype=FP16,
                          parallel_blocks=1)

    assert price_kernel(chip, spec(int(chip.ub_size // 4))).spill_bytes == 0
    big = int(2 * chip.ub_size)
    base, spilled = price_kernel(chip, spec(0)), price_kernel(chip, spec(big))
    assert 0 < spilled.spill_bytes <= big
    # The spill goes out and back through DDR: at least its read time is added.
    assert spilled.total_us - base.total_us >= spilled.spill_bytes / chip.ddr_bytes_per_us * (1 - 1e-9)
    more = price_kernel(chip, spec(2 * big))
    assert more.spill_bytes > spilled.spill_bytes and more.total_us > spilled.total_us


def test_gather_reads_the_rows_it_copies_not_the_whole_table():
    from simulator.pricing import kernel_spec
    from tests.helpers import lower

    table = numpy_helper.from_array(np.zeros((30000, 64), np.float32), "table")
    graph = helper.make_graph([helper.make_node("Gather", ["table", "ids"], ["y"], name="g")], "g",
                              [helper.make_tensor_value_info("ids", TensorProto.INT64, [8])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [8, 64])], [table])
    ir = lower(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]))
    spec = kernel_spec(ir.nodes[0], FP16)
    assert spec.input_bytes == 8 * 64 * 2 + 8 * 8      # the rows gathered + the int64 ids


def test_onchip_bytes_from_work_are_used_when_not_given():
    work = Work().add_vector("alu", 10)
    work.onchip_bytes = 1234
    assert KernelSpec("k", "X", work).intermediate_bytes == 1234
    assert KernelSpec("k", "X", work, intermediate_bytes=0).intermediate_bytes == 0


def test_no_task_kernels_are_free():
    chip = load_chip("Ascend910")
    view = KernelSpec("reshape", "Reshape", Work(), input_bytes=1 << 20, output_bytes=1 << 20, no_task=True)
    cost = price_kernel(chip, view)
    assert cost.total_us == 0 and cost.launches == 0
    ops = [elementwise("relu", 1 << 16), elementwise("relu", 1 << 16)]
    with_view = price_stream(chip, [ops[0], view, ops[1]])
    without = price_stream(chip, ops)
    assert with_view.total_us == pytest.approx(without.total_us)
    assert with_view.launches == without.launches == 2


def test_stream_is_the_sum_of_its_kernels():
    chip = load_chip("Ascend910B2")
    specs = [elementwise("a", 1 << 14), matmul("mm", 256, 256, 256), elementwise("b", 1 << 18)]
    stream = price_stream(chip, specs)
    assert stream.launches == 3
    assert stream.total_us == pytest.approx(sum(price_kernel(chip, s).total_us for s in specs))


def test_inconsistent_specs_are_rejected():
    with pytest.raises(AtcError):
        KernelSpec("k", "X", Work(), input_bytes=-1)
    with pytest.raises(AtcError):
        KernelSpec("k", "X", Work(), input_bytes=10, weight_bytes=8, l2_input_bytes=8)


def test_row_reduction_splits_by_rows_but_a_full_reduction_does_not():
    chip = load_chip("Ascend910")
    rows, cols, item = 8192, 1024, 2
    work = Work().add_vector("alu", rows * cols)
    row_reduce = KernelSpec("rows", "ReduceSum", work, input_bytes=rows * cols * item,
                            output_bytes=rows * item, output_elements=rows,
                            largest_input_bytes=rows * cols * item)
    full_reduce = KernelSpec("all", "ReduceSum", work, input_bytes=rows * cols * item,
                             output_bytes=item, output_elements=1, largest_input_bytes=rows * cols * item)
    assert price_kernel(chip, row_reduce).cores_used == chip.ai_core_cnt
    assert price_kernel(chip, full_reduce).cores_used == 1
    assert price_kernel(chip, row_reduce).total_us < price_kernel(chip, full_reduce).total_us


# ---------------------------------------------------------------- SuperKernel

@pytest.mark.parametrize("soc", SOCS)
def test_super_kernel_saves_exactly_the_documented_terms(soc):
    chip = load_chip(soc)
    specs = [elementwise("a", 1 << 12), elementwise("b", 1 << 14, 2),
             KernelSpec("view", "Reshape", no_task=True), matmul("mm", 128, 256, 64),
             elementwise("c", 1 << 10, 1, 2, "transcendental")]
    separate = price_stream(chip, specs)
    merged = price_super_kernel(chip, specs)
    tasks = [k for k in separate.kernels if k.launches]
    boundaries = len(tasks) - 1
    saving = sum(min(chip.superkernel_early_start_saving_us, k.scalar_us) for k in tasks[1:])
    expected = boundaries * chip.task_launch_overhead_us - boundaries * chip.superkernel_sync_us + saving
    assert merged.launches == 1 and separate.launches == len(tasks)
    assert separate.total_us - merged.total_us == pytest.approx(expected)
    assert merged.total_us < separate.total_us


def test_super_kernel_of_one_kernel_is_that_kernel():
    chip = load_chip("Ascend910")
    spec = elementwise("a", 1 << 16)
    assert price_super_kernel(chip, [spec]).total_us == pytest.approx(price_kernel(chip, spec).total_us)
    assert price_super_kernel(chip, []).total_us == 0


# ---------------------------------------------------------------- golden reference kernels

def reference_cases() -> dict:
    """A fixed set of kernels on every chip -> priced total, bound and cores; the golden file
    pins them (a deliberate change updates it with --update and says why)."""
    cases = {
        "add_2M": elementwise("add", 1 << 21, n_inputs=2),
        "softmax_like_1M": elementwise("sm", 1 << 20, ops=5, cls="transcendental"),
        "matmul_128x768x768": matmul("mm", 128, 768, 768),
        "matmul_4096x768x3072": matmul("mm", 4096, 768, 3072),
        "conv3x3_b8_256_14": conv("c", 8, 256, 256, 14),
        "conv7x7_rgb_small_channel": conv("c", 8, 3, 64, 112, k=7, small_channel=True),
        "relu_256": elementwise("relu", 256),
    }
    out = {}
    for soc in SOCS:
        chip = load_chip(soc)
        for name, spec in cases.items():
            cost = price_kernel(chip, spec)
            out[f"{soc}/{name}"] = {"total_us": round(cost.total_us, 6), "bound": cost.bound,
                                    "cores": cost.cores_used}
    return out


def test_reference_kernels_cost_what_the_golden_file_says():
    golden = json.loads(open(GOLDEN).read())
    got = reference_cases()
    assert set(got) == set(golden), "run: python tests/test_cost_model.py --update"
    for key, want in golden.items():
        assert got[key]["bound"] == want["bound"] and got[key]["cores"] == want["cores"], key
        assert got[key]["total_us"] == pytest.approx(want["total_us"], rel=1e-6), (
            f"{key} moved; if on purpose run python tests/test_cost_model.py --update and say why")


if __name__ == "__main__" and sys.argv[1:] == ["--update"]:
    with open(GOLDEN, "w") as f:
        json.dump(reference_cases(), f, indent=1, sort_keys=True)
        f.write("\n")
    print(f"wrote {GOLDEN}")


def test_reference_builds_leave_out_fusion_passes_and_canonical_rewrites(tmp_path):
    """bench/calibrate.py prices ATC's graph of a published row: compile_model(skip_passes=)
    drops a named fusion pass or a canonical rewrite (DenseNet's ConcatPrefix) and nothing else."""
    from collections import Counter

    from atc_py import zoo
    from atc_py.compiler import compile_model
    from atc_py.options import AtcOptions
    from codegen.registry import kernel_of

    path = zoo.save("densenet121", str(tmp_path), small=True)

    def kernels(skip):
        options = AtcOptions(model=path, framework="5", output=str(tmp_path / "m"), soc_version="Ascend310P3")
        options.validate()
        graph = compile_model(options, build=False, skip_passes=skip).graph
        return Counter(n.op_type for n in graph.nodes if not kernel_of(n.op_type).no_task)

    default, nested = kernels(()), kernels(("ConcatPrefix",))
    assert "Concat" not in default and nested["Concat"] > 0          # the dense layers copy again
    assert sum(nested.values()) > sum(default.values())
    assert kernels(("ConvBNReluFusionPass",))["Conv"] > nested.get("Conv", 0)
