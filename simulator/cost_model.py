"""Price kernels on an Ascend chip from first principles.

There is no NPU here, so every kernel time is estimated: DaVinci's queues (MTE2 in, Cube,
Vector, MTE3 out) run in parallel with double buffering, so a kernel costs its launch and
scalar prologue, the slowest queue, and the fill/drain of one tile through the others.
Every hardware number comes from ``simulator/chips/<soc>.json`` (value, unit, source,
confidence); this module only holds formulas.  COST_MODEL.md derives each of them.
"""
from __future__ import annotations

import json
import math
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Optional, Sequence

import numpy as np

from codegen.work import VECTOR_OP_CLASSES, Work
from ge.errors import AtcError

CHIP_DIR = Path(__file__).resolve().parent / "chips"
CONFIDENCE_LEVELS = ("primary", "secondary", "derived", "unconfirmed")


# --------------------------------------------------------------------------- chip data

@dataclass(frozen=True)
class Chip:
    """One soc's primitive parameters as plain floats (names follow CANN's platform_config
    ini where one exists); `sources` keeps each value's unit, source and confidence.
    Peaks are methods computed from the primitives, never stored."""

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
    hbm_bandwidth: float                  # GB/s, whole chip
    l2_size: float                        # bytes
    ddr_rate: float                       # bytes/cycle/core, GM -> core (MTE2)
    l2_read_rate: float                   # bytes/cycle/core, L2 hit -> core
    l2_write_rate: float                  # bytes/cycle/core (stored; writes priced to HBM)
    ub_to_ddr_rate: float                 # bytes/cycle/core, UB -> GM (MTE3)
    l1_to_l0_a_rate: float                # stored, not used: L0 reuse assumed
    l1_to_l0_b_rate: float
    ub_size: float                        # bytes per (vector) core
    l1_size: float
    l0_a_size: float
    l0_b_size: float
    l0_c_size: float
    ubblock_size: float
    vector_min_block_bytes: float         # smallest output slice a vector kernel gives a core
    tile_overhead_cycles: float           # per pipeline iteration: DMA issue, flag sync, loop
    task_launch_overhead_us: float        # per task in a static graph
    kernel_scalar_overhead_us: float      # per kernel scalar prologue
    gm_latency_us: float                  # first global-memory access, once per kernel
    superkernel_sync_us: float            # per sub-kernel boundary
    superkernel_early_start_saving_us: float
    sources: dict = field(default_factory=dict, compare=False, repr=False)

    # -- derived quantities (formulas in COST_MODEL.md) --

    def cube_macs_per_cycle(self, dtype) -> float:
        """MACs per cycle per core: the cube's M x N x K for the dtype ([DtypeMKN])."""
        dt = np.dtype(dtype)
        if dt.kind in "iub" and dt.itemsize == 1:
            k = self.cube_k_size_int8
        elif dt.kind == "f" and dt.itemsize >= 4:
            k = self.cube_k_size_fp32
        else:
            k = self.cube_k_size
        return self.cube_m_size * self.cube_n_size * k

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

    def vector_cycles(self, op_class: str) -> float:
        return getattr(self, f"vector_cycles_{op_class}")

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
        return self.hbm_bandwidth * 1e3          # GB/s = 1e9 B/s = 1e3 B/us

    def confidence(self, key: str) -> str:
        return self.sources[key]["confidence"]


_PARAM_FIELDS = tuple(f.name for f in fields(Chip) if f.name not in ("soc_version", "sources"))


def available_socs() -> list[str]:
    """The soc versions with a data file in simulator/chips/."""
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
    return _parse_chip(CHIP_DIR / f"{soc_version}.json")


def _parse_chip(path: Path) -> Chip:
    try:
        doc = json.loads(path.read_text())
        params = dict(doc["params"])
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise AtcError("E19999", f"chip data file {path} is unreadable: {exc}") from exc
    params = _with_design(path, doc, params)
    missing = sorted(set(_PARAM_FIELDS) - set(params))
    extra = sorted(set(params) - set(_PARAM_FIELDS))
    if missing or extra:
        raise AtcError("E19999", f"chip data file {path}: missing {missing}, unknown {extra}")
    values, sources = {}, {}
    for key in _PARAM_FIELDS:
        entry = params[key]
        if not isinstance(entry, dict) or set(entry) != {"value", "unit", "source", "confidence"}:
            raise AtcError("E19999", f"{path}: {key} must be {{value, unit, source, confidence}}")
        if entry["confidence"] not in CONFIDENCE_LEVELS:
            raise AtcError("E19999", f"{path}: {key} has confidence {entry['confidence']!r}")
        value = float(entry["value"])
        if not math.isfinite(value) or value < 0:
            raise AtcError("E19999", f"{path}: {key} = {entry['value']!r} is not a finite non-negative number")
        values[key] = value
        sources[key] = dict(entry)
    return Chip(soc_version=doc.get("soc_version", path.stem), sources=sources, **values)


