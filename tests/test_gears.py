"""atc's gears: --dynamic_batch_size, --dynamic_image_size, --dynamic_dims.  Each flag compiles
to GE's multi-batch layout (root graph with the shape-data input, MapIndex and Case; one
subgraph per gear), every gear runs and matches onnxruntime on its shape, Netron draws the
gear subgraphs, --mode=6 and --mode=1 list the gears, and bad gear flags get ATC's codes."""
from __future__ import annotations

import json

import numpy as np
import pytest

import atc_py
import gear_models
from codegen.gear_import import load_om_model
from codegen.om_import import open_om
from helpers import netron_open, run_ort
from om_format import attrs as om_attrs
from simulator.compare import compare_one
from simulator.session import InferSession
from test_atc_flags import atc, base, failed, work  # noqa: F401  (fixtures)

CASES = {   # flag: (model, --input_shape, gears, extra flags)
    "dynamic_batch_size": (gear_models.cnn, "x:-1,3,8,8", "1,2,4", []),
    "dynamic_image_size": (gear_models.cnn, "x:2,3,-1,-1", "8,8;16,12;6,10", []),
    "dynamic_dims": (gear_models.seq, "x:-1,-1,8;m:-1,4", "1,4,1;2,8,2;3,5,3", ["--input_format=ND"]),
}


def compile_gears(work, capsys, flag, *extra):
    make, shape, gears, flags = CASES[flag]
    onnx_path = work / f"{flag}.onnx"
    import onnx
    onnx.save(make(), onnx_path)
    rc, text = atc(capsys, *base(onnx_path, work / flag), f"--input_shape={shape}", f"--{flag}={gears}",
                   "--precision_mode=force_fp32", *flags, *extra)
    assert rc == 0, text
    return onnx_path, work / f"{flag}.om", text


@pytest.mark.parametrize("flag", sorted(CASES))
def test_every_gear_runs_and_matches_onnxruntime(work, capsys, flag):
    onnx_path, om, _ = compile_gears(work, capsys, flag)
    import onnx
    model = onnx.load(onnx_path)
    session = InferSession(om)
    gears = session.get_dynamic_gears()
    assert len(gears) == 3
    times = []
    for gear in gears:
        feeds = gear_models.feeds_for(gear["shapes"], seed=gear["index"])     # every input the gears change
        got = dict(zip(session.get_output_names(), session.infer(feeds)))
        assert session.model.gear == gear["index"]
        for name, ref in run_ort(model, feeds).items():
            check = compare_one(name, name, got[name], ref, "fp32")
            assert check.passed, (gear, name, check.describe())
        times.append(session.last_result.npu_time_ms["mean"])
    assert [g["index"] for g in session.summary()["gears"]] == [0, 1, 2]
    assert all(t > 0 for t in times)


def _root_and_subgraphs(om):
    model = open_om(om).model_def
    return model.graph[0], list(model.graph[1:])


