"""Tensors an .om holds beyond plain numbers: strings (GE's DT_STRING layout) and the ONNX
types GE has no DataType for (float8 e4m3fnuz / e5m2fnuz, uint4), held as uint8 bit patterns
with the ONNX type recorded (om_format/attrs.py, ARCHITECTURE.md "Tensor types").  Through
atc, the .om, Netron, atc-sim's files, and the kernels' conversions against ONNX's reference."""
from __future__ import annotations

import struct
import warnings

import ml_dtypes
import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

import cli
from codegen.om_import import load_om_graph
from ge.ops.elementwise import convert
from ge.ops.quant import quantize
from om_format.attrs import (LOGICAL_TYPE_ATTR, desc_dtype, from_attr, om_holds, string_bytes, tensor_def,
                             tensor_desc, tensor_from_def, to_attr)
from om_format.errors import OmFormatError
from om_format.schema import DataType, TensorDef
from om_format.weights import WeightsBuilder
from simulator import cli as sim_cli

from helpers import netron_open

FNUZ = (ml_dtypes.float8_e4m3fnuz, ml_dtypes.float8_e5m2fnuz)
GE_TYPED = (ml_dtypes.float8_e4m3fn, ml_dtypes.float8_e5m2, ml_dtypes.int4)     # the same kernels, GE DataTypes
ONNX_TYPE = {ml_dtypes.float8_e4m3fnuz: TensorProto.FLOAT8E4M3FNUZ, ml_dtypes.float8_e5m2fnuz: TensorProto.FLOAT8E5M2FNUZ,
             ml_dtypes.uint4: TensorProto.UINT4, ml_dtypes.float8_e4m3fn: TensorProto.FLOAT8E4M3FN,
             ml_dtypes.float8_e5m2: TensorProto.FLOAT8E5M2, ml_dtypes.int4: TensorProto.INT4}
NIBBLES = (ml_dtypes.uint4, ml_dtypes.int4)


def strings(*values, shape=None) -> np.ndarray:
    out = np.empty(len(values), dtype=object)
    out[:] = list(values)
    return out.reshape(shape or (len(values),))


# ---------------------------------------------------------------- om_format

def test_string_tensor_is_ges_dt_string_layout():
    """Heads {int64 offset from the tensor's first byte, int64 length}, then each string's
    UTF-8 bytes and a NUL -- what GE's own string tensors hold."""
    data = string_bytes(strings("ab", "cé", ""))
    heads = struct.unpack("<6q", data[:48])
    assert heads == (48, 2, 51, 3, 55, 0)
    assert data[48:] == b"ab\0c\xc3\xa9\0\0"
    t = tensor_def(strings("ab", "cé", "", "x", shape=(2, 2)), "s")
    assert t.desc.dtype == DataType.DT_STRING and t.desc.size == 0
    back = tensor_from_def(TensorDef.FromString(t.SerializeToString()))
    assert back.dtype == object and back.shape == (2, 2) and back.tolist() == [["ab", "cé"], ["", "x"]]


@pytest.mark.parametrize("corrupt, why", [
    (lambda d: d[:40], "heads"),                                              # shorter than its heads
    (lambda d: struct.pack("<q", 10_000) + d[8:], "outside"),                 # offset past the end
    (lambda d: struct.pack("<q", 0) + d[8:], "outside"),                      # offset into the heads
    (lambda d: d[:8] + struct.pack("<q", -1) + d[16:], "outside"),            # negative length
    (lambda d: d[:48] + b"\xff\xfe" + d[50:], "UTF-8"),
])
def test_string_tensor_from_a_file_is_checked(corrupt, why):
    t = tensor_def(strings("ab", "cé", ""), "s")
    t.data = corrupt(bytes(t.data))
    with pytest.raises(OmFormatError, match=why):
        tensor_from_def(t)