def _with_design(path: Path, doc: dict, params: dict, depth: int = 0) -> dict:
    """A chip file may list only the values that make it differ from another chip
    (``"defaults_from": "<soc>"``, and in ``"defaults_reason"`` why the rest carry over: the
    same design, or the DaVinci core constants every chip shares); the rest are taken from
    that chip, each source saying where it comes from."""
    base_soc = doc.get("defaults_from")
    if not base_soc:
        return params
    base_path = path.parent / f"{base_soc}.json"
    if depth > 4 or not isinstance(base_soc, str) or not base_path.is_file():
        raise AtcError("E19999", f"chip data file {path}: defaults_from [{base_soc}] is not a chip data file")
    try:
        base_doc = json.loads(base_path.read_text())
        base = _with_design(base_path, base_doc, dict(base_doc["params"]), depth + 1)
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise AtcError("E19999", f"chip data file {base_path} is unreadable: {exc}") from exc
    merged = {}
    for key, entry in base.items():
        if key in params:
            continue
        if not isinstance(entry, dict) or "source" not in entry:
            merged[key] = entry          # reported as malformed below
            continue
        merged[key] = {**entry, "source": f"as {base_soc} ({doc.get('defaults_reason', '')}): "
                                          f"{entry['source']}"}
    merged.update(params)
    return merged


# --------------------------------------------------------------------------- kernel cost

@dataclass
class KernelSpec:
    """What the cost model needs to know about one kernel.

    Bytes are global-memory traffic in the compute dtype: `input_bytes` every external input
    read (weights included), `output_bytes` every output written, `intermediate_bytes` the
    tensors a fused kernel keeps on chip instead (defaults to ``work.onchip_bytes``; an
    explicit value wins, they are never added).  `l2_resident_input_bytes` of the inputs
    are expected to hit in L2 (e.g. just written by the previous kernel; the caller decides).
    `parallel_blocks` overrides the default split (see `_blocks`), e.g. for reductions
    whose partial results combine across cores.  `no_task` kernels are views: free."""

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
    l2_resident_input_bytes: int = 0
    parallel_blocks: Optional[int] = None

    def __post_init__(self):
        self.compute_dtype = np.dtype(self.compute_dtype)
        if self.intermediate_bytes is None:
            self.intermediate_bytes = int(getattr(self.work, "onchip_bytes", 0))
        for name in ("input_bytes", "output_bytes", "intermediate_bytes", "l2_resident_input_bytes"):
            if getattr(self, name) < 0:
                raise AtcError("E19999", f"kernel {self.name}: {name} is negative")
        if self.work.cube_macs < 0 or any(v < 0 for v in self.work.vector_ops.values()):
            raise AtcError("E19999", f"kernel {self.name}: negative work")
        unknown = set(self.work.vector_ops) - set(VECTOR_OP_CLASSES)
        if unknown:
            raise AtcError("E19999", f"kernel {self.name}: unknown vector op classes {sorted(unknown)}")
        if self.parallel_blocks is not None and self.parallel_blocks < 1:
            raise AtcError("E19999", f"kernel {self.name}: parallel_blocks must be >= 1")


@dataclass
class KernelCost:
    """Per-pipe busy times of the busiest core, in microseconds."""

    name: str
    op_type: str
    launch_us: float = 0.0
    scalar_us: float = 0.0
    mte2_us: float = 0.0
    cube_us: float = 0.0
    vector_us: float = 0.0
    mte3_us: float = 0.0
    hbm_us: float = 0.0             # chip-wide HBM occupancy (reads + writes share the pins)
    fill_drain_us: float = 0.0
    total_us: float = 0.0
    bound: str = "none"             # "memory" | "cube" | "vector" | "none" (no task)
    cores_used: int = 0
    blocks: float = 0.0
    spill_bytes: float = 0.0
    tiles: float = 0.0              # pipeline iterations per core (real-valued, see 3.5)
    launches: int = 0

    @property
    def pipes(self) -> dict:
        return {"mte2": self.mte2_us, "cube": self.cube_us, "vector": self.vector_us,
                "mte3": self.mte3_us, "hbm": self.hbm_us}

    @property
    def steady_us(self) -> float:
        return max(self.pipes.values())


def _blocks(chip: Chip, spec: KernelSpec, cube: bool) -> float:
    """Independent pieces of output a kernel can be split into, as a real number >= 1.
    Cube kernels: one 16x16 output fractal each.  Vector kernels: `vector_min_block_bytes`
    of the larger of output and biggest input each, at most one block per output element."""
    if spec.parallel_blocks is not None:
        return float(spec.parallel_blocks)
    elements = spec.output_elements
    if elements is None:
        elements = spec.output_bytes / spec.compute_dtype.itemsize
    if cube:
        return max(1.0, elements / (chip.cube_m_size * chip.cube_n_size))
    # A vector block is sized by the bigger of what it writes and what it streams in, but a
    # block needs at least one output element of its own: a row reduction splits by rows.
    streamed = max(spec.output_bytes, spec.largest_input_bytes)
    return max(1.0, min(float(max(elements, 1)), streamed / chip.vector_min_block_bytes))


