"""int4 in the .om: two values a byte (DT_INT4, as GE sizes it), the first element in the low
nibble (ONNX's INT4 packing; ascend-formats.md says nothing of it, and Netron reads an .om's
int4 this way), om_format/int4.py.  Written packed in the weights partition and inline
tensors with descriptor sizes to match, unpacked with its size checked when read, the same
numbers as onnxruntime through atc and atc-sim, and what Netron shows."""
from __future__ import annotations

import ml_dtypes
import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import cli
from codegen.om_import import load_om_graph
from ge.errors import AtcError
from helpers import netron_open, run_ort
from om_format import int4
from om_format.attrs import tensor_def, tensor_desc, tensor_from_def
from om_format.container import build_om, load_model_def, read_om
from om_format.errors import OmFormatError
from om_format.schema import DataType, TensorDef
from om_format.weights import WeightsBuilder
from simulator import cli as sim_cli

INT4 = np.dtype(ml_dtypes.int4)
RNG = np.random.default_rng(4)


def _int4(*shape) -> np.ndarray:
    return RNG.integers(-8, 8, shape).astype(INT4)


def test_two_values_a_byte_first_in_the_low_nibble():
    assert int4.pack(np.array([1, 2], INT4)).tolist() == [0x21]
    assert int4.pack(np.array([-1, -8, 7], INT4)).tolist() == [0x8F, 0x07]    # odd: the last high nibble is 0
    assert int4.pack(np.array([], INT4)).tolist() == []


@pytest.mark.parametrize("shape", [(), (1,), (2,), (3,), (5, 3), (4, 4), (0, 3), (3, 1, 7)])
def test_round_trip_through_a_tensor_def_and_the_weights_partition(shape):
    array = _int4(*shape)
    count = array.size
    t = TensorDef.FromString(tensor_def(array, "w").SerializeToString())
    assert t.desc.dtype == DataType.DT_INT4 and t.desc.size == (count + 1) // 2 == len(t.data)
    back = tensor_from_def(t)
    assert back.dtype == INT4 and back.shape == array.shape and np.array_equal(back, array)
    wb = WeightsBuilder()
    wb.add(np.ones(3, np.float32))                                  # not at offset 0
    offset, size = wb.add(array)
    assert size == (count + 1) // 2
    ref = TensorDef()
    ref.desc.CopyFrom(tensor_desc("w", INT4, shape))
    ref.desc.data_offset, ref.desc.weight_size = offset, size
    back = tensor_from_def(ref, wb.bytes())
    assert np.array_equal(back, array) and not back.flags.writeable


@pytest.mark.parametrize("delta", [-1, 1])
def test_an_int4_tensor_of_the_wrong_byte_count_is_refused(delta):
    t = tensor_def(_int4(5), "w")                                   # 5 values: 3 bytes
    t.data = bytes(t.data) + b"\0" if delta > 0 else bytes(t.data)[:-1]
    with pytest.raises(OmFormatError, match=r"'w' has \d data bytes, shape \[5\] of int4 needs 3"):
        tensor_from_def(t)


def _int4_model(tmp_path, k: int = 5, n: int = 3):
    """x[2,k] @ DequantizeLinear(int4 W[k,n], scale, zero point int4) + b: an odd k*n packs
    with a pad; the bias lies after W in the weights partition."""
    w = _int4(k, n)
    weight = helper.make_tensor("w", TensorProto.INT4, [k, n], w.astype(np.int8).reshape(-1).tolist())
    zero = helper.make_tensor("zp", TensorProto.INT4, [], [-3])
    graph = helper.make_graph([helper.make_node("DequantizeLinear", ["w", "s", "zp"], ["wf"]),
                               helper.make_node("MatMul", ["x", "wf"], ["xw"]),
                               helper.make_node("Add", ["xw", "b"], ["y"])], "int4",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, k])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, n])],
                              [weight, helper.make_tensor("s", TensorProto.FLOAT, [], [0.25]), zero,
                               numpy_helper.from_array(RNG.standard_normal(n).astype(np.float32), "b")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)])
    onnx.checker.check_model(model, full_check=True)
    path = tmp_path / "int4.onnx"
    onnx.save(model, path)
    return model, path, w


