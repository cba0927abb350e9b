"""Test helpers: compile an ONNX model in-process, run it, compare with onnxruntime."""
from __future__ import annotations

from typing import Iterable, Optional

import numpy as np
import onnx
import onnxruntime as ort
from onnx import numpy_helper

from codegen.om_builder import compute_dtype
from fusion_passes import pipeline
from fusion_passes.switches import FusionSwitches
from ge.onnx_import import import_model
from ge.passes import run_generic
from ge.passes.contract import run_passes
from simulator.executor import run_graph


def lower(model: onnx.ModelProto, input_shapes: Optional[dict] = None):
    """ONNX -> IR after the generic passes (no fusion)."""
    graph = import_model(model, input_shapes or {})
    run_generic(graph)
    return graph


def fuse_model(model: onnx.ModelProto, disabled_ops: Iterable[str] = (), passes=None,
         switches: Optional[FusionSwitches] = None, input_shapes: Optional[dict] = None):
    """ONNX -> IR -> fusion passes; returns (graph, {pass_name: FusionResult}).  `passes`: pass
    classes (or callables switches -> pass) to run instead of the whole fusion pipeline."""
    graph = lower(model, input_shapes)
    switches = switches or FusionSwitches(disabled_ops=set(disabled_ops))
    chosen = pipeline.fusion_passes(switches) if passes is None else [make(switches) for make in passes]
    return graph, {r.pass_name: r for r in run_passes(graph, chosen)}


def op_types(graph) -> list:
    return [n.op_type for n in graph.nodes]


def random_feeds(model: onnx.ModelProto, seed: int = 0) -> dict:
    """Seeded inputs for every graph input: ints in [0, 10) (fine for small vocabularies),
    0/1 padding masks for integer inputs named like *mask*."""
    rng = np.random.default_rng(seed)
    inits = {i.name for i in model.graph.initializer}
    feeds = {}
    for info in model.graph.input:
        if info.name in inits:
            continue
        t = info.type.tensor_type
        shape = [d.dim_value if d.HasField("dim_value") else 1 for d in t.shape.dim]
        dtype = onnx.helper.tensor_dtype_to_np_dtype(t.elem_type)
        if np.issubdtype(dtype, np.integer) and "mask" in info.name.lower():
            mask = np.ones(shape, dtype=dtype)       # padding mask: the last positions padded
            if shape and shape[-1] > 2:
                mask[..., -(shape[-1] // 4 or 1):] = 0
            feeds[info.name] = mask
        elif np.issubdtype(dtype, np.integer):
            feeds[info.name] = rng.integers(0, 10, size=shape).astype(dtype)
        elif dtype == np.bool_:
            feeds[info.name] = rng.integers(0, 2, size=shape).astype(bool)
        else:
            feeds[info.name] = rng.standard_normal(shape).astype(dtype)
    return feeds


def ort_session(model: onnx.ModelProto) -> ort.InferenceSession:
    """onnxruntime on one thread with every graph optimization off: the unfused reference."""
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    options.intra_op_num_threads = 1
    return ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])


def run_ort(model: onnx.ModelProto, feeds: dict) -> dict:
    session = ort_session(model)
    names = [o.name for o in session.get_outputs()]
    return dict(zip(names, session.run(names, feeds)))


def run_ort_op(op_type: str, inputs: list, attrs: Optional[dict] = None, opset: int = 18, n_outputs: int = 1,
               constant: Iterable[int] = ()) -> list:
    """Run one ONNX node in onnxruntime.  `inputs`: arrays (None = an omitted optional input);
    the indices in `constant` become initializers, the others graph inputs."""
    constant = set(constant)
    names, graph_inputs, inits, feeds = [], [], [], {}
    for i, array in enumerate(inputs):
        if array is None:
            names.append("")
            continue
        name = f"in{i}"
        names.append(name)
        if i in constant:
            inits.append(numpy_helper.from_array(np.asarray(array), name))
        else:
            graph_inputs.append(onnx.helper.make_tensor_value_info(
                name, onnx.helper.np_dtype_to_tensor_dtype(array.dtype), array.shape))
            feeds[name] = array
    while names and names[-1] == "":
        names.pop()
    outs = [f"out{i}" for i in range(n_outputs)]
    node = onnx.helper.make_node(op_type, names, outs, **(attrs or {}))
    graph = onnx.helper.make_graph([node], "g", graph_inputs,
                                   [onnx.helper.make_empty_tensor_value_info(o) for o in outs], initializer=inits)
    model = onnx.helper.make_model(graph, opset_imports=[onnx.helper.make_opsetid("", opset)])
    model.ir_version = 10 if opset >= 21 else 9
    return ort_session(model).run(None, feeds)


def run_ir(graph, feeds: dict, precision_mode: str = "force_fp32") -> dict:
    return run_graph(graph, feeds, lambda node: compute_dtype(node, precision_mode))


def assert_matches_ort(model: onnx.ModelProto, graph, feeds: Optional[dict] = None, precision: str = "fp32"):
    """Numbers of the (fused) IR graph equal onnxruntime's on the original model, judged by
    the rule `atc-sim --compare` applies (simulator/compare.py, tolerances in COMPARE.md)."""
    from simulator.compare import compare_one
    feeds = feeds or random_feeds(model)
    expected = run_ort(model, feeds)
    mode = "force_fp32" if precision == "fp32" else "force_fp16"
    got = run_ir(graph, feeds, mode)
    for name, ref in expected.items():
        check = compare_one(name, name, np.asarray(got[name]), np.asarray(ref), precision)
        assert check.passed, f"{name}: {check.describe()}"


def netron_dir() -> str:
    """Folder of the installed Netron package (its om.js); skips the test without it."""
    import os
    import pytest
    netron = pytest.importorskip("netron")
    return os.path.dirname(netron.__file__)


def netron_open(path, numbers: bool = False) -> dict:
    """What Netron's own om.js sees in an .om file (tests/netron/harness.mjs), as a dict;
    `numbers`: with each initializer's values as Netron's tensor decoder shows them."""
    import json
    import os
    import shutil
    import subprocess
    import pytest
    node = shutil.which("node")
    if node is None:
        pytest.skip("node is not installed")
    harness = os.path.join(os.path.dirname(os.path.abspath(__file__)), "netron", "harness.mjs")
    args = [node, harness, netron_dir(), str(path)] + (["--numbers"] if numbers else [])
    proc = subprocess.run(args, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def record_sha_updates(monkeypatch, record) -> None:
    """Every piece the .om writer feeds SHA-256 also goes to `record(data)`; the hash is the
    writer's own, unchanged (tests of what reaches the hash, and in which pieces)."""
    from om_format import container

    class Recording:
        def __init__(self, sha):
            self._sha = sha

        def update(self, data):
            record(data)
            self._sha.update(data)

        def digest(self):
            return self._sha.digest()

    real_init = container._HashingWriter.__init__

    def init(self, *args, **kwargs):
        real_init(self, *args, **kwargs)
        self.sha = Recording(self.sha)

    monkeypatch.setattr(container._HashingWriter, "__init__", init)
