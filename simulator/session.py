"""`InferSession`: run an .om from Python, in the spirit of ais_bench's and onnxruntime's sessions.

    session = InferSession("model.om")                 # or InferSession(path, soc_version="Ascend310")
    session.get_inputs()[0].name, .shape, .datatype    # what the .om records
    outputs = session.infer([x])                       # or infer({"input": x}); a list, in output order
    session.summary()["NPU_compute_time"]              # simulated chip time of the calls so far

    gears = InferSession("gear_model.om")             # atc --dynamic_batch_size / _image_size / _dims
    gears.get_dynamic_gears()                          # [{"index", "values", "shapes"}, ...]
    gears.infer([x4])                                  # the gear of x4's shape (ais_bench: auto_set_dymdims_mode)
    gears.set_dynamic_batchsize(4); gears.infer([x4])  # or set_dynamic_hw / _dims, infer(.., gear=(4,))

Why a class beside the CLI: `atc-sim` is a thin layer over it, and users script what they
would script with ais_bench (`InferSession(device_id, model_path)`, `infer`, `sumary()`)
or onnxruntime (`get_inputs`, `run`).  Every time in it is simulated by the cost model of
the chip, never measured on this machine (the host wall time is reported apart).
"""
from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Optional, Sequence, Union

import numpy as np

from ge.errors import AtcError, AtcWarning
from ge.limits import max_tensor_bytes
from ge.symbolic import Dim
from simulator import runner

HOST_LINKS = Path(__file__).resolve().parent / "host_links.json"


@dataclass(frozen=True)
class TensorInfo:
    """One model input or output, as ais_bench's get_inputs() describes it."""
    name: str
    shape: tuple
    datatype: str          # numpy dtype name: "float32", "uint8", ...
    format: str
    size: int              # bytes

    @property
    def realsize(self) -> int:
        return self.size

    @property
    def dtype(self) -> np.dtype:
        return np.dtype(self.datatype)


def _info(value) -> TensorInfo:
    """A dynamic-shape model's unknown dims are -1, as ais_bench shows them; its size is then
    the largest the ranges allow (0 when unbounded)."""
    dtype = np.dtype(value.desc.dtype)
    if value.desc.is_dynamic():
        largest = max_tensor_bytes(value.desc.shape, dtype)
        return TensorInfo(value.name, tuple(-1 if isinstance(d, Dim) else int(d) for d in value.desc.shape),
                          dtype.name, value.desc.format or "ND", largest or 0)
    return TensorInfo(value.name, tuple(int(d) for d in value.desc.shape), dtype.name,
                      value.desc.format or "ND", int(value.desc.size * dtype.itemsize))


def soc_mismatch_warning(om_soc: str, asked: str) -> Optional[AtcWarning]:
    """ACL refuses an .om built for another chip (EE1001 "ModelCheckCompatibility failed,
    supported socVersion=..., but the model socVersion=..."); the simulator says the same and
    goes on, pricing on the asked chip."""
    if not om_soc or not asked or om_soc == asked:
        return None
    return AtcWarning("W10111", f"ModelCheckCompatibility failed, supported socVersion={asked}, but the model "
                      f"socVersion={om_soc}. On a device ACL refuses to load it (EE1001); the simulator runs it "
                      f"and prices every kernel on {asked}.")


def host_link(soc_version: str) -> dict:
    doc = json.loads(HOST_LINKS.read_text())
    return doc["links"].get(soc_version, doc["default"])


