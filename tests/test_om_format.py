"""Tests of om_format: schema, attributes, the container, and Netron opening our files."""
import hashlib
import os
import re
import struct

import numpy as np
import pytest

from ge.errors import AtcError
from codegen.om_import import open_om
from om_format import schema
from om_format.attrs import (from_attr, from_ge_dtype, get_attrs, set_attrs, tensor_desc,
                             tensor_from_def, to_attr, to_ge_dtype)
from om_format.container import (HEADER_SIZE, OmHeader, PartitionType, build_om,
                                 load_model_def, load_task_def, read_om, write_om)
from om_format.schema import (AttrDef, DataType, ModelDef, ModelTaskDef, TaskDef,
                              TensorDescriptor, serialize)
from om_format.errors import OmFormatError
from om_format.weights import WeightsBuilder

from helpers import netron_dir, netron_open

HERE = os.path.dirname(os.path.abspath(__file__))
OM_DIR = os.path.join(os.path.dirname(HERE), "om_format")


# ---------------------------------------------------------------- schema

def test_committed_proto_files_are_generated_from_schema():
    for spec in (schema.GE_FILE, schema.TASK_FILE):
        with open(os.path.join(OM_DIR, spec["name"]), encoding="utf-8") as f:
            assert f.read() == schema.proto_text(spec), "regenerate with python -m om_format.schema"


def _field_numbers(descriptor, prefix=""):
    out = {}
    for f in descriptor.fields:
        out[(prefix + descriptor.name, f.number)] = f.name
    for nested in descriptor.nested_types:
        if not nested.GetOptions().map_entry:
            out.update(_field_numbers(nested, prefix + descriptor.name + "."))
    return out




def test_field_numbers_match_netron_om_proto():
    """Independent check: Netron's om-proto.js decodes every ge.proto field the same way."""
    with open(os.path.join(netron_dir(), "om-proto.js"), encoding="utf-8") as f:
        text = f.read()
    theirs = {}
    for block in re.split(r"\n(?=ge\.proto\.[\w.]+ = class)", text):
        head = re.match(r"ge\.proto\.([\w.]+) = class", block)
        if not head:
            continue
        decode = block.split("static decodeText")[0]
        for m in re.finditer(r"case (\d+):\s+(?:message\.(\w+)|reader\.entry\(message\.(\w+))", decode):
            theirs[(head.group(1), int(m.group(1)))] = m.group(2) or m.group(3)
    ours = {}
    for name in ("ModelDef", "GraphDef", "OpDef", "AttrDef", "NamedAttrs", "ShapeDef",
                 "TensorDescriptor", "TensorDef"):
        ours.update(_field_numbers(getattr(schema, name).DESCRIPTOR))
    assert len(theirs) > 75
    assert ours == theirs
    enum_values = dict(re.findall(r'"(DT_\w+)": (\d+)', text))
    ours = {v.name: v.number for v in schema.POOL.FindEnumTypeByName("ge.proto.DataType").values}
    # Netron's table stops at DT_UINT2; GE's newer types (float8, ...) follow it in ours
    assert {k: int(v) for k, v in enum_values.items()} == {k: v for k, v in ours.items()
                                                           if v < schema.NETRON_DATA_TYPES}
    assert len(enum_values) == schema.NETRON_DATA_TYPES


def test_task_def_roundtrip_and_extension_numbers():
    tasks = ModelTaskDef(version="1.0", stream_num=1)
    t = tasks.task.add(id=0, type=0, op_name="conv1", op_type="Conv2D", kernel_type="AI_CORE",
                       fusion_pass="ConvBatchnormFusionPass", compute_dtype=DataType.DT_FLOAT16)
    t.origin_op_names.extend(["Conv_0", "BatchNormalization_1"])
    t.input_desc.add().CopyFrom(tensor_desc("x", np.float16, (1, 3, 4, 4), "NCHW"))
    t.attr["strides"].CopyFrom(to_attr([1, 1]))
    back = ModelTaskDef.FromString(serialize(tasks))
    assert back == tasks
    assert list(back.task[0].origin_op_names) == ["Conv_0", "BatchNormalization_1"]
    ext = [f for f in TaskDef.DESCRIPTOR.fields if f.name not in ("id", "type", "stream_id", "event_id")]
    assert all(f.number >= 100 for f in ext)


# ---------------------------------------------------------------- attributes

