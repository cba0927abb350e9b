"""Price kernels on an Ascend chip from first principles.

There is no NPU here, so every kernel time is estimated: DaVinci's queues (MTE2 in, Cube,
Vector, MTE3 out) run in parallel with double buffering, so a kernel costs its launch and
scalar prologue, the slowest queue, and the fill/drain of one tile through the others.
A cube product is padded to the 16x16x16 fractal (conv channels to C0) and split over the
AI cores in whole fractals; what each core streams in follows from that split and the L0C
tile it accumulates in.  Global memory is DDR/HBM behind an L2 that keeps recent tensors
(the stream-level residency is decided in `simulator/pricing.py`).  Every hardware number
comes from ``simulator/chips/<soc>.json`` and the design files it refers to (value, unit,
source, confidence); this module only holds formulas.  COST_MODEL.md derives each of them.
"""
from __future__ import annotations

import json
import math
from dataclasses import dataclass, field, fields
from functools import lru_cache
from pathlib import Path
from typing import Optional, Sequence

import numpy as np

from codegen.work import VECTOR_OP_CLASSES, Gemm, Work
from ge.errors import AtcError

CHIP_DIR = Path(__file__).resolve().parent / "chips"
DESIGN_DIR = CHIP_DIR / "designs"
CONFIDENCE_LEVELS = ("primary", "secondary", "derived", "fitted", "unconfirmed")
ENTRY_KEYS = {"value", "unit", "source", "confidence"}
MAX_DESIGN_DEPTH = 8
ACC_BYTES = 4               # the cube accumulates in fp32 (int32 for int8) in L0C
BOUNDS = ("memory", "cube", "vector", "launch")


# --------------------------------------------------------------------------- chip data

