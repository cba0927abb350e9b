"""Shapes known only at run time (issue 12, item 3): `-1` and ranges in --input_shape /
--input_shape_range compile once to an .om that records unknown dims as GE does; config
inputs computed at run time are read by their kernels; the simulator binds every size when
it runs, matches onnxruntime at each shape and prices each run at its real sizes."""
from __future__ import annotations

import os

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

import atc_py
import cli
from builder import Net
from codegen.om_import import load_om_graph, open_om
from ge.errors import AtcError
from ge.symbolic import Dim
from helpers import fuse_model, run_ort
from om_format import attrs as om_attrs
from simulator import cli as sim_cli

I64 = TensorProto.INT64


def _attention_like_model() -> onnx.ModelProto:
    """x [N, S, 16] -> MatMul + bias + Relu -> a Reshape whose target the exporter computes from
    Shape(x) -> heads -> Softmax: what every transformer export does with a dynamic length."""
    net = Net(opset=17)
    x = net.input("x", ["N", "S", 16])
    h = net.op("Relu", net.op("Add", net.op("MatMul", x, net.rand(16, 16)), net.rand(16)))
    dims = net.op("Gather", net.op("Shape", x), net.const(np.array([0, 1], np.int64)), axis=0)
    target = net.op("Concat", dims, net.const(np.array([4, 4], np.int64)), axis=0)
    heads = net.op("Transpose", net.op("Reshape", h, target), perm=[0, 2, 1, 3])
    return net.model(net.op("Softmax", heads, axis=-1))