@pytest.mark.parametrize("dtype", FNUZ + (ml_dtypes.uint4,))
def test_type_without_ge_datatype_is_uint8_bits_with_the_onnx_type_recorded(dtype):
    array = np.array([0, 1, 2.5, 15], np.float32).astype(dtype)
    desc = tensor_desc("t", array.dtype, array.shape)
    assert desc.dtype == DataType.DT_UINT8 and desc.size == 4
    assert desc.attr[LOGICAL_TYPE_ATTR].s == TensorProto.DataType.Name(ONNX_TYPE[dtype]).encode()
    assert desc_dtype(desc) == np.dtype(dtype) and om_holds(dtype)
    t = tensor_def(array)
    assert bytes(t.data) == array.view(np.uint8).tobytes()        # the bit patterns, one a byte
    back = from_attr(type(to_attr(array)).FromString(to_attr(array).SerializeToString()))
    assert back.dtype == np.dtype(dtype) and np.array_equal(back.view(np.uint8), array.view(np.uint8))
    desc.dtype = DataType.DT_INT8                                # recorded over the wrong storage
    with pytest.raises(OmFormatError, match="held as DT_UINT8"):
        desc_dtype(desc)
    desc.dtype = DataType.DT_UINT8
    desc.attr[LOGICAL_TYPE_ATTR].s = b"FLOAT128"
    with pytest.raises(OmFormatError, match="FLOAT128"):
        desc_dtype(desc)


def test_string_constants_go_to_the_weights_partition():
    wb = WeightsBuilder()
    offset, size = wb.add(strings("a", "bc"))
    assert bytes(wb.bytes()[offset:offset + size]) == string_bytes(strings("a", "bc"))


# ---------------------------------------------------------------- atc, Netron, atc-sim

def _save(tmp_path, graph, name):
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)])
    onnx.checker.check_model(model, full_check=True)
    path = tmp_path / f"{name}.onnx"
    onnx.save(model, path)
    return path


@pytest.fixture
def string_om(tmp_path, capsys):
    """Equal of a string input with a string constant, and the input echoed back."""
    const = helper.make_tensor("c", TensorProto.STRING, [3], [b"ab", "cé".encode(), b""])
    graph = helper.make_graph(
        [helper.make_node("Equal", ["x", "c"], ["eq"]), helper.make_node("Identity", ["x"], ["echo"])], "s",
        [helper.make_tensor_value_info("x", TensorProto.STRING, [2, 3])],
        [helper.make_tensor_value_info("eq", TensorProto.BOOL, [2, 3]),
         helper.make_tensor_value_info("echo", TensorProto.STRING, [2, 3])], [const])
    model = _save(tmp_path, graph, "strings")
    assert cli.main([f"--model={model}", "--framework=5", f"--output={tmp_path / 'strings'}",
                     "--soc_version=Ascend910"]) == 0
    capsys.readouterr()
    return model, tmp_path / "strings.om"


@pytest.fixture
def lowbit_om(tmp_path, capsys):
    """float -> float8e4m3fnuz -> float, float -> float8e5m2fnuz (saturate=0), and a uint4 QDQ."""
    graph = helper.make_graph(
        [helper.make_node("Cast", ["x"], ["f8"], to=TensorProto.FLOAT8E4M3FNUZ),
         helper.make_node("Cast", ["f8"], ["back"], to=TensorProto.FLOAT),
         helper.make_node("Cast", ["x"], ["e5"], to=TensorProto.FLOAT8E5M2FNUZ, saturate=0),
         helper.make_node("QuantizeLinear", ["x", "s", "zp"], ["q"]),
         helper.make_node("DequantizeLinear", ["q", "s", "zp"], ["dq"])], "f",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [5])],
        [helper.make_tensor_value_info("f8", TensorProto.FLOAT8E4M3FNUZ, [5]),
         helper.make_tensor_value_info("back", TensorProto.FLOAT, [5]),
         helper.make_tensor_value_info("e5", TensorProto.FLOAT8E5M2FNUZ, [5]),
         helper.make_tensor_value_info("q", TensorProto.UINT4, [5]),
         helper.make_tensor_value_info("dq", TensorProto.FLOAT, [5])],
        [helper.make_tensor("s", TensorProto.FLOAT, [], [0.5]), helper.make_tensor("zp", TensorProto.UINT4, [], [3])])
    model = _save(tmp_path, graph, "lowbit")
    assert cli.main([f"--model={model}", "--framework=5", f"--output={tmp_path / 'lowbit'}",
                     "--soc_version=Ascend910", "--precision_mode=must_keep_origin_dtype"]) == 0   # ONNX's float32
    capsys.readouterr()
    return model, tmp_path / "lowbit.om"


def _reference(model, feeds):
    from onnx.reference import ReferenceEvaluator
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return dict(zip([o.name for o in onnx.load(model).graph.output], ReferenceEvaluator(str(model)).run(None, feeds)))


