"""A decoder's gated MLP priced by the cost model: two GEMMs (the gate in the first one's
epilogue) against one whole-MLP kernel.  The decision in fusion_passes/gated_mlp.py.

    python bench/bench_gated_mlp.py

The MLP: y = x + (act(norm(x)·Wg) ⊙ (norm(x)·Wu))·Wd, float16, RMSNorm first.
- "2 GEMMs" (what GatedMlpFusionPass + RmsNormMatMul + MatMulBiasAct build): kernel 1 =
  RmsNormMatMulFusionOp with the SwiGLU epilogue on the packed [K, 2I] weight, writing h
  [rows, I]; kernel 2 = MatMulBiasFusionOp with the residual.  Priced from their own work
  rules (codegen/fused/), as the report prices them.
- "2 GEMMs, 1 super kernel": the same pair launched as one super kernel.
- "1 kernel, rows": the whole MLP as one kernel whose cores each own whole rows (all of I
  and N for 16 rows): no cross-core traffic, so at most ceil(rows/16) cores work (priced on
  the chip with that many AI cores: the cost model splits a product over every core it
  has, and a row-owning kernel cannot).
- "1 kernel, split I": cores split I; each multiplies its h slice by its rows of Wd and adds
  the partial [rows, N] sums across cores.  The cost model does not charge a cross-core
  combination; we charge each core's fp32 partial output as a write (the atomic adds), and
  not the synchronization before the residual.
Work and on-chip bytes of the one-kernel forms are the sum of the two kernels' (the
intermediate h stays on chip).  Sizes: the sweep's scaled decoder (512 -> 1408) and
Llama-7B's (4096 -> 11008), from one token (decoding) to 2048 (prefill).
"""
from __future__ import annotations

import dataclasses
import math
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import codegen  # noqa: E402,F401  (registers the kernels)
from codegen.registry import kernel_of  # noqa: E402
from ge.ops.registry import TensorType  # noqa: E402
from simulator.cost_model import KernelSpec, load_chip, price_kernel, price_super_kernel  # noqa: E402

F16 = np.dtype(np.float16)
SIZES = ((512, 1408), (4096, 11008))
ROWS = (1, 32, 128, 512, 2048)
SOCS = ("Ascend910", "Ascend910B2", "Ascend310P3")
GLU = {"activation": "Swish", "gate": 1, "emit_normalized": 0, "axis": -1, "epsilon": 1e-6, "stash_type": 1}


def _t(*shape):
    return TensorType(F16, tuple(shape))


def _spec(name, op_type, inputs, outputs, attrs, **extra):
    work = kernel_of(op_type).work(inputs, outputs, attrs)
    fields = dict(input_bytes=sum(t.nbytes for t in inputs if t is not None),
                  output_bytes=sum(t.nbytes for t in outputs), compute_dtype=F16,
                  output_elements=max(sum(t.size for t in outputs), work.onchip_bytes // F16.itemsize))
    fields.update(extra)
    return KernelSpec(name, op_type, work, **fields)


def two_gemms(rows, k, inter):
    x, h, y = _t(rows, k), _t(rows, inter), _t(rows, k)
    first = _spec("gate_up", "RmsNormMatMulFusionOp", [x, _t(k), None, _t(k, 2 * inter)], [h], GLU)
    second = _spec("down", "MatMulBiasFusionOp", [h, _t(inter, k), None, y], [y], {"activation": ""})
    return first, second


def one_kernel(chip, rows, k, inter, split_i: bool):
    first, second = two_gemms(rows, k, inter)
    work = first.work + second.work
    work.onchip_bytes = first.work.onchip_bytes + second.work.onchip_bytes + rows * inter * F16.itemsize
    inputs = first.input_bytes + second.input_bytes - rows * inter * F16.itemsize     # h stays on chip
    out = rows * k * F16.itemsize
    if split_i:
        blocks = max(1.0, rows * inter / (chip.cube_m_size * chip.cube_n_size))
        cores = min(chip.ai_core_cnt, math.ceil(blocks))
        return KernelSpec("mlp", "GatedMlp", work, input_bytes=inputs, output_bytes=out + cores * rows * k * 4,
                          compute_dtype=F16, parallel_blocks=blocks)
    return KernelSpec("mlp", "GatedMlp", work, input_bytes=inputs, output_bytes=out, compute_dtype=F16,
                      parallel_blocks=max(1, math.ceil(rows / chip.cube_m_size)))


def row_owning_chip(chip, rows):
    """The chip as a row-owning kernel sees it: one AI core per 16 rows at most."""
    return dataclasses.replace(chip, ai_core_cnt=min(chip.ai_core_cnt, math.ceil(rows / chip.cube_m_size)))


def main() -> int:
    columns = ("2 GEMMs", "2 GEMMs, 1 super kernel", "1 kernel, rows", "1 kernel, split I")
    for soc in SOCS:
        chip = load_chip(soc)
        print(f"{soc} (us per MLP)")
        print(f"{'rows':>5} {'K':>5} {'I':>6} | " + " ".join(f"{c:>23}" for c in columns) + " | best")
        for k, inter in SIZES:
            for rows in ROWS:
                first, second = two_gemms(rows, k, inter)
                times = (price_kernel(chip, first).total_us + price_kernel(chip, second).total_us,
                         price_super_kernel(chip, [first, second]).total_us,
                         price_kernel(row_owning_chip(chip, rows), one_kernel(chip, rows, k, inter, False)).total_us,
                         price_kernel(chip, one_kernel(chip, rows, k, inter, True)).total_us)
                best = columns[int(np.argmin(times))]
                print(f"{rows:5d} {k:5d} {inter:6d} | " + " ".join(f"{t:23.1f}" for t in times) + f" | {best}")
        print()
    return 0


if __name__ == "__main__":
    sys.exit(main())
