"""Kernel counts of the peers on one ONNX file; run as a subprocess (a peer may crash or hang).

usage: python -m bench.sweep.peers ort|openvino|tvm MODEL.onnx
Prints one JSON line {"kernels": total, "kernels_noview": without views, "types": {...}}.
What counts as a kernel (RESULTS.md repeats this):
- ort: nodes of the model onnxruntime writes at ORT_ENABLE_EXTENDED (CPU EP,
  optimized_model_filepath): every node is one kernel call of its session.
- openvino: the CPU plugin's compiled model (f32 inference precision, 1 thread), one
  inference with PERF_COUNT on: nodes whose profiling status is EXECUTED (constants,
  parameters, results and in-place nodes report NOT_RUN and are not counted).
- tvm: relax from_onnx, then LegalizeOps, AnnotateTIROpPattern, FoldConstant, FuseOps,
  FuseTIR: `call_tir` calls in main, one per fused PrimFunc kernel launched.
Views (VIEW_TYPES; for TVM, a PrimFunc that only reshapes) are counted and left out of
kernels_noview, as atc_py's task list leaves out its no_task view ops.
"""
from __future__ import annotations

import collections
import json
import os
import re
import sys

VIEW_TYPES = {"Reshape", "Squeeze", "Unsqueeze", "Flatten", "Identity"}
TVM_VIEW_FUNCS = ("reshape", "squeeze", "expand_dims", "flatten")


def _result(types: collections.Counter, views: int) -> dict:
    total = sum(types.values())
    return {"kernels": total, "kernels_noview": total - views, "types": dict(types.most_common())}


def ort(path: str) -> dict:
    import onnx
    import onnxruntime as rt
    optimized = path[:-5] + ".ort_extended.onnx"
    options = rt.SessionOptions()
    options.graph_optimization_level = rt.GraphOptimizationLevel.ORT_ENABLE_EXTENDED
    options.optimized_model_filepath = optimized
    options.intra_op_num_threads = 1
    rt.InferenceSession(path, options, providers=["CPUExecutionProvider"])
    nodes = onnx.load(optimized, load_external_data=False).graph.node
    for leftover in (optimized, optimized + ".data"):
        if os.path.exists(leftover):
            os.remove(leftover)
    types = collections.Counter(n.op_type for n in nodes)
    return _result(types, sum(v for k, v in types.items() if k in VIEW_TYPES))


def openvino(path: str) -> dict:
    import numpy as np
    import openvino as ov
    core = ov.Core()
    compiled = core.compile_model(core.read_model(path), "CPU", {
        "INFERENCE_PRECISION_HINT": "f32", "PERF_COUNT": True, "INFERENCE_NUM_THREADS": 1})
    request = compiled.create_infer_request()
    rng = np.random.default_rng(0)
    feeds = {}
    for i, port in enumerate(compiled.inputs):
        shape = list(port.get_partial_shape().to_shape())
        dtype = port.get_element_type().to_dtype()
        if np.issubdtype(dtype, np.integer) or dtype == np.bool_:
            feeds[i] = np.ones(shape, dtype=dtype)
        else:
            feeds[i] = rng.standard_normal(shape).astype(dtype)
    request.infer(feeds)
    executed = [p.node_type for p in request.profiling_info if str(p.status).endswith(".EXECUTED")]
    types = collections.Counter(executed)
    return _result(types, sum(v for k, v in types.items() if k in VIEW_TYPES))


def tvm(path: str) -> dict:
    import onnx
    import tvm as tvm_
    from tvm import relax
    from tvm.relax.frontend.onnx import from_onnx
    mod = from_onnx(onnx.load(path), keep_params_in_input=False)
    mod = tvm_.transform.Sequential([
        relax.transform.LegalizeOps(), relax.transform.AnnotateTIROpPattern(), relax.transform.FoldConstant(),
        relax.transform.FuseOps(), relax.transform.FuseTIR()])(mod)
    calls = []

    def visit(expr):
        if isinstance(expr, relax.Call) and isinstance(expr.op, tvm_.ir.Op) and expr.op.name == "relax.call_tir":
            calls.append(expr.args[0].name_hint)

    relax.analysis.post_order_visit(mod["main"].body, visit)
    # kernel name without the numbering TVM adds to distinct shapes (fused_conv2d3_add2 -> fused_conv2d_add)
    types = collections.Counter(re.sub(r"\d+(?=_|$)", "", name) for name in calls)
    views = sum(v for k, v in types.items() if k.startswith(TVM_VIEW_FUNCS))
    return _result(types, views)


PEERS = {"ort": ort, "openvino": openvino, "tvm": tvm}


def main(argv) -> int:
    peer, path = argv
    print(json.dumps(PEERS[peer](path)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