def test_the_om_has_ge_multi_batch_layout(work, capsys):
    _, om, _ = compile_gears(work, capsys, "dynamic_batch_size")
    root, subgraphs = _root_and_subgraphs(om)
    assert [(op.name, op.type) for op in root.op] == [
        ("x", "Data"), ("ascend_mbatch_shape_data", "Data"), ("ascend_mbatch_shape_const", "Const"),
        ("ascend_mbatch_shape_mapindex", "MapIndex"), ("ascend_mbatch_shape_case", "Case"), ("NetOutput", "NetOutput")]
    ops = {op.name: op for op in root.op}
    assert list(ops["x"].output_desc[0].shape.dim) == [4, 3, 8, 8]          # the largest gear
    x_attrs = om_attrs.get_attrs(ops["x"].attr)
    assert x_attrs["_mbatch_origin_input_dims"] == [-1, 3, 8, 8] and x_attrs["index"] == 0
    shape_data = ops["ascend_mbatch_shape_data"]
    assert list(shape_data.output_desc[0].shape.dim) == [1] and shape_data.output_desc[0].dtype == 7   # DT_INT32
    assert om_attrs.get_attrs(shape_data.attr)["index"] == 1                                # the last input
    case = om_attrs.get_attrs(ops["ascend_mbatch_shape_case"].attr)
    assert case["_batch_num"] == 3 and case["mbatch_dynamic_type"] == 1
    assert [case[f"_pred_value_{i}"] for i in range(3)] == [[1], [2], [4]]
    assert case["user_designate_shape_order"] == ["x"]
    assert list(ops["ascend_mbatch_shape_case"].subgraph_name) == ["Batch_0", "Batch_1", "Batch_2"]
    assert list(ops["ascend_mbatch_shape_case"].input) == ["ascend_mbatch_shape_mapindex:0", "x:0"]
    assert list(root.input) == ["x", "ascend_mbatch_shape_data"]
    net = om_attrs.get_attrs(ops["NetOutput"].attr)
    assert net["_dynamic_output_dims"] == ["0,0,1,5", "1,0,2,5", "2,0,4,5"]
    assert [g.name for g in subgraphs] == ["Batch_0", "Batch_1", "Batch_2"]
    for i, graph in enumerate(subgraphs):
        assert all(op.name.endswith(f"_ascend_mbatch_batch_{i}") for op in graph.op)
        assert {om_attrs.get_attrs(op.attr).get("_batch_label") for op in graph.op if op.type != "Const"} == \
            {f"Batch_{i}"}
        data = next(op for op in graph.op if op.type == "Data")
        assert list(data.output_desc[0].shape.dim) == [[1, 2, 4][i], 3, 8, 8]
        assert om_attrs.get_attrs(data.attr)["_parent_node_index"] == 1
    # the gears share their weights: the partition holds each constant once
    loaded = load_om_model(om)
    assert [b.values for b in loaded.gears.branches] == [(1,), (2,), (4,)]
    static = work / "s"
    rc, text = atc(capsys, *base(work / "dynamic_batch_size.onnx", static), "--input_shape=x:4,3,8,8",
                   "--precision_mode=force_fp32")
    assert rc == 0, text
    weights = lambda path: len(open_om(path).om.partitions.get(1, b""))  # noqa: E731
    assert weights(om) <= weights(f"{static}.om") + 64


def test_gear_largest_data_and_fill_order_of_dims(work, capsys):
    _, om, _ = compile_gears(work, capsys, "dynamic_dims")
    root, subgraphs = _root_and_subgraphs(om)
    ops = {op.name: op for op in root.op}
    assert list(ops["x"].output_desc[0].shape.dim) == [2, 8, 8]     # 2*8*8 holds the most elements (gear 1)
    assert list(ops["m"].output_desc[0].shape.dim) == [3, 4]                  # and 3*4 (gear 2)
    case = om_attrs.get_attrs(ops["ascend_mbatch_shape_case"].attr)
    assert case["mbatch_dynamic_type"] == 3 and case["user_designate_shape_order"] == ["x", "m"]
    shapes = [[list(op.output_desc[0].shape.dim) for op in g.op if op.type == "Data"] for g in subgraphs]
    assert shapes == [[[1, 4, 8], [1, 4]], [[2, 8, 8], [2, 4]], [[3, 5, 8], [3, 4]]]


def test_fusion_and_report_run_per_gear(work, capsys):
    _, om, text = compile_gears(work, capsys, "dynamic_batch_size", "--log=info")
    for i, batch in enumerate((1, 2, 4)):
        assert f"Gear {i} of 3 (--dynamic_batch_size {batch}): x:{batch},3,8,8" in text
    assert text.count("Graph Fusion Report:") == 3
    fusion = json.loads((work / "fusion_result.json").read_text())["session_and_graph_id_0_0"]["graph_fusion"]
    assert fusion["ConvBNReluFusionPass"] == {"effect_times": "3", "match_times": "3"}
    for graph in _root_and_subgraphs(om)[1]:
        assert [op.type for op in graph.op if op.type not in ("Data", "Const", "NetOutput")] == ["ConvPoolFCFusionOp"]


