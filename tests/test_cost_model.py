"""Chip data files and the kernel cost model: loading, derived peaks, and the physics the
model must respect (monotone costs, fusion savings, spills, views, SuperKernel terms).
Expected values are computed here from the JSON primitives, never copied from the model."""
import json
import math

import numpy as np
import pytest

from codegen.registry import kernel_of
from codegen.work import Work
from ge.ops.registry import TensorType
from ge.errors import AtcError
from simulator import cost_model as cm
from simulator.cost_model import (KernelSpec, available_socs, load_chip, price_kernel,
                                  price_stream, price_super_kernel)

SOCS = ("Ascend910", "Ascend910B2", "Ascend310P3")
FP16 = np.dtype(np.float16)


def raw_params(soc):
    return json.loads((cm.CHIP_DIR / f"{soc}.json").read_text())["params"]


def elementwise(name, n, n_inputs=1, ops=1, cls="alu", inter=0):
    """A kernel reading `n_inputs` fp16 tensors of n elements and writing one."""
    return KernelSpec(name, name, Work().add_vector(cls, ops * n), input_bytes=n_inputs * n * 2,
                      output_bytes=n * 2, intermediate_bytes=inter, compute_dtype=FP16)


def matmul(name, m, k, n, dtype=FP16):
    size = np.dtype(dtype).itemsize
    return KernelSpec(name, "MatMul", Work(cube_macs=m * k * n), input_bytes=(m * k + k * n) * size,
                      output_bytes=m * n * size, compute_dtype=dtype)


# ---------------------------------------------------------------- chip data

@pytest.mark.parametrize("soc", SOCS)
def test_each_chip_loads_with_metadata(soc):
    assert soc in available_socs()
    chip = load_chip(soc)
    assert chip.soc_version == soc
    params = raw_params(soc)
    for key, entry in params.items():
        assert set(entry) == {"value", "unit", "source", "confidence"}, key
        assert entry["confidence"] in cm.CONFIDENCE_LEVELS, key
        assert entry["source"] and entry["unit"], key
        assert getattr(chip, key) == float(entry["value"])
        assert chip.confidence(key) == entry["confidence"]
    assert set(params) == set(cm._PARAM_FIELDS)


CHIPS_WITH_DEFAULTS = {"Ascend910A": "Ascend910", "Ascend910B1": "Ascend910B2", "Ascend910B3": "Ascend910B2",
                       "Ascend910B4": "Ascend910B2", "Ascend310": "Ascend310P3", "Ascend310B1": "Ascend310P3"}


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


def test_broken_data_file_is_an_internal_error(tmp_path):
    params = raw_params("Ascend910")
    del params["ub_size"]
    path = tmp_path / "Bad.json"
    path.write_text(json.dumps({"soc_version": "Bad", "params": params}))
    with pytest.raises(AtcError) as err:
        cm._parse_chip(path)
    assert err.value.code == "E19999" and "ub_size" in err.value.message


@pytest.mark.parametrize("soc", SOCS)
def test_peaks_are_derived_from_primitives(soc):
    p = {k: v["value"] for k, v in raw_params(soc).items()}
    chip = load_chip(soc)
    macs = p["cube_m_size"] * p["cube_n_size"] * p["cube_k_size"]
    fp16 = p["ai_core_cnt"] * macs * 2 * p["cube_freq"] * 1e6
    assert chip.cube_peak_flops(np.float16) == pytest.approx(fp16)
    assert chip.cube_peak_flops(np.int8) == pytest.approx(fp16 * p["cube_k_size_int8"] / p["cube_k_size"])


def test_ascend910_fp16_peak_matches_the_quoted_order():
    # 32 cores x 4096 MAC x 2 x 1 GHz = 262 TFLOPS; Huawei quotes 256.
    assert 250e12 < load_chip("Ascend910").cube_peak_flops(np.float16) < 270e12


# ---------------------------------------------------------------- single kernels