def test_netron_opens_an_om_with_strings_and_storage_types(string_om, lowbit_om):
    seen = netron_open(string_om[1])
    (graph,) = seen["graphs"]
    types = {v["name"]: v["type"]["dataType"] for n in graph["nodes"] for arg in n["inputs"] + n["outputs"]
             for v in arg["values"]}
    assert types["x:0"] == "string"
    inits = [v for n in graph["nodes"] for arg in n["inputs"] for v in arg["values"] if v.get("initializer")]
    (const,) = inits
    assert const["initializer"]["type"]["dataType"] == "string"
    assert bytes.fromhex(const["initializer"]["data"]) == string_bytes(strings("ab", "cé", ""))
    seen = netron_open(lowbit_om[1])
    (graph,) = seen["graphs"]
    out_types = {v["type"]["dataType"] for n in graph["nodes"] for arg in n["outputs"] for v in arg["values"]}
    assert "uint8" in out_types and not out_types - {"uint8", "float32"}
    graph_back = load_om_graph(str(lowbit_om[1])).graph
    assert [str(np.dtype(v.desc.dtype)) for v in graph_back.outputs] == \
        ["float8_e4m3fnuz", "float32", "float8_e5m2fnuz", "uint4", "float32"]


def test_atc_sim_reads_and_writes_string_files(string_om, tmp_path, capsys):
    model, om = string_om
    x = np.array([["ab", "x", ""], ["cé", "cé", "ab"]])
    np.save(tmp_path / "x.npy", x)
    assert sim_cli.main(["--model", str(om), "--input", str(tmp_path / "x.npy"), "--output", str(tmp_path / "o"),
                         "--compare", str(model)]) == 0
    out = capsys.readouterr().out
    assert "compare PASS" in out
    ref = _reference(model, {"x": x.astype(object)})
    eq, echo = np.load(tmp_path / "o" / "eq.npy"), np.load(tmp_path / "o" / "echo.npy")
    assert eq.tolist() == ref["eq"].tolist() == [[True, False, True], [False, True, False]]
    assert echo.dtype.kind == "U" and echo.tolist() == x.tolist()
    # .bin: GE's DT_STRING layout, both ways
    assert sim_cli.main(["--model", str(om), "--input", str(tmp_path / "x.npy"), "--output", str(tmp_path / "b"),
                         "--outfmt", "BIN"]) == 0
    assert (tmp_path / "b" / "echo.bin").read_bytes() == string_bytes(x.astype(object))
    assert sim_cli.main(["--model", str(om), "--input", str(tmp_path / "b" / "echo.bin"),
                         "--output", str(tmp_path / "b2")]) == 0
    assert np.load(tmp_path / "b2" / "echo.npy").tolist() == x.tolist()
    capsys.readouterr()


def test_atc_sim_never_unpickles_a_string_input(string_om, tmp_path, capsys):
    np.save(tmp_path / "obj.npy", np.array([["ab", "x", ""], ["a", "b", "c"]], dtype=object), allow_pickle=True)
    (tmp_path / "bad.bin").write_bytes(b"\x00" * 20)
    for name in ("obj.npy", "bad.bin"):
        assert sim_cli.main(["--model", str(string_om[1]), "--input", str(tmp_path / name)]) != 0
        out = capsys.readouterr().out
        assert "E10001" in out and "Traceback" not in out and "E19999" not in out


def test_atc_sim_storage_types_in_files_are_bit_patterns(lowbit_om, tmp_path, capsys):
    model, om = lowbit_om
    x = np.array([0.3, -1.7, 100.0, 3.3, 1e6], np.float32)
    np.save(tmp_path / "x.npy", x)
    assert sim_cli.main(["--model", str(om), "--input", str(tmp_path / "x.npy"), "--output", str(tmp_path / "o")]) == 0
    capsys.readouterr()
    ref = _reference(model, {"x": x})
    for name, dtype in (("f8", ml_dtypes.float8_e4m3fnuz), ("e5", ml_dtypes.float8_e5m2fnuz), ("q", ml_dtypes.uint4)):
        got = np.load(tmp_path / "o" / f"{name}.npy")
        assert got.dtype == np.uint8
        assert np.array_equal(got, np.asarray(ref[name]).view(np.uint8)), name
        assert np.asarray(ref[name]).dtype == np.dtype(dtype)
    assert np.load(tmp_path / "o" / "e5.npy")[4] == 0x80            # no saturation: 1e6 -> NaN (FNUZ's 0x80)
    for name in ("back", "dq"):
        np.testing.assert_array_equal(np.load(tmp_path / "o" / f"{name}.npy"), ref[name])