def test_mode_6_and_the_json_dump_list_the_gears(work, capsys):
    _, om, _ = compile_gears(work, capsys, "dynamic_image_size")
    rc, text = atc(capsys, "--mode=6", f"--om={om}")
    assert rc == 0, text
    assert "Dynamic gears (--dynamic_image_size): 3, in subgraphs Batch_0..Batch_2" in text
    assert "  input x: 2,3,-1,-1" in text and "  gear 1: 16,12" in text
    rc, text = atc(capsys, "--mode=1", f"--om={om}", f"--json={work / 'g.json'}")
    assert rc == 0, text
    gears = json.loads((work / "g.json").read_text())["gears"]
    assert gears == {"flag": "dynamic_image_size", "mbatch_dynamic_type": 2, "gears": [[8, 8], [16, 12], [6, 10]],
                     "subgraphs": ["Batch_0", "Batch_1", "Batch_2"], "dynamic_inputs": {"x": [2, 3, -1, -1]}}


def test_netron_draws_the_root_graph_and_every_gear_subgraph(work, capsys):
    _, om, _ = compile_gears(work, capsys, "dynamic_batch_size")
    seen = netron_open(om)
    assert [g["name"] for g in seen["graphs"]] == ["g", "Batch_0", "Batch_1", "Batch_2"]
    root = {n["name"]: n for n in seen["graphs"][0]["nodes"]}
    assert [n["type"] for n in seen["graphs"][0]["nodes"]] == ["Data", "Data", "MapIndex", "Case", "NetOutput"]
    # the Const of gears is drawn as MapIndex's initializer, int32[3] = 1, 2, 4
    table = root["ascend_mbatch_shape_mapindex"]["inputs"][1]["values"][0]["initializer"]
    assert table["type"]["shape"] == [3] and table["data"] == "010000000200000004000000"
    for i, graph in enumerate(seen["graphs"][1:]):
        assert [n["name"] for n in graph["nodes"]][1].endswith(f"_ascend_mbatch_batch_{i}")
        assert graph["nodes"][0]["outputs"][0]["values"][0]["type"]["shape"] == [[1, 2, 4][i], 3, 8, 8]


def test_the_python_api_takes_gears_as_lists(work):
    import onnx
    onnx.save(gear_models.cnn(), work / "cnn.onnx")
    report = atc_py.compile(work / "cnn.onnx", output=work / "api", soc_version="Ascend910",
                            input_shape={"x": [-1, 3, 8, 8]}, dynamic_batch_size=[1, 2, 4])
    assert report["dynamic"] == {"flag": "dynamic_batch_size", "gears": [[1], [2], [4]], "input_shape": "x:-1,3,8,8"}
    assert report["inputs"] == [{"name": "x", "shape": [-1, 3, 8, 8], "dtype": "float32"}]
    assert [g["gear"] for g in report["gears"]] == [[1], [2], [4]]
    assert [g["input_shape"] for g in report["gears"]][2] == {"x": [4, 3, 8, 8]}
    assert all(g["kernels_after"] == 1 for g in report["gears"])
    atc_py.compile(work / "cnn.onnx", output=work / "img", soc_version="Ascend910",
                   input_shape="x:1,3,-1,-1", dynamic_image_size=[(8, 8), (16, 16)])
    assert load_om_model(work / "img.om").gears.values == [(8, 8), (16, 16)]


def test_gear_builds_are_deterministic(work, capsys):
    _, om, _ = compile_gears(work, capsys, "dynamic_dims")
    first = om.read_bytes()
    _, om, _ = compile_gears(work, capsys, "dynamic_dims")
    assert om.read_bytes() == first


