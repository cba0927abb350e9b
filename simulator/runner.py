"""Run an .om on the bundled simulator: inputs in, outputs and timings out.

Why a module apart from the CLI: tests and the benchmark drive the same steps in-process.
Two clocks are kept strictly apart: the *simulated* chip time comes from the cost model
(one price per task of the .om's task list, summed in stream order -- deterministic), and
the *host* wall time is how long numpy took to compute the numbers on this machine.
Input files are read with ``np.load(allow_pickle=False)``: a pickled .npy is refused,
never unpickled.
"""
from __future__ import annotations

import math
import os
import re
import time
from dataclasses import dataclass, field
from typing import Optional

import numpy as np

from codegen.gear_import import load_om_model
from codegen.om_import import LoadedOm
from ge.dynamic import bind_inputs, describe_shape, specialize, substitute_shape
from ge.errors import AtcError
from ge.ir import Graph, Value
from ge.limits import KERNEL_TEMPORARIES, Budget, current_budget, max_tensor_bytes, tensor_bytes
from ge.files import Outputs, open_input
from ge.symbolic import Dim
from simulator.cost_model import Chip, KernelCost, load_chip, super_kernel_durations
from simulator import blas, host_memory, tensor_files
from ge.workspace import Workspace
from simulator.executor import DynamicRun, Plan, execute, live_bytes, prepare, reserve_workspace, run_graph
from simulator.pricing import node_costs

OUTFMTS = ("NPY", "BIN", "TXT")
MAX_LOOP = 100_000     # forwards per run: the simulated time is the same in each, so more only
                       # re-measures the host; beyond this a typo (--loop=1000000000) would run for days
RANDOM_INT_HIGH = 10   # random int inputs are drawn in [0, min(10, embedding rows)): valid ids


def _input_error(value, reason: str, solution: str) -> AtcError:
    return AtcError("E10001", f"Value [{value}] for parameter [--input] is invalid. Reason: {reason}", solution)


def safe_name(name: str) -> str:
    """A tensor name as a file name: anything but [A-Za-z0-9_.-] becomes '_'."""
    return re.sub(r"[^A-Za-z0-9_.-]", "_", name).lstrip(".") or "tensor"


# --------------------------------------------------------------------------- model

@dataclass
class Model:
    """A loaded .om plus the chip it is priced on.  For a gear model, `gears` holds every
    gear (codegen.gear_import.Gears) and `gear` the one this view runs (`for_gear`): its
    graph is that gear's subgraph, run after the root graph's MapIndex picked it.  A
    dynamic-shape model keeps the task timings of every set of sizes it ran at
    (`timings_by_shape`).  `plan` is the graph prepared for the numeric executor, built once
    (at load, or on first use); the memory its forwards take (`workspace`) is one pool for
    all the gears' views, each view made once."""

    path: str
    loaded: LoadedOm
    chip: Chip
    gear: Optional[int] = None
    timings_by_shape: dict = field(default_factory=dict)
    _plan: Optional[Plan] = field(default=None, repr=False)
    workspace: Workspace = field(default_factory=Workspace, repr=False)
    _views: dict = field(default_factory=dict, repr=False)

    @property
    def plan(self) -> Plan:
        if self._plan is None:
            self._plan = prepare(self.graph, self.dtype_of)
        return self._plan

    def prepare(self) -> Plan:
        """What a forward needs that does not depend on its inputs, done once: the plan
        (constants in their kernels' dtypes, what kernels derive from them), the memory of
        its forwards mapped and touched (ge/workspace.py -- as aclmdlLoad allocates a
        model's feature-map and workspace memory), glibc told to keep what a forward frees
        (host_memory.py: per process, and a forked worker inherits it), the BLAS library
        found.  The first forward then costs what the others do."""
        plan = _as_recorded(self, lambda: self.plan)
        reserve_workspace(plan, self.workspace)
        host_memory.keep_freed_memory()
        blas.threads()                       # finds the BLAS library (reads /proc/self/maps) once
        return plan

    @property
    def graph(self) -> Graph:
        return self.loaded.graph

    @property
    def gears(self):
        return self.loaded.gears

    def dtype_of(self, node) -> np.dtype:
        if node.name not in self.loaded.compute_dtypes and self.gears is not None:
            return self.gears.index_dtypes[node.name]       # the root graph's MapIndex
        return self.loaded.compute_dtypes[node.name]

    def task_nodes(self) -> dict:
        """{name: node} of every task this view runs (a gear model's MapIndex included)."""
        nodes = {n.name: n for n in self.graph.nodes}
        if self.gears is not None:
            nodes.update({n.name: n for n in self.gears.index_graph.nodes})
        return nodes

    def for_gear(self, index: int) -> "Model":
        """The view of gear `index`: its subgraph, dtypes and tasks (the gears stay reachable);
        made once, so its plan is prepared once, and sharing this model's workspace (one gear
        runs at a time).  The first gear's graph is the model's own: its plan too is shared."""
        if index in self._views:
            return self._views[index]
        branch = self.gears.branches[index].loaded
        view = LoadedOm(branch.om, branch.graph, branch.compute_dtypes, branch.tasks, branch.task_def,
                        branch.soc_version, branch.precision_mode, self.gears, self.loaded.enable_small_channel)
        model = Model(self.path, view, self.chip, index, workspace=self.workspace, _views=self._views)
        if branch.graph is self.graph and branch.compute_dtypes is self.loaded.compute_dtypes:
            model._plan = self._plan
        self._views[index] = model
        return model