def test_atc_sim_reads_storage_type_inputs_and_refuses_bad_nibbles(tmp_path, capsys):
    graph = helper.make_graph([helper.make_node("Cast", ["q"], ["f"], to=TensorProto.FLOAT),
                               helper.make_node("Cast", ["e"], ["g"], to=TensorProto.FLOAT)], "u",
                              [helper.make_tensor_value_info("q", TensorProto.UINT4, [4]),
                               helper.make_tensor_value_info("e", TensorProto.FLOAT8E4M3FNUZ, [4])],
                              [helper.make_tensor_value_info("f", TensorProto.FLOAT, [4]),
                               helper.make_tensor_value_info("g", TensorProto.FLOAT, [4])])
    model = _save(tmp_path, graph, "u4")
    assert cli.main([f"--model={model}", "--framework=5", f"--output={tmp_path / 'u4'}", "--soc_version=Ascend910"]) == 0
    q = np.array([0, 3, 9, 15], np.uint8)
    e = np.array([0x00, 0x40, 0x80, 0xC8], np.uint8)          # 0, 1.0 (bias 8), NaN (FNUZ's only), -2.0
    np.save(tmp_path / "q.npy", q)
    np.save(tmp_path / "e.npy", e.view(ml_dtypes.float8_e4m3fnuz))   # numpy's void form: V1
    inputs = f"{tmp_path / 'q.npy'},{tmp_path / 'e.npy'}"
    assert sim_cli.main(["--model", str(tmp_path / "u4.om"), "--input", inputs, "--output", str(tmp_path / "o")]) == 0
    np.testing.assert_array_equal(np.load(tmp_path / "o" / "f.npy"), [0, 3, 9, 15])
    np.testing.assert_array_equal(np.load(tmp_path / "o" / "g.npy"), [0, 1.0, np.nan, -2.0])
    np.save(tmp_path / "q.npy", np.array([0, 3, 16, 15], np.uint8))          # 16 is no uint4
    assert sim_cli.main(["--model", str(tmp_path / "u4.om"), "--input", inputs]) != 0
    out = capsys.readouterr().out
    assert "E10001" in out and "one value 0..15 a byte" in out
    (tmp_path / "q.bin").write_bytes(bytes([0, 3, 16, 15]))                    # the same in a raw .bin
    (tmp_path / "e.bin").write_bytes(e.tobytes())
    assert sim_cli.main(["--model", str(tmp_path / "u4.om"), "--input",
                         f"{tmp_path / 'q.bin'},{tmp_path / 'e.bin'}"]) != 0
    assert "one value 0..15 a byte" in capsys.readouterr().out
    (tmp_path / "q.bin").write_bytes(q.tobytes())
    assert sim_cli.main(["--model", str(tmp_path / "u4.om"), "--input", f"{tmp_path / 'q.bin'},{tmp_path / 'e.bin'}",
                         "--output", str(tmp_path / "ob")]) == 0
    np.testing.assert_array_equal(np.load(tmp_path / "ob" / "g.npy"), [0, 1.0, np.nan, -2.0])
    np.save(tmp_path / "q.npy", np.array([0, 3, 6, 15], np.int32))           # a wider type is not the bits
    assert sim_cli.main(["--model", str(tmp_path / "u4.om"), "--input", inputs]) != 0
    assert "bit patterns" in capsys.readouterr().out


# ---------------------------------------------------------------- the conversions themselves

def _reference_node(node, in_type, out_type, x, *inits):
    from onnx.reference import ReferenceEvaluator
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", in_type, [None])],
                              [helper.make_tensor_value_info("y", out_type, [None])], list(inits))
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)])
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")
        return np.asarray(ReferenceEvaluator(model).run(None, {"x": x})[0])


def _probe_floats() -> np.ndarray:
    """Every float16 value, and float32 values across the float8 ranges, their edges and beyond."""
    every_half = np.arange(1 << 16, dtype=np.uint16).view(np.float16).astype(np.float32)
    rng = np.random.default_rng(0)
    wide = rng.standard_normal(20000).astype(np.float32) * rng.choice(
        np.float32([1e-5, 1e-2, 1, 30, 300, 6e4, 1e6]), 20000)
    return np.concatenate([every_half, wide, np.float32([np.inf, -np.inf, np.nan, 0, -0.0, 3e38, -3e38])])