@pytest.mark.parametrize("soc", SOCS)
def test_more_bytes_cost_more(soc):
    chip = load_chip(soc)
    n = 1 << 20
    times = []
    for extra in (0, n, 4 * n, 16 * n):
        spec = elementwise("add", n, n_inputs=2)
        spec.input_bytes += extra
        times.append(price_kernel(chip, spec).total_us)
    assert all(a < b for a, b in zip(times, times[1:])), times
    # Scaling the whole kernel (work and bytes) once it fills the chip.
    scaled = [price_kernel(chip, elementwise("add", n * f, n_inputs=2)).total_us for f in (1, 2, 4)]
    assert all(a < b for a, b in zip(scaled, scaled[1:])), scaled


@pytest.mark.parametrize("soc", SOCS)
def test_more_macs_cost_more(soc):
    chip = load_chip(soc)
    base = matmul("mm", 512, 512, 512)
    times = []
    for factor in (1, 2, 8):
        spec = KernelSpec("mm", "MatMul", Work(cube_macs=base.work.cube_macs * factor),
                          base.input_bytes, base.output_bytes, compute_dtype=FP16)
        times.append(price_kernel(chip, spec).total_us)
    assert all(a < b for a, b in zip(times, times[1:])), times


def test_large_matmul_is_cube_bound_at_the_derived_peak():
    chip = load_chip("Ascend910")
    spec = matmul("mm", 2048, 2048, 2048)
    cost = price_kernel(chip, spec)
    assert cost.bound == "cube"
    assert cost.cores_used == chip.ai_core_cnt
    # The cube pipe runs exactly at the chip's peak when all cores get equal blocks.
    assert cost.cube_us * 1e-6 * chip.cube_peak_flops(np.float16) == pytest.approx(2 * spec.work.cube_macs)
    assert cost.total_us >= cost.cube_us + cost.launch_us + cost.scalar_us


def test_int8_cube_is_faster_and_fp32_on_910b2_slower():
    chip = load_chip("Ascend910B2")
    t = {dt: price_kernel(chip, matmul("mm", 2048, 2048, 2048, dt)).cube_us
         for dt in (np.int8, np.float16, np.float32)}
    assert t[np.int8] < t[np.float16] < t[np.float32]


@pytest.mark.parametrize("soc", SOCS)
def test_elementwise_is_memory_bound_and_respects_the_hbm_floor(soc):
    chip = load_chip(soc)
    spec = elementwise("add", 1 << 22, n_inputs=2)
    cost = price_kernel(chip, spec)
    assert cost.bound == "memory"
    floor = (spec.input_bytes + spec.output_bytes) / (chip.hbm_bandwidth * 1e3)
    assert cost.total_us >= floor + chip.task_launch_overhead_us
    # The busiest core reads its whole blocks through its own DDR path.
    blocks = spec.output_bytes / chip.vector_min_block_bytes
    share = math.ceil(blocks / chip.vector_cores) / blocks
    per_core = share * spec.input_bytes / (chip.ddr_rate * chip.vec_freq)
    assert cost.mte2_us == pytest.approx(per_core)


def test_small_kernels_use_few_cores():
    chip = load_chip("Ascend910")
    tiny = price_kernel(chip, elementwise("relu", 16))
    big = price_kernel(chip, elementwise("relu", 1 << 20))
    assert tiny.cores_used == 1
    assert big.cores_used == chip.ai_core_cnt


def test_transcendental_costs_more_than_alu():
    chip = load_chip("Ascend910")
    alu = price_kernel(chip, elementwise("x", 1 << 20, ops=8, cls="alu"))
    exp = price_kernel(chip, elementwise("x", 1 << 20, ops=8, cls="transcendental"))
    assert exp.vector_us == pytest.approx(alu.vector_us * chip.vector_cycles_transcendental / chip.vector_cycles_alu)


def test_l2_resident_inputs_are_cheaper():
    chip = load_chip("Ascend910B2")
    cold = elementwise("add", 1 << 20, n_inputs=2)
    warm = elementwise("add", 1 << 20, n_inputs=2)
    warm.l2_resident_input_bytes = warm.input_bytes // 2
    assert price_kernel(chip, warm).total_us < price_kernel(chip, cold).total_us