BAD = [   # (flags, code, words in the message)
    (["--input_shape=x:-1,3,8,8", "--dynamic_batch_size=1,2", "--dynamic_image_size=8,8;16,16"], "E10009",
     "mutually exclusive"),
    (["--input_shape=x:-1,3,8,8", "--dynamic_batch_size=1,2", "--input_shape_range=x:[1~4],3,8,8"], "E10009",
     "--input_shape_range"),
    (["--dynamic_batch_size=1,2"], "E10004", "Value for --input_shape is empty"),
    (["--input_shape=x:1~4,3,8,8", "--dynamic_batch_size=1,2"], "E10040", "cannot have '~'"),
    (["--input_shape=x:-1,3,-1,8", "--dynamic_batch_size=1,2"], "E10018", "only batch size N can be -1"),
    (["--input_shape=x:2,3,8,8", "--dynamic_batch_size=1,2"], "E10031", "none of the nodes"),
    (["--input_shape=x:-1,3,8,8", "--dynamic_batch_size=4"], "E10035", "1 profiles, which is less than the "
                                                                        "minimum 2"),
    (["--input_shape=x:-1,3,8,8", f"--dynamic_batch_size={','.join(map(str, range(1, 102)))}"], "E10036",
     "101 profiles, which is greater than the maximum 100"),
    (["--input_shape=x:-1,3,8,8", "--dynamic_batch_size=1,0"], "E10038", "Dimension size 0 is invalid"),
    (["--input_shape=x:-1,3,8,8", "--dynamic_batch_size=1,2,2"], "E10039", "duplicate profiles"),
    (["--input_shape=x:-1,3,8,8", "--dynamic_batch_size=1,two"], "E10003", "It can only contains digit"),
    (["--input_shape=x:1,3,-1,-1", "--dynamic_image_size=8;16,16"], "E10020", "--dynamic_image_size is invalid"),
    (["--input_shape=x:1,3,-1,-1", "--dynamic_image_size=8,8;8,8"], "E10039", "duplicate profiles"),
    (["--input_shape=x:-1,3,-1,-1", "--dynamic_image_size=8,8;16,16"], "E10019", "only the height and width"),
    (["--input_shape=x:1,3,-1,-1", "--dynamic_image_size=8,8;16,16", "--input_format=NHWC"], "E10019",
     "only the height and width"),
    (["--input_shape=x:1,3,-1,-1", "--dynamic_image_size=8,8;16,x"], "E10003", "It can only contains digit"),
    (["--input_shape=x:-1,3,8,8", "--dynamic_dims=1;2"], "E10001", "input_format must be ND"),
    (["--input_shape=x:-1,3,-1,8", "--dynamic_dims=1,8;2", "--input_format=ND"], "E10003",
     "consistent with the number of -1"),
    (["--input_shape=x:-1,3,8,8", "--dynamic_dims=1;a", "--input_format=ND"], "E10001", "must be positive integer"),
    (["--input_shape=x:-1,3,8,8", "--dynamic_dims=1;0", "--input_format=ND"], "E10038", "Dimension size 0"),
    (["--input_shape=x:2,3,8,8", "--dynamic_dims=1;2", "--input_format=ND"], "E10001",
     "at least one dim should be -1"),
    (["--input_shape=x:-1,3,8,8,1", "--dynamic_dims=1;2", "--input_format=ND"], "E10001", "within [1, 4]"),
]


@pytest.mark.parametrize("flags,code,words", BAD, ids=[f"{b[1]}-{i}" for i, b in enumerate(BAD)])
def test_bad_gear_flags_get_atc_codes(work, capsys, flags, code, words):
    import onnx
    onnx.save(gear_models.cnn(), work / "cnn.onnx")
    rc, text = atc(capsys, *base(work / "cnn.onnx", work / "bad"), *flags)
    failed(rc, text, code, work / "bad.om")
    assert words in text, text


def test_gear_profile_counts_must_agree():
    from atc_py.gears import _check_gear_list
    from ge.errors import AtcError
    with pytest.raises(AtcError) as err:
        _check_gear_list([[1, 2], [3]])
    assert err.value.code == "E10037" and "A profile has 2 dimensions while another has 1" in err.value.message


def test_a_gear_on_an_axis_the_model_fixes_is_refused(work, capsys):
    import onnx
    onnx.save(gear_models.static_batch(), work / "s.onnx")
    rc, text = atc(capsys, *base(work / "s.onnx", work / "s"), "--input_shape=x:-1,3,8,8",
                   "--dynamic_batch_size=1,2")
    failed(rc, text, "E10011", work / "s.om")
    assert "fixed to 1 by the model" in text


def test_static_models_ignore_the_gear_machinery(work, capsys):
    import onnx
    onnx.save(gear_models.cnn(), work / "cnn.onnx")
    rc, text = atc(capsys, *base(work / "cnn.onnx", work / "st"), "--input_shape=x:2,3,8,8")
    assert rc == 0, text
    assert len(open_om(work / "st.om").model_def.graph) == 1
    assert load_om_model(work / "st.om").gears is None
    assert np.isfinite(InferSession(work / "st.om").infer([np.ones((2, 3, 8, 8), np.float32)])[0]).all()


