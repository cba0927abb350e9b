"""Issue 8, memory: a tiny file must not exhaust memory.  Every stage checks the resource
budget (ge/limits.py) before it allocates: compile-time tensors against the chip's memory,
what the host allocates against what it may use; folding decides from the output size.

Findings covered: 1 (a 140-byte Range 0..2^40, a Concat of an Expand, a 512 MB weight), 3 (a
119-byte ConstantOfShape [30000, 30000] folded into 3.35 GiB), 7 (tensor sizes bounded only by
int64; random inputs drawn as float64 first), 8 in part (absurd recorded dims in an .om).
Each hostile case runs in a fresh process under a 2 GB address-space limit and 30 s.
"""
from __future__ import annotations

import os
import tracemalloc

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from codegen.om_import import open_om
from ge.ir import Graph, TensorDesc, Value
from om_format.container import PartitionType, build_om
from sandbox import leftovers, run_tool
from simulator import runner


def _save(tmp_path, name, nodes, inputs, outputs, inits=(), opset=17):
    graph = helper.make_graph(nodes, "g", inputs, outputs, list(inits))
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    path = tmp_path / f"{name}.onnx"
    path.write_bytes(model.SerializeToString())
    return path


def _i64(name, values):
    return numpy_helper.from_array(np.asarray(values, np.int64), name)


def _compile(tmp_path, model, *extra):
    return run_tool("atc", [f"--model={model}", "--framework=5", f"--output={tmp_path}/o",
                            "--soc_version=Ascend910", *extra], str(tmp_path))


def _refused(result, code="E13023"):
    assert result.verdict == "coded" and code in result.codes, (result.verdict, result.text[-2000:])
    assert result.seconds < 30


# --------------------------------------------------------------------------- finding 1

def test_f1_tiny_range_to_2_pow_40_is_refused_without_allocating(tmp_path):
    node = helper.make_node("Range", ["s", "l", "d"], ["y"], name="range")
    model = _save(tmp_path, "range", [node], [], [helper.make_tensor_value_info("y", TensorProto.INT64, None)],
                  [_i64("s", 0), _i64("l", 1 << 40), _i64("d", 1)])
    assert os.path.getsize(model) < 200
    result = _compile(tmp_path, model)
    _refused(result)
    assert "[range]" in result.text and str(8 << 40) in result.text   # the node and the size
    assert result.max_rss_mb < 500
    assert not os.path.exists(tmp_path / "o.om") and leftovers(str(tmp_path)) == []


def _expand_concat(tmp_path, rows):
    nodes = [helper.make_node("Expand", ["one", "shape"], ["e"], name="expand"),
             helper.make_node("Concat", ["e", "e"], ["y"], axis=0, name="concat")]
    return _save(tmp_path, f"expand{rows}", nodes, [], [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                 [numpy_helper.from_array(np.ones([1], np.float32), "one"), _i64("shape", [rows, 1 << 15])])


def test_f1_concat_of_a_huge_expand_is_refused_at_compile_time(tmp_path):
    model = _expand_concat(tmp_path, 1 << 25)      # 4 TiB: more than the chip's 32 GiB
    assert os.path.getsize(model) < 300
    result = _compile(tmp_path, model)
    _refused(result)
    assert "[expand]" in result.text
    assert result.max_rss_mb < 500


def test_f1_expand_that_fits_the_chip_compiles_lean_and_the_run_is_refused_on_a_small_host(tmp_path):
    """8 GiB fits Ascend910's 32 GiB, so the .om is valid; it stays a kernel (never folded)
    and atc-sim refuses to run it in 2 GB instead of dying halfway."""
    model = _expand_concat(tmp_path, 1 << 15)      # Expand 4 GiB, Concat 8 GiB
    result = _compile(tmp_path, model)
    assert result.verdict == "ok", result.text[-2000:]
    assert result.max_rss_mb < 500
    run = run_tool("atc-sim", ["--model", tmp_path / "o.om", "--output", tmp_path / "run"], str(tmp_path))
    _refused(run)
    assert not os.path.exists(tmp_path / "run")


def test_f1_a_weight_beyond_the_address_space_is_refused_before_it_is_mapped(tmp_path):
    """The weight sits in external data (a sparse file: no disk used).  Weights are
    memory-mapped, never copied (ge.onnx_weights), but the map and what fusions may copy of
    it (ge.limits.MAPPED_COPIES) need address space: 1.5 GiB does not fit 2 GB, and is
    refused before it is mapped."""
    rows, cols = 4096, 98304                               # float32: 1.5 GiB
    with open(tmp_path / "w.bin", "wb") as f:
        f.truncate(rows * cols * 4)
    weight = TensorProto(name="w", data_type=TensorProto.FLOAT, dims=[rows, cols])
    weight.data_location = TensorProto.EXTERNAL
    for key, value in (("location", "w.bin"), ("offset", "0"), ("length", str(rows * cols * 4))):
        entry = weight.external_data.add()
        entry.key, entry.value = key, value
    model = _save(tmp_path, "big", [helper.make_node("MatMul", ["x", "w"], ["y"], name="mm")],
                  [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, rows])],
                  [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, cols])], [weight])
    result = _compile(tmp_path, model)
    _refused(result)
    assert "external data" in result.text
    assert result.max_rss_mb < 500
    assert not os.path.exists(tmp_path / "o.om")