@pytest.mark.parametrize("dtype", FNUZ + (ml_dtypes.uint4,) + GE_TYPED)
@pytest.mark.parametrize("saturate", [1, 0])
def test_cast_is_bit_exact_with_onnx_reference(dtype, saturate):
    if dtype in NIBBLES and not saturate:
        pytest.skip("saturate applies to float8 targets only")
    x = _probe_floats()
    with np.errstate(over="ignore"):
        half = x.astype(np.float16)          # beyond float16: infinities, which Cast must handle too
    for source in (x, half):
        in_type = TensorProto.FLOAT if source.dtype == np.float32 else TensorProto.FLOAT16
        ref = _reference_node(helper.make_node("Cast", ["x"], ["y"], to=ONNX_TYPE[dtype], saturate=saturate),
                              in_type, ONNX_TYPE[dtype], source)
        got = convert(source, dtype, bool(saturate))
        assert got.dtype == np.dtype(dtype)
        assert np.array_equal(got.view(np.uint8), ref.view(np.uint8))
        back = _reference_node(helper.make_node("Cast", ["x"], ["y"], to=in_type), ONNX_TYPE[dtype], in_type, ref)
        np.testing.assert_array_equal(convert(ref, source.dtype), back)


@pytest.mark.parametrize("dtype", FNUZ + (ml_dtypes.uint4,) + GE_TYPED)
def test_quantize_linear_is_bit_exact_with_onnx_reference(dtype):
    x = _probe_floats()
    with np.errstate(all="ignore"):      # x / scale beyond float32: the reference casts inf to uint4 as 0,
        x = x[np.isfinite(x / np.float32(0.37))]    # ONNX's spec (and we) saturate it to 15
    zero = 7 if dtype == ml_dtypes.uint4 else -3 if dtype == ml_dtypes.int4 else 0
    scale = helper.make_tensor("s", TensorProto.FLOAT, [], [0.37])
    zp = helper.make_tensor("z", ONNX_TYPE[dtype], [], [zero])
    ref = _reference_node(helper.make_node("QuantizeLinear", ["x", "s", "z"], ["y"]), TensorProto.FLOAT,
                          ONNX_TYPE[dtype], x, scale, zp)
    got = quantize(x, np.float32(0.37), zero, np.dtype(dtype))
    assert np.array_equal(got.view(np.uint8), ref.view(np.uint8))


# ---------------------------------------------------------------- string tensors through other ops

def _vi(name, elem, shape):
    return helper.make_tensor_value_info(name, elem, shape)


_S = TensorProto.STRING
STRING_GRAPHS = {
    "concat_transpose": ([helper.make_node("Concat", ["x", "x"], ["c"], axis=0),
                          helper.make_node("Transpose", ["c"], ["y"], perm=[1, 0])], [_vi("y", _S, [3, 4])], []),
    "gather_reshape": ([helper.make_node("Gather", ["x", "i"], ["g"], axis=1),
                        helper.make_node("Reshape", ["g", "s"], ["y"])], [_vi("y", _S, [4])],
                       [helper.make_tensor("i", TensorProto.INT64, [2], [2, 0]),
                        helper.make_tensor("s", TensorProto.INT64, [1], [4])]),
    "equal_where": ([helper.make_node("Constant", [], ["k"], value_strings=["a", "dd", "zz"]),
                     helper.make_node("Equal", ["x", "k"], ["m"]),
                     helper.make_node("Where", ["m", "x", "z"], ["y"])], [_vi("y", _S, [2, 3])],
                    [helper.make_tensor("z", _S, [], [b"-"])]),
    "unique": ([helper.make_node("Unique", ["x"], ["y"], sorted=1)], [_vi("y", _S, [None])], []),
}


@pytest.mark.parametrize("name", sorted(STRING_GRAPHS))
def test_string_tensors_through_registry_ops_match_onnxruntime(name):
    import onnxruntime as ort
    import conformance
    nodes, outputs, inits = STRING_GRAPHS[name]
    graph = helper.make_graph(nodes, name, [_vi("x", _S, [2, 3])], outputs, inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)])
    onnx.checker.check_model(model, full_check=True)
    x = strings("a", "bb", "zz", "dd", "é", "a", shape=(2, 3))
    ref = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})
    outcome = conformance.run_case(conformance.Case(name, model, (((x,), tuple(ref)),), 21))
    assert outcome.passed, outcome.detail