def load_model(path: str, soc_version: str = "", prepare_kernels: bool = True) -> Model:
    """Load the .om (E10003 if damaged) and the chip data: `soc_version` overrides the one
    recorded in the .om.  A gear model comes back as the view of its first gear.
    `prepare_kernels` readies the numeric executor now (`Model.prepare`), so the first
    forward costs what the others do; pricing-only callers skip it."""
    loaded = load_om_model(path)
    soc = soc_version or loaded.soc_version
    if not soc:
        raise AtcError("E10001", f"The model [{path}] records no soc_version.",
                       "Pass --soc_version, e.g. --soc_version=Ascend910.")
    model = Model(path, loaded, load_chip(soc), 0 if loaded.gears is not None else None)
    if model.gears is None:
        check_budget(model, current_budget())
    for index in range(len(model.gears.branches) if model.gears is not None else 0):
        check_budget(model.for_gear(index), current_budget())
    if prepare_kernels:
        model.prepare()
    return model


def gear_list(gears) -> str:
    """Every gear of a model, as the error messages list them."""
    return "; ".join(gears.describe(i) for i in range(len(gears.branches)))


def pick_gear(model: Model, values) -> int:
    """The gear the root graph runs for these gear values: what ACL does with the values the
    user sets (aclmdlSetDynamicBatchSize/HWSize/Dims fill ascend_mbatch_shape_data), then
    the .om's own MapIndex kernel maps them to the index of the Case branch."""
    gears = model.gears
    width = gears.index_graph.inputs[0].desc.shape[0]
    shape_data = np.asarray([int(v) for v in values], dtype=np.int32)
    if shape_data.shape != (width,) or tuple(int(v) for v in values) not in gears.values:
        raise AtcError("E10001", f"Gear {[int(v) for v in values]} is not one of the model's gears. The model's "
                       f"--{gears.flag} gears are: {gear_list(gears)}.",
                       "Pick one of the gears the model was compiled with.")
    out = run_graph(gears.index_graph, {gears.shape_input: shape_data},
                    lambda node: gears.index_dtypes[node.name])
    return int(next(iter(out.values())))


def gear_of_shapes(model: Model, shapes: dict) -> int:
    """The gear whose input shapes are `shapes` ({input name: dims}; the inputs the gears
    do not change may be left out); a clear error listing the gears when none is."""
    gears = model.gears
    given = {name: tuple(int(d) for d in dims) for name, dims in shapes.items()}
    unknown = sorted(set(given) - {v.name for v in model.graph.inputs})
    if unknown:
        raise AtcError("E10001", f"Input(s) {unknown} are not inputs of the model; it has "
                       f"{[v.name for v in model.graph.inputs]}.", "Name the model's inputs.")
    for index in range(len(gears.branches)):
        graph = gears.branches[index].loaded.graph
        if all(tuple(v.desc.shape) == given[v.name] for v in graph.inputs if v.name in given) and \
                all(name in given for name in gears.origin_dims):
            return pick_gear(model, gears.branches[index].values)
    text = "; ".join(f"{n}:{','.join(map(str, d))}" for n, d in given.items())
    raise AtcError("E10001", f"Input shape(s) [{text}] match no gear of the model. Its --{gears.flag} gears are: "
                   f"{gear_list(gears)}.", "Give inputs of one of the gears' shapes.")


def check_budget(model: Model, budget: Budget) -> None:
    """Before anything is allocated: every tensor fits the chip's memory, and the run -- its
    peak of live tensors plus a kernel's temporaries -- fits what the host lets this process
    use (E13023).  The sizes come from the file: an .om that records absurd dims is refused
    here, not by a MemoryError halfway through."""
    budget = budget.with_device(int(model.chip.memory_size), model.chip.soc_version)
    graph = model.graph
    for value in list(graph.inputs) + [v for node in graph.nodes for v in node.outputs]:
        owner = f" of kernel [{value.producer.name}]" if value.producer is not None else ""
        largest = max_tensor_bytes(value.desc.shape, value.desc.dtype)
        if largest is not None:          # a dynamic tensor at the ranges' maxima; unbounded ones per run
            budget.check_tensor(largest, f"Tensor [{value.name}]{owner}, shape {list(value.desc.shape)}",
                                "The .om records a tensor no chip could hold: regenerate it with atc.")
    if graph.is_dynamic:
        return
    peak, largest = live_bytes(graph)
    budget.check_host(peak + KERNEL_TEMPORARIES * largest, f"Running model [{model.path}] (a peak of {peak} bytes "
                      f"of live tensors, plus {KERNEL_TEMPORARIES}x the largest, {largest} bytes, for a kernel's "
                      "temporaries)")