def _damaged(om, change) -> bytes:
    from om_format.container import PartitionType, build_om, load_model_def, read_om
    parsed = read_om(om.read_bytes())
    model_def = load_model_def(parsed)
    change(model_def)
    parts = dict(parsed.partitions)
    parts[PartitionType.MODEL_DEF] = model_def.SerializeToString()
    return build_om(parts, name="bad", ops=1, platform_version="Ascend910")


def _case(model_def):
    return next(op for op in model_def.graph[0].op if op.type == "Case")


def _set(op, key, value):
    om_attrs.set_attrs(op.attr, {key: value})


DAMAGE = {
    "too many gears": lambda m: _set(_case(m), "_batch_num", 1000),
    "unknown dynamic type": lambda m: _set(_case(m), "mbatch_dynamic_type", 7),
    "gear value changed": lambda m: _set(_case(m), "_pred_value_1", [3]),
    "gear twice": lambda m: _set(_case(m), "_pred_value_1", [1]),
    "subgraph renamed": lambda m: setattr(m.graph[2], "name", "Batch_9"),
    "subgraph shape": lambda m: next(op for op in m.graph[1].op if op.type == "Data").output_desc[0]
    .shape.dim.__setitem__(0, 3),
    "foreign root op": lambda m: setattr(next(op for op in m.graph[0].op if op.type == "MapIndex"), "type", "Relu"),
    "case inputs": lambda m: _case(m).input.__delitem__(1),
    "no case": lambda m: m.graph[0].op.remove(_case(m)),
}


@pytest.mark.parametrize("name", sorted(DAMAGE))
def test_a_damaged_gear_model_is_e10003(work, capsys, name):
    from ge.errors import AtcError
    _, om, _ = compile_gears(work, capsys, "dynamic_batch_size")
    bad = work / "bad.om"
    bad.write_bytes(_damaged(om, DAMAGE[name]))
    with pytest.raises(AtcError) as err:
        load_om_model(bad)
    assert err.value.code == "E10003", err.value.message
    from test_atc_flags import run_sim
    rc, text = run_sim(capsys, "--model", bad)
    assert rc == 1 and "E10003" in text


def test_gears_of_a_real_bert_export_each_fuse_attention_and_match_onnxruntime(tmp_path):
    """transformers' BERT exported by torch.onnx with dynamic batch and sequence axes, given
    --dynamic_dims gears as the model-zoo scripts do: each gear fuses both attention blocks
    and matches onnxruntime on its own shape, priced at its own size."""
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    import onnx
    import exporters
    from codegen.fused.attention import OP_TYPE
    path = exporters.export_dynamic("bert", "torchscript", str(tmp_path / "bert.onnx"))
    model = onnx.load(path)
    names = [i.name for i in model.graph.input]
    gears = [(1, 8), (2, 16), (3, 5)]
    atc_py.compile(path, output=str(tmp_path / "b"), soc_version="Ascend910", input_format="ND",
                   input_shape=";".join(f"{n}:-1,-1" for n in names), precision_mode="force_fp32",
                   dynamic_dims=[[v for _ in names for v in gear] for gear in gears])
    session = InferSession(tmp_path / "b.om")
    assert [g["index"] for g in session.get_dynamic_gears()] == [0, 1, 2]
    times = []
    for index, (batch, length) in enumerate(gears):
        rng = np.random.default_rng(index)
        feeds = {n: (np.ones((batch, length), np.int64) if "mask" in n else
                     np.zeros((batch, length), np.int64) if "token_type" in n else
                     rng.integers(0, 100, (batch, length)).astype(np.int64)) for n in names}
        feeds[next(n for n in names if "mask" in n)][0, length // 2:] = 0       # padding in the first sequence
        got = session.infer(feeds)
        assert session.model.gear == index
        kernels = [n.op_type for n in session.model.graph.nodes]
        assert kernels.count(OP_TYPE) == 2 and "Softmax" not in kernels
        ref = list(run_ort(model, feeds).values())
        assert got[0].shape == ref[0].shape == (batch, length, 64)
        np.testing.assert_allclose(got[0], ref[0], rtol=1e-4, atol=1e-5)
        times.append(session.last_result.npu_time_ms["mean"])
    assert len(set(times)) == 3 and min(times) > 0          # each gear priced at its own shape
