"""The cost model is physically monotone: the same kernel on a problem at least as large in
every dimension never costs less, and a whole model never runs a bigger batch or a longer
sequence in less time.  Throughput per sample may rise with batch (weights amortise, idle
cores fill) up to saturation, and must not fall before it.

Why: a cheaper price for more work is a modelling bug, not a speed-up -- two earlier runs
priced BERT at shape (1, 3) above (2, 8) and a bigger tiny-BERT gear below a smaller one,
because a cube kernel's pipeline was cut into its L0C tiles (a 128-row GEMM paid its weight
load and its cube time one after the other, a 129-row one overlapped them) and side inputs
were shared among more cores than the smaller problem could use.  Hypothesis draws shapes
for every kernel kind the registry prices (MatMul and batched MatMul, Conv, depthwise and
small-channel Conv, the fused conv and MatMul kernels, LayerNorm, LayerNormMatMul, attention,
autofused elementwise chains with a reduction, Softmax, pooling, Gather) and grows them; the
examples are derandomized, so a run is reproducible.
"""
from __future__ import annotations

import os

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from builder import Net
from codegen.work import Gemm, Work
from helpers import fuse_model
from simulator.cost_model import KernelSpec, load_chip, price_kernel
from simulator.pricing import kernel_spec, price_tasks

SOCS = ("Ascend910", "Ascend910B2", "Ascend310P3")
FP16 = np.dtype(np.float16)
SETTINGS = dict(deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])


def _never_cheaper(small: float, large: float) -> bool:
    return large >= small * (1 - 1e-12) - 1e-12


def _grown(draw, dims: list, growth: int = 200) -> list:
    """Each dimension plus a drawn non-negative step (most draws grow one or two)."""
    return [d + draw(st.sampled_from((0, 0, 1, 15, 16, 17, 100, growth))) for d in dims]


# ---------------------------------------------------------------- cube products, directly

def _gemm_spec(batch, m, n, k, window, groups, shared_b, bias, dtype, small_channel):
    """A kernel of one cube product with its operands and outputs in memory (what MatMul,
    BatchMatMul and Conv price as); `bias` adds a side input of n elements."""
    item = np.dtype(dtype).itemsize
    gemm = Gemm(batch=batch, groups=groups, m=m, n=n, k=k * window, k_window=window,
                a_elements=m * k, shared_b=shared_b)
    weights = (1 if shared_b else batch) * groups * k * window * n * item
    inputs = batch * groups * m * k * item + weights + bias * groups * n * item
    return KernelSpec("g", "Conv" if window > 1 else "MatMul", Work.of_gemms(gemm).add_vector("alu", batch * groups * m * n),
                      input_bytes=inputs, output_bytes=batch * groups * m * n * item, compute_dtype=dtype,
                      weight_bytes=(weights if shared_b else 0) + bias * groups * n * item, small_channel=small_channel)


@st.composite
def gemm_pairs(draw):
    dims = [draw(st.integers(1, 12)), draw(st.integers(1, 300)), draw(st.integers(1, 700)),
            draw(st.integers(1, 700)), draw(st.sampled_from((1, 1, 9, 49))), draw(st.sampled_from((1, 1, 2, 32)))]
    flags = (draw(st.booleans()), draw(st.booleans()), draw(st.sampled_from((np.float16, np.float32, np.int8))),
             draw(st.booleans()), draw(st.sampled_from(SOCS)))
    grown = _grown(draw, dims)
    grown[4], grown[5] = dims[4], dims[5]            # the same kernel: window and groups stay
    return dims, grown, flags


@settings(max_examples=400, **SETTINGS)
@given(gemm_pairs())
def test_a_larger_cube_product_never_costs_less(pair):
    """Batch, rows, columns and depth each grow or stay: the price never falls, for shared and
    per-batch B, with a bias or not, fp16/fp32/int8, with --enable_small_channel or not."""
    dims, grown, (shared_b, bias, dtype, small_channel, soc) = pair
    chip = load_chip(soc)
    small = price_kernel(chip, _gemm_spec(*dims, shared_b, bias, dtype, small_channel))
    large = price_kernel(chip, _gemm_spec(*grown, shared_b, bias, dtype, small_channel))
    assert _never_cheaper(small.total_us, large.total_us), (dims, grown, small.total_us, large.total_us)


@pytest.mark.parametrize("soc", SOCS)
def test_a_128_row_gemm_is_not_dearer_than_a_129_row_one(soc):
    """The case that exposed the bug: one L0C tile of rows paid its weight load and its cube
    time in sequence, two tiles overlapped them, so one more row made the kernel 13% cheaper."""
    chip = load_chip(soc)
    times = [price_kernel(chip, _gemm_spec(1, m, 3072, 768, 1, 1, True, False, FP16, False)).total_us
             for m in (127, 128, 129, 144)]
    assert times == sorted(times), times


# ---------------------------------------------------------------- kernels as the registry builds them

