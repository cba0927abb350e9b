"""The fused attention kernel's price on small cases, pinned so a change cannot move it silently.

MultiHeadAttentionFusionOp is the most priced kernel of every transformer we simulate, but
until now its cost was pinned only inside whole-BERT tests.  These tests price the kernel
alone (inputs from DDR, outputs to DDR) in its three forms -- self-attention that projects Q,
K and V itself, already projected Q/K/V, and a decoder step reading a KV cache as it is
(kv_layout "bhsd", grouped-query) -- and check what physics says:

* a larger problem (batch, heads, query or key/value length) never costs less, and the time
  per sample never rises with the batch (weights amortise, idle cores fill) -- it saturates;
* the cube pads a head_dim or a sequence length to the 16x16x16 fractal: 60 costs like 64;
* a decode step (one query, a long cache) is memory-bound and speeds up with DDR bandwidth,
  a long prefill is compute-bound and does not: the bound the roofline names for each;
* a few exact prices, so a deliberate change updates them here.

The first check found the cache form non-monotone: the cache's K and V were priced as side
inputs shared among the cores by their share of the output rows, so more query rows (more
cores splitting them) made every core stream less of a cache it in fact reads whole; a KV
head is now the B operand its products stream (codegen/fused/attention.py `work`).
"""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from codegen.fused.attention import OP_TYPE, SLOTS
from ge.ir import Graph, Node, TensorDesc
from simulator.cost_model import load_chip, price_kernel
from simulator.pricing import kernel_spec
from simulator.profile import roofline

SOCS = ("Ascend910", "Ascend910B2", "Ascend310P3")
FORMS = ("self", "projected", "cache")
FP16 = np.dtype(np.float16)
SETTINGS = dict(deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])


def attention(form: str, batch: int, sq: int, skv: int, heads: int, head_dim: int, kv_heads: int = 0,
              hidden: int = 64) -> Node:
    """One fused attention node.  `self`: Q, K and V projected inside from x [B,S,hidden]
    (skv must equal sq); `projected`: Q [B,Sq,H*D], K and V [B,Skv,Hkv*D] read as they are;
    `cache`: Q projected from x [B,Sq,hidden], K and V a [B,Hkv,Skv,D] cache (kv_layout bhsd)."""
    kv_heads = kv_heads or heads
    graph = Graph("attention")

    def tensor(name, *shape):
        return graph.new_value(name, TensorDesc(np.dtype(np.float32), tuple(shape)))

    def weight(name, *shape):                    # only shapes matter to the price: no real array
        return graph.constant(name, np.broadcast_to(np.float32(0), shape))

    attrs = dict(num_heads=heads, kv_heads=kv_heads, head_dim=head_dim, scale=head_dim ** -0.5)
    if form == "self":
        assert skv == sq
        x = tensor("x", batch, sq, hidden)
        inputs = SLOTS.pack(x_q=x, w_q=weight("wq", hidden, heads * head_dim),
                            x_k=x, w_k=weight("wk", hidden, kv_heads * head_dim),
                            x_v=x, w_v=weight("wv", hidden, kv_heads * head_dim))
    elif form == "projected":
        inputs = SLOTS.pack(x_q=tensor("q", batch, sq, heads * head_dim),
                            x_k=tensor("k", batch, skv, kv_heads * head_dim),
                            x_v=tensor("v", batch, skv, kv_heads * head_dim))
    else:
        attrs["kv_layout"] = "bhsd"
        inputs = SLOTS.pack(x_q=tensor("x", batch, sq, hidden), w_q=weight("wq", hidden, heads * head_dim),
                            x_k=tensor("k", batch, kv_heads, skv, head_dim),
                            x_v=tensor("v", batch, kv_heads, skv, head_dim))
    out = tensor("y", batch, sq, heads * head_dim)
    return graph.add_node(Node(OP_TYPE, inputs, [out], attrs, name="attention"))


def price(soc, *args, chip=None, **kwargs):
    """The kernel's cost alone on the chip, in fp16."""
    return price_kernel(chip or load_chip(soc), kernel_spec(attention(*args, **kwargs), FP16))


def _never_cheaper(small: float, large: float) -> bool:
    return large >= small * (1 - 1e-12) - 1e-12


# ---------------------------------------------------------------- monotone

@st.composite
def attention_pairs(draw):
    """A form, a problem and the same problem grown in some of batch, KV heads, the query
    group (grouped-query), query length, key/value length and head_dim."""
    form = draw(st.sampled_from(FORMS))
    dims = [draw(st.integers(1, 4)), draw(st.integers(1, 4)), draw(st.sampled_from((1, 2, 4))),
            draw(st.integers(1, 200)), draw(st.integers(1, 600))]          # batch, kv heads, group, sq, skv
    if form == "cache" and draw(st.booleans()):
        dims[3] = 1                                                          # a decode step
    steps = (0, 0, 1, 15, 16, 17, 64, 300)
    grown = [dims[0] + draw(st.sampled_from(steps)) // 4, dims[1] + draw(st.sampled_from((0, 0, 1, 3))),
             dims[2] * draw(st.sampled_from((1, 1, 2))), dims[3] + draw(st.sampled_from(steps)),
             dims[4] + draw(st.sampled_from(steps))]
    if form == "self":
        dims[4], grown[4] = dims[3], grown[3]
    head_dim = draw(st.sampled_from((8, 16, 60, 64, 100, 128)))
    dims.append(head_dim)
    grown.append(head_dim + draw(st.sampled_from((0, 0, 0, 1, 4, 16))))
    return form, dims, grown, draw(st.sampled_from(SOCS))