def test_registry_work_rule_prices():
    # The kernel's Work is the cost model's input: a Relu's work comes straight from it.
    kernel = kernel_of("Relu")
    t = TensorType(FP16, (64, 1024))
    spec = KernelSpec("relu", "Relu", kernel.work([t], [t], {}), t.nbytes, t.nbytes, compute_dtype=FP16)
    cost = price_kernel(load_chip("Ascend910"), spec)
    assert cost.vector_us > 0 and cost.total_us > cost.launch_us


# ---------------------------------------------------------------- fusion, spill, views

@pytest.mark.parametrize("soc", SOCS)
def test_fused_memory_bound_chain_costs_less_than_its_parts(soc):
    """y = relu(x * a + b): three kernels unfused, one kernel with two on-chip intermediates."""
    chip = load_chip(soc)
    n = 1 << 20
    unfused = [elementwise("mul", n, 2), elementwise("add", n, 2), elementwise("relu", n, 1)]
    fused = KernelSpec("mul_add_relu", "FusedElemwise", Work().add_vector("alu", 3 * n),
                       input_bytes=3 * n * 2, output_bytes=n * 2, intermediate_bytes=2 * n * 2,
                       compute_dtype=FP16)
    parts = price_stream(chip, unfused)
    whole = price_kernel(chip, fused)
    assert all(k.bound == "memory" for k in parts.kernels)
    assert whole.spill_bytes == 0
    assert whole.total_us < parts.total_us
    # The saving is at least the two launches removed.
    assert parts.total_us - whole.total_us > 2 * chip.task_launch_overhead_us


def test_intermediates_exceeding_ub_spill():
    chip = load_chip("Ascend910")
    n = 4096   # small output: one block, so the whole intermediate is one block's working set

    def spec(inter):
        return KernelSpec("red", "FusedReduce", Work().add_vector("alu", n), input_bytes=n * 2,
                          output_bytes=64, intermediate_bytes=inter, compute_dtype=FP16,
                          parallel_blocks=1)

    fits = price_kernel(chip, spec(int(chip.ub_size // 4)))
    assert fits.spill_bytes == 0
    big = int(2 * chip.ub_size)
    base, spilled = price_kernel(chip, spec(0)), price_kernel(chip, spec(big))
    assert 0 < spilled.spill_bytes <= big
    # The spill goes out and back through MTE2/MTE3: at least its read time is added.
    read_back = spilled.spill_bytes / (chip.ddr_rate * chip.cube_freq)
    assert spilled.total_us - base.total_us >= read_back * (1 - 1e-9)
    more = price_kernel(chip, spec(2 * big))
    assert more.spill_bytes > spilled.spill_bytes and more.total_us > spilled.total_us


def test_onchip_bytes_from_work_are_used_when_not_given():
    work = Work().add_vector("alu", 10)
    work.onchip_bytes = 1234
    assert KernelSpec("k", "X", work).intermediate_bytes == 1234
    assert KernelSpec("k", "X", work, intermediate_bytes=0).intermediate_bytes == 0


def test_no_task_kernels_are_free():
    chip = load_chip("Ascend910")
    view = KernelSpec("reshape", "Reshape", Work(), input_bytes=1 << 20, output_bytes=1 << 20,
                      no_task=True)
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


def test_negative_sizes_are_rejected():
    with pytest.raises(AtcError):
        KernelSpec("k", "X", Work(), input_bytes=-1)


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
    expected = (boundaries * chip.task_launch_overhead_us
                - boundaries * chip.superkernel_sync_us + saving)
    assert merged.launches == 1 and separate.launches == len(tasks)
    assert separate.total_us - merged.total_us == pytest.approx(expected)
    assert merged.total_us < separate.total_us


def test_super_kernel_of_one_kernel_is_that_kernel():
    chip = load_chip("Ascend910")
    spec = elementwise("a", 1 << 16)
    assert price_super_kernel(chip, [spec]).total_us == pytest.approx(price_kernel(chip, spec).total_us)
    assert price_super_kernel(chip, []).total_us == 0


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