# --------------------------------------------------------------------------- inputs

def _int_high(value: Value) -> int:
    """Largest safe exclusive bound for random ids: rows of any embedding table they index."""
    high = RANDOM_INT_HIGH
    for node, index in value.uses:
        if node.op_type == "Gather" and index == 1 and node.inputs[0] is not None and node.inputs[0].is_const:
            table = node.inputs[0].const
            axis = int(node.attrs.get("axis", 0)) % max(table.ndim, 1)
            high = min(high, int(table.shape[axis]))
    return max(high, 1)


def input_shapes(graph: Graph, shapes: Optional[dict] = None) -> dict:
    """{input name: shape}: the model's, or for a dynamic model the sizes `shapes` gives
    (--dymShape); E10001 when a dynamic input has none, or one that does not fit."""
    shapes = shapes or {}
    if not graph.is_dynamic:
        return {v.name: tuple(v.desc.shape) for v in graph.inputs}
    unknown = [n for n in shapes if n not in {v.name for v in graph.inputs}]
    if unknown:
        raise AtcError("E10001", f"--dymShape names input(s) {unknown}, which the model does not have; it has "
                       f"{[v.name for v in graph.inputs]}.", "Give the model's input names.")
    bind_inputs(graph, shapes)
    out = {}
    for value in graph.inputs:
        if value.name in shapes:
            out[value.name] = tuple(int(d) for d in shapes[value.name])
        elif value.desc.is_dynamic():
            raise AtcError("E10001", f"Input [{value.name}] has a dynamic shape "
                           f"{describe_shape(value.desc.shape, graph)} and no size was given.",
                           f'Give its shape with --dymShape "{value.name}:d1,d2,..." (ais_bench\'s flag for '
                           "dynamic-shape models), or input files.")
        else:
            out[value.name] = tuple(value.desc.shape)
    return out


def random_inputs(graph: Graph, seed: int = 0, shapes: Optional[dict] = None) -> dict:
    """Seeded inputs of the model's shapes (a dynamic model's: `shapes`) and dtypes.  Floats:
    standard normal.  Inputs whose name contains "mask": ones (a random mask is rarely
    meaningful, and big negative additive masks overflow fp16).  Raw images of an Aipp op:
    uniform bytes [0, 255].  Other ints: uniform in [0, min(10, rows of the embedding table
    they index)).  Bools: random."""
    if not 0 <= seed < 1 << 63:
        raise AtcError("E10013", f"Value [{seed}] for --seed is out of range [0, 2^63).", "Pass --seed=0 or more.")
    rng = np.random.default_rng(seed)
    feeds = {}
    sizes = input_shapes(graph, shapes)
    for value in graph.inputs:
        dtype, shape = np.dtype(value.desc.dtype), sizes[value.name]
        if dtype.hasobject:              # strings: decimal numerals, so Equal & co. see repeats
            feeds[value.name] = rng.integers(0, RANDOM_INT_HIGH, size=shape).astype(str).astype(object)
        elif dtype in tensor_files.NIBBLE_RANGES:
            lo, hi = tensor_files.NIBBLE_RANGES[dtype]
            feeds[value.name] = rng.integers(lo, hi + 1, size=shape, dtype=np.int8).astype(dtype)
        elif "mask" in value.name.lower():
            feeds[value.name] = np.ones(shape, dtype)
        elif dtype == np.bool_:
            feeds[value.name] = rng.integers(0, 2, size=shape, dtype=np.uint8).view(np.bool_)
        elif dtype == np.uint8 and any(node.op_type == "Aipp" for node, _ in value.uses):
            feeds[value.name] = rng.integers(0, 256, size=shape, dtype=np.uint8)
        elif np.issubdtype(dtype, np.integer):
            feeds[value.name] = rng.integers(0, _int_high(value), size=shape, dtype=dtype)
        elif dtype in (np.float32, np.float64):   # drawn in their own dtype: no float64 copy first
            feeds[value.name] = rng.standard_normal(shape, dtype=dtype)
        else:
            feeds[value.name] = rng.standard_normal(shape, dtype=np.float32).astype(dtype)
    return feeds


_NPY_HEADER_ROOM = 1 << 20   # bytes an .npy may hold beyond its data (its header)


def _expected(value: Value, shapes: Optional[dict]) -> Optional[tuple]:
    """The shape an input file must have: the model's, the --dymShape one of a dynamic input,
    or None (a dynamic input without one: any shape its symbols' ranges allow)."""
    if not value.desc.is_dynamic():
        return tuple(value.desc.shape)
    if shapes and value.name in shapes:
        return tuple(int(d) for d in shapes[value.name])
    return None


def _fits(value: Value, shape: tuple) -> Optional[str]:
    """Why `shape` does not fit a dynamic input (None when it does)."""
    from ge.dynamic import bind
    return bind(tuple(value.desc.shape), tuple(shape), {}, value.graph) if value.graph is not None else None