def _priced(form, dims, soc):
    batch, kv_heads, group, sq, skv, head_dim = dims
    return price(soc, form, batch, sq, skv, kv_heads * group, head_dim, kv_heads=kv_heads).total_us


@settings(max_examples=1000, **SETTINGS)
@given(attention_pairs())
def test_a_larger_attention_never_costs_less(pair):
    """Batch, heads, query and key/value length and head_dim each grow or stay: the price never
    falls, in every form (the KV-cache decode step included), with grouped-query heads or not."""
    form, dims, grown, soc = pair
    small, large = _priced(form, dims, soc), _priced(form, grown, soc)
    assert _never_cheaper(small, large), (form, dims, grown, soc, small, large)


@pytest.mark.parametrize("soc", SOCS)
def test_the_cache_read_does_not_shrink_with_more_query_rows(soc):
    """The case the monotone check found: a 1170-entry cache and 68 vs 84 query rows.  Each
    core streams its head's whole K and V whatever share of the query rows it has."""
    times = [price(soc, "cache", 1, sq, 1170, 1, 32, hidden=256).total_us for sq in (60, 64, 68, 72, 76, 80, 84)]
    assert times == sorted(times), times


CASES = {
    # form, (sq, skv, heads, head_dim, kv_heads, hidden) at batch 1
    "bert_layer": ("self", (128, 128, 12, 64, 12, 768)),
    "long_prefill": ("projected", (512, 512, 8, 64, 8, 512)),
    "decode_step": ("cache", (1, 1024, 32, 128, 8, 4096)),
}
BATCHES = (1, 2, 4, 8, 16, 32, 64, 128)


@pytest.mark.parametrize("soc", SOCS)
@pytest.mark.parametrize("case", sorted(CASES))
def test_time_per_sample_falls_with_batch_until_it_saturates(case, soc):
    """The batch time never falls; the time per sample never rises (weights amortise, idle
    cores fill) and it saturates: the last doubling of the batch gains under 10%, where the
    first gains more than the last."""
    form, (sq, skv, heads, head_dim, kv_heads, hidden) = CASES[case]
    times = [price(soc, form, b, sq, skv, heads, head_dim, kv_heads=kv_heads, hidden=hidden).total_us
             for b in BATCHES]
    per_sample = [t / b for t, b in zip(times, BATCHES)]
    assert all(_never_cheaper(a, b) for a, b in zip(times, times[1:])), times
    assert all(_never_cheaper(b, a) for a, b in zip(per_sample, per_sample[1:])), per_sample
    gains = [a / b for a, b in zip(per_sample, per_sample[1:])]
    assert gains[-1] < 1.10 and gains[0] > gains[-1], gains


# ---------------------------------------------------------------- padding to the fractal

@pytest.mark.parametrize("soc", SOCS)
@pytest.mark.parametrize("what, unaligned, aligned, below", [
    ("head_dim", (60, 49), 64, 48),
    ("skv", (113, 120), 128, 112),
    ("sq", (113, 127), 128, 112),
])
def test_the_cube_runs_a_partial_fractal_as_a_whole_one(soc, what, unaligned, aligned, below):
    """Q.K^T and P.V pad head_dim and both sequence lengths to 16: a kernel of 60 (or 49)
    runs the cube MACs and cube time of 64, not 60/64 of them, and more than 48's; the
    kernel as a whole never costs more than the aligned one."""
    def cost(value):
        dims = dict(sq=128, skv=128, head_dim=64)
        dims[what] = value
        return price(soc, "projected", 4, dims["sq"], dims["skv"], 4, dims["head_dim"])

    full, less = cost(aligned), cost(below)
    for value in unaligned:
        padded = cost(value)
        assert padded.padded_macs == full.padded_macs > less.padded_macs, (value, padded.padded_macs)
        # the split may differ by a core's worth; the real MACs would be value/aligned (<= 0.94)
        assert padded.cube_us >= 0.97 * full.cube_us, (value, padded.cube_us, full.cube_us)
        assert padded.total_us <= full.total_us * (1 + 1e-12), (value, padded.total_us, full.total_us)