def _matmul(b, m, k, n):
    net = Net()
    x = net.input("x", [b, m, k])
    return net.model(net.op("Relu", net.op("Add", net.op("MatMul", x, net.rand(k, n)), net.rand(n))))


def _batch_matmul(b, m, k, n):
    net = Net()
    x, y = net.input("x", [b, m, k]), net.input("y", [b, k, n])
    return net.model(net.op("MatMul", x, y))


def _conv(images, channels, size, out_channels, window, depthwise=False):
    net = Net()
    x = net.input("x", [images, channels, size, size])
    group, cout = (channels, channels) if depthwise else (1, out_channels)
    ones = net.const(np.ones(cout, np.float32))
    y = net.op("Conv", x, net.rand(cout, channels // group, window, window), net.rand(cout),
               pads=[window // 2] * 4, group=group)
    y = net.op("BatchNormalization", y, ones, net.rand(cout), net.rand(cout), ones)
    return net.model(net.op("MaxPool", net.op("Relu", y), kernel_shape=[2, 2], strides=[2, 2]))


def _layer_norm_matmul(rows, hidden, n):
    net = Net()
    x = net.input("x", [rows, hidden])
    y = net.op("LayerNormalization", x, net.rand(hidden), net.rand(hidden), axis=-1)
    return net.model(net.op("Add", net.op("MatMul", y, net.rand(hidden, n)), net.rand(n)))


def _layer_norm(rows, hidden):
    net = Net()
    x = net.input("x", [rows, hidden])
    return net.model(net.op("LayerNormalization", x, net.rand(hidden), net.rand(hidden), axis=-1))


def _chain_and_reduce(rows, cols):
    net = Net()
    x = net.input("x", [rows, cols])
    y = net.op("Mul", net.op("Sigmoid", net.op("Add", x, net.rand(cols))), x)
    return net.model(net.op("ReduceSum", y, net.const(np.array([-1], np.int64)), keepdims=1))


def _softmax(rows, cols):
    net = Net()
    return net.model(net.op("Softmax", net.input("x", [rows, cols]), axis=-1))


def _gather(rows, cols):
    from onnx import TensorProto
    net = Net()
    ids = net.input("ids", [rows], TensorProto.INT64)
    return net.model(net.op("Gather", net.rand(64, cols), ids, axis=0))


KINDS = {
    # name: (builder, ranges of its dims, the fused kernel it must produce)
    "matmul_bias_relu": (_matmul, [(1, 4), (1, 200), (1, 300), (1, 300)], "MatMulBiasReluFusionOp"),
    "batch_matmul": (_batch_matmul, [(1, 6), (1, 100), (1, 100), (1, 100)], "MatMul"),
    "conv_bn_relu_pool": (lambda *d: _conv(*d), [(1, 3), (1, 24), (4, 20), (1, 40), (1, 3)], "ConvBNReluFusionOp"),
    "depthwise_conv": (lambda *d: _conv(*d, depthwise=True), [(1, 3), (2, 24), (4, 20), (1, 1), (3, 3)],
                       "DepthwiseConvBNReluFusionOp"),
    "layer_norm_matmul": (_layer_norm_matmul, [(1, 200), (2, 200), (1, 300)], "LayerNormMatMulFusionOp"),
    "layer_norm": (_layer_norm, [(1, 300), (2, 300)], "LayerNormalization"),
    "autofused_chain_reduce": (_chain_and_reduce, [(1, 300), (1, 300)], "AutofusedKernel"),
    "softmax": (_softmax, [(1, 300), (1, 300)], "Softmax"),
    "gather": (_gather, [(1, 300), (1, 300)], "Gather"),
}


def _isolated_prices(model, chip, small_channel=False) -> dict:
    """node name -> (op type, price of the kernel alone: inputs from DDR, outputs to DDR)."""
    graph, _ = fuse_model(model)
    return {n.name: (n.op_type, price_kernel(chip, kernel_spec(n, FP16, small_channel)).total_us)
            for n in graph.nodes}


@st.composite
def kind_pairs(draw, kind):
    _, ranges, _ = KINDS[kind]
    dims = [draw(st.integers(lo, hi)) for lo, hi in ranges]
    grown = [min(hi, d + draw(st.sampled_from((0, 0, 1, 16, 17, 64)))) for d, (lo, hi) in zip(dims, ranges)]
    return dims, grown, draw(st.sampled_from(SOCS)), draw(st.booleans())


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_every_kernel_kind_is_never_cheaper_on_a_larger_problem(kind):
    builder, _, fused = KINDS[kind]

    @settings(max_examples=12, **SETTINGS)
    @given(kind_pairs(kind))
    def check(pair):
        dims, grown, soc, small_channel = pair
        chip = load_chip(soc)
        small = _isolated_prices(builder(*dims), chip, small_channel)
        large = _isolated_prices(builder(*grown), chip, small_channel)
        assert fused in {op for op, _ in small.values()}, (kind, small)
        for name, (op, price) in small.items():
            if name in large and large[name][0] == op:
                assert _never_cheaper(price, large[name][1]), (kind, op, dims, grown, price, large[name][1])

    check()


# ---------------------------------------------------------------- whole models

@pytest.fixture(scope="module")
def bert_export(tmp_path_factory):
    """transformers' small BERT, exported by torch.onnx with dynamic batch and sequence."""
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    import exporters
    path = str(tmp_path_factory.mktemp("bert") / "bert.onnx")
    return exporters.export_dynamic("bert", "torchscript", path)


def _bert_feeds(names, batch, length):
    return {n: (np.ones((batch, length), np.int64) if "mask" in n else np.zeros((batch, length), np.int64)
                if "token_type" in n else np.full((batch, length), 7, np.int64)) for n in names}


def _monotone_grid(times: dict) -> list:
    return [(a, b, times[a], times[b]) for a in times for b in times
            if b != a and b[0] >= a[0] and b[1] >= a[1] and not _never_cheaper(times[a], times[b])]


@pytest.mark.parametrize("soc", SOCS)
def test_dynamic_shape_bert_never_runs_a_larger_shape_faster(bert_export, soc, tmp_path):
    """One .om with -1 batch and sequence, run over a (batch, length) grid, each run priced at
    its own sizes: the time never falls when either grows; tokens per second never falls as
    the batch grows at a fixed length while the chip has idle cores to fill."""
    import onnx

    import atc_py
    import exporters
    model = onnx.load(bert_export)
    names = [i.name for i in model.graph.input]
    atc_py.compile(bert_export, output=str(tmp_path / "b"), soc_version=soc,
                   input_shape=exporters.decoder_input_shape(model), precision_mode="force_fp16")
    session = atc_py.InferSession(str(tmp_path / "b.om"))
    times = {}
    for batch in (1, 2, 3, 4, 8):
        for length in (1, 3, 8, 16, 32):
            session.infer(_bert_feeds(names, batch, length))
            times[batch, length] = session.last_result.npu_time_ms["mean"]
    assert not _monotone_grid(times), _monotone_grid(times)[:5]
    for length in (1, 3, 8, 16, 32):
        per_sample = [b / times[b, length] for b in (1, 2, 3, 4, 8)]
        assert per_sample == sorted(per_sample), (length, per_sample)


@pytest.mark.parametrize("soc", SOCS)
def test_tiny_bert_gears_cost_more_as_they_grow(bert_export, soc, tmp_path):
    """--dynamic_dims gears, each a chain of larger shapes: gear i+1 never costs less."""
    import onnx

    import atc_py
    model = onnx.load(bert_export)
    names = [i.name for i in model.graph.input]
    gears = [(1, 4), (1, 8), (2, 8), (2, 16), (4, 16), (8, 16), (8, 32)]
    atc_py.compile(bert_export, output=str(tmp_path / "g"), soc_version=soc, input_format="ND",
                   input_shape=";".join(f"{n}:-1,-1" for n in names),
                   dynamic_dims=[[v for _ in names for v in gear] for gear in gears])
    session = atc_py.InferSession(str(tmp_path / "g.om"))
    times = []
    for index, (batch, length) in enumerate(gears):
        session.infer(_bert_feeds(names, batch, length))
        assert session.model.gear == index
        times.append(session.last_result.npu_time_ms["mean"])
    assert all(_never_cheaper(a, b) for a, b in zip(times, times[1:])), times


def _priced(model, soc) -> float:
    import tempfile

    from atc_py.compiler import compile_model
    from atc_py.options import AtcOptions
    import onnx
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "m.onnx")
        onnx.save(model, path)
        options = AtcOptions(model=path, framework="5", output=os.path.join(tmp, "m"), soc_version=soc)
        options.validate()
        result = compile_model(options, build=False)
        return price_tasks(result.graph, load_chip(soc), result.dtype_of).total_us


@pytest.mark.parametrize("soc", SOCS)
def test_a_small_cnn_scales_with_batch_until_it_saturates(soc):
    """The zoo's small ResNet-50 over batch 1-32: the time per batch never falls; images per
    second never fall while the largest activation of the batch still fits the L2 share that
    keeps activations (the saturation point of COST_MODEL.md section 4)."""
    from atc_py import zoo
    chip = load_chip(soc)
    times = {b: _priced(zoo.build("resnet50", small=True, batch=b), soc) for b in (1, 2, 3, 4, 8, 16, 32)}
    batches = sorted(times)
    assert all(_never_cheaper(times[a], times[b]) for a, b in zip(batches, batches[1:])), times
    graph, _ = fuse_model(zoo.build("resnet50", small=True, batch=1))
    largest = max(int(np.prod(v.desc.shape)) * 2 for n in graph.nodes for v in n.outputs)
    fitting = [b for b in batches if 2 * b * largest <= chip.l2_capacity]
    fps = [b / times[b] for b in fitting]
    assert len(fitting) >= 3 and fps == sorted(fps), (fitting, fps)