# --------------------------------------------------------------------------- finding 3

def test_f3_constant_of_shape_decides_from_its_size_before_folding(tmp_path):
    node = helper.make_node("ConstantOfShape", ["shape"], ["y"], name="fill",
                            value=numpy_helper.from_array(np.zeros([1], np.float32)))
    model = _save(tmp_path, "fill", [node], [], [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                  [_i64("shape", [30000, 30000])])
    assert os.path.getsize(model) < 150
    result = _compile(tmp_path, model)
    assert result.verdict == "ok", result.text[-2000:]   # 3.35 GiB fits the chip: a Fill kernel
    assert result.max_rss_mb < 500
    assert os.path.getsize(tmp_path / "o.om") < 64 << 10
    run = run_tool("atc-sim", ["--model", tmp_path / "o.om"], str(tmp_path))
    _refused(run)


# --------------------------------------------------------------------------- finding 7

def _relu_model(tmp_path):
    return _save(tmp_path, "relu", [helper.make_node("Relu", ["x"], ["y"], name="relu")],
                 [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 3, 8, 8])],
                 [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", 3, 8, 8])])


def test_f7_input_shape_beyond_the_chip_is_refused_at_compile_time(tmp_path):
    result = _compile(tmp_path, _relu_model(tmp_path), "--input_shape=x:99999999999,3,8,8")
    _refused(result)
    assert "[x]" in result.text
    assert not os.path.exists(tmp_path / "o.om")


def test_f7_random_inputs_are_drawn_in_their_own_dtype():
    """A float32 input of 64 MiB: no float64 copy (128 MiB) on the way."""
    graph = Graph("g")
    value = Value("x", TensorDesc(np.float32, (16, 1024, 1024), "ND"))
    graph.inputs.append(value)
    tracemalloc.start()
    try:
        feeds = runner.random_inputs(graph)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert feeds["x"].dtype == np.float32
    assert peak < 1.25 * feeds["x"].nbytes, peak


# --------------------------------------------------------------------------- finding 8 (dims)

def test_f8_om_recording_absurd_dims_is_refused_before_running(tmp_path):
    """An .om whose tensors all agree on [99999999999, 3, 8, 8] (checksum re-sealed): the
    loader's shape check passes, the budget refuses it before a byte is allocated."""
    ok = _compile(tmp_path, _relu_model(tmp_path), "--input_shape=x:1,3,8,8")
    assert ok.verdict == "ok", ok.text
    opened = open_om(str(tmp_path / "o.om"))
    model_def = opened.model_def
    for op in model_def.graph[0].op:
        for desc in list(op.input_desc) + list(op.output_desc):
            if list(desc.shape.dim) == [1, 3, 8, 8]:
                desc.shape.dim[0] = 99999999999
    parts = dict(opened.om.partitions)
    parts[PartitionType.MODEL_DEF] = model_def.SerializeToString()
    (tmp_path / "huge.om").write_bytes(build_om(parts, name="huge", ops=1, platform_version="Ascend910"))
    run = run_tool("atc-sim", ["--model", tmp_path / "huge.om"], str(tmp_path))
    _refused(run)


@pytest.mark.parametrize("limit_gb", [1])
def test_budget_follows_the_address_space_limit(tmp_path, limit_gb):
    """The host budget reads RLIMIT_AS: a run that fits 2 GB is refused under 1 GB with the
    budget's code, not a MemoryError."""
    model = _expand_concat(tmp_path, 1 << 12)      # Concat 1 GiB
    assert _compile(tmp_path, model).verdict == "ok"
    run = run_tool("atc-sim", ["--model", tmp_path / "o.om"], str(tmp_path), address_space=limit_gb << 30)
    _refused(run)
