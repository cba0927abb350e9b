"""A damaged .om never gets past the reader as a traceback: `atc --mode=1/6`, the .om importer
and `atc-sim` answer E10003 (or run), whatever the bytes, even with a re-sealed checksum."""
from __future__ import annotations

import random

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import cli as atc_cli
from ge.errors import AtcError
from codegen.om_import import load_om_graph
from om_format import attrs as om_attrs
from om_format.container import PartitionType, build_om, load_model_def, load_task_def, read_om
from simulator import cli as sim_cli
from simulator import runner

HUGE = [1 << 62, 1 << 40, 1 << 32, (1 << 63) - 1, -1, -(1 << 63), 0]


@pytest.fixture(scope="module")
def small_om(tmp_path_factory):
    """x[1,3,8,8] -> Conv(+bias) -> Relu -> Flatten -> MatMul -> Add: unfused, so each op is
    its own kernel with its own attributes."""
    root = tmp_path_factory.mktemp("om")
    rng = np.random.default_rng(0)
    init = [numpy_helper.from_array(rng.standard_normal(s).astype(np.float32), n)
            for n, s in (("w", (4, 3, 3, 3)), ("b", (4,)), ("m", (144, 5)), ("c", (5,)))]
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["conv"], name="conv", pads=[0, 0, 0, 0]),
             helper.make_node("Relu", ["conv"], ["relu"], name="relu"),
             helper.make_node("Flatten", ["relu"], ["flat"], name="flat"),
             helper.make_node("MatMul", ["flat", "m"], ["mm"], name="mm"),
             helper.make_node("Add", ["mm", "c"], ["y"], name="add")]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 5])], init)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    onnx_path = root / "small.onnx"
    onnx_path.write_bytes(model.SerializeToString())
    switch = root / "off.json"
    switch.write_text('{"Switch": {"GraphFusion": {"ALL": "off"}, "UBFusion": {"ALL": "off"}}}')
    out = root / "small"
    assert atc_cli.main([f"--model={onnx_path}", "--framework=5", f"--output={out}", "--soc_version=Ascend910",
                         f"--fusion_switch_file={switch}", "--precision_mode=force_fp32"]) == 0
    return str(out) + ".om"


def _rebuild(om, model_def=None, tasks=None) -> bytes:
    parts = dict(om.partitions)
    if model_def is not None:
        parts[PartitionType.MODEL_DEF] = model_def.SerializeToString()
    if tasks is not None:
        parts[PartitionType.TASK_INFO] = tasks.SerializeToString()
    return build_om(parts, name="fuzz", ops=1, platform_version="Ascend910")


def _op(model_def, name):
    return next(op for op in model_def.graph[0].op if op.name == name)


def _every_consumer(path):
    """Each reader of an .om: returns the errors' codes; any other exception fails the test."""
    codes = []
    for step in (lambda: load_om_graph(path),
                 lambda: __import__("atc_py.om_json", fromlist=["x"]).om_to_dict(path),
                 lambda: __import__("atc_py.om_json", fromlist=["x"]).model_info(path),
                 lambda: _simulate(path)):
        try:
            step()
        except AtcError as err:
            codes.append(err.code)
    return codes


def _simulate(path):
    model = runner.load_model(path, "Ascend910")
    runner.run(model, runner.random_inputs(model.graph), loop=1, warmup_count=0)


# --------------------------------------------------------------------------- directed damage

def _drop_netoutput(md):
    ops = md.graph[0].op
    del ops[[op.type for op in ops].index("NetOutput")]


def _missing_source(md):
    _op(md, "relu").input[0] = "ghost:0"


def _wrong_output_index(md):
    _op(md, "relu").input[0] = "conv:7"


def _unknown_type(md):
    _op(md, "relu").type = "NoSuchKernel"


def _const_beyond_weights(md):
    const = next(op for op in md.graph[0].op if op.type == "Const")
    const.attr["value"].t.desc.weight_size = 1 << 40
    const.attr["value"].t.data = b""


def _const_huge_dims(md):
    const = next(op for op in md.graph[0].op if op.type == "Const")
    const.attr["value"].t.desc.shape.dim[:] = [1 << 32, 1 << 32]
    const.attr["value"].t.data = b""
    const.attr["value"].t.desc.weight_size = 0