@pytest.mark.parametrize("value", [
    True, False, 0, -7, 2 ** 62, 1.5, -0.25, "", "NCHW", "héllo", b"\x00\xff", [], [1, 2, 3],
    [1.5, 2.0], [True, False], ["a", "bc"], [b"x", b""], [[1, 2], [], [3]], [[0.5], [1.0, 2.0]],
    [np.dtype(np.float16), np.dtype(np.int32)],
])
def test_attr_roundtrip_exact(value):
    attr = to_attr(value)
    back = from_attr(AttrDef.FromString(attr.SerializeToString()))
    assert back == value and type(back) is type(value)
    if isinstance(value, list) and value and not isinstance(value[0], list):
        assert type(back[0]) is type(value[0])


def test_attr_wire_choices():
    assert to_attr(True).WhichOneof("value") == "b"
    assert to_attr(np.int64(3)).WhichOneof("value") == "i"
    assert to_attr("x").s == b"x"
    assert to_attr(b"x").WhichOneof("value") == "bt"
    assert to_attr(np.float32).dt == DataType.DT_FLOAT
    assert to_attr([]).list.val_type == schema.ListValueType.VT_LIST_NONE
    assert to_attr([]).WhichOneof("value") == "list"
    assert to_attr([1, 2.5]).list.f == [1.0, 2.5]
    assert to_attr([1, 2]).list.val_type == schema.ListValueType.VT_LIST_INT
    assert from_attr(AttrDef()) is None
    nested = {"input_format": "RGB888_U8", "crop": True, "mean_chn_0": 104, "var_reci_chn_0": 0.5}
    assert to_attr(nested).WhichOneof("value") == "func"             # GE's NamedAttrs (the Aipp op's `aipp`)
    assert from_attr(AttrDef.FromString(to_attr(nested).SerializeToString())) == nested
    with pytest.raises(TypeError):
        to_attr({1: 1})
    with pytest.raises(TypeError):
        to_attr([1, "a"])


@pytest.mark.parametrize("dtype", [np.float32, np.float16, np.float64, np.int8, np.uint8, np.int16,
                                   np.uint16, np.int32, np.int64, np.uint32, np.uint64, np.bool_])
def test_tensor_attr_roundtrip(dtype):
    rng = np.random.default_rng(0)
    arr = (rng.standard_normal((2, 3, 4)) * 50).astype(dtype)
    attr = AttrDef.FromString(to_attr(arr).SerializeToString())
    assert list(attr.t.desc.shape.dim) == [2, 3, 4]
    assert attr.t.data == arr.astype(np.dtype(dtype).newbyteorder("<")).tobytes()
    back = from_attr(attr)
    assert back.dtype == np.dtype(dtype) and back.shape == arr.shape
    np.testing.assert_array_equal(back, arr)
    assert from_ge_dtype(to_ge_dtype(dtype)) == np.dtype(dtype)


def test_tensor_attr_scalar_big_endian_and_list():
    big = np.arange(6, dtype=">i4").reshape(2, 3)
    np.testing.assert_array_equal(from_attr(to_attr(big)), big)
    assert to_attr(big).t.data == np.arange(6, dtype="<i4").tobytes()
    scalar = np.array(3.5, dtype=np.float32)
    back = from_attr(AttrDef.FromString(to_attr(scalar).SerializeToString()))
    assert back.shape == () and back == 3.5
    arrs = [np.ones(2, np.float32), np.zeros((1, 2), np.int8)]
    out = from_attr(to_attr(arrs))
    assert [a.dtype for a in out] == [np.float32, np.int8]


def test_bfloat16_optional():
    ml = pytest.importorskip("ml_dtypes")
    arr = np.array([1.0, -2.5, 3.0], dtype=ml.bfloat16)
    assert to_ge_dtype(arr.dtype) == DataType.DT_BF16 == 27
    np.testing.assert_array_equal(from_attr(to_attr(arr)), arr)


def test_dtype_errors():
    with pytest.raises(ValueError):
        to_ge_dtype(np.dtype("U3"))
    with pytest.raises(OmFormatError) as e:
        from_ge_dtype(DataType.DT_RESOURCE)
    assert "DT_RESOURCE" in e.value.message


def test_tensor_from_weights_partition_and_bounds():
    wb = WeightsBuilder()
    wb.add(np.ones(3, np.int8))
    arr = np.arange(12, dtype=np.float32).reshape(3, 4)
    offset, size = wb.add(arr)
    attr = AttrDef()
    attr.t.desc.CopyFrom(tensor_desc("w", np.float32, (3, 4)))
    attr.t.desc.data_offset, attr.t.desc.weight_size = offset, size
    np.testing.assert_array_equal(from_attr(attr, wb.bytes()), arr)
    with pytest.raises(OmFormatError):
        from_attr(attr)  # weights not given
    attr.t.desc.data_offset = len(wb) - 8
    with pytest.raises(OmFormatError, match="outside"):
        from_attr(attr, wb.bytes())


