"""`atc-sim --accuracy float.onnx`: how far a quantized .om's answers lie from the float model
it was quantized from -- the accuracy the quantization cost, not a check of our kernels
(`--compare` checks those, against the quantized ONNX).

Why: an int8 model is deployed when it still answers like its float original.  Huawei's AMCT
reports it as the accuracy drop on a dataset; here every inference of the run (the --input
files, or the seeded random inputs) goes through the .om in the simulator and through
onnxruntime on the float model, and per output we report the cosine similarity (mean and
worst over the inferences) and the largest absolute difference; a classifier (one output,
[batch, classes]) also gets its top-1 agreement (rows whose argmax is the same).  No verdict:
what drop is acceptable is the user's call.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Optional

import numpy as np

from ge.ir import Graph


@dataclass
class OutputAccuracy:
    name: str
    reference_name: str
    inferences: int
    cosine_mean: float
    cosine_min: float
    max_abs_error: float
    top1_agree: Optional[int] = None      # classifier outputs ([batch, classes]) only
    top1_total: Optional[int] = None

    def as_dict(self) -> dict:
        return asdict(self)

    def describe(self) -> str:
        top1 = f"top-1 agreement {self.top1_agree}/{self.top1_total}, " if self.top1_total else ""
        return (f"{top1}cosine mean {self.cosine_mean:.6f} (worst {self.cosine_min:.6f}), "
                f"max_abs_error {self.max_abs_error:.6g} over {self.inferences} inference(s)")


def is_classifier(array: np.ndarray, outputs: int) -> bool:
    """A model's only output, [batch, classes] floats (BERT's 2-D pooler output is not one)."""
    return outputs == 1 and array.ndim == 2 and array.shape[1] > 1 and array.dtype.kind == "f"


def _cosine(a: np.ndarray, b: np.ndarray) -> float:
    a, b = a.astype(np.float64).ravel(), b.astype(np.float64).ravel()
    norm = float(np.linalg.norm(a) * np.linalg.norm(b))
    return float(np.dot(a, b) / norm) if norm > 0 else float(np.array_equal(a, b))


def measure(graph: Graph, outputs: list, references: list) -> list:
    """`outputs`: the .om's {name: array} per inference; `references`: the float model's
    {name: array} for the same inferences.  Outputs match by name, else by position."""
    results = []
    for i, value in enumerate(graph.outputs):
        names = list(references[0])
        ref_name = value.name if value.name in references[0] else (names[i] if i < len(names) else None)
        if ref_name is None:
            continue
        cosines, max_abs, agree, total = [], 0.0, 0, 0
        for got, ref in zip(outputs, references):
            g, r = np.asarray(got[value.name]), np.asarray(ref[ref_name])
            if g.shape != r.shape:
                continue
            cosines.append(_cosine(g, r))
            max_abs = max(max_abs, float(np.max(np.abs(g.astype(np.float64) - r))) if r.size else 0.0)
            if is_classifier(r, len(graph.outputs)):
                agree += int(np.sum(np.argmax(g, axis=1) == np.argmax(r, axis=1)))
                total += r.shape[0]
        if cosines:
            results.append(OutputAccuracy(value.name, ref_name, len(cosines), float(np.mean(cosines)),
                                          float(np.min(cosines)), max_abs, agree if total else None, total or None))
    return results


def accuracy_against(onnx_path: str, graph: Graph, feeds: list, outputs: list) -> list:
    """Run the float model in onnxruntime on every inference's inputs and measure."""
    from simulator.compare import onnx_feeds, run_onnxruntime
    references = [run_onnxruntime(onnx_path, onnx_feeds(graph, f), flag="--accuracy") for f in feeds]
    return measure(graph, outputs, references)
