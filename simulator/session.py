"""`InferSession`: run an .om from Python, in the spirit of ais_bench's and onnxruntime's sessions.

    session = InferSession("model.om")                 # or InferSession(path, soc_version="Ascend310")
    session.get_inputs()[0].name, .shape, .datatype    # what the .om records
    outputs = session.infer([x])                       # or infer({"input": x}); a list, in output order
    session.summary()["NPU_compute_time"]              # simulated chip time of the calls so far

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
    dtype = np.dtype(value.desc.dtype)
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
        self.model = runner.load_model(self.model_path, soc_version or "")
        self.warnings = []
        mismatch = soc_mismatch_warning(self.model.loaded.soc_version, soc_version or "")
        if mismatch is not None:
            self.warnings.append(mismatch)
        self._npu_ms: list = []
        self._host_ms: list = []
        self._timings: Optional[list] = None
        self.last_result: Optional[runner.RunResult] = None

    # -- what the model is ----------------------------------------------------------
    @property
    def soc_version(self) -> str:
        return self.model.chip.soc_version

    def get_inputs(self) -> list:
        return [_info(v) for v in self.model.graph.inputs]

    def get_outputs(self) -> list:
        return [_info(v) for v in self.model.graph.outputs]

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

    def infer(self, feeds, loop: int = 1, warmup_count: int = 0) -> list:
        """Run `warmup_count` untimed and `loop` timed inferences; the outputs of the last, as
        a list in output order.  Each timed inference adds its simulated time to summary()."""
        result = runner.run(self.model, self.feeds(feeds), loop, warmup_count, timings=self._timings)
        self._timings = result.timings
        self.last_result = result
        self._npu_ms.extend([result.npu_time_ms["mean"]] * loop)
        self._host_ms.extend(result.host_samples_ms)
        return [result.outputs[n] for n in self.get_output_names()]

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
    def transfer_ms(self) -> tuple:
        """Simulated (H2D, D2H) copy times of one inference over the chip's host link."""
        link = host_link(self.soc_version)
        per_byte_ms = 1e-6 / link["bandwidth_gbps"]          # GB/s -> ms per byte
        h2d = sum(i.size for i in self.get_inputs())
        d2h = sum(o.size for o in self.get_outputs())
        lat = link["latency_us"] / 1e3
        return lat + h2d * per_byte_ms, lat + d2h * per_byte_ms

    def summary(self) -> dict:
        """ais_bench's summary of the calls so far: simulated NPU_compute_time and copy
        latencies (ms), throughput for batch = first dim of the first input, host wall time."""
        if not self._npu_ms:
            raise AtcError("E10001", "No inference has run yet.", "Call infer() first.")
        h2d, d2h = self.transfer_ms()
        npu = runner.stats_ms(self._npu_ms)
        batch = runner.default_batchsize(self.model.graph)
        return {"simulated": True, "soc_version": self.soc_version, "NPU_compute_time": npu,
                "H2D_latency": runner.stats_ms([h2d] * len(self._npu_ms)),
                "D2H_latency": runner.stats_ms([d2h] * len(self._npu_ms)),
                "throughput": 1000.0 * batch / npu["mean"] if npu["mean"] > 0 else 0.0,
                "batchsize": batch, "exec_time_list": list(self._npu_ms),
                "host_wall_time": runner.stats_ms(self._host_ms)}

    sumary = summary              # ais_bench spells it so

    def reset_summary(self) -> None:
        self._npu_ms.clear()
        self._host_ms.clear()