def test_set_get_attrs_on_op():
    op = schema.OpDef(name="c", type="Conv2D")
    values = {"strides": [1, 1, 2, 2], "data_format": "NCHW", "groups": 1, "relu_flag": True}
    set_attrs(op.attr, values)
    assert get_attrs(schema.OpDef.FromString(serialize(op)).attr) == dict(sorted(values.items()))


def test_tensor_desc_fields():
    d = tensor_desc("x", np.float16, (1, 3, 8, 8), "NCHW")
    assert (d.dtype, list(d.shape.dim), d.layout, d.size, d.real_dim_cnt) == (
        DataType.DT_FLOAT16, [1, 3, 8, 8], "NCHW", 384, 4)
    assert tensor_desc("y", DataType.DT_INT32, (-1, 4)).size == 0
    assert tensor_desc("s", np.float32, ()).HasField("shape")


# ---------------------------------------------------------------- weights layout

def test_weights_builder_alignment_and_dedup():
    wb = WeightsBuilder()
    a = np.arange(5, dtype=np.float32)
    assert wb.add(a) == (0, 20)
    assert wb.add(np.ones(3, np.int8)) == (64, 3)
    assert wb.add(a.copy()) == (0, 20)          # identical bytes share a slot
    assert wb.add(np.ones(1, np.int64)) == (128, 8)
    data = wb.bytes()
    assert len(data) == 136 and data[20:64] == b"\0" * 44
    assert data[0:20] == a.tobytes()
    nodedup = WeightsBuilder(dedup=False)
    nodedup.add(a)
    assert nodedup.add(a) == (64, 20)


# ---------------------------------------------------------------- container

PLATFORM = "Ascend910B2"


def _om(partitions=None, **kw):
    parts = partitions if partitions is not None else {
        PartitionType.MODEL_DEF: serialize(ModelDef(name="m")),
        PartitionType.WEIGHTS_DATA: b"w" * 13,
        PartitionType.TASK_INFO: serialize(ModelTaskDef(version="1")),
    }
    args = dict(name="m", ops=3, platform_version=PLATFORM)
    args.update(kw)
    return build_om(parts, **args)


def test_header_layout_exact():
    data = _om()
    assert data[:4] == b"IMOD"
    magic, headsize, version = struct.unpack_from("<III", data, 0)
    assert (magic, headsize, version) == (0x444F4D49, 256, 0x20000000)
    assert data[12:76] == hashlib.sha256(data[256:]).digest() + b"\0" * 32
    assert struct.unpack_from("<I", data, 76)[0] == len(data) - 256
    assert data[80:84] == b"\0\0\0\0"                       # not encrypted, CHECK, IR, offline
    assert data[84:116] == b"m" + b"\0" * 31
    assert struct.unpack_from("<I", data, 116)[0] == 3
    assert struct.unpack_from("<I", data, 156)[0] == 1        # model_num
    assert data[160:180] == PLATFORM.encode() + b"\0" * (20 - len(PLATFORM))
    assert struct.unpack_from("<Q", data, 184)[0] == len(data) - 256
    assert data[193] == 0
    assert OmHeader.unpack(data).pack() == data[:256]
    assert _om(is_dynamic=True)[193] == 1


def test_partition_table_layout():
    data = _om()
    num, pad = struct.unpack_from("<II", data, 256)
    assert (num, pad) == (3, 0)
    base = 256 + 8 + 24 * num
    model = serialize(ModelDef(name="m"))
    entries = [struct.unpack_from("<IIQQ", data, 264 + 24 * i) for i in range(num)]
    assert [e[0] for e in entries] == [0, 1, 2] and all(e[1] == 0 for e in entries)
    assert entries[0][2:] == (0, len(model))
    assert all(e[2] % 8 == 0 for e in entries)
    assert data[base:base + len(model)] == model
    off, size = entries[1][2:]
    assert data[base + off:base + off + size] == b"w" * 13
    assert (len(data) - base) % 8 == 0