def _data_huge_dims(md):
    data = next(op for op in md.graph[0].op if op.type == "Data")
    data.output_desc[0].shape.dim[:] = [1 << 40, 1 << 40]


def _string_where_conv_wants_ints(md):
    _op(md, "conv").attr["pads"].CopyFrom(om_attrs.to_attr("abc"))


def _conv_output_shape_lies(md):
    _op(md, "conv").output_desc[0].shape.dim[2] = 5


def _compute_dtype_not_float(md):
    _op(md, "conv").attr["_compute_dtype"].CopyFrom(om_attrs.to_attr("int64"))


def _compute_dtype_tensor(md):
    _op(md, "conv").attr["_compute_dtype"].CopyFrom(om_attrs.to_attr(np.zeros(3, np.float32)))


def _bad_input_slots(md):
    _op(md, "conv").attr["_input_slots"].CopyFrom(om_attrs.to_attr(["a", "b"]))


def _provenance_of_wrong_kind(md):
    _op(md, "relu").attr["original_op_names"].CopyFrom(om_attrs.to_attr(np.zeros(2, np.float32)))


def _no_graph(md):
    del md.graph[:]


DAMAGE = [_drop_netoutput, _missing_source, _wrong_output_index, _unknown_type, _const_beyond_weights,
          _const_huge_dims, _data_huge_dims, _string_where_conv_wants_ints, _conv_output_shape_lies,
          _compute_dtype_not_float, _compute_dtype_tensor, _bad_input_slots, _provenance_of_wrong_kind,
          _no_graph]


@pytest.mark.parametrize("damage", DAMAGE, ids=lambda f: f.__name__.strip("_"))
def test_damaged_model_def_is_e10003_everywhere(small_om, tmp_path, capsys, damage):
    om = read_om(small_om)
    md = load_model_def(om)
    damage(md)
    path = tmp_path / "bad.om"
    path.write_bytes(_rebuild(om, md))
    with pytest.raises(AtcError) as err:
        load_om_graph(str(path))
    assert err.value.code == "E10003", err.value.render()
    assert sim_cli.main(["--model", str(path)]) == sim_cli.EXIT_ERROR
    text = capsys.readouterr().out
    assert "[ERROR] E10003" in text and "Traceback" not in text
    for mode in ("1", "6"):   # these read the container and ModelDef only: success or E10003
        rc = atc_cli.main([f"--mode={mode}", f"--om={path}", f"--json={tmp_path / 'x.json'}"])
        text = capsys.readouterr().out
        assert "Traceback" not in text and "E19999" not in text, text
        assert rc == 0 or "E10003" in text, text


def test_task_list_naming_a_missing_op(small_om, tmp_path):
    om = read_om(small_om)
    tasks = load_task_def(om)
    tasks.task[0].op_name = "ghost"
    path = tmp_path / "bad.om"
    path.write_bytes(_rebuild(om, tasks=tasks))
    with pytest.raises(AtcError) as err:
        load_om_graph(str(path))
    assert err.value.code == "E10003"


def test_kernel_failing_on_recorded_attrs_is_e10003_naming_it(tmp_path, capsys):
    """An attribute the shape rule does not read (Gemm's alpha) can still break the kernel at
    run time: atc-sim says E10003 and names the kernel, not E19999."""
    w = numpy_helper.from_array(np.ones((4, 2), np.float32), "w")
    graph = helper.make_graph([helper.make_node("Gemm", ["x", "w"], ["y"], name="gemm", alpha=2.0)], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3, 4])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [3, 2])], [w])
    onnx_path = tmp_path / "gemm.onnx"
    onnx_path.write_bytes(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString())
    off = tmp_path / "off.json"          # no fusion (nor its canonical MatMul form): the Gemm stays a Gemm
    off.write_text('{"Switch": {"GraphFusion": {"ALL": "off"}, "UBFusion": {"ALL": "off"}}}')
    assert atc_cli.main([f"--model={onnx_path}", "--framework=5", f"--output={tmp_path / 'gemm'}",
                         "--soc_version=Ascend910", f"--fusion_switch_file={off}"]) == 0
    om = read_om(str(tmp_path / "gemm.om"))
    md = load_model_def(om)
    _op(md, "gemm").attr["alpha"].CopyFrom(om_attrs.to_attr("abc"))
    path = tmp_path / "bad.om"
    path.write_bytes(_rebuild(om, md))
    capsys.readouterr()
    assert sim_cli.main(["--model", str(path)]) == sim_cli.EXIT_ERROR
    text = capsys.readouterr().out
    assert "[ERROR] E10003" in text and "Kernel [gemm]" in text and "Traceback" not in text, text