def _read_file(path: str, value: Value, shapes: Optional[dict] = None) -> np.ndarray:
    """One input file, opened only if it is a regular file of a plausible size (a FIFO,
    /dev/zero or a huge file is refused before reading)."""
    expected = _expected(value, shapes)
    dtype = np.dtype(value.desc.dtype)
    if path.lower().endswith(".bin"):
        if expected is None:
            raise _input_error(path, f"input [{value.name}] has a dynamic shape {list(map(str, value.desc.shape))}: "
                               "a raw .bin file does not say its shape.",
                               f'Give its shape with --dymShape "{value.name}:d1,d2,...", or use .npy files.')
        # ais_bench's raw format: the model input's dtype and shape, no header.
        elements = math.prod(expected)
        if dtype.hasobject:             # strings: GE's DT_STRING layout (simulator/tensor_files.py)
            with open_input(path, "--input", max_bytes=current_budget().file_bytes) as f:
                try:
                    return tensor_files.strings_from_bin(f.read(), expected, path)
                except ValueError as exc:
                    raise _input_error(path, f"it is not a string tensor in GE's DT_STRING layout: {exc}",
                                       "Write the 16-byte heads {offset, length}, then the NUL-ended strings.")
        expected_bytes = elements * dtype.itemsize
        with open_input(path, "--input", max_bytes=expected_bytes) as f:
            size = os.fstat(f.fileno()).st_size
            if size != expected_bytes:
                raise _input_error(path, f"it has {size} bytes; input [{value.name}] ({dtype}, "
                                   f"{list(expected)}) needs {expected_bytes}.", "Write the raw tensor bytes.")
            if not tensor_files.is_opaque(dtype):
                return np.fromfile(f, dtype=dtype, count=elements).reshape(expected)
            bits = np.fromfile(f, dtype=tensor_files.bits_dtype(dtype), count=elements).reshape(expected)
        converted, why = tensor_files.from_file(bits, dtype)      # an int4/uint4 byte out of range
        if why is not None:
            raise _input_error(path, f"{why}; input [{value.name}] has dtype {dtype}.", "Write the bit patterns.")
        return converted
    # Any numeric dtype may come in (a wrong one is refused below with its name): at most
    # 16 bytes an element, plus the header.
    limit = math.prod(expected) * 16 + _NPY_HEADER_ROOM if expected is not None and not dtype.hasobject \
        else current_budget().file_bytes        # a unicode .npy of strings has no bound per element
    with open_input(path, "--input", max_bytes=limit) as f:
        _check_npy_header(f, path, value, expected)
        f.seek(0)
        try:
            array = np.load(f, allow_pickle=False)
        except ValueError as exc:
            raise _input_error(path, f"it is not a plain numeric .npy ({exc}); pickled object arrays are refused.",
                               "Save the input with np.save(path, array) from a numeric array.")
        except Exception as exc:
            raise _input_error(path, f"it cannot be read as .npy: {exc}", "Save the input with np.save.")
    if not isinstance(array, np.ndarray):
        raise _input_error(path, "it is an .npz archive, not one .npy array.", "Give one .npy file per input.")
    if array.dtype.hasobject or array.dtype.fields is not None:
        raise _input_error(path, f"dtype {array.dtype} is not a plain numeric type.", "Save a numeric array.")
    if array.dtype.byteorder == ">":   # same values, other byte order: the kernels want native
        array = array.astype(array.dtype.newbyteorder("="))
    converted, why = tensor_files.from_file(array, dtype)
    if why is not None:
        raise _input_error(path, f"{why}; input [{value.name}] has dtype {dtype}.",
                           "Save strings as np.array(values, dtype=str), ml_dtypes types as .view(np.uint8/uint16).")
    return converted


def _check_npy_header(f, path: str, value: Value, expected: Optional[tuple]) -> None:
    """Read only the .npy header and check its shape against the model input and the file
    size before numpy allocates what the header claims (never trust a size from a file)."""
    try:
        version = np.lib.format.read_magic(f)
        read = np.lib.format.read_array_header_2_0 if version >= (2, 0) else np.lib.format.read_array_header_1_0
        shape, _, dtype = read(f)
        data_bytes = os.fstat(f.fileno()).st_size - f.tell()
    except Exception:   # not an .npy at all, or an npz: np.load below says what it is
        return
    if expected is not None and tuple(shape) != expected:
        raise _input_error(path, f"shape {list(shape)}; input [{value.name}] has shape {list(expected)}.",
                           "Give inputs of the compiled shape.")
    why = _fits(value, tuple(shape)) if expected is None else None
    if why is not None:
        raise _input_error(path, f"shape {list(shape)} does not fit input [{value.name}] "
                           f"{list(map(str, value.desc.shape))}: {why}.", "Give a shape within the model's ranges.")
    if not dtype.hasobject and data_bytes < math.prod(shape) * dtype.itemsize:
        raise _input_error(path, f"its header promises {math.prod(shape) * dtype.itemsize} data bytes, the file "
                           f"holds {data_bytes} (truncated).", "Save the input again with np.save.")