def test_roundtrip_and_deterministic(tmp_path):
    parts = {PartitionType.TASK_INFO: b"tasks", 0: serialize(ModelDef(name="m")), 1: b"abc"}
    p1, p2 = tmp_path / "a.om", tmp_path / "b.om"
    write_om(p1, parts, name="model", ops=2, platform_version=PLATFORM)
    write_om(p2, dict(reversed(list(parts.items()))), name="model", ops=2, platform_version=PLATFORM)
    assert p1.read_bytes() == p2.read_bytes()
    assert sorted(os.listdir(tmp_path)) == ["a.om", "b.om"]   # no temp files left
    om = read_om(p1)
    assert om.partitions == {0: parts[0], 1: b"abc", 2: b"tasks"}
    assert (om.header.name, om.header.ops, om.header.platform_version) == ("model", 2, PLATFORM)
    assert load_model_def(om).name == "m"
    assert read_om(p1.read_bytes()).partitions == om.partitions


def test_empty_weights_added_and_long_names_cut():
    om = read_om(_om({0: b""}, name="x" * 40 + "é", platform_version="p" * 30))
    assert om.partitions == {0: b"", 1: b""}
    assert om.header.name == "x" * 31 and om.header.platform_version == "p" * 19
    om = read_om(_om({0: b""}, name="a" * 30 + "é"))   # é would not fit: cut on a char boundary
    assert om.header.name == "a" * 30


def test_write_om_failure_leaves_no_temp(tmp_path):
    with pytest.raises(ValueError):
        write_om(tmp_path / "x.om", {1: b"w"}, name="m", ops=0, platform_version="")
    with pytest.raises(ValueError):
        write_om(tmp_path / "x.om", {0: b"", 5: b"so"}, name="m", ops=0, platform_version="")
    assert os.listdir(tmp_path) == []


def test_task_and_model_def_loading():
    tasks = ModelTaskDef(version="1")
    tasks.task.add(id=3, op_name="relu1")
    om = read_om(_om({0: serialize(ModelDef(name="m")), 2: serialize(tasks)}))
    assert load_task_def(om) == tasks
    assert load_task_def(read_om(_om({0: b""}))) is None
    with pytest.raises(OmFormatError, match="not a ge.proto.ModelDef"):
        load_model_def(read_om(_om({0: b"\xff\xff\xff"})))


def _reseal(data: bytearray) -> bytes:
    """Fix length and checksum after tampering, so the intended check is the one that fires."""
    payload = bytes(data[HEADER_SIZE:])
    struct.pack_into("<I", data, 76, len(payload))
    struct.pack_into("<Q", data, 184, len(payload))
    data[12:76] = hashlib.sha256(payload).digest().ljust(64, b"\0")
    return bytes(data)


def _entry(data, i):
    return 264 + 24 * i


def _tamper_entry(i, **fields):
    def apply(d):
        t, pad, off, size = struct.unpack_from("<IIQQ", d, _entry(d, i))
        vals = dict(type=t, pad=pad, off=off, size=size)
        vals.update(fields)
        struct.pack_into("<IIQQ", d, _entry(d, i), vals["type"], vals["pad"], vals["off"], vals["size"])
        return _reseal(d)
    return apply


def _set_num(n):
    def apply(d):
        struct.pack_into("<I", d, 256, n)
        return _reseal(d)
    return apply


def _overlap(d):
    off0, size0 = struct.unpack_from("<QQ", d, _entry(d, 0) + 8)
    return _tamper_entry(1, off=off0 + size0 - 1)(d)