@pytest.fixture
def attention_om(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    path = str(tmp_path / "m.onnx")
    onnx.save(_attention_like_model(), path)
    report = atc_py.compile(path, output=str(tmp_path / "m"), soc_version="Ascend910",
                            input_shape="x:-1,1~64,16", precision_mode="force_fp32")
    return path, str(tmp_path / "m.om"), report


def test_minus_one_and_a_range_compile_once_and_match_onnxruntime_at_three_shapes(attention_om):
    onnx_path, om, _ = attention_om
    session = atc_py.InferSession(om)
    model = onnx.load(onnx_path)
    times = []
    for n, s in [(1, 3), (4, 40), (16, 64)]:
        x = np.random.default_rng(n).standard_normal((n, s, 16)).astype(np.float32)
        got, = session.infer([x])
        ref = list(run_ort(model, {"x": x}).values())[0]
        assert got.shape == (n, 4, s, 4) and np.allclose(got, ref, atol=1e-5)
        times.append(session.last_result.npu_time_ms["mean"])
        assert session.last_result.dims == {"N": n, "S": s}
    assert times[0] < times[1] < times[2]            # each run priced at its own sizes


def test_the_om_records_unknown_dims_as_ge_does(attention_om, tmp_path):
    _, om, report = attention_om
    opened = open_om(om)
    assert opened.om.header.is_unknow_model == 1
    data = next(op for op in opened.model_def.graph[0].op if op.type == "Data")
    desc = data.output_desc[0]
    assert list(desc.shape.dim) == [-1, -1, 16]
    attrs = om_attrs.get_attrs(desc.attr)
    assert attrs["shape_range"] == [[0, -1], [1, 64], [16, 16]]        # GE's [lo, hi], -1 unbounded
    assert attrs["_symbolic_shape"] == ["N", "S", "16"]
    assert om_attrs.get_attrs(opened.model_def.attr)["_dim_symbols"] == ["N:0:-1:input", "S:1:64:input"]
    graph = load_om_graph(om).graph
    reshape = next(n for n in graph.nodes if n.op_type == "Reshape")
    assert [str(d) for d in reshape.attrs["shape"]] == ["N", "S", "4", "4"]   # the expressions survive
    assert report["dynamic"]["symbolic_matches"] == {"MatMulBiasAct": 1}
    static = atc_py.compile(_attention_like_model(), output=str(tmp_path / "static"), soc_version="Ascend910",
                            input_shape="x:2,8,16")
    assert static["dynamic"] == {} and open_om(static["om"]).om.header.is_unknow_model == 0


def test_the_report_says_what_it_priced_and_which_patterns_it_checked_on_symbols(attention_om, capsys):
    onnx_path, _, _ = attention_om
    out = os.path.join(os.path.dirname(onnx_path), "r")
    assert cli.main([f"--model={onnx_path}", "--framework=5", f"--output={out}", "--soc_version=Ascend910",
                     "--input_shape=x:-1,1~64,16", "--input_hint_shape=0:[2,32,16]", "--log=info"]) == 0
    text = capsys.readouterr().out
    assert "Dynamic shapes: N in [0, inf], S in [1, 64]" in text
    assert "Priced at: x [2, 32, 16]" in text
    assert "Patterns checked on symbolic dims: MatMulBiasAct 1" in text
    assert "Simulated time (priced at):" in text and "Simulated time (ranges' low ends):" in text


@pytest.mark.parametrize("flag", ["--input_shape_range=x:[-1,1~64,16]", "--input_shape_range=x:[-1],[1~64],16",
                                  "--input_shape_range=[-1,1~64,16]"])
def test_input_shape_range_forms_build_the_same_om(attention_om, flag, capsys, tmp_path):
    onnx_path, om, _ = attention_om
    os.makedirs(tmp_path / "ranged")
    out = str(tmp_path / "ranged" / "m")             # the same name: the .om records it
    args = [f"--model={onnx_path}", "--framework=5", f"--output={out}", "--soc_version=Ascend910",
            "--precision_mode=force_fp32", flag, "--input_shape=x:4,8,16"]
    assert cli.main(args) == 0
    text = capsys.readouterr().out
    assert "W10105" in text and "W10103" in text      # deprecated (GE's warning), overrides --input_shape
    with open(om, "rb") as a, open(out + ".om", "rb") as b:
        assert a.read() == b.read()


@pytest.mark.parametrize("flag", ["--input_shape=x:-1,8~1,16", "--input_shape=x:-1,a~3,16",
                                  "--input_shape_range=x:-1,1~64,16", "--input_shape_range=x:[-1,1~64~9,16]",
                                  "--input_shape_range=x:[-2,1,16]"])
def test_bad_ranges_are_e10048(attention_om, flag, capsys, tmp_path):
    onnx_path, _, _ = attention_om
    out = tmp_path / "bad"
    assert cli.main([f"--model={onnx_path}", "--framework=5", f"--output={out}", "--soc_version=Ascend910", flag]) != 0
    assert "E10048" in capsys.readouterr().out and not (tmp_path / "bad.om").exists()


def test_a_range_whose_maximum_exceeds_the_chip_is_refused_an_unbounded_one_is_not(tmp_path):
    net = Net()
    model = net.model(net.op("Relu", net.input("x", ["N", 1 << 20])))
    with pytest.raises(AtcError) as err:      # 1e6 x 1M float32 = 4 TB at the range's maximum
        atc_py.compile(model, output=str(tmp_path / "big"), soc_version="Ascend910", input_shape="x:1~1000000,1048576")
    assert err.value.code == "E13023"
    atc_py.compile(model, output=str(tmp_path / "open"), soc_version="Ascend910", input_shape="x:-1,1048576")


def test_atc_sim_takes_the_sizes_from_dymshape_or_files_and_refuses_what_does_not_fit(attention_om, capsys):
    onnx_path, om, _ = attention_om
    folder = os.path.dirname(om)
    assert sim_cli.main(["--model", om, "--dymShape", "x:2,5,16", "--compare", onnx_path]) == 0
    assert "compare PASS" in capsys.readouterr().out
    np.save(os.path.join(folder, "x.npy"), np.ones((3, 9, 16), np.float32))
    assert sim_cli.main(["--model", om, "--input", os.path.join(folder, "x.npy"), "--output",
                         os.path.join(folder, "o")]) == 0
    written = [f for f in os.listdir(os.path.join(folder, "o")) if f.endswith(".npy")]
    assert len(written) == 1 and np.load(os.path.join(folder, "o", written[0])).shape == (3, 4, 9, 4)
    for bad, code in ((["--dymShape", "x:2,65,16"], "E10001"),          # S outside 1~64
                      (["--dymShape", "x:2,5,15"], "E10001"),           # a fixed dim
                      ([], "E10001")):                                   # pure data needs sizes
        capsys.readouterr()
        assert sim_cli.main(["--model", om] + bad) == 1
        assert code in capsys.readouterr().out


def test_dataset_mode_prices_each_inputs_sizes_on_their_own(attention_om, capsys, monkeypatch):
    """A folder of inputs of different sizes runs one by one (each priced at its own sizes),
    not over run_many's processes, even when cores are free."""
    from simulator import blas

    _, om, _ = attention_om
    folder = os.path.join(os.path.dirname(om), "in")
    os.makedirs(folder)
    for k, seq in enumerate((3, 7, 11)):
        np.save(os.path.join(folder, f"{k}.npy"), np.ones((1, seq, 16), np.float32))
    monkeypatch.setattr(blas, "free_cores", lambda: 2)
    out = os.path.join(os.path.dirname(om), "o")
    assert sim_cli.main(["--model", om, "--input", folder, "--output", out]) == 0
    assert "spread over" not in capsys.readouterr().out
    shapes = sorted(np.load(os.path.join(out, f)).shape for f in os.listdir(out) if f.endswith(".npy"))
    assert shapes == [(1, 4, 3, 4), (1, 4, 7, 4), (1, 4, 11, 4)]


def _conv_model() -> onnx.ModelProto:
    net = Net(opset=17)
    x = net.input("x", ["N", 3, "H", "W"])
    conv = net.op("Conv", x, net.rand(8, 3, 3, 3), net.rand(8), pads=[1, 1, 1, 1])
    bn = net.op("BatchNormalization", conv, net.const(np.ones(8) * 1.1), net.rand(8), net.rand(8),
                net.const(np.ones(8) * 0.9))
    pooled = net.op("GlobalAveragePool", net.op("Relu", bn))
    return net.model(net.op("Gemm", net.op("Flatten", pooled), net.rand(10, 8), net.rand(10), transB=1))


def test_conv_fusion_fires_on_a_dynamic_image_size_and_every_size_matches(tmp_path):
    model = _conv_model()
    report = atc_py.compile(model, output=str(tmp_path / "c"), soc_version="Ascend910",
                            input_shape="x:1~2,3,16~32,16~32", precision_mode="force_fp32")
    assert report["dynamic"]["symbolic_matches"].get("ConvBNReLU") == 1
    session = atc_py.InferSession(str(tmp_path / "c.om"))
    times = []
    for n, h, w in [(1, 16, 16), (2, 20, 31), (2, 32, 32)]:
        x = np.random.default_rng(h).standard_normal((n, 3, h, w)).astype(np.float32)
        got, = session.infer([x])
        assert np.allclose(got, list(run_ort(model, {"x": x}).values())[0], atol=1e-4)
        times.append(session.last_result.npu_time_ms["mean"])
    assert times[0] < times[1] < times[2]


def test_symbolic_shapes_flow_through_the_fusion_pipeline():
    graph, results = fuse_model(_attention_like_model(), input_shapes={"x": [-1, -1, 16]})
    fused = next(n for n in graph.nodes if n.op_type.startswith("MatMulBias"))
    n, s = graph.inputs[0].desc.shape[:2]
    assert isinstance(n, Dim) and fused.outputs[0].desc.shape == (n, s, 16)
    assert results["MatMulBiasActFusionPass"].symbolic_matches == 1


# -- config inputs computed at run time ---------------------------------------------------------

def _vi(name, shape, dtype=TensorProto.FLOAT):
    return helper.make_tensor_value_info(name, dtype, shape)


def _single(op, inputs, outputs=("y",), **attrs) -> onnx.ModelProto:
    node = helper.make_node(op, [i.name if i is not None else "" for i in inputs], list(outputs), **attrs)
    graph = helper.make_graph([node], "g", [i for i in inputs if i is not None],
                              [helper.make_empty_tensor_value_info(o) for o in outputs])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    model.ir_version = 9
    return model


def _x(*shape):
    return np.random.default_rng(sum(shape)).standard_normal(shape).astype(np.float32)


def _i(*values):
    return np.array(values, np.int64)


RUNTIME_CASES = {
    "Reshape": (_single("Reshape", [_vi("x", [6, 64]), _vi("s", [2], I64)]),
                [{"x": _x(6, 64), "s": _i(3, 128)}, {"x": _x(6, 64), "s": _i(384, 1)}, {"x": _x(6, 64), "s": _i(-1, 2)}]),
    "Expand": (_single("Expand", [_vi("x", [64, 1]), _vi("s", [2], I64)]),
               [{"x": _x(64, 1), "s": _i(64, 4)}, {"x": _x(64, 1), "s": _i(1, 70)}, {"x": _x(64, 1), "s": _i(64, 1)}]),
    "Slice": (_single("Slice", [_vi("x", [50, 60]), _vi("a", [1], I64), _vi("b", [1], I64), _vi("c", [1], I64),
                                _vi("d", [1], I64)]),
              [{"x": _x(50, 60), "a": _i(1), "b": _i(40), "c": _i(1), "d": _i(1)},
               {"x": _x(50, 60), "a": _i(-1), "b": _i(-100), "c": _i(0), "d": _i(-2)},
               {"x": _x(50, 60), "a": _i(0), "b": _i(90), "c": _i(1), "d": _i(2)}]),
    "Squeeze": (_single("Squeeze", [_vi("x", [1, 30, 1, 2]), _vi("a", [1], I64)]),
                [{"x": _x(1, 30, 1, 2), "a": _i(0)}, {"x": _x(1, 30, 1, 2), "a": _i(2)},
                 {"x": _x(1, 30, 1, 2), "a": _i(-2)}]),
    "Unsqueeze": (_single("Unsqueeze", [_vi("x", [30, 2]), _vi("a", [2], I64)]),
                  [{"x": _x(30, 2), "a": _i(0, 1)}, {"x": _x(30, 2), "a": _i(0, 3)}, {"x": _x(30, 2), "a": _i(-1, 1)}]),
    "ReduceSum": (_single("ReduceSum", [_vi("x", [30, 40, 50]), _vi("a", [1], I64)], keepdims=0),
                  [{"x": _x(30, 40, 50), "a": _i(0)}, {"x": _x(30, 40, 50), "a": _i(1)},
                   {"x": _x(30, 40, 50), "a": _i(-1)}]),
    "ReduceMean": (_single("ReduceMean", [_vi("x", [30, 40, 50]), _vi("a", [2], I64)]),
                   [{"x": _x(30, 40, 50), "a": _i(0, 1)}, {"x": _x(30, 40, 50), "a": _i(1, 2)},
                    {"x": _x(30, 40, 50), "a": _i(0, 2)}]),
    "Split": (_single("Split", [_vi("x", [20, 60]), _vi("s", [2], I64)], ("p", "q"), axis=1),
              [{"x": _x(20, 60), "s": _i(10, 50)}, {"x": _x(20, 60), "s": _i(30, 30)},
               {"x": _x(20, 60), "s": _i(60, 0)}]),
    "Tile": (_single("Tile", [_vi("x", [20, 30]), _vi("r", [2], I64)]),
             [{"x": _x(20, 30), "r": _i(1, 1)}, {"x": _x(20, 30), "r": _i(2, 3)}, {"x": _x(20, 30), "r": _i(3, 1)}]),
    "Pad": (_single("Pad", [_vi("x", [20, 30]), _vi("p", [4], I64)]),
            [{"x": _x(20, 30), "p": _i(0, 1, 0, 2)}, {"x": _x(20, 30), "p": _i(5, 5, 5, 5)},
             {"x": _x(20, 30), "p": _i(0, 0, 0, 0)}]),
    "Resize": (_single("Resize", [_vi("x", [1, 1, 16, 16]), None, None, _vi("z", [4], I64)], mode="nearest"),
               [{"x": _x(1, 1, 16, 16), "z": _i(1, 1, 32, 32)}, {"x": _x(1, 1, 16, 16), "z": _i(1, 1, 8, 24)},
                {"x": _x(1, 1, 16, 16), "z": _i(1, 1, 16, 16)}]),
    "TopK": (_single("TopK", [_vi("x", [30, 70]), _vi("k", [1], I64)], ("v", "i")),
             [{"x": _x(30, 70), "k": _i(1)}, {"x": _x(30, 70), "k": _i(40)}, {"x": _x(30, 70), "k": _i(70)}]),
    "ConstantOfShape": (_single("ConstantOfShape", [_vi("s", [2], I64)],
                                value=helper.make_tensor("v", TensorProto.FLOAT, [1], [2.5])),
                        [{"s": _i(20, 30)}, {"s": _i(1, 90)}, {"s": _i(40, 40)}]),
    "Range": (_single("Range", [_vi("a", [], I64), _vi("b", [], I64), _vi("c", [], I64)]),
              [{"a": np.array(0), "b": np.array(50), "c": np.array(1)},
               {"a": np.array(3), "b": np.array(200), "c": np.array(4)},
               {"a": np.array(10), "b": np.array(0), "c": np.array(-3)}]),
    "NonZero": (_single("NonZero", [_vi("x", [30, 40])]),
                [{"x": (_x(30, 40) > 0).astype(np.float32)}, {"x": np.zeros((30, 40), np.float32)},
                 {"x": np.ones((30, 40), np.float32)}]),
}


@pytest.mark.parametrize("op", sorted(RUNTIME_CASES))
def test_config_inputs_computed_at_run_time_are_read_by_the_kernel(op, tmp_path):
    model, runs = RUNTIME_CASES[op]
    atc_py.compile(model, output=str(tmp_path / "m"), soc_version="Ascend910", precision_mode="force_fp32")
    session = atc_py.InferSession(str(tmp_path / "m.om"))
    assert session.model.graph.is_dynamic
    shapes, times = set(), []
    for feeds in runs:
        got = session.infer(feeds)
        ref = list(run_ort(model, feeds).values())
        for g, r in zip(got, ref):
            assert g.shape == r.shape and np.allclose(g, r, rtol=1e-5, atol=1e-5), (op, feeds)
        shapes.add(tuple(g.shape for g in got))
        times.append(session.last_result.npu_time_ms["mean"])
    assert len(shapes) >= 2 and all(t >= 0 for t in times)           # views (Reshape ...) launch nothing
    assert len(session.model.timings_by_shape) >= len(shapes)       # each output size priced on its own


# -- attention over a dynamic sequence length -------------------------------------------------

@pytest.fixture(scope="module")
def dynamic_exports(tmp_path_factory):
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    pytest.importorskip("onnxscript")
    import exporters
    root, cache = tmp_path_factory.mktemp("dynamic_exports"), {}

    def get(name, exporter):
        if (name, exporter) not in cache:
            path = str(root / f"{name}_{exporter}.onnx")
            exporters.export_dynamic(name, exporter, path)
            cache[name, exporter] = path
        return cache[name, exporter]

    return get


def _token_feeds(model: onnx.ModelProto, batch: int, length: int) -> dict:
    rng = np.random.default_rng(batch * 100 + length)
    feeds = {}
    for info in model.graph.input:
        if "mask" in info.name:
            feeds[info.name] = np.ones((batch, length), np.int64)
            feeds[info.name][0, length // 2:] = 0                   # padding in the first sequence
        elif "token_type" in info.name:
            feeds[info.name] = np.zeros((batch, length), np.int64)
        else:
            feeds[info.name] = rng.integers(0, 100, (batch, length)).astype(np.int64)
    return feeds


@pytest.mark.parametrize("name,exporter", [("bert", "torchscript"), ("bert", "dynamo"), ("gpt2", "torchscript"),
                                           ("gpt2", "dynamo")])
def test_attention_over_a_dynamic_sequence_length_fuses_and_matches_at_three_lengths(dynamic_exports, name, exporter,
                                                                                       tmp_path):
    """BERT and GPT-2 exported with dynamic batch and sequence axes: every block is one MHA
    kernel checked on the symbols (no Softmax left), every linear layer a fused GEMM (GPT-2's
    Conv1D flattens the rows around its Gemm: the row views cross it on symbolic shapes), and
    each length runs priced at its own sizes."""
    import exporters
    from codegen.fused.attention import OP_TYPE
    path = dynamic_exports(name, exporter)
    model = onnx.load(path)
    shape = exporters.decoder_input_shape(model)                    # every dynamic dim -1
    assert shape.count("-1") == 2 * len(model.graph.input)
    report = atc_py.compile(path, output=str(tmp_path / "b"), soc_version="Ascend910", input_shape=shape,
                            precision_mode="force_fp32")
    assert report["dynamic"]["symbolic_matches"]["MHA"] == 2
    assert {p["pattern"]: p["effect"] for p in report["patterns"]}["MatMulBiasAct"] == 6   # as static: all but those in MHA kernels
    assert not [m for m in report["misses"] if m["pass"] == "MultiHeadAttentionFusionPass"]
    session = atc_py.InferSession(str(tmp_path / "b.om"))
    kinds = [n.op_type for n in session.model.graph.nodes]
    assert kinds.count(OP_TYPE) == 2 and "Softmax" not in kinds
    dims = set()
    for batch, length in [(1, 3), (2, 8), (3, 16), (4, 1)]:         # length 1: a decode-sized step
        feeds = _token_feeds(model, batch, length)
        got, = session.infer(feeds)
        ref, = run_ort(model, feeds).values()
        assert got.shape == ref.shape == (batch, length, 64) and np.allclose(got, ref, atol=1e-5)
        assert session.last_result.npu_time_ms["mean"] > 0
        dims.add(tuple(sorted(session.last_result.dims.values())))
    assert len(dims) == 4 and len(session.model.timings_by_shape) == 4


# -- autofuse on symbolic dims ---------------------------------------------------------------

def _mean_abs_norm_model() -> onnx.ModelProto:
    """x [B, S, 16]: an RMSNorm-shaped norm of mean |x| (Abs, ReduceMean, Add, Sqrt, Div, Mul;
    with Pow(x, 2) it would be RmsNormFusionPass's RMSNormalization, not autofuse groups) then
    a gated elementwise tail with a [B, S, 1] broadcast: groups whose shapes are all symbolic."""
    net = Net(opset=18)
    x = net.input("x", ["B", "S", 16])
    var = net.op("ReduceMean", net.op("Abs", x), net.const(np.array([-1], np.int64)), keepdims=1)
    norm = net.op("Mul", net.op("Div", x, net.op("Sqrt", net.op("Add", var, net.const(np.array(1e-6, np.float32))))),
                  net.rand(16))
    gate = net.op("Sigmoid", net.op("ReduceMax", norm, net.const(np.array([-1], np.int64)), keepdims=1))
    return net.model(net.op("Tanh", net.op("Mul", norm, gate)))


def test_autofuse_groups_on_symbolic_dims_run_at_every_size(tmp_path):
    """The group's sub-graph carries its symbolic dims and their ranges; the kernel binds them
    from its inputs' real shapes when it runs and when it is priced."""
    from codegen.fused.autofused import OP_TYPE, decode_subgraph
    model = _mean_abs_norm_model()
    report = atc_py.compile(model, output=str(tmp_path / "a"), soc_version="Ascend910", input_shape="x:-1,1~64,16",
                            precision_mode="force_fp32")
    static = atc_py.compile(model, output=str(tmp_path / "s"), soc_version="Ascend910", input_shape="x:2,8,16",
                            precision_mode="force_fp32")
    fused = {p["pattern"]: p["effect"] for p in report["patterns"]}.get("AutoFuse", 0)
    assert fused >= 2 and fused == {p["pattern"]: p["effect"] for p in static["patterns"]}["AutoFuse"]
    assert report["dynamic"]["symbolic_matches"]["AutoFuse"] == fused
    assert report["kernels_after"] == static["kernels_after"]
    session = atc_py.InferSession(str(tmp_path / "a.om"))
    kernels = [n for n in session.model.graph.nodes if n.op_type == OP_TYPE]
    sub = decode_subgraph(kernels[0].attrs["subgraph"])
    assert set(sub.symbols) == {"B", "S"} and (sub.symbols["S"].lo, sub.symbols["S"].hi) == (1, 64)
    times = []
    for b, s in [(1, 1), (3, 17), (8, 64)]:
        x = np.random.default_rng(s).standard_normal((b, s, 16)).astype(np.float32)
        got, = session.infer([x])
        ref, = run_ort(model, {"x": x}).values()
        assert got.shape == (b, s, 16) and np.allclose(got, ref, atol=1e-5)
        times.append(session.last_result.npu_time_ms["mean"])
    assert times[0] < times[2]


def test_a_sub_graph_whose_dims_its_inputs_do_not_tell_is_not_bindable():
    """x [B*S, 16] (both only as a product) viewed as [B, S, 16] inside the group: the kernel
    could not bind B and S from its input (AutoFusePass checks `bindable` and leaves such a
    group unfused, NF2008); the dims round-trip through the JSON."""
    from codegen.fused.autofused import decode_subgraph, encode_subgraph
    from ge.ops.registry import TensorType
    from ge.symbolic import symbol
    b, s = symbol("B", 1, 8), symbol("S", 1, 64)
    f32 = np.dtype(np.float32)
    text = encode_subgraph([TensorType(f32, (b * s, 16))],
                           [("Reshape", {"shape": [b, s, 16]}, [("i", 0)], [TensorType(f32, (b, s, 16))]),
                            ("Relu", {}, [("o", 0, 0)], [TensorType(f32, (b, s, 16))])], [("o", 1, 0)])
    sub = decode_subgraph(text)
    assert sub.ops[0][1]["shape"] == [b, s, 16] and sub.ops[1][3][0].shape == (b, s, 16)   # round trip
    assert not sub.bindable()
    told = decode_subgraph(encode_subgraph([TensorType(f32, (b, s, 16))],
                                           [("Relu", {}, [("i", 0)], [TensorType(f32, (b, s, 16))])], [("o", 0, 0)]))
    assert told.bindable() and told.bindings([(2, 5, 16)]) == {"B": 2, "S": 5}


def test_a_shape_the_sampled_sizes_agree_on_is_checked_at_the_range_end_too(tmp_path):
    """MaxPool(kernel 1, stride 40, ceil_mode) over S in 2~120 has 1 output step up to S = 41
    and 3 at S = 120: the rule needs ints, and the sizes it was tried at (2, 3, 9, 31) all
    gave 1, which the .om recorded as a fixed dim -- a valid S = 100 was then refused as a
    damaged model.  The high end is tried too, so the dim stays dynamic."""
    net = Net(opset=17)
    x = net.input("x", [1, 1, "S"])
    pooled = net.op("MaxPool", net.op("Relu", x), kernel_shape=[1], strides=[40], ceil_mode=1)
    path = str(tmp_path / "pool.onnx")
    onnx.save(net.model(net.op("Relu", pooled)), path)
    atc_py.compile(path, output=str(tmp_path / "pool"), soc_version="Ascend910", input_shape="x:1,1,2~120")
    graph = load_om_graph(str(tmp_path / "pool.om")).graph
    assert isinstance(graph.outputs[0].desc.shape[2], Dim)
    from helpers import run_ir
    for length in (10, 100):
        feed = {"x": np.random.default_rng(length).standard_normal((1, 1, length)).astype(np.float32)}
        expected = run_ort(onnx.load(path), feed)
        np.testing.assert_array_equal(run_ir(graph, feed)[graph.outputs[0].name], list(expected.values())[0])


def test_a_ceil_mode_pool_over_a_dynamic_size_stays_outside_the_conv_block_which_still_fuses():
    """Whether H % 2 is 0 depends on the run: the pooled store of a conv block needs it, so
    the pool stays its own kernel -- and the conv + ReLU still fuse (the undecided check
    used to make the whole block a miss, NF2008)."""
    from ge.onnx_import import parse_input_shape
    from helpers import op_types, run_ir
    net = Net(opset=17)
    x = net.input("x", [1, 3, "H", "W"])
    conv = net.op("Conv", x, net.rand(8, 3, 3, 3), net.rand(8), pads=[1, 1, 1, 1])
    pooled = net.op("MaxPool", net.op("Relu", conv), kernel_shape=[2, 2], strides=[2, 2], ceil_mode=1)
    model = net.model(net.op("Sigmoid", pooled))
    graph, stats = fuse_model(model, input_shapes=parse_input_shape("x:1,3,16~64,16~64"))
    assert op_types(graph)[:2] == ["ConvBNReluFusionOp", "MaxPool"]
    assert not stats["ConvBNReluFusionPass"].misses
    for size in (17, 32):
        feed = {"x": np.random.default_rng(size).standard_normal((1, 3, size, size)).astype(np.float32)}
        expected = list(run_ort(model, feed).values())[0]
        np.testing.assert_allclose(list(run_ir(graph, feed).values())[0], expected, rtol=1e-5, atol=1e-5)