def _files_for(spec: str, graph: Graph) -> list:
    names = [v.name for v in graph.inputs]
    if os.path.isdir(spec):
        files = sorted(f for f in os.listdir(spec) if f.lower().endswith((".npy", ".bin"))
                       and os.path.isfile(os.path.join(spec, f)))
        by_name = {os.path.splitext(f)[0]: f for f in files}
        if all(safe_name(n) in by_name for n in names):
            return [os.path.join(spec, by_name[safe_name(n)]) for n in names]
        if len(files) != len(names):
            raise _input_error(spec, f"the folder holds {len(files)} .npy/.bin file(s), the model has "
                               f"{len(names)} input(s) {names}.",
                               "Name the files <input name>.npy, or give one file per input (taken sorted).")
        return [os.path.join(spec, f) for f in files]
    paths = [p.strip() for p in spec.split(",")]
    if any(not p for p in paths):
        raise _input_error(spec, "it has an empty entry.", "Separate the .npy files with single commas.")
    if len(paths) != len(names):
        raise _input_error(spec, f"{len(paths)} file(s) given, the model has {len(names)} input(s) {names}.",
                           "Give one file per model input, in the model's input order.")
    return paths


@dataclass
class Dataset:
    """What `--input` names: one feed dict per inference, and the name ais_bench gives each
    inference's output files (the first input's file name without its suffix)."""

    feeds: list                        # [{input name: array}] in inference order
    names: list                        # [file base name] per inference
    source: str


def _data_files(folder: str) -> list:
    return sorted(os.path.join(folder, f) for f in os.listdir(folder)
                  if f.lower().endswith((".npy", ".bin")) and os.path.isfile(os.path.join(folder, f)))


def dataset_files(spec: str, graph: Graph) -> list:
    """ais_bench's dataset mode: `--input dir1,dir2` with one folder per model input, the
    k-th files of the folders (sorted by name) form inference k; for a one-input model,
    `--input a.bin,b.bin,...` is one inference per file.  Returns [[path per input]] per
    inference, or None when `spec` is one inference in the single-run forms of load_inputs."""
    names = [v.name for v in graph.inputs]
    entries = [p.strip() for p in spec.split(",")]
    if any(not p for p in entries):
        return None
    if all(os.path.isdir(p) for p in entries) and len(entries) == len(names):
        if len(entries) == 1:
            files = _data_files(entries[0])
            by_name = {os.path.splitext(os.path.basename(f))[0] for f in files}
            if len(files) <= 1 or safe_name(names[0]) in by_name:
                return None            # the one-inference folder form
        per_input = [_data_files(p) for p in entries]
        counts = [len(f) for f in per_input]
        if 0 in counts or len(set(counts)) != 1:
            raise _input_error(spec, f"the folders hold {counts} .npy/.bin file(s); each folder feeds one model "
                               f"input ({names}) and all must hold the same number of files.",
                               "Give one folder per input with one file per inference in each.")
        return [list(files) for files in zip(*per_input)]
    if len(names) == 1 and len(entries) > 1 and all(os.path.isfile(p) for p in entries):
        return [[p] for p in entries]
    return None


def load_dataset(spec: str, graph: Graph, shapes: Optional[dict] = None) -> Dataset:
    """Every inference `--input` asks for: N files per input folder -> N inferences.  A
    dynamic model's files may have any shape its ranges allow (`shapes`: --dymShape)."""
    runs = dataset_files(spec, graph)
    if runs is None:
        feeds = load_inputs(spec, graph, shapes)
        first = _files_for(spec, graph)[0] if graph.inputs else "pure_infer_data"
        return Dataset([feeds], [os.path.splitext(os.path.basename(first))[0]], spec)
    feeds, bases = [], []
    for paths in runs:
        feed = {}
        for value, path in zip(graph.inputs, paths):
            feed[value.name] = _checked(_read_file(path, value, shapes), value, path, shapes)
        _check_together(graph, feed)
        feeds.append(feed)
        bases.append(os.path.splitext(os.path.basename(paths[0]))[0])
    return Dataset(feeds, bases, spec)


def _checked(array: np.ndarray, value: Value, path: str, shapes: Optional[dict] = None) -> np.ndarray:
    expected = _expected(value, shapes)
    if expected is not None and tuple(array.shape) != expected:
        raise _input_error(path, f"shape {list(array.shape)}; input [{value.name}] has shape "
                           f"{list(expected)}.", "Give inputs of the compiled shape.")
    if array.dtype != np.dtype(value.desc.dtype):
        raise _input_error(path, f"dtype {array.dtype}; input [{value.name}] has dtype "
                           f"{np.dtype(value.desc.dtype)}.", "Give inputs of the compiled dtype.")
    return array