@dataclass(frozen=True)
class Chip:
    """One soc's primitive parameters as plain floats (names follow CANN's platform_config
    ini where one exists); `sources` keeps each value's unit, source, confidence and the
    file it came from (the chip file or a design file it refers to).  Peaks are methods
    computed from the primitives, never stored."""

    soc_version: str
    ai_core_cnt: float
    vector_core_cnt: float
    cube_vector_split: float
    cube_freq: float                      # MHz == cycles per microsecond
    vec_freq: float                       # MHz
    cube_m_size: float
    cube_n_size: float
    cube_k_size: float
    cube_k_size_int8: float
    cube_k_size_fp32: float
    vector_lanes_fp16: float              # elements per cycle per core
    vector_lanes_fp32: float
    vector_cycles_alu: float              # cycles per full-width vector op, by op class
    vector_cycles_div: float
    vector_cycles_transcendental: float
    vector_cycles_move: float
    memory_size: float                    # bytes
    hbm_bandwidth: float                  # GB/s, whole chip, pin rate
    ddr_efficiency: float                 # sustained share of the pin rate
    l2_size: float                        # bytes
    l2_usable_fraction: float             # share of L2 that keeps activations between kernels
    ddr_rate: float                       # bytes/cycle/core (stored; the chip-wide DDR rate is what binds)
    l2_read_rate: float                   # bytes/cycle/core, L2 hit -> core
    l2_write_rate: float                  # bytes/cycle/core (stored; writes priced on MTE3)
    ub_to_ddr_rate: float                 # bytes/cycle/core, UB -> global memory (MTE3)
    l1_to_l0_a_rate: float                # stored: the L0C tile reuse keeps MTE1 off the critical path
    l1_to_l0_b_rate: float
    ub_size: float                        # bytes per (vector) core
    l1_size: float
    l0_a_size: float
    l0_b_size: float
    l0_c_size: float
    l0c_tile_rows: float                  # M extent of the output tile a core accumulates in L0C
    ubblock_size: float                   # bytes: also the C0 channel block (32 B: 16 fp16)
    small_channel_c0: float               # channels per C0 block under --enable_small_channel
    cube_output_via_vector: float         # 1: L0C results reach UB through the vector unit
    vector_min_block_bytes: float         # smallest output slice a vector kernel gives a core
    tile_overhead_cycles: float           # per pipeline iteration: DMA issue, flag sync, loop
    task_launch_overhead_us: float        # per task in a static graph
    kernel_scalar_overhead_us: float      # per kernel scalar prologue
    gm_latency_us: float                  # first global-memory access, once per kernel
    superkernel_sync_us: float            # per sub-kernel boundary
    superkernel_early_start_saving_us: float
    design: str = ""
    sources: dict = field(default_factory=dict, compare=False, repr=False)

    # -- derived quantities (formulas in COST_MODEL.md) --

    def cube_k(self, dtype) -> float:
        """The cube's K depth for a dtype ([DtypeMKN])."""
        dt = np.dtype(dtype)
        if dt.kind in "iub" and dt.itemsize == 1:
            return self.cube_k_size_int8
        if dt.kind == "f" and dt.itemsize >= 4:
            return self.cube_k_size_fp32
        return self.cube_k_size

    def cube_macs_per_cycle(self, dtype) -> float:
        """MACs per cycle per core: the cube's M x N x K for the dtype."""
        return self.cube_m_size * self.cube_n_size * self.cube_k(dtype)

    def cube_peak_flops(self, dtype=np.float16) -> float:
        """Chip peak FLOP/s = cores x MACs/cycle x 2 x clock."""
        return self.ai_core_cnt * self.cube_macs_per_cycle(dtype) * 2 * self.cube_freq * 1e6

    def vector_lanes(self, dtype) -> float:
        """Elements per cycle per core: 1- and 2-byte types at the fp16 width, 4-byte at the
        fp32 width, 8-byte types emulated at half the fp32 width."""
        size = np.dtype(dtype).itemsize
        if size <= 2:
            return self.vector_lanes_fp16
        if size == 4:
            return self.vector_lanes_fp32
        return self.vector_lanes_fp32 * 4 / size

    def vector_peak_ops(self, dtype=np.float16) -> float:
        """Chip peak of one-cycle vector element ops per second."""
        return self.vector_cores * self.vector_lanes(dtype) / self.vector_cycles_alu * self.vec_freq * 1e6

    def vector_cycles(self, op_class: str) -> float:
        return getattr(self, f"vector_cycles_{op_class}")

    def c0(self, dtype) -> float:
        """Channels per C0 block: one 32-byte UB block (16 fp16, 32 int8, 8 fp32)."""
        return max(1.0, self.ubblock_size // np.dtype(dtype).itemsize)

    @property
    def split(self) -> bool:
        return bool(self.cube_vector_split)

    @property
    def vector_cores(self) -> float:
        """Cores that run vector-only kernels: the AIVs on split chips, else the AI cores
        (310P's standalone vector cores are not used; see COST_MODEL.md)."""
        return self.vector_core_cnt if self.split else self.ai_core_cnt

    @property
    def vector_per_cube_core(self) -> float:
        """Vector units serving one cube core's epilogue in a mixed kernel."""
        return self.vector_core_cnt / self.ai_core_cnt if self.split else 1.0

    @property
    def hbm_bytes_per_us(self) -> float:
        """Pin bandwidth: GB/s = 1e9 B/s = 1e3 B/us."""
        return self.hbm_bandwidth * 1e3

    @property
    def ddr_bytes_per_us(self) -> float:
        """What DDR/HBM sustains under streaming traffic."""
        return self.hbm_bytes_per_us * self.ddr_efficiency

    @property
    def l2_capacity(self) -> float:
        """Bytes of L2 that keep activations between kernels."""
        return self.l2_size * self.l2_usable_fraction

    @property
    def l0c_tile_elements(self) -> float:
        """Output elements one double-buffered L0C tile accumulates (fp32)."""
        return self.l0_c_size / (2 * ACC_BYTES)

    def confidence(self, key: str) -> str:
        return self.sources[key]["confidence"]


_PARAM_FIELDS = tuple(f.name for f in fields(Chip) if f.name not in ("soc_version", "design", "sources"))


def available_socs() -> list[str]:
    """The soc versions with a data file in simulator/chips/ (design files are not chips)."""
    return sorted(p.stem for p in CHIP_DIR.glob("*.json"))


def load_chip(soc_version: str) -> Chip:
    """Load and validate ``chips/<soc_version>.json``; unknown socs raise ATC's E10001."""
    socs = available_socs()
    if soc_version not in socs:
        raise AtcError(
            "E10001",
            f"Value [{soc_version}] for parameter [--soc_version] is invalid. "
            f"Reason: no chip data for it; supported: {', '.join(socs)}.",
            f"Pass one of: {', '.join(socs)}.")
    return _load_cached(soc_version)


@lru_cache(maxsize=None)
def _load_cached(soc_version: str) -> Chip:
    return _parse_chip(CHIP_DIR / f"{soc_version}.json")


def _read_doc(path: Path) -> dict:
    try:
        doc = json.loads(path.read_text())
        if not isinstance(doc.get("params"), dict):
            raise TypeError("no params object")
        return doc
    except (OSError, ValueError, TypeError, AttributeError) as exc:
        raise AtcError("E19999", f"chip data file {path} is unreadable: {exc}") from exc


def _layers(path: Path, depth: int = 0) -> list:
    """[(path, doc, prefix)] from the most general design to the chip file itself; later
    layers override earlier ones.  A chip names its `design` (a design may name its `base`),
    or another chip it takes every value it does not list from (`defaults_from`, with
    `defaults_reason`: e.g. another bin of the same die); those values' sources then say so."""
    doc = _read_doc(path)
    other = doc.get("defaults_from")
    if other:
        other_path = CHIP_DIR / f"{other}.json"
        if depth > MAX_DESIGN_DEPTH or not isinstance(other, str) or "/" in other or not other_path.is_file():
            raise AtcError("E19999", f"chip data file {path}: defaults_from [{other}] is not a chip data file")
        note = f"as {other} ({doc.get('defaults_reason', '')}): "
        return [(p, d, note + prefix) for p, d, prefix in _layers(other_path, depth + 1)] + [(path, doc, "")]
    chain = [(path, doc, "")]
    ref = doc.get("design")
    while ref:
        if len(chain) > MAX_DESIGN_DEPTH or not isinstance(ref, str) or "/" in ref or ref.startswith("."):
            raise AtcError("E19999", f"chip data file {path}: bad or cyclic design reference {ref!r}")
        design_path = DESIGN_DIR / f"{ref}.json"
        if not design_path.is_file():
            raise AtcError("E19999", f"chip data file {chain[-1][0]}: design {ref!r} has no file {design_path}")
        doc = _read_doc(design_path)
        chain.append((design_path, doc, ""))
        ref = doc.get("base")
    return chain[::-1]


def _label(path: Path) -> str:
    """Where a value came from: the data file, relative to simulator/chips/ when inside it."""
    try:
        return path.resolve().relative_to(CHIP_DIR).as_posix()
    except ValueError:
        return str(path)


def _parse_chip(path: Path) -> Chip:
    values, sources = {}, {}
    layers = _layers(path)
    for layer_path, doc, prefix in layers:
        for key, entry in doc["params"].items():
            if key not in _PARAM_FIELDS:
                raise AtcError("E19999", f"{layer_path}: unknown parameter {key!r}")
            if not isinstance(entry, dict) or set(entry) != ENTRY_KEYS:
                raise AtcError("E19999", f"{layer_path}: {key} must be {{value, unit, source, confidence}}")
            if entry["confidence"] not in CONFIDENCE_LEVELS:
                raise AtcError("E19999", f"{layer_path}: {key} has confidence {entry['confidence']!r}")
            try:
                value = float(entry["value"])
            except (TypeError, ValueError):
                value = math.nan
            if not math.isfinite(value) or value < 0:
                raise AtcError("E19999", f"{layer_path}: {key} = {entry['value']!r} is not a finite non-negative number")
            values[key] = value
            sources[key] = dict(entry, source=prefix + entry["source"], file=_label(layer_path))
    missing = sorted(set(_PARAM_FIELDS) - set(values))
    if missing:
        raise AtcError("E19999", f"chip data file {path}: missing {missing} (in the file and its designs)")
    designs = [doc.get("design", "") for p, doc, _ in layers if p.parent == DESIGN_DIR]
    return Chip(soc_version=layers[-1][1].get("soc_version", path.stem), design=designs[-1] if designs else "",
                sources=sources, **values)


# --------------------------------------------------------------------------- kernel cost

@dataclass
class KernelSpec:
    """What the cost model needs to know about one kernel.

    Bytes are global-memory traffic in the compute dtype: `input_bytes` every external input
    read (`weight_bytes` of them constants), `output_bytes` every output written,
    `intermediate_bytes` the tensors a fused kernel keeps on chip instead (defaults to
    ``work.onchip_bytes``; an explicit value wins, they are never added).  Where the data
    sits is the stream's business (`simulator/pricing.py`): `l2_input_bytes` of the
    activation inputs hit in L2, `l2_output_bytes` of the outputs stay in L2 and are never
    written back to DDR; by default everything comes from and goes to DDR.
    `parallel_blocks` overrides the default split of a vector kernel (see `_blocks`).
    `small_channel`: convs with at most `small_channel_c0` input channels pack them in that
    C0 (ATC's --enable_small_channel).  `no_task` kernels are views: free."""

    name: str
    op_type: str
    work: Work = field(default_factory=Work)
    input_bytes: int = 0
    output_bytes: int = 0
    intermediate_bytes: Optional[int] = None      # None: take `work.onchip_bytes`
    compute_dtype: np.dtype = np.dtype(np.float16)
    no_task: bool = False
    output_elements: Optional[int] = None
    largest_input_bytes: int = 0    # the biggest single input: what a reduction streams per output
    weight_bytes: int = 0
    l2_input_bytes: int = 0
    l2_output_bytes: int = 0
    parallel_blocks: Optional[int] = None
    small_channel: bool = False
    broadcast_bytes: int = 0        # constant inputs smaller than the output: every core reads them whole

    def __post_init__(self):
        self.compute_dtype = np.dtype(self.compute_dtype)
        if self.intermediate_bytes is None:
            self.intermediate_bytes = int(getattr(self.work, "onchip_bytes", 0))
        for name in ("input_bytes", "output_bytes", "intermediate_bytes", "weight_bytes", "l2_input_bytes",
                     "l2_output_bytes"):
            if getattr(self, name) < 0:
                raise AtcError("E19999", f"kernel {self.name}: {name} is negative")
        if (self.weight_bytes + self.l2_input_bytes > self.input_bytes or self.l2_output_bytes > self.output_bytes
                or self.broadcast_bytes > self.weight_bytes):
            raise AtcError("E19999", f"kernel {self.name}: more weight/L2 bytes than it reads or writes")
        if self.work.cube_macs < 0 or any(v < 0 for v in self.work.vector_ops.values()):
            raise AtcError("E19999", f"kernel {self.name}: negative work")
        unknown = set(self.work.vector_ops) - set(VECTOR_OP_CLASSES)
        if unknown:
            raise AtcError("E19999", f"kernel {self.name}: unknown vector op classes {sorted(unknown)}")
        if self.parallel_blocks is not None and self.parallel_blocks < 1:
            raise AtcError("E19999", f"kernel {self.name}: parallel_blocks must be >= 1")

    @property
    def ddr_read_bytes(self) -> int:
        return self.input_bytes - self.l2_input_bytes

    @property
    def ddr_write_bytes(self) -> int:
        return self.output_bytes - self.l2_output_bytes


@dataclass
class KernelCost:
    """Per-pipe busy times of the busiest core, in microseconds, and what the kernel moved."""

    name: str
    op_type: str
    launch_us: float = 0.0
    scalar_us: float = 0.0
    mte2_us: float = 0.0
    cube_us: float = 0.0
    vector_us: float = 0.0
    mte3_us: float = 0.0
    hbm_us: float = 0.0             # chip-wide DDR/HBM occupancy (reads + writes share the pins)
    fill_drain_us: float = 0.0      # pipeline fill/drain and per-tile overhead beyond the slowest pipe
    latency_us: float = 0.0         # first global-memory access before the pipeline starts
    total_us: float = 0.0
    bound: str = "none"             # "memory" | "cube" | "vector" | "launch" | "none" (no task)
    cores_used: int = 0
    blocks: float = 0.0
    spill_bytes: float = 0.0
    tiles: float = 0.0              # pipeline iterations per core
    launches: int = 0
    flops: float = 0.0              # useful arithmetic: 2 x cube MACs + vector element ops
    padded_macs: float = 0.0        # MACs the cube really runs (fractal and C0 padding)
    ddr_bytes: float = 0.0          # DDR/HBM traffic, reads + writes
    l2_bytes: float = 0.0           # inputs served by L2
    memory_bytes: float = 0.0       # everything the kernel reads and writes in global memory
    plans: tuple = ()               # cube kernels: the split each product took (GemmPlan)

    @property
    def pipes(self) -> dict:
        return {"mte2": self.mte2_us, "cube": self.cube_us, "vector": self.vector_us,
                "mte3": self.mte3_us, "hbm": self.hbm_us}

    @property
    def steady_us(self) -> float:
        return max(self.pipes.values())

    @property
    def overhead_us(self) -> float:
        """Launch, scalar prologue and first-access latency: time no pipe is busy."""
        return self.launch_us + self.scalar_us + self.latency_us

    @property
    def body_us(self) -> float:
        """The pipelined part: slowest pipe plus fill/drain."""
        return self.steady_us + self.fill_drain_us


# -- cube products -------------------------------------------------------------------------

@dataclass(frozen=True)
class GemmPlan:
    """One `Gemm` padded to the cube on one split over cores (`split` = cores over products,
    rows, columns): the busiest core's cycles, the bytes it streams in, its pipeline steps and
    padded outputs, and the size of one step (what the first step loads and computes before
    the next queue can start: the pipeline's fill and drain)."""

    cores: int                  # cores with work
    split: tuple
    share: float                # the busiest core's share of the real outputs (and of the epilogue)
    cycles: float
    reads: float                # bytes the busiest core streams in for this product's operands
    memory_bytes: float         # operand bytes the kernel reads from global memory at least once
    tiles: float                # L0C tiles on the busiest core
    steps: float                # pipeline steps on the busiest core: L0C tiles x K panels
    out_elements: float         # padded outputs on the busiest core (they leave L0C once)
    padded_macs: float
    step_reads: float           # bytes one step loads (its A and B panels)
    step_cycles: float          # cube cycles of one step
    step_outputs: float         # padded outputs of one L0C tile
    step_fraction: float        # one L0C tile's share of the busiest core's real outputs


def _ceil(a: float, b: float) -> int:
    return int(math.ceil(a / b - 1e-12))


def _streamed(a: float, b: float, products: int, shared_b: bool, m_tiles: int, n_tiles: int,
              a_panel: float, b_panel: float, half_l1: float) -> float:
    """Bytes one core streams into L1 for its `products` products of A slice `a` x B slice
    `b` (COST_MODEL.md 3.2).  Each L0C tile needs its A panel and B panel (at most one L0C
    tile's rows or columns); whatever fits half of L1 is loaded once and reused, the rest
    streams again for every tile that needs it, in the cheapest loop order.  A B that fits L1
    stays there across products (once if shared, else once per product)."""
    held_b = b <= half_l1
    if a <= half_l1:
        each = a + (0.0 if held_b else b)
    elif held_b:
        each = a
    else:
        options = [a * n_tiles + b * m_tiles]
        if a_panel <= half_l1:              # keep an A panel, stream B once per panel
            options.append(a + b * m_tiles)
        if b_panel <= half_l1:              # keep a B panel, stream A once per panel
            options.append(a * n_tiles + b)
        each = min(options)
    return products * each + (b * (1 if shared_b else products) if held_b else 0.0)


@lru_cache(maxsize=64)
def _split_grid(cores: int) -> tuple:
    """Every way a kernel can spread over `cores` cores along (products, rows, columns), the
    columns taking what the other two leave: the same set for every problem size, so a
    smaller problem can always use the split a larger one uses."""
    return tuple((pb, pm, cores // (pb * pm)) for pb in range(1, cores + 1) for pm in range(1, cores // pb + 1))


def l0c_tile(chip: Chip) -> tuple:
    """(rows, columns) of the output tile a core accumulates in one double-buffered L0C:
    `l0c_tile_rows` rows (chip data: 128) and as many whole fractal columns as fit (310P3:
    128 x 256; 910B2: 128 x 128).  One shape for every problem (smaller problems use its
    corner), so a larger problem never gets a tile shape a smaller one could not use."""
    rows = int(chip.l0c_tile_rows)
    cols = max(chip.cube_n_size, (chip.l0c_tile_elements // rows) // chip.cube_n_size * chip.cube_n_size)
    return rows, int(cols)


def k_panel(chip: Chip, dtype) -> int:
    """K depth of one pipeline step: the K slice of a full L0C tile's A and B panels that
    L0A and L0B hold double-buffered (310P3 fp16: 64).  MTE2 brings the panels in at this
    depth while the cube works on the previous slice (COST_MODEL.md 3.5)."""
    dtype = np.dtype(dtype)
    kc = chip.cube_k(dtype)
    m0, n0 = l0c_tile(chip)
    depth = min(chip.l0_a_size / (2 * m0), chip.l0_b_size / (2 * n0)) / dtype.itemsize
    return int(max(kc, depth // kc * kc))


def _packs(chip: Chip, gemm: Gemm, dtype: np.dtype) -> list:
    """How many groups of a grouped conv with few channels per group may share one fractal
    (block-diagonal weights): each power of two up to what C0 holds.  Fewer channels per group
    allow every packing more channels allow, so a larger conv never has a cheaper one."""
    channels = max(1, gemm.k // max(gemm.k_window, 1))
    c0 = chip.c0(dtype)
    if gemm.groups <= 1 or channels >= c0:
        return [1]
    most = min(gemm.groups, int(c0 // channels))
    return [1 << i for i in range(most.bit_length()) if 1 << i <= most]


@lru_cache(maxsize=8192)
def gemm_plans(chip: Chip, gemm: Gemm, dtype: np.dtype, small_channel: bool = False) -> tuple:
    """`gemm` padded to fractals and C0, on every packing of its groups and every split over
    the AI cores (COST_MODEL.md 3.2).  A core takes whole products and whole fractals of rows
    and columns; the kernel picks the plan that prices cheapest (`_price_cube`)."""
    dtype = np.dtype(dtype)
    item = dtype.itemsize
    frac_m, frac_n, kc = chip.cube_m_size, chip.cube_n_size, chip.cube_k(dtype)
    channels = max(1, gemm.k // max(gemm.k_window, 1))
    m = max(1, gemm.m)
    tile_m, tile_n = l0c_tile(chip)
    kp = k_panel(chip, dtype)
    half_l1 = chip.l1_size / 2
    memory = 0.0 if gemm.a_onchip else gemm.batch * gemm.groups * (gemm.a_elements or gemm.m * gemm.k) * item
    if not gemm.b_onchip:
        memory += (1 if gemm.shared_b else gemm.batch) * gemm.groups * gemm.k * gemm.n * item
    plans = {}
    for pack in _packs(chip, gemm, dtype):
        c0 = chip.c0(dtype)
        if small_channel and gemm.k_window > 1 and channels * pack <= chip.small_channel_c0:
            c0 = chip.small_channel_c0
        channels_padded = _ceil(channels * pack, c0) * c0
        k_padded = _ceil(channels_padded * gemm.k_window, kc) * kc
        n_packed = max(1, gemm.n * pack)
        products = max(1, gemm.batch * _ceil(gemm.groups, pack))
        mf, nf, kf = _ceil(m, frac_m), _ceil(n_packed, frac_n), _ceil(k_padded, kc)
        a_product = 0.0 if gemm.a_onchip else (gemm.a_elements or gemm.m * gemm.k) * pack * item * channels_padded / (channels * pack)
        a_row = a_product / m                              # A bytes per output row
        k_steps, k_step = _ceil(k_padded, kp), min(k_padded, kp)
        padded_macs = float(products * mf * nf * kf * frac_m * frac_n * kc)
        for pb, pm, pn in _split_grid(int(chip.ai_core_cnt)):
            bc, mc, nc = _ceil(products, min(pb, products)), _ceil(mf, min(pm, mf)), _ceil(nf, min(pn, nf))
            if (pack, bc, mc, nc) in plans:
                continue
            rows, cols = mc * frac_m, nc * frac_n
            rows_real, cols_real = min(m, rows), min(n_packed, cols)
            m0, n0 = min(rows, tile_m), min(cols, tile_n)
            m_tiles, n_tiles = _ceil(rows, m0), _ceil(cols, n0)
            a_slice = a_row * rows_real                   # this core's A rows, one product
            b_slice = 0.0 if gemm.b_onchip else k_padded * cols * item
            a_panel = a_row * min(rows_real, m0)
            b_panel = 0.0 if gemm.b_onchip else k_padded * n0 * item
            reads = _streamed(a_slice, b_slice, bc, gemm.shared_b, m_tiles, n_tiles, a_panel, b_panel, half_l1)
            split = (_ceil(products, bc), _ceil(mf, mc), _ceil(nf, nc))
            plans[(pack, bc, mc, nc)] = GemmPlan(
                cores=split[0] * split[1] * split[2], split=split,
                share=bc * rows_real * cols_real / (products * m * n_packed), cycles=float(bc * mc * nc * kf),
                reads=float(reads), memory_bytes=memory, tiles=float(bc * m_tiles * n_tiles),
                steps=float(bc * m_tiles * n_tiles * k_steps), out_elements=float(bc * rows * cols),
                padded_macs=padded_macs, step_reads=(a_panel + b_panel) * k_step / k_padded,
                step_cycles=float(_ceil(m0, frac_m) * _ceil(n0, frac_n) * _ceil(k_step, kc)),
                step_outputs=float(m0 * n0),
                step_fraction=min(rows_real, m0) * min(cols_real, n0) / (bc * rows_real * cols_real))
    return tuple(plans.values())


def plan_gemm(chip: Chip, gemm: Gemm, dtype: np.dtype, small_channel: bool = False) -> GemmPlan:
    """The split a kernel running only `gemm` (operands from DDR, fp16 outputs) takes."""
    dtype = np.dtype(dtype)
    spec = KernelSpec("gemm", "MatMul", Work.of_gemms(gemm), compute_dtype=dtype, small_channel=small_channel,
                      output_bytes=gemm.batch * gemm.groups * gemm.m * gemm.n * dtype.itemsize)
    spec.input_bytes = int(sum(p.memory_bytes for p in gemm_plans(chip, gemm, dtype, small_channel)[:1]))
    return price_kernel(chip, spec).plans[0]


def _blocks(chip: Chip, spec: KernelSpec) -> float:
    """Independent pieces of output a vector kernel can be split into, as a real number
    >= 1: `vector_min_block_bytes` of the larger of output and biggest input each, at most
    one block per output element."""
    if spec.parallel_blocks is not None:
        return float(spec.parallel_blocks)
    elements = spec.output_elements
    if elements is None:
        elements = spec.output_bytes / spec.compute_dtype.itemsize
    # A vector block is sized by the bigger of what it writes and what it streams in, but a
    # block needs at least one output element of its own: a row reduction splits by rows.
    streamed = max(spec.output_bytes, spec.largest_input_bytes)
    return max(1.0, min(float(max(elements, 1)), streamed / chip.vector_min_block_bytes))


def _spill(chip: Chip, spec: KernelSpec, blocks: float, io_stream: float) -> tuple:
    """(spilled bytes, on-chip bytes per block): intermediates that do not fit UB next to the
    double-buffered streams go out to memory and come back (COST_MODEL.md 3.3)."""
    capacity = chip.ub_size
    io_block = io_stream / blocks
    inter_block = spec.intermediate_bytes / blocks
    stream_reserve = 2 * min(io_block, capacity / 4)          # double-buffered, sub-chunkable
    spill_block = min(inter_block, max(0.0, inter_block + stream_reserve - capacity))
    return spill_block * blocks, 2 * io_block + inter_block - spill_block


def _pipeline(totals: Sequence[float], steps: Sequence[float]) -> float:
    """Time of queues in a fixed order (MTE2, cube, vector, MTE3) working through equal-or-
    smaller steps, double-buffered: a queue cannot start before the first step has passed the
    queues ahead of it, and after its last step the queues behind it still handle that step.
    So the time is the largest, over queues, of its own busy time plus one step of every other
    queue (COST_MODEL.md 3.5); one step gives the plain sum.  Non-decreasing in every total and
    step: a larger problem never pipelines into less time."""
    return max(total + sum(steps) - step for total, step in zip(totals, steps))


def _cube_phase(chip: Chip, plan: GemmPlan, ddr_read: float, side_reads: float, side_constants: float,
                vector_cycles: float, output_bytes: float, ddr_write: float, lanes: float) -> tuple:
    """(time, mte2, cube, vector, mte3) of one cube product on one split: the busiest core's
    queues over its steps, one step of each as fill and drain, plus its per-step overhead.
    The core reads its share of the side inputs (a residual) and the constant ones (a bias)
    whole."""
    freq = chip.cube_freq
    share = plan.share
    per_core = chip.vector_per_cube_core
    reads = plan.reads + share * side_reads + side_constants
    port = 1.0 / (chip.l2_read_rate * freq)
    mte2 = max(reads * port, ddr_read / chip.ddr_bytes_per_us)
    # The first step's panels: every core loads its own at once, so from DDR each gets its
    # share of the chip's rate.
    step_rate = max(port, chip.ai_core_cnt / chip.ddr_bytes_per_us) if ddr_read > 0 else port
    cube = plan.cycles / chip.cube_freq
    move = chip.vector_cycles_move if chip.cube_output_via_vector else 0.0
    epilogue = share * vector_cycles / per_core
    vector = (epilogue + plan.out_elements * move / per_core) / (lanes * chip.vec_freq)
    mte3 = max(share * output_bytes / (chip.ub_to_ddr_rate * freq), ddr_write / chip.ddr_bytes_per_us)
    totals = (mte2, cube, vector, mte3)
    steps = (min(mte2, plan.step_reads * step_rate),
             min(cube, plan.step_cycles / chip.cube_freq),
             min(vector, (epilogue * plan.step_fraction + plan.step_outputs * move / per_core) / (lanes * chip.vec_freq)),
             mte3 * plan.step_fraction)
    time = _pipeline(totals, steps) + plan.steps * chip.tile_overhead_cycles / freq
    return time, mte2, cube, vector, mte3


def _price_cube(chip: Chip, spec: KernelSpec, cost: KernelCost, cube_dtype, vector_cycles: float, lanes: float) -> None:
    """A kernel of cube products: each product a phase of its own, split over the cores the way
    that prices cheapest; the kernel's other inputs, outputs and the vector work no product
    claims as its epilogue belong to its last phase (COST_MODEL.md 3.2-3.5).  The DDR reads
    are shared among the phases in proportion to the bytes each reads from global memory."""
    gemms = spec.work.gemms
    options = [gemm_plans(chip, g, cube_dtype, spec.small_channel) for g in gemms]
    operand_bytes = [opts[0].memory_bytes for opts in options]
    side = max(0.0, spec.input_bytes - sum(operand_bytes))
    side_constants = min(side, spec.broadcast_bytes)
    # The epilogue works on output fractals: their intermediates are what must fit UB.
    fractals = (spec.output_elements or spec.output_bytes / spec.compute_dtype.itemsize) / (
        chip.cube_m_size * chip.cube_n_size)
    spill, _ = _spill(chip, spec, max(1.0, fractals), spec.output_bytes)
    from_ddr = spec.ddr_read_bytes / spec.input_bytes if spec.input_bytes else 0.0
    ddr_write = spec.ddr_write_bytes + spill
    # A product's own epilogue (attention's softmax on its scores) splits as that product
    # does; the rest of the vector work is the last product's epilogue.
    own = [sum(count * chip.vector_cycles(cls) for cls, count in g.epilogue) for g in gemms]
    rest = max(0.0, vector_cycles - sum(own))
    body = 0.0
    chosen = []
    for index, (opts, operands) in enumerate(zip(options, operand_bytes)):
        last = index == len(options) - 1
        args = ((side - side_constants + spill, side_constants, own[index] + rest, spec.output_bytes + spill, ddr_write)
                if last else (0.0, 0.0, own[index], 0.0, 0.0))
        ddr_read = from_ddr * operands + ((from_ddr * side + spill) if last else 0.0)
        best = None
        for plan in opts:
            priced = _cube_phase(chip, plan, ddr_read, *args, lanes)
            if best is None or (priced[0], plan.cores) < (best[0][0], best[1].cores):
                best = (priced, plan)
        (time, mte2, cube, vector, mte3), plan = best
        body += time
        cost.mte2_us += mte2
        cost.cube_us += cube
        cost.vector_us += vector
        cost.mte3_us += mte3
        chosen.append(plan)
    ddr_read = spec.ddr_read_bytes + spill
    cost.hbm_us = (ddr_read + ddr_write) / chip.ddr_bytes_per_us
    cost.plans = tuple(chosen)
    cost.cores_used = max(p.cores for p in chosen)
    cost.blocks = sum(p.tiles for p in chosen)
    cost.tiles = sum(p.steps for p in chosen)
    cost.padded_macs = sum(p.padded_macs for p in chosen)
    cost.spill_bytes = spill
    cost.ddr_bytes = ddr_read + ddr_write
    _finish(chip, spec, cost, max(cost.hbm_us, body))


def _finish(chip: Chip, spec: KernelSpec, cost: KernelCost, body: float) -> None:
    """Overheads, bound and the bookkeeping every kernel shares (COST_MODEL.md 3.6)."""
    cost.fill_drain_us = body - cost.steady_us
    cost.latency_us = chip.gm_latency_us if spec.input_bytes + spec.output_bytes + cost.spill_bytes > 0 else 0.0
    cost.launch_us = chip.task_launch_overhead_us
    cost.scalar_us = chip.kernel_scalar_overhead_us
    cost.total_us = cost.overhead_us + body
    memory = max(cost.mte2_us, cost.mte3_us, cost.hbm_us)
    busy = (("memory", memory), ("cube", cost.cube_us), ("vector", cost.vector_us))
    cost.bound = "launch" if cost.overhead_us >= body else max(busy, key=lambda kv: kv[1])[0]
    cost.launches = 1
    cost.flops = 2.0 * spec.work.cube_macs + sum(spec.work.vector_ops.values())
    cost.l2_bytes = spec.l2_input_bytes
    cost.memory_bytes = spec.input_bytes + spec.output_bytes + 2 * cost.spill_bytes


def price_kernel(chip: Chip, spec: KernelSpec) -> KernelCost:
    """Price one kernel; COST_MODEL.md section 3 derives every line."""
    cost = KernelCost(spec.name, spec.op_type)
    if spec.no_task:
        return cost
    work = spec.work
    cube = work.cube_macs > 0
    vector_cycles = sum(count * chip.vector_cycles(cls) for cls, count in work.vector_ops.items())
    lanes = chip.vector_lanes(spec.compute_dtype)
    cube_dtype = np.dtype(work.cube_dtype) if work.cube_dtype else spec.compute_dtype   # int8 stays int8
    if cube and work.gemms:
        _price_cube(chip, spec, cost, cube_dtype, vector_cycles, lanes)
        return cost

    # Vector kernels (and cube work without a shape): whole blocks per core, the busiest core
    # does `share` of the kernel.
    freq = chip.vec_freq if chip.split and not cube else chip.cube_freq   # clock of the movers
    cores_avail = chip.ai_core_cnt if cube else chip.vector_cores
    blocks = _blocks(chip, spec)
    whole_blocks = math.ceil(blocks - 1e-9)
    cores = max(1, int(min(cores_avail, whole_blocks)))
    share = min(1.0, math.ceil(whole_blocks / cores) / blocks)
    spill, core_set = _spill(chip, spec, blocks, spec.input_bytes + spec.output_bytes)
    cycles = share * work.cube_macs / chip.cube_macs_per_cycle(cube_dtype)
    min_tiles = max(1.0, core_set * math.ceil(whole_blocks / cores) / chip.ub_size)

    # Every core read passes through L2 into the core's MTE2 queue; what misses L2 (weights,
    # evicted activations, spills) comes from DDR, which all cores share: the MTE2 stage lasts
    # as long as the slower of the core's L2 port and the chip's DDR (COST_MODEL.md 3.4).
    # Writes likewise; reads and writes together also share the DDR pins (`hbm_us`).
    ddr_read = spec.ddr_read_bytes + spill
    ddr_write = spec.ddr_write_bytes + spill
    # Broadcast constants (LayerNorm's gamma and beta, a bias) are read whole by every core;
    # everything else splits with the output.
    core_reads = share * (spec.input_bytes - spec.broadcast_bytes + spill) + spec.broadcast_bytes
    cost.mte2_us = max(core_reads / (chip.l2_read_rate * freq), ddr_read / chip.ddr_bytes_per_us)
    cost.mte3_us = max(share * (spec.output_bytes + spill) / (chip.ub_to_ddr_rate * freq),
                       ddr_write / chip.ddr_bytes_per_us)
    cost.hbm_us = (ddr_read + ddr_write) / chip.ddr_bytes_per_us
    cost.cube_us = cycles / chip.cube_freq
    cost.vector_us = share * vector_cycles / (lanes * chip.vec_freq)

    # Double-buffered pipeline over n equal tiles, n chosen by the kernel: slowest + (others)/n
    # + n x per-tile overhead, n at least what fits UB (COST_MODEL.md 3.5); never faster than
    # the DDR floor.
    stages = [cost.mte2_us, cost.cube_us, cost.vector_us, cost.mte3_us]
    slowest = max(stages)
    others = sum(stages) - slowest
    tile_us = chip.tile_overhead_cycles / freq
    tiles = max(min_tiles, math.sqrt(others / tile_us)) if tile_us > 0 and others > 0 else min_tiles
    body = max(cost.hbm_us, slowest + others / tiles + tiles * tile_us)
    cost.cores_used = cores
    cost.blocks = blocks
    cost.spill_bytes = spill
    cost.tiles = tiles
    cost.padded_macs = float(work.cube_macs)
    cost.ddr_bytes = ddr_read + ddr_write
    _finish(chip, spec, cost, body)
    return cost


# --------------------------------------------------------------------------- streams

@dataclass
class StreamCost:
    """Kernels executed in order on one stream."""

    total_us: float
    kernels: list
    launches: int


def price_stream(chip: Chip, specs: Sequence[KernelSpec]) -> StreamCost:
    """Tasks run back to back: the stream time is the sum of kernel totals."""
    kernels = [price_kernel(chip, s) for s in specs]
    return StreamCost(sum(k.total_us for k in kernels), kernels, sum(k.launches for k in kernels))


@dataclass
class SuperKernelCost(StreamCost):
    sync_us: float = 0.0
    saving_us: float = 0.0


def super_kernel_durations(chip: Chip, kernels: Sequence[KernelCost]) -> list:
    """How long each sub-kernel of one super kernel occupies the stream: the first pays the
    single launch; every later one pays a full-core sync and gets back the early-start /
    icache-preload overlap (capped by its scalar prologue, which is what it hides).  Views
    (no launch) take no time.  The sum is the super kernel's time."""
    durations, first = [], True
    for k in kernels:
        if not k.launches:
            durations.append(0.0)
        elif first:
            durations.append(k.total_us)
            first = False
        else:
            saving = min(chip.superkernel_early_start_saving_us, k.scalar_us)
            durations.append(k.total_us - k.launch_us + chip.superkernel_sync_us - saving)
    return durations


def price_super_kernel(chip: Chip, specs: Sequence[KernelSpec]) -> SuperKernelCost:
    """A run of kernels merged into one SuperKernel task: one launch; every boundary between
    sub-kernels adds a full-core sync and saves the early-start/icache-preload overlap."""
    kernels = [price_kernel(chip, s) for s in specs]
    tasks = [k for k in kernels if k.launches]
    if not tasks:
        return SuperKernelCost(0.0, kernels, 0)
    sync = (len(tasks) - 1) * chip.superkernel_sync_us
    saving = sum(min(chip.superkernel_early_start_saving_us, k.scalar_us) for k in tasks[1:])
    return SuperKernelCost(sum(super_kernel_durations(chip, kernels)), kernels, 1, sync_us=sync,
                           saving_us=saving)