@pytest.mark.parametrize("soc", SOCS)
def test_a_decode_step_pays_a_whole_fractal_of_query_rows(soc):
    """One query row per KV head runs the cube like 16 (the rows pad to the fractal); a
    grouped-query kernel stacks its query group's rows into that fractal, so 4 query heads per
    KV head add only their Q projection's MACs, not 4x the attention products."""
    one = price(soc, "cache", 1, 1, 1024, 8, 128, kv_heads=8)
    sixteen = price(soc, "cache", 1, 16, 1024, 8, 128, kv_heads=8)
    grouped = price(soc, "cache", 1, 1, 1024, 32, 128, kv_heads=8)
    assert one.padded_macs == sixteen.padded_macs
    assert one.cube_us >= 0.97 * sixteen.cube_us, (one.cube_us, sixteen.cube_us)
    assert grouped.padded_macs - one.padded_macs == _projection_macs(1, 32 * 128) - _projection_macs(1, 8 * 128)


def _projection_macs(rows, cols, hidden=64):
    """Padded MACs of the Q projection [rows, hidden] x [hidden, cols] (hidden a multiple of 16)."""
    return -(-rows // 16) * 16 * -(-cols // 16) * 16 * hidden


# ---------------------------------------------------------------- memory- vs compute-bound

def _ridge(chip) -> float:
    """FLOP per byte where the chip's cube peak meets its sustained DDR bandwidth."""
    return chip.cube_peak_flops(FP16) / (chip.ddr_bytes_per_us * 1e6)


DECODE = ("cache", 1, 1, 4096, 32, 128)           # one new token against a 4096-entry cache
PREFILL = ("projected", 8, 512, 512, 12, 64)      # eight 512-token sequences


@pytest.mark.parametrize("soc", SOCS)
def test_a_decode_step_is_memory_bound_and_a_prefill_compute_bound(soc):
    """The roofline names the bound: a decode step streams the whole cache for one query row
    (a few FLOP per byte, far below the chip's ridge), keeps DDR over 80% busy and is
    memory-bound; twice the DDR bandwidth makes it at least 1.6x faster, twice the clock barely
    moves it.  A prefill does hundreds of FLOP per byte, leaves DDR mostly idle and is
    compute-bound (the cube, or the vector unit's softmax); twice the bandwidth barely moves
    it, twice the clock makes it at least 1.6x faster."""
    chip = load_chip(soc)
    faster_ddr = dataclasses.replace(chip, hbm_bandwidth=2 * chip.hbm_bandwidth)
    faster_clock = dataclasses.replace(chip, cube_freq=2 * chip.cube_freq, vec_freq=2 * chip.vec_freq)
    for case, bounds in ((DECODE, {"memory"}), (PREFILL, {"cube", "vector"})):
        cost = price(soc, *case, kv_heads=8 if case is DECODE else 0, hidden=4096)
        line = roofline(chip, cost, FP16)
        assert line["bound"] == cost.bound and cost.bound in bounds, (case, cost.bound)
        intensity = line["arithmetic_intensity"]
        ddr = cost.total_us / price(soc, *case, chip=faster_ddr, kv_heads=8 if case is DECODE else 0,
                                    hidden=4096).total_us
        clock = cost.total_us / price(soc, *case, chip=faster_clock, kv_heads=8 if case is DECODE else 0,
                                      hidden=4096).total_us
        if case is DECODE:
            decode_intensity = intensity
            assert intensity < _ridge(chip) / 20 and line["ddr_utilization"] > 0.8, line
            assert ddr > 1.6 and clock < 1.15, (ddr, clock)
        else:
            assert intensity > 50 * decode_intensity and line["ddr_utilization"] < 0.3, line
            assert ddr < 1.15 and clock > 1.6, (ddr, clock)


# ---------------------------------------------------------------- exact prices

PINNED = [
    # (soc, form, batch, sq, skv, heads, head_dim, kv_heads (0: = heads), hidden): (us, bound)
    (("Ascend310P3", "self", 1, 16, 16, 2, 16, 0, 32), (3.711116576487949, "launch")),
    (("Ascend310P3", "projected", 2, 40, 40, 4, 60, 0, 64), (4.862954486741129, "launch")),
    (("Ascend310P3", "cache", 1, 1, 100, 8, 64, 2, 128), (4.607011321328167, "launch")),
    (("Ascend910", "self", 2, 64, 64, 4, 32, 0, 128), (4.417468013468014, "launch")),
    (("Ascend910B2", "cache", 4, 1, 512, 16, 128, 4, 2048), (12.50631111111111, "memory")),
    (("Ascend310P3", "projected", 4, 128, 128, 4, 64, 0, 64), (17.72844829420257, "vector")),
    (("Ascend910", "self", 8, 128, 128, 12, 64, 0, 768), (41.55297777777778, "vector")),
]


@pytest.mark.parametrize("shape, expected", PINNED, ids=lambda v: "-".join(map(str, v)) if len(v) > 2 else "")
def test_pinned_attention_prices(shape, expected):
    """Exact simulated times of small attention kernels.  A change to the cost model, the chip
    data or the attention work rule that moves one must update it here, deliberately, and say
    why in its commit (the numbers come from this test's `price`, nothing else)."""
    soc, form, batch, sq, skv, heads, head_dim, kv_heads, hidden = shape
    cost = price(soc, form, batch, sq, skv, heads, head_dim, kv_heads=kv_heads, hidden=hidden)
    assert (cost.total_us, cost.bound) == (pytest.approx(expected[0], rel=1e-9), expected[1])