def npy_shapes(spec: str, graph: Graph) -> dict:
    """{input name: shape} of the first inference of `--input`, from the .npy headers alone
    (ais_bench's --auto_set_dymdims_mode picks the gear from them, so it takes .npy only)."""
    runs = dataset_files(spec, graph)
    paths = runs[0] if runs is not None else _files_for(spec, graph)
    shapes = {}
    for value, path in zip(graph.inputs, paths):
        if not path.lower().endswith(".npy"):
            raise _input_error(path, "--auto_set_dymdims_mode reads the shapes from .npy headers; this is not .npy.",
                               "Give .npy input files.")
        with open_input(path, "--input", max_bytes=current_budget().file_bytes) as f:
            try:
                version = np.lib.format.read_magic(f)
                read = np.lib.format.read_array_header_2_0 if version >= (2, 0) else \
                    np.lib.format.read_array_header_1_0
                shape, _, _ = read(f)
            except Exception as exc:
                raise _input_error(path, f"it has no readable .npy header ({exc}).", "Save it with np.save.") from None
        shapes[value.name] = tuple(int(d) for d in shape)
    return shapes


def zero_inputs(graph: Graph, shapes: Optional[dict] = None) -> dict:
    """ais_bench's --pure_data_type zero: every input all zeros (a dynamic model's at `shapes`)."""
    sizes = input_shapes(graph, shapes)
    return {v.name: np.full(sizes[v.name], "", dtype=object) if np.dtype(v.desc.dtype).hasobject else
            np.zeros(sizes[v.name], np.dtype(v.desc.dtype)) for v in graph.inputs}


def load_inputs(spec: str, graph: Graph, shapes: Optional[dict] = None) -> dict:
    """`--input`: comma-separated .npy (or raw .bin) files in model input order, or a folder
    of files named after the inputs (else taken in sorted order).  Checks count, shape, dtype."""
    feeds = {}
    for value, path in zip(graph.inputs, _files_for(spec, graph)):
        feeds[value.name] = _checked(_read_file(path, value, shapes), value, path, shapes)
    _check_together(graph, feeds)
    return feeds


def _check_together(graph: Graph, feeds: dict) -> None:
    """A dynamic model's inputs must agree on the symbols they share (E10001)."""
    if graph.is_dynamic:
        bind_inputs(graph, {name: np.shape(a) for name, a in feeds.items()})


# --------------------------------------------------------------------------- timing

@dataclass
class TaskTiming:
    """One task of the .om's task list, placed on the (single) task stream."""

    task_id: int
    stream_id: int
    name: str
    kernel_type: str
    start_us: float
    cost: KernelCost
    duration_us: float = 0.0     # time on the stream: the cost, or its share of a super kernel
    super_kernel: str = ""


def simulate_tasks(model: Model, graph: Optional[Graph] = None, chip: Optional[Chip] = None) -> list:
    """Price every task of the .om in task order; each starts when the previous ends.  Tasks
    the .om groups into a super kernel share its price (see cost_model.super_kernel_durations).
    `graph`: a dynamic model specialized to one run's sizes (ge.dynamic.specialize); `chip`
    prices on other parameters than the model's (the calibration fit does)."""
    graph = graph if graph is not None else model.graph
    chip = chip or model.chip
    costs = node_costs(graph, chip, model.dtype_of, model.loaded.enable_small_channel)
    task_def = model.loaded.task_def
    defs = {t.op_name: t for t in task_def.task} if task_def is not None else {}
    nodes = {n.name: n for n in graph.nodes}
    group_of = {name: nodes[name].provenance.get("super_kernel", "") for name in model.loaded.tasks}
    durations = {name: costs[name].total_us for name in model.loaded.tasks}
    for group in sorted(set(group_of.values()) - {""}):
        members = [name for name in model.loaded.tasks if group_of[name] == group]
        shares = super_kernel_durations(chip, [costs[name] for name in members])
        durations.update(zip(members, shares))
    clock, timings = 0.0, []
    if model.gears is not None:        # the root graph's MapIndex picks the gear first
        gears = model.gears
        index_cost = node_costs(gears.index_graph, model.chip, lambda node: gears.index_dtypes[node.name])
        cost = index_cost[gears.index_task]
        td = defs.get(gears.index_task)
        timings.append(TaskTiming(int(td.id) if td else 0, int(td.stream_id) if td else 0, gears.index_task,
                                  (td.kernel_type if td else "") or "AI_VECTOR", clock, cost, cost.total_us))
        clock += cost.total_us
    for i, name in enumerate(model.loaded.tasks):
        td = defs.get(name)
        timings.append(TaskTiming(int(td.id) if td else i, int(td.stream_id) if td else 0, name,
                                  (td.kernel_type if td else "") or "AI_CORE", clock, costs[name],
                                  durations[name], group_of[name]))
        clock += durations[name]
    return timings


def stats_ms(samples: list) -> dict:
    """ais_bench's statistics of a list of times in ms."""
    a = np.asarray(samples, dtype=np.float64)
    mean = a[0] if np.all(a == a[0]) else a.mean()     # equal samples: their value, not a rounded sum
    return {"min": float(a.min()), "max": float(a.max()), "mean": float(mean),
            "median": float(np.median(a)), "percentile(99%)": float(np.percentile(a, 99)), "count": int(a.size)}