# --------------------------------------------------------------------------- fuzz

def _mutate(md, tasks, rng):
    ops = md.graph[0].op
    op = rng.choice(ops)
    kind = rng.randrange(10)
    if kind == 0:
        del ops[rng.randrange(len(ops))]
    elif kind == 1 and op.input:
        src = op.input[0].split(":")[0]
        op.input[rng.randrange(len(op.input))] = rng.choice(["ghost:0", f"{src}:9", f"{src}:-1", src, ""])
    elif kind == 2:
        op.type = rng.choice(["Bogus", "Data", "Const", "NetOutput", rng.choice(ops).type])
    elif kind == 3:
        descs = list(op.output_desc)
        if descs:
            desc = rng.choice(descs)
            if desc.shape.dim and rng.random() < 0.7:
                desc.shape.dim[rng.randrange(len(desc.shape.dim))] = rng.choice(HUGE)
            else:
                desc.dtype = rng.randrange(40)
    elif kind == 4 and op.attr:
        key = rng.choice(sorted(op.attr))
        value = rng.choice(["abc", [1 << 62, -5], ["x"], [], np.zeros((2, 2), np.float32), 1.5,
                            rng.choice(HUGE), [[1, 2], [3]]])
        op.attr[key].CopyFrom(om_attrs.to_attr(value))
    elif kind == 5 and op.attr:
        del op.attr[rng.choice(sorted(op.attr))]
    elif kind == 6:
        op.name = rng.choice(ops).name
    elif kind == 7:
        i, j = rng.randrange(len(ops)), rng.randrange(len(ops))
        a, b = type(op)(), type(op)()
        a.CopyFrom(ops[i]); b.CopyFrom(ops[j])
        ops[i].CopyFrom(b); ops[j].CopyFrom(a)
    elif kind == 8:
        consts = [o for o in ops if o.type == "Const"]
        if consts:
            t = rng.choice(consts).attr["value"].t
            setattr(t.desc, rng.choice(["weight_size", "data_offset"]), rng.choice(HUGE))
            t.data = b""
    elif kind == 9 and tasks.task:
        rng.choice(tasks.task).op_name = rng.choice(["ghost", rng.choice(ops).name])


def test_seeded_fuzz_is_coded_error_or_success(small_om, tmp_path):
    """Structured mutations of the ModelDef/TaskDef and raw byte flips, each re-sealed so the
    damage reaches the protobuf and graph layers: every reader raises AtcError E10003 or works."""
    om = read_om(small_om)
    rng = random.Random(1234)
    raw = bytearray(_rebuild(om))
    table = 256 + 8 + 24 * len(om.partitions)
    model_def_size = len(om.partitions[PartitionType.MODEL_DEF])
    path = str(tmp_path / "fuzz.om")
    seen = set()
    for i in range(300):
        if i % 3 == 2:   # byte flips inside the ModelDef partition
            data = bytearray(raw)
            for _ in range(rng.choice([1, 2, 4])):
                data[table + rng.randrange(model_def_size)] ^= 1 << rng.randrange(8)
            parts = dict(om.partitions)
            parts[PartitionType.MODEL_DEF] = bytes(data[table:table + model_def_size])
            blob = build_om(parts, name="fuzz", ops=1, platform_version="Ascend910")
        else:
            md, tasks = load_model_def(om), load_task_def(om)
            for _ in range(rng.choice([1, 1, 2, 3])):
                if md.graph and md.graph[0].op:
                    _mutate(md, tasks, rng)
            blob = _rebuild(om, md, tasks)
        with open(path, "wb") as f:
            f.write(blob)
        codes = _every_consumer(path)
        assert set(codes) <= {"E10003"}, (i, codes)
        seen.update(codes)
    assert seen == {"E10003"}   # the fuzz did reach the checks