class InferSession:
    """An .om loaded on the simulator; `soc_version` prices it on another chip than the one
    it records (with ACL's compatibility warning in `warnings`)."""

    def __init__(self, om_path: Union[str, os.PathLike], soc_version: Optional[str] = None, device_id: int = 0):
        self.model_path = os.fspath(om_path)
        self.device_id = device_id
        self._root = runner.load_model(self.model_path, soc_version or "")
        self.model = self._root         # for a gear model: the view of the gear that runs next
        self._gear: Optional[int] = None                # set_dynamic_*: the gear every infer() runs
        self.warnings = []
        mismatch = soc_mismatch_warning(self.model.loaded.soc_version, soc_version or "")
        if mismatch is not None:
            self.warnings.append(mismatch)
        self._npu_ms: list = []
        self._host_ms: list = []
        self._gear_ms: dict = {}        # gear index -> simulated ms of its inferences
        self._timings: dict = {}        # gear index (None: a static model) -> its priced task list
        self._copy_bytes: list = []     # a dynamic-shape model: (H2D, D2H) bytes of each timed inference
        self._batches: list = []        # and its batch size
        self.last_result: Optional[runner.RunResult] = None
        self.last_many: Optional[runner.ManyResult] = None

    # -- what the model is ----------------------------------------------------------
    @property
    def soc_version(self) -> str:
        return self.model.chip.soc_version

    def get_inputs(self) -> list:
        """The model's inputs; a gear model's dims that change between gears are -1 until a
        gear is chosen (as ACL's aclmdlGetInputDims says), then that gear's."""
        if self.gears is not None and self._gear is None:
            return [_dynamic_info(v, [g.loaded.graph.inputs[i] for g in self.gears.branches])
                    for i, v in enumerate(self.model.graph.inputs)]
        return [_info(v) for v in self.model.graph.inputs]

    def get_outputs(self) -> list:
        if self.gears is not None and self._gear is None:
            return [_dynamic_info(v, [g.loaded.graph.outputs[i] for g in self.gears.branches])
                    for i, v in enumerate(self.model.graph.outputs)]
        return [_info(v) for v in self.model.graph.outputs]

    # -- gears (models compiled with --dynamic_batch_size / _image_size / _dims) --------
    @property
    def gears(self):
        """codegen.gear_import.Gears of a gear model, else None."""
        return self._root.gears

    def get_dynamic_gears(self) -> list:
        """Every gear: its index, its values (as the atc flag gave them) and input shapes."""
        gears = self._need_gears("get_dynamic_gears")
        return [{"index": i, "values": list(b.values), "shapes": {n: list(d) for n, d in gears.shapes(i).items()}}
                for i, b in enumerate(gears.branches)]

    def _need_gears(self, what: str):
        if self.gears is None:
            raise AtcError("E10001", f"{what}: the model [{self.model_path}] has no gears (it was compiled without "
                           "--dynamic_batch_size, --dynamic_image_size or --dynamic_dims).",
                           "Run it with inputs of its static shapes.")
        return self.gears

    def _need_kind(self, flag: str, what: str):
        gears = self._need_gears(what)
        if gears.flag != flag:
            raise AtcError("E10001", f"{what}: the model's gears are --{gears.flag}, not --{flag}. Its gears are: "
                           f"{runner.gear_list(gears)}.", f"Choose the gear with the setter of --{gears.flag}.")
        return gears

    def set_gear(self, gear) -> int:
        """Choose the gear later infer() calls run: its index (an int), its values (a tuple:
        (4,) for batch 4, (224, 224) for an image size) or {input name: dims}.  Returns its
        index."""
        self._gear = self.resolve_gear(gear)
        self.model = self._root.for_gear(self._gear)
        return self._gear

    def resolve_gear(self, gear) -> int:
        gears = self._need_gears("set_gear")
        if isinstance(gear, dict):
            return runner.gear_of_shapes(self._root, gear)
        if isinstance(gear, (int, np.integer)) and not isinstance(gear, bool):
            if 0 <= int(gear) < len(gears.branches):
                return int(gear)
            raise AtcError("E10001", f"Gear index {gear} is out of range; the model has {len(gears.branches)} gears: "
                           f"{runner.gear_list(gears)}.", "Pick one of the gears.")
        return runner.pick_gear(self._root, tuple(gear))

    def set_dynamic_batchsize(self, batch: int) -> int:
        """ais_bench/ACL: the batch size of a --dynamic_batch_size model."""
        self._need_kind("dynamic_batch_size", "set_dynamic_batchsize")
        return self.set_gear((int(batch),))

    def set_dynamic_hw(self, height: int, width: int) -> int:
        """ais_bench/ACL: the image size of a --dynamic_image_size model."""
        self._need_kind("dynamic_image_size", "set_dynamic_hw")
        return self.set_gear((int(height), int(width)))

    def set_dynamic_dims(self, dims) -> int:
        """ais_bench/ACL: the input shapes of a gear model, {name: dims} or ais_bench's
        "name:d1,d2;name2:d1,d2" text."""
        self._need_gears("set_dynamic_dims")
        return self.set_gear(parse_shapes(dims) if isinstance(dims, str) else dims)

    set_dynamic_shape = set_dynamic_dims      # for a gear model, a shape names its gear

    def get_input_names(self) -> list:
        return [v.name for v in self.model.graph.inputs]

    def get_output_names(self) -> list:
        return [v.name for v in self.model.graph.outputs]

    # -- running --------------------------------------------------------------------
    def feeds(self, feeds: Union[dict, Sequence[np.ndarray], np.ndarray]) -> dict:
        """A list/tuple in input order, a dict by input name, or one array for a one-input model."""
        names = self.get_input_names()
        if isinstance(feeds, np.ndarray):
            feeds = [feeds]
        if isinstance(feeds, dict):
            return {k: np.asarray(v) for k, v in feeds.items()}
        feeds = list(feeds)
        if len(feeds) != len(names):
            raise AtcError("E10001", f"The model has {len(names)} input(s) {names}; {len(feeds)} given.",
                           "Give one array per model input, in the model's input order.")
        return {n: np.asarray(a) for n, a in zip(names, feeds)}

    def infer(self, feeds, loop: int = 1, warmup_count: int = 0, gear=None) -> list:
        """Run `warmup_count` untimed and `loop` timed inferences; the outputs of the last, as
        a list in output order.  Each timed inference adds its simulated time to summary().
        A gear model runs `gear` (see set_gear), else the gear set before, else the gear
        whose shapes the inputs have (ais_bench's --auto_set_dymdims_mode)."""
        feeds = self.feeds(feeds)
        index = None
        if self.gears is not None:
            if gear is not None:
                index = self.resolve_gear(gear)
            elif self._gear is not None:
                index = self._gear
            else:
                index = runner.gear_of_shapes(self._root, {k: np.shape(v) for k, v in feeds.items()})
            self.model = self._root.for_gear(index)
        result = runner.run(self.model, feeds, loop, warmup_count, timings=self._timings.get(index))
        self._timings[index] = result.timings
        self.last_result = result
        self._npu_ms.extend([result.npu_time_ms["mean"]] * loop)
        self._host_ms.extend(result.host_samples_ms)
        if self.model.graph.is_dynamic:        # its copies and batch are this run's real sizes
            copied = (sum(np.asarray(a).nbytes for a in feeds.values()),
                      sum(np.asarray(a).nbytes for a in result.outputs.values()))
            self._copy_bytes.extend([copied] * loop)
            self._batches.extend([result.batchsize] * loop)
        if index is not None:
            self._gear_ms.setdefault(index, []).extend([result.npu_time_ms["mean"]] * loop)
        return [result.outputs[n] for n in self.get_output_names()]

    def infer_many(self, feeds_list: Sequence, workers: int = 0, gear=None) -> list:
        """One inference per entry of `feeds_list` (ais_bench's dataset mode), spread over
        `workers` processes (default: the free cores; runner.run_many), so N cores give
        close to N times the inferences per second.  Returns one output list per entry, in
        order; each inference adds its simulated time to summary()."""
        feeds_list = [self.feeds(f) for f in feeds_list]
        if not feeds_list:
            return []
        if self.model.graph.is_dynamic:     # each input's sizes are priced on their own graph: one at a time
            return [self.infer(f, gear=gear) for f in feeds_list]
        index = None
        if self.gears is not None:
            index = self.resolve_gear(gear) if gear is not None else self._gear
            if index is None:
                index = runner.gear_of_shapes(self._root, {k: np.shape(v) for k, v in feeds_list[0].items()})
            self.model = self._root.for_gear(index)
        timings = self._timings.get(index)
        if timings is None:
            timings = self._timings[index] = runner._as_recorded(self.model, runner.simulate_tasks, self.model)
        npu_ms = sum(t.duration_us for t in timings) / 1e3
        result = runner.run_many(self.model_path, feeds_list, workers, self.model.chip.soc_version, gear=index,
                                 model=self.model)
        self._npu_ms.extend([npu_ms] * len(feeds_list))
        self._host_ms.extend(result.host_samples_ms)
        if index is not None:
            self._gear_ms.setdefault(index, []).extend([npu_ms] * len(feeds_list))
        self.last_many = result
        names = self.get_output_names()
        return [[outputs[n] for n in names] for outputs in result.outputs]

    def run(self, output_names: Optional[list], feeds: dict) -> list:
        """onnxruntime's call form: run(None, {name: array})."""
        outputs = self.infer(feeds)
        if not output_names:
            return outputs
        by_name = dict(zip(self.get_output_names(), outputs))
        missing = [n for n in output_names if n not in by_name]
        if missing:
            raise AtcError("E10001", f"Output(s) {missing} are not outputs of the model; it has "
                           f"{self.get_output_names()}.", "Ask for outputs the .om has.")
        return [by_name[n] for n in output_names]

    # -- timing ---------------------------------------------------------------------
    def transfer_ms(self, h2d: Optional[int] = None, d2h: Optional[int] = None) -> tuple:
        """Simulated (H2D, D2H) copy times of one inference over the chip's host link, of the
        model's I/O sizes (a gear model's: the gear that ran last) or of the bytes given (a
        dynamic-shape model's real sizes)."""
        link = host_link(self.soc_version)
        per_byte_ms = 1e-6 / link["bandwidth_gbps"]          # GB/s -> ms per byte
        h2d = sum(_info(v).size for v in self.model.graph.inputs) if h2d is None else h2d
        d2h = sum(_info(v).size for v in self.model.graph.outputs) if d2h is None else d2h
        lat = link["latency_us"] / 1e3
        return lat + h2d * per_byte_ms, lat + d2h * per_byte_ms

    def summary(self) -> dict:
        """ais_bench's summary of the calls so far: simulated NPU_compute_time and copy
        latencies (ms), throughput for batch = first dim of the first input, host wall time."""
        if not self._npu_ms:
            raise AtcError("E10001", "No inference has run yet.", "Call infer() first.")
        npu = runner.stats_ms(self._npu_ms)
        if self._copy_bytes:             # a dynamic-shape model: each inference at its own sizes
            copies = [self.transfer_ms(*b) for b in self._copy_bytes]
            batch = self._batches[-1]
        else:
            copies = [self.transfer_ms()] * len(self._npu_ms)
            batch = runner.default_batchsize(self.model.graph)
        out = {"simulated": True, "soc_version": self.soc_version, "NPU_compute_time": npu,
               "H2D_latency": runner.stats_ms([c[0] for c in copies]),
               "D2H_latency": runner.stats_ms([c[1] for c in copies]),
               "throughput": 1000.0 * batch / npu["mean"] if npu["mean"] > 0 else 0.0,
               "batchsize": batch, "exec_time_list": list(self._npu_ms),
               "host_wall_time": runner.stats_ms(self._host_ms)}
        if self._gear_ms:      # a gear model: each gear's simulated time on its own
            out["gears"] = [{"index": i, "values": list(self.gears.branches[i].values),
                             "NPU_compute_time": runner.stats_ms(ms)} for i, ms in sorted(self._gear_ms.items())]
        return out

    sumary = summary              # ais_bench spells it so

    def reset_summary(self) -> None:
        self._npu_ms.clear()
        self._host_ms.clear()
        self._gear_ms.clear()
        self._copy_bytes.clear()
        self._batches.clear()