def _atc(capsys, onnx_path, out, *extra):
    rc = cli.main([f"--model={onnx_path}", "--framework=5", f"--output={out}", "--soc_version=Ascend910", *extra])
    text = capsys.readouterr().out
    assert rc == 0 and "Traceback" not in text, text
    return str(out) + ".om"


def _const(model_def, name):
    return next(op for op in model_def.graph[0].op if op.type == "Const" and op.name == name)


def test_atc_writes_int4_weights_packed_and_netron_shows_their_values(tmp_path, capsys):
    _, path, w = _int4_model(tmp_path)
    (tmp_path / "1").mkdir(), (tmp_path / "2").mkdir()
    om = _atc(capsys, path, tmp_path / "1" / "a")
    md = load_model_def(read_om(om))
    desc = _const(md, "w").attr["value"].t.desc
    assert desc.dtype == DataType.DT_INT4 and desc.size == desc.weight_size == 8     # 15 values
    assert _const(md, "w").output_desc[0].size == 8
    dq = next(op for op in md.graph[0].op if op.type == "Dequantize")
    zero = dq.attr["x_zero_point"].t                              # an int4 attribute: inline, packed too
    assert zero.desc.dtype == DataType.DT_INT4 and zero.desc.size == len(zero.data) == 1
    assert tensor_from_def(zero).tolist() == -3 and bytes(zero.data) == b"\x0d"
    graph = load_om_graph(om).graph
    const = next(v for n in graph.nodes for v in n.inputs if v is not None and v.name == "w")
    assert np.array_equal(const.const, w)
    seen = {v["name"]: v["initializer"] for n in netron_open(om, numbers=True)["graphs"][0]["nodes"]
            for arg in n["inputs"] for v in arg["values"] if v.get("initializer")}
    assert seen["w:0"]["type"]["dataType"] == "int4"
    assert seen["w:0"]["numbers"] == w.astype(np.int8).reshape(-1).tolist()
    assert bytes.fromhex(seen["w:0"]["data"]) == int4.pack(w).tobytes()
    again = _atc(capsys, path, tmp_path / "2" / "a")               # same input, same bytes
    assert open(om, "rb").read() == open(again, "rb").read()


def test_an_int4_model_computes_what_onnxruntime_does(tmp_path, capsys):
    model, path, _ = _int4_model(tmp_path, k=7, n=5)
    om = _atc(capsys, path, tmp_path / "m", "--precision_mode=force_fp32")
    x = RNG.standard_normal((2, 7)).astype(np.float32)
    np.save(tmp_path / "x.npy", x)
    rc = sim_cli.main(["--model", om, "--input", str(tmp_path / "x.npy"), "--output", str(tmp_path / "o"),
                       "--compare", str(path)])
    text = capsys.readouterr().out
    assert rc == 0 and "compare PASS" in text, text
    np.testing.assert_allclose(np.load(tmp_path / "o" / "y.npy"), run_ort(model, {"x": x})["y"], rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("weight_size", [7, 9])
def test_a_truncated_or_oversized_int4_weight_is_e10003_without_a_traceback(tmp_path, capsys, weight_size):
    _, path, _ = _int4_model(tmp_path)
    om = read_om(_atc(capsys, path, tmp_path / "a"))
    md = load_model_def(om)
    _const(md, "w").attr["value"].t.desc.weight_size = weight_size      # inside the partition, wrong for 15 values
    parts = dict(om.partitions)
    parts[0] = md.SerializeToString()
    bad = tmp_path / "bad.om"
    bad.write_bytes(build_om(parts, name="int4", ops=1, platform_version="Ascend910"))
    with pytest.raises(AtcError) as err:
        load_om_graph(str(bad))
    assert err.value.code == "E10003" and "int4 needs 8" in err.value.message
    assert sim_cli.main(["--model", str(bad)]) == sim_cli.EXIT_ERROR
    text = capsys.readouterr().out
    assert "[ERROR] E10003" in text and "int4 needs 8" in text and "Traceback" not in text