@dataclass
class RunResult:
    outputs: dict                      # output name -> array (last loop)
    npu_time_ms: dict                  # stats of the simulated time, one sample per loop
    host_time_ms: dict                 # stats of the numpy wall time, one sample per timed loop
    throughput: float                  # 1000 * batchsize / mean simulated ms
    batchsize: int
    timings: list = field(default_factory=list)
    host_samples_ms: list = field(default_factory=list)
    dims: dict = field(default_factory=dict)      # a dynamic model's symbols in this run: name -> size
    input_shapes: dict = field(default_factory=dict)
    priced: Optional[Graph] = None                # a dynamic model specialized to this run's sizes
    first_forward_ms: float = 0.0      # the first forward of this run (a warm-up, or the first timed loop)


def default_batchsize(graph: Graph, feeds: Optional[dict] = None) -> int:
    """As ais_bench: the first dim of the first input (1 for scalars); a dynamic model's from
    the inputs it was fed."""
    if not graph.inputs:
        return 1
    first = graph.inputs[0]
    shape = tuple(np.shape(feeds[first.name])) if feeds and first.name in feeds else tuple(first.desc.shape)
    if not shape or isinstance(shape[0], Dim):
        return 1
    return int(shape[0]) if int(shape[0]) > 0 else 1


def _as_recorded(model: Model, step, *args):
    """Run a step on the graph as the .om records it.  The loader checked every reference and
    shape, so a kernel or price that still fails means attributes the file should not hold:
    a damaged (or foreign) .om, reported as E10003 with the kernel's own message."""
    try:
        return step(*args)
    except AtcError as err:
        if err.code != "E19999":
            raise
        raise AtcError("E10003", f"The model [{model.path}] cannot be run as recorded: {err.message}",
                       "The .om is damaged or was written by another atc version: regenerate it with atc. "
                       "If atc has just written it, report the model.") from err


def run(model: Model, feeds: dict, loop: int = 1, warmup_count: int = 1,
        batchsize: Optional[int] = None, timings: Optional[list] = None) -> RunResult:
    """`warmup_count` untimed forwards, then `loop` timed ones.  `timings` (from an earlier
    run of the same model) skips re-pricing the task list: the graph is static."""
    if not 1 <= loop <= MAX_LOOP or not 0 <= warmup_count <= MAX_LOOP:
        raise AtcError("E10013", f"--loop must be in [1, {MAX_LOOP}] and --warmup_count in [0, {MAX_LOOP}] "
                       f"(got {loop}, {warmup_count}).", "Pass --loop=1 or more.")
    if model.gears is not None:        # the shape data ACL sets selects this gear's subgraph
        chosen = pick_gear(model, model.gears.branches[model.gear].values)
        if chosen != model.gear:
            raise AtcError("E10003", f"The model's MapIndex maps gear {model.gear} to subgraph {chosen}.",
                           "The .om is damaged: regenerate it with atc.")
    dynamic = model.graph.is_dynamic
    if dynamic:
        _check_run_budget(model, feeds)
    first = None
    for _ in range(warmup_count):
        t0 = time.perf_counter()
        forward(model, feeds)
        first = first if first is not None else (time.perf_counter() - t0) * 1e3
    host, outputs = [], {}
    seen = DynamicRun()
    for _ in range(loop):
        t0 = time.perf_counter()
        seen = DynamicRun()
        outputs = forward(model, feeds, seen)
        host.append((time.perf_counter() - t0) * 1e3)
    priced = None
    if dynamic:        # priced at this run's sizes: the graph specialized to them, once per set of sizes
        key = (tuple(sorted(seen.values.items())), repr(sorted(seen.runtime_attrs.items())))
        if key not in model.timings_by_shape:
            static = specialize(model.graph, seen.values, seen.runtime_attrs)
            model.timings_by_shape[key] = (static, _as_recorded(model, simulate_tasks, model, static))
        priced, timings = model.timings_by_shape[key]
    elif timings is None:
        timings = _as_recorded(model, simulate_tasks, model)
    npu_ms = sum(t.duration_us for t in timings) / 1e3
    bs = batchsize if batchsize else default_batchsize(model.graph, feeds)
    npu = {**stats_ms([npu_ms]), "count": loop}   # the same simulated time in every loop
    throughput = 1000.0 * bs / npu["mean"] if npu["mean"] > 0 else 0.0
    return RunResult(outputs, npu, stats_ms(host), throughput, bs, timings, host, dict(seen.values),
                     {name: tuple(np.shape(a)) for name, a in feeds.items()}, priced,
                     first_forward_ms=first if first is not None else host[0])


def _check_run_budget(model: Model, feeds: dict) -> None:
    """A dynamic model at this run's input sizes: every tensor whose size they decide (sizes
    that kernels' outputs tell count at their ranges' maxima) must fit the chip (E13023)."""
    values = bind_inputs(model.graph, {name: np.shape(a) for name, a in feeds.items()})
    budget = current_budget().with_device(int(model.chip.memory_size), model.chip.soc_version)
    for node in model.graph.nodes:
        for value in node.outputs:
            largest = max_tensor_bytes(substitute_shape(value.desc.shape, values), value.desc.dtype)
            if largest is not None:
                budget.check_tensor(largest, f"Tensor [{value.name}] of kernel [{node.name}] at these input sizes")


