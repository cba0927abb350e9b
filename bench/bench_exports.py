"""Kernel counts on real exporter graphs: atc_py's fusion vs onnxruntime's own optimizer.

Exports full-size-ish ResNet-50, BERT (2 and 12 layers), ViT-Base and GPT-2 with torch.onnx's
TorchScript and dynamo exporters (tests/exporters.py), compiles each file with our pipeline
(atc_py.compiler.compile_model) and lets onnxruntime optimise the same file at
ORT_ENABLE_EXTENDED (SessionOptions.optimized_model_filepath), then prints side by side:
- ours: kernels launched = nodes whose registry op is not no_task (views launch nothing);
- ORT: nodes in its optimized model (and, for reference, without Reshape/Squeeze/Unsqueeze/
  Flatten/Identity, which ORT runs as copies-or-aliases too);
- Convs not inside a fused kernel, MHA kernels vs Softmax count, what fired.
Needs the `export` extra.  usage: python bench/bench_exports.py [--models resnet50,bert] [--workdir DIR]
"""
from __future__ import annotations

import argparse
import collections
import os
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.join(ROOT, "tests"))

import onnx  # noqa: E402
import onnxruntime as ort  # noqa: E402

import exporters  # noqa: E402  (tests/exporters.py)
from atc_py.compiler import compile_model  # noqa: E402
from atc_py.options import AtcOptions  # noqa: E402
from codegen.registry import kernel_of  # noqa: E402

# (model, layers) -- layers None: the model's full depth.
CASES = [("resnet50", None), ("bert", 2), ("bert", 12), ("vit", None), ("gpt2", None)]
VIEW_OPS = {"Reshape", "Squeeze", "Unsqueeze", "Flatten", "Identity"}


def ours(path: str, workdir: str) -> dict:
    options = AtcOptions(model=path, framework="5", output=os.path.join(workdir, "out"), soc_version="Ascend910")
    start = time.time()
    result = compile_model(options, build=False)
    kernels = [n for n in result.graph.nodes if not kernel_of(n.op_type).no_task]
    types = collections.Counter(n.op_type for n in kernels)
    fired = {s.pass_name.replace("FusionPass", "").replace("Pass", ""): s.effect_times
             for s in result.fusion_results if getattr(s, "effect_times", 0)}
    return {"kernels": len(kernels), "types": types, "fired": fired, "seconds": time.time() - start,
            "unfused_convs": types.get("Conv", 0), "softmax": types.get("Softmax", 0),
            "mha": sum(v for k, v in types.items() if "Attention" in k)}


def onnxruntime_nodes(path: str) -> tuple:
    """(all nodes, nodes without views) of ORT's ORT_ENABLE_EXTENDED-optimised model."""
    optimized = path[:-5] + ".ort_extended.onnx"
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED
    options.optimized_model_filepath = optimized
    ort.InferenceSession(path, options, providers=["CPUExecutionProvider"])
    nodes = onnx.load(optimized, load_external_data=False).graph.node
    return len(nodes), sum(1 for n in nodes if n.op_type not in VIEW_OPS), collections.Counter(n.op_type for n in nodes)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default=",".join(sorted({m for m, _ in CASES})))
    parser.add_argument("--exporters", default=",".join(exporters.EXPORTERS))
    parser.add_argument("--workdir", default="")
    args = parser.parse_args()
    workdir = args.workdir or tempfile.mkdtemp(prefix="atc_exports_")
    cache = exporters.ExportCache(workdir)
    wanted = set(args.models.split(","))
    print(f"torch exporters, full size (batch 1; 224x224 images; 128 tokens), workdir {workdir}")
    print(f"{'model':<14}{'exporter':<12}{'onnx':>6}{'ours':>6}{'ORT':>6}{'ORT-views':>10}"
          f"{'conv left':>10}{'MHA/softmax':>12}{'compile s':>10}  fired")
    for name, layers in CASES:
        if name not in wanted:
            continue
        label = name + (f"-{layers}L" if layers else "")
        for exporter in args.exporters.split(","):
            path = cache.path(name, exporter, "full", layers)
            onnx_nodes = len(onnx.load(path, load_external_data=False).graph.node)
            mine = ours(path, workdir)
            ort_all, ort_no_views, ort_types = onnxruntime_nodes(path)
            mha = f"{mine['mha']}/{mine['mha'] + mine['softmax']}" if mine["mha"] or mine["softmax"] else "-"
            fired = ", ".join(f"{k} {v}" for k, v in mine["fired"].items())
            print(f"{label:<14}{exporter:<12}{onnx_nodes:>6}{mine['kernels']:>6}{ort_all:>6}{ort_no_views:>10}"
                  f"{mine['unfused_convs']:>10}{mha:>12}{mine['seconds']:>10.1f}  {fired}", flush=True)
            print(f"{'':<26}ours: {dict(mine['types'].most_common(8))}", flush=True)
            print(f"{'':<26}ORT:  {dict(ort_types.most_common(8))}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