def price_kernel(chip: Chip, spec: KernelSpec) -> KernelCost:
    """Price one kernel; COST_MODEL.md section 3 derives every line."""
    cost = KernelCost(spec.name, spec.op_type)
    if spec.no_task:
        return cost
    work = spec.work
    cube = work.cube_macs > 0
    cores_avail = chip.ai_core_cnt if cube else chip.vector_cores
    freq = chip.vec_freq if chip.split and not cube else chip.cube_freq   # clock of the movers

    # Parallel split: whole blocks per core; the busiest core does `share` of the kernel.
    blocks = _blocks(chip, spec, cube)
    whole_blocks = math.ceil(blocks - 1e-9)
    cores = max(1, int(min(cores_avail, whole_blocks)))
    blocks_per_core = math.ceil(whole_blocks / cores)
    share = min(1.0, blocks_per_core / blocks)

    # On-chip working set per block -> spill and tile size.
    capacity = chip.ub_size
    io_stream = spec.output_bytes if cube else spec.input_bytes + spec.output_bytes
    io_block = io_stream / blocks
    inter_block = spec.intermediate_bytes / blocks
    stream_reserve = 2 * min(io_block, capacity / 4)          # double-buffered, sub-chunkable
    spill_block = min(inter_block, max(0.0, inter_block + stream_reserve - capacity))
    spill = spill_block * blocks
    # Tiles: the core's working set must be cut into at least `min_tiles` double-buffered
    # tiles that fit on chip (vector: UB; cube: also L0A+L0B for the streamed inputs).
    core_set = (2 * io_block + inter_block - spill_block) * blocks_per_core
    min_tiles = max(1.0, core_set / capacity)
    if cube:
        l0_tile = (chip.l0_a_size + chip.l0_b_size) / 2
        min_tiles = max(min_tiles, 2 * share * spec.input_bytes / l0_tile)

    # Memory traffic (spilled intermediates are written out and read back).
    l2_read = min(spec.l2_resident_input_bytes, spec.input_bytes, chip.l2_size)
    hbm_read = spec.input_bytes - l2_read + spill
    write = spec.output_bytes + spill

    cost.mte2_us = share * (hbm_read / (chip.ddr_rate * freq) + l2_read / (chip.l2_read_rate * freq))
    cost.mte3_us = share * write / (chip.ub_to_ddr_rate * freq)
    cost.hbm_us = (hbm_read + write) / chip.hbm_bytes_per_us
    if cube:
        cube_dtype = work.cube_dtype or spec.compute_dtype       # int8 kernels multiply int8 whatever the mode
        cost.cube_us = share * work.cube_macs / (chip.cube_macs_per_cycle(cube_dtype) * chip.cube_freq)
    vector_cycles = sum(count * chip.vector_cycles(cls) for cls, count in work.vector_ops.items())
    vector_share = share / (chip.vector_per_cube_core if cube else 1.0)
    cost.vector_us = vector_share * vector_cycles / (chip.vector_lanes(spec.compute_dtype) * chip.vec_freq)

    # Double-buffered pipeline over n tiles: slowest + (others)/n + n x per-tile overhead,
    # with the best n >= min_tiles (see COST_MODEL.md 3.5); never faster than the HBM floor.
    stages = [cost.mte2_us, cost.cube_us, cost.vector_us, cost.mte3_us]
    slowest = max(stages)
    others = sum(stages) - slowest
    tile_us = chip.tile_overhead_cycles / freq
    tiles = max(min_tiles, math.sqrt(others / tile_us)) if tile_us > 0 and others > 0 else min_tiles
    pipelined = slowest + others / tiles + tiles * tile_us
    body = max(cost.hbm_us, pipelined)
    has_memory = hbm_read + write + l2_read > 0
    cost.fill_drain_us = body - cost.steady_us + (chip.gm_latency_us if has_memory else 0.0)

    cost.launch_us = chip.task_launch_overhead_us
    cost.scalar_us = chip.kernel_scalar_overhead_us
    cost.total_us = cost.launch_us + cost.scalar_us + cost.steady_us + cost.fill_drain_us
    memory = max(cost.mte2_us, cost.mte3_us, cost.hbm_us)
    cost.bound = max((("memory", memory), ("cube", cost.cube_us), ("vector", cost.vector_us)),
                     key=lambda kv: kv[1])[0]
    cost.cores_used = cores
    cost.blocks = blocks
    cost.spill_bytes = spill
    cost.tiles = tiles
    cost.launches = 1
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