CASES = {
    "truncated header": (lambda d: bytes(d[:200]), "smaller than the 256-byte"),
    "empty file": (lambda d: b"", "is 0 bytes"),
    "bad magic": (lambda d: b"XMOD" + bytes(d[4:]), "magic"),
    "bad headsize": (lambda d: bytes(d[:4]) + struct.pack("<I", 128) + bytes(d[8:]), "128-byte header"),
    "old version": (lambda d: bytes(d[:8]) + struct.pack("<I", 0x10000000) + bytes(d[12:]), "version"),
    "encrypted": (lambda d: bytes(d[:80]) + b"\x01" + bytes(d[81:]), "encrypted"),
    "truncated file": (lambda d: bytes(d[:-5]), "length"),
    "extended file": (lambda d: bytes(d) + b"\0" * 8, "length"),
    "wrong checksum": (lambda d: bytes(d[:-1]) + bytes([d[-1] ^ 1]), "checksum"),
    "bad is_checksum": (lambda d: bytes(d[:81]) + b"\x07" + bytes(d[82:]), "is_checksum"),
    "huge num": (_set_num(0xFFFFFFFF), "4294967295 partitions"),
    "zero num": (_set_num(0), "0 partitions"),
    "table past end": (_set_num(32), "needs 776 bytes"),
    "table pad": (lambda d: _reseal(bytearray(d[:260]) + b"\x01\0\0\0" + d[264:]), "padding"),
    "offset past end": (_tamper_entry(1, off=1 << 40), "runs past the end"),
    "size past end": (_tamper_entry(2, size=10 ** 6), "runs past the end"),
    "u64 wrap": (_tamper_entry(2, off=8, size=(1 << 64) - 8), "runs past the end"),
    "overlap": (_overlap, "overlap"),
    "duplicate type": (_tamper_entry(2, type=1), "two WEIGHTS_DATA"),
    "unknown type": (_tamper_entry(2, type=17), "unknown type 17"),
    "entry pad": (_tamper_entry(1, pad=5), "non-zero padding"),
    "no model def": (_tamper_entry(0, type=3), "no MODEL_DEF"),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_reader_rejects(case):
    tamper, expected = CASES[case]
    good = _om()
    read_om(good)  # sanity: the untouched file is fine
    with pytest.raises(OmFormatError) as e:
        read_om(tamper(bytearray(good)))
    assert expected in e.value.message, e.value.message
    with pytest.raises(AtcError) as coded:   # what a user of atc / atc-sim sees
        open_om(tamper(bytearray(good)))
    assert coded.value.code == "E10003" and expected in coded.value.message
    assert coded.value.solution and isinstance(coded.value.__cause__, OmFormatError)


def test_reader_unchecked_file_skips_checksum():
    d = bytearray(_om())
    d[81] = 1              # UNCHECK
    d[12:76] = b"\x55" * 64
    assert read_om(bytes(d)).header.is_checksum == 1


def test_reader_missing_file(tmp_path):
    with pytest.raises(AtcError) as e:
        open_om(tmp_path / "nope.om")
    assert e.value.code == "E10003" and "nope.om" in e.value.message


# ---------------------------------------------------------------- Netron

def _const(graph, name, array, weights=None):
    op = graph.op.add(name=name, type="Const")
    desc = tensor_desc(name, array.dtype, array.shape)
    if weights is not None:                           # stored in WEIGHTS_DATA
        desc.data_offset, desc.weight_size = weights.add(array)
        op.attr["value"].t.desc.CopyFrom(desc)
    else:                                             # stored inline in the TensorDef
        op.attr["value"].CopyFrom(to_attr(array))
    op.output_desc.add().CopyFrom(desc)
    return op


def _small_model():
    """Data -> Conv2D(weight in WEIGHTS_DATA, bias inline) -> Relu -> NetOutput."""
    rng = np.random.default_rng(1)
    weight = rng.standard_normal((4, 3, 3, 3)).astype(np.float32)
    bias = np.arange(4, dtype=np.float32)
    wb = WeightsBuilder()
    wb.add(np.full(5, 7, np.int8))                    # so the weight does not sit at offset 0
    model = ModelDef(name="small", version=1)
    g = model.graph.add(name="small_graph")
    g.input.append("data")
    g.output.append("output")
    x = tensor_desc("x", np.float32, (1, 3, 8, 8), "NCHW")
    y = tensor_desc("y", np.float32, (1, 4, 6, 6), "NCHW")
    data = g.op.add(name="data", type="Data")
    data.output_desc.add().CopyFrom(x)
    set_attrs(data.attr, {"index": 0})
    w_op = _const(g, "conv1_weight", weight, wb)
    b_op = _const(g, "conv1_bias", bias)
    conv = g.op.add(name="conv1", type="Conv2D")
    conv.input.extend(["data:0", "conv1_weight:0", "conv1_bias:0"])
    conv.input_desc.extend([x, w_op.output_desc[0], b_op.output_desc[0]])
    conv.output_desc.add().CopyFrom(y)
    set_attrs(conv.attr, {"strides": [1, 1, 1, 1], "pads": [0, 0, 0, 0], "data_format": "NCHW",
                          "original_op_names": ["Conv_0"]})
    relu = g.op.add(name="relu1", type="Relu")
    relu.input.append("conv1:0")
    relu.input_desc.add().CopyFrom(y)
    relu.output_desc.add().CopyFrom(y)
    out = g.op.add(name="output", type="NetOutput")
    out.input.extend(["relu1:0", "conv1:-1"])          # data edge and a control edge
    out.input_desc.add().CopyFrom(y)
    return model, wb, weight, bias


def test_netron_opens_our_om(tmp_path):
    model, wb, weight, bias = _small_model()
    path = tmp_path / "small.om"
    write_om(path, {PartitionType.MODEL_DEF: serialize(model), PartitionType.WEIGHTS_DATA: wb.bytes(),
                    PartitionType.TASK_INFO: serialize(ModelTaskDef(version="1"))},
             name="small", ops=len(model.graph[0].op), platform_version=PLATFORM)
    seen = netron_open(path)
    assert seen["format"] == "DaVinci OM"
    (graph,) = seen["graphs"]
    assert graph["name"] == "small_graph"
    nodes = {n["name"]: n for n in graph["nodes"]}
    # Const ops become initializers, not nodes
    assert [n["name"] for n in graph["nodes"]] == ["data", "conv1", "relu1", "output"]
    assert [nodes[k]["type"] for k in ("data", "conv1", "relu1", "output")] == ["Data", "Conv2D", "Relu", "NetOutput"]

    conv_in = {a["name"]: a["values"][0] for a in nodes["conv1"]["inputs"]}
    assert conv_in["input"]["name"] == "data:0"
    assert conv_in["input"]["type"] == {"dataType": "float32", "shape": [1, 3, 8, 8], "layout": "NCHW"}
    w = conv_in["weights"]["initializer"]
    assert w["type"]["dataType"] == "float32" and w["type"]["shape"] == [4, 3, 3, 3]
    assert w["data"] == weight.tobytes().hex()          # resolved from WEIGHTS_DATA at data_offset
    assert conv_in["bias"]["initializer"]["data"] == bias.tobytes().hex()   # inline TensorDef.data

    assert nodes["conv1"]["outputs"][0]["values"][0]["name"] == "conv1:0"
    assert nodes["conv1"]["outputs"][0]["values"][0]["type"]["shape"] == [1, 4, 6, 6]
    assert nodes["relu1"]["inputs"][0]["values"][0]["name"] == "conv1:0"
    assert nodes["relu1"]["outputs"][0]["values"][0]["type"]["dataType"] == "float32"
    assert nodes["output"]["inputs"][0]["values"][0]["name"] == "relu1:0"
    assert len(nodes["output"]["controlDependencies"]) == 1
    assert nodes["data"]["outputs"][0]["values"][0]["type"]["shape"] == [1, 3, 8, 8]

    attrs = {a["name"]: a for a in nodes["conv1"]["attributes"]}
    assert attrs["strides"]["value"] == [1, 1, 1, 1] and attrs["strides"]["type"] == "int64[]"
    assert attrs["data_format"]["value"] == "NCHW"
    assert "original_op_names" not in attrs              # Netron hides provenance


def test_netron_single_partition_and_relu_flag(tmp_path):
    """Only MODEL_DEF given: write_om adds an empty WEIGHTS_DATA so Netron's 32-bit table
    probe cannot misread the table as one empty model partition."""
    model = ModelDef(name="m")
    g = model.graph.add(name="g")
    x = tensor_desc("x", np.float16, (2, 3))
    a = g.op.add(name="a", type="Data")
    a.output_desc.add().CopyFrom(x)
    b = g.op.add(name="b", type="Conv2D")
    b.input.append("a:0")
    b.input_desc.add().CopyFrom(x)
    b.output_desc.add().CopyFrom(x)
    set_attrs(b.attr, {"relu_flag": True})
    path = tmp_path / "m.om"
    write_om(path, {0: serialize(model)}, name="m", ops=2, platform_version=PLATFORM)
    (graph,) = netron_open(path)["graphs"]
    assert [n["name"] for n in graph["nodes"]] == ["a", "b"]
    assert graph["nodes"][1]["chain"] == ["ReLU"]
    assert graph["nodes"][1]["outputs"][0]["values"][0]["type"]["dataType"] == "float16"


def test_tensor_from_def_rejects_wrong_byte_count():
    t = schema.TensorDef(data=b"\0" * 7)
    t.desc.CopyFrom(tensor_desc("bad", np.float32, (2,)))
    with pytest.raises(OmFormatError) as e:
        tensor_from_def(t)
    assert "7 data bytes" in e.value.message


def test_message_attrs_pass_through():
    td = tensor_desc("q", np.int32, (3,))
    assert from_attr(AttrDef.FromString(to_attr(td).SerializeToString())) == td
    assert isinstance(from_attr(to_attr(td)), TensorDescriptor)
    g = schema.GraphDef(name="body")
    assert from_attr(to_attr(g)) == g