def _dynamic_info(value, per_gear: list) -> TensorInfo:
    """A gear model's input or output: -1 for the dims that differ between gears, its size
    at the largest gear (the buffer ACL allocates)."""
    shapes = [tuple(int(d) for d in v.desc.shape) for v in per_gear]
    dims = tuple(d[0] if len(set(d)) == 1 else -1 for d in zip(*shapes))
    dtype = np.dtype(value.desc.dtype)
    size = max(int(np.prod(s, dtype=np.int64)) for s in shapes) * dtype.itemsize
    return TensorInfo(value.name, dims, dtype.name, value.desc.format or "ND", size)


def parse_shapes(text: str, flag: str = "--dymDims") -> dict:
    """ais_bench's shape text "name:d1,d2;name2:d1,d2" -> {name: [dims]}."""
    shapes = {}
    for item in filter(None, (part.strip() for part in str(text).split(";"))):
        name, sep, dims = item.rpartition(":")
        values = [d.strip() for d in dims.split(",")]
        if not sep or not name or not all(v.isascii() and v.isdigit() for v in values):
            raise AtcError("E10001", f"Value [{text}] for parameter [{flag}] is invalid. Reason: [{item}] is not of "
                           "the form name:d1,d2,... with positive integer dims.",
                           f'Write {flag} "input1:1,3,224,224;input2:1,3".')
        shapes[name] = [int(v) for v in values]
    if not shapes:
        raise AtcError("E10001", f"Value [{text}] for parameter [{flag}] is invalid. Reason: it names no input.",
                       f'Write {flag} "input1:1,3,224,224;input2:1,3".')
    return shapes