def forward(model: Model, feeds: dict, run: Optional[DynamicRun] = None,
            blas_threads: Optional[int] = None) -> dict:
    """One numeric forward with one BLAS thread per core that is ours and free right now
    (simulator/blas.py: oversubscribed BLAS threads are what collapses a busy machine), or
    `blas_threads` fixed; the memory it frees is kept for the next one (host_memory.py);
    `run` collects what a dynamic-shape model's run saw."""
    plan = model.prepare()              # done at load already, unless the caller loaded for pricing only
    if blas_threads:
        blas.set_threads(blas_threads)
    else:
        blas.fit_to_free_cores()
    return _as_recorded(model, execute, plan, feeds, None, run)


# --------------------------------------------------------------------------- many inputs

@dataclass
class ManyResult:
    outputs: list                      # one {output name: array} per input set, in order
    host_time_ms: dict                 # stats of the per-inference numpy time
    host_samples_ms: list              # the per-inference numpy times, in input order
    wall_s: float                      # the whole run, model load and worker start-up included
    workers: int
    per_worker: list = field(default_factory=list)   # workers.WorkerStats, this process first


def run_many(path: str, input_sets: list, workers: int = 0, soc_version: str = "",
             gear: Optional[int] = None, model: Optional[Model] = None,
             blas_threads: Optional[int] = None) -> ManyResult:
    """Run the .om at `path` (its gear `gear`, for a gear model) once per input set (a list
    of {input name: array}), spread over `workers` processes (default: the free cores) of one
    BLAS thread each, so N cores give close to N times the inferences per second of one.
    `model`, already loaded (a Session's), is used as it is instead of loading `path` again.
    The model is prepared here, once, and the workers are forked from this process after
    that (simulator/workers.py): they share its constants and start at once.  Outputs come
    back in input order.  atc-sim's dataset mode (`--input` folders, one file per inference)
    runs on this.  With one worker everything runs in this process, its BLAS threads fitted
    to the free cores (or `blas_threads`)."""
    from simulator import workers as forked

    t0 = time.perf_counter()
    workers = max(1, min(workers or blas.free_cores(), len(input_sets)))
    if not forked.can_fork():
        workers = 1
    if model is None:
        model = load_model(path, soc_version, prepare_kernels=False)
        model = model.for_gear(gear) if gear is not None else model
    model.prepare()                                   # before any worker exists: they inherit it
    if workers == 1:
        outputs, times, cpu = [], [], []
        for feeds in input_sets:
            t1, c1 = time.perf_counter(), time.process_time()     # BLAS threads may be several
            outputs.append(forward(model, feeds, blas_threads=blas_threads))
            times.append((time.perf_counter() - t1) * 1e3)
            cpu.append((time.process_time() - c1) * 1e3)
        stats = [forked.WorkerStats(len(times), 0.0, times, list(range(len(times))), cpu)]
        return ManyResult(outputs, stats_ms(times) if times else {}, times, time.perf_counter() - t0, 1, stats)
    outputs, stats = forked.run_forked(lambda feeds: _as_recorded(model, execute, model.plan, feeds),
                                       input_sets, workers)
    by_index = {k: t for s in stats for k, t in zip(s.indices, s.forward_ms)}
    times = [by_index[k] for k in sorted(by_index)]
    return ManyResult(outputs, stats_ms(times), times, time.perf_counter() - t0, workers, stats)


# --------------------------------------------------------------------------- outputs

def write_outputs(outputs: dict, directory: str, outfmt: str, out: Outputs, prefix: Optional[str] = None) -> dict:
    """Write each output as <name>.npy / .bin (raw) / .txt into `directory`, as part of the
    run's outputs `out`, or, with `prefix`, as ais_bench names them: <prefix>_<output
    index>.<fmt>; returns {name: path}.  Names that map to the same file name get a numbered
    suffix."""
    out.make_folder(directory, "--output")
    paths, taken = {}, set()
    for index, (name, array) in enumerate(outputs.items()):
        first = f"{safe_name(prefix)}_{index}" if prefix is not None else safe_name(name)
        stem, n = first, 1
        while stem in taken:
            n += 1
            stem = f"{first}_{n}"
        taken.add(stem)
        path = os.path.join(directory, stem + "." + outfmt.lower())
        with out.open(path, "--output") as f:
            if outfmt == "NPY":             # strings and ml_dtypes types: simulator/tensor_files.py
                np.save(f, tensor_files.npy_form(array), allow_pickle=False)
            elif outfmt == "BIN":
                raw = tensor_files.bin_bytes(array)
                f.write(raw) if raw is not None else np.ascontiguousarray(array).tofile(f)
            else:
                shown, fmt = tensor_files.text_form(array)
                flat = shown.reshape(-1, shown.shape[-1]) if shown.ndim >= 1 else shown.reshape(1, 1)
                np.savetxt(f, flat, fmt=fmt)
        paths[name] = path
    return paths
