"""Model zoo: every small model is valid ONNX, runs in onnxruntime with finite outputs of the
right shapes, builds byte-identically, and has the export patterns the fusion passes expect."""
import os
import subprocess
import sys
from collections import Counter

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import helper

from atc_py import zoo
from atc_py.zoo import _layers as L
from atc_py.zoo._builder import ROOT, GraphBuilder
from ge.errors import AtcError

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

SMALL_OUTPUTS = {
    "seed_testmodel": {"output": (1, 10)},
    "seed_addge": {"output": (2, 16, 32)},
    "seed_mulreducesum": {"output": (2, 16)},
    "resnet50": {"output": (1, 10)},
    "resnet101": {"output": (1, 10)},
    "densenet121": {"output": (1, 10)},
    "efficientnet_b4": {"output": (1, 10)},
    "mobilenet_v2": {"output": (1, 10)},
    "bert_base": {"last_hidden_state": (1, 8, 32), "pooler_output": (1, 32)},
    "vit_base": {"logits": (1, 10)},
    "gpt2": {"logits": (1, 8, 100)},
}


def _session(model):
    return ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])


def _feeds(sess, seed=0):
    rng = np.random.default_rng(seed)
    feeds = {}
    for i in sess.get_inputs():
        if i.type == "tensor(int64)":
            hi = 2 if "mask" in i.name else 100
            feeds[i.name] = rng.integers(0, hi, i.shape).astype(np.int64)
        else:
            feeds[i.name] = rng.standard_normal(i.shape).astype(np.float32)
    return feeds


def _run(model, feeds=None):
    sess = _session(model)
    feeds = feeds if feeds is not None else _feeds(sess)
    return dict(zip([o.name for o in sess.get_outputs()], sess.run(None, feeds))), feeds


def _ops(model):
    return Counter(n.op_type for n in model.graph.node)


@pytest.fixture(scope="module")
def small_models():
    return {name: zoo.build(name, small=True) for name in zoo.MODELS}


def _cli(*args, cwd=REPO):
    env = dict(os.environ, PYTHONPATH=REPO)
    return subprocess.run([sys.executable, "-m", "atc_py.zoo", *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=120)


# -- CLI -------------------------------------------------------------------------------
def test_list_prints_every_name_one_per_line():
    res = _cli("--list")
    assert res.returncode == 0
    assert res.stdout.split() == list(zoo.MODELS)
    assert set(SMALL_OUTPUTS) == set(zoo.MODELS)


def test_cli_writes_the_model(tmp_path):
    out = tmp_path / "new" / "dir"
    res = _cli("seed_testmodel", "--output", str(out), "--small")
    assert res.returncode == 0, res.stderr
    path = out / "seed_testmodel.onnx"
    assert path.is_file()
    assert onnx.load(str(path)).SerializeToString() == zoo.build("seed_testmodel", small=True).SerializeToString()


def test_cli_bad_name_lists_valid_names_without_traceback(tmp_path):
    res = _cli("resnet51", "--output", str(tmp_path))
    assert res.returncode == 2
    assert "resnet51" in res.stderr and "resnet50" in res.stderr and "gpt2" in res.stderr
    assert "Traceback" not in res.stderr
    assert not (tmp_path / "resnet51.onnx").exists()


def test_build_and_save_api(tmp_path):
    with pytest.raises(AtcError) as err:
        zoo.build("nope")
    assert err.value.code == "E10001" and "bert_base" in err.value.solution
    path = zoo.save("seed_addge", str(tmp_path / "o"), small=True)
    assert path == str(tmp_path / "o" / "seed_addge.onnx")
    onnx.checker.check_model(onnx.load(path), full_check=True)


# -- every model -----------------------------------------------------------------------
@pytest.mark.parametrize("name", list(zoo.MODELS))
def test_small_model_checks_and_runs_finite(name, small_models):
    model = small_models[name]
    onnx.checker.check_model(model, full_check=True)
    outs, _ = _run(model)
    assert {k: v.shape for k, v in outs.items()} == SMALL_OUTPUTS[name]
    for value in outs.values():
        if value.dtype != np.bool_:
            assert np.isfinite(value).all()
            assert 1e-3 < np.abs(value).max() < 1e3     # well-conditioned, not collapsed


@pytest.mark.parametrize("name", list(zoo.MODELS))
def test_build_is_deterministic(name, small_models):
    assert zoo.build(name, small=True).SerializeToString() == small_models[name].SerializeToString()


def test_names_follow_the_pytorch_exporter(small_models):
    r50 = small_models["resnet50"]
    nodes = {n.name for n in r50.graph.node}
    inits = {t.name for t in r50.graph.initializer}
    assert {"/conv1/Conv", "/layer1/layer1.0/conv1/Conv", "/layer1/layer1.0/downsample/downsample.0/Conv",
            "/layer1/layer1.0/relu_2/Relu", "/layer4/layer4.2/Add", "/fc/Gemm"} <= nodes
    assert {"layer1.0.conv1.weight", "layer1.0.bn1.running_var", "layer1.0.downsample.1.weight",
            "fc.bias"} <= inits
    bert = {n.name for n in small_models["bert_base"].graph.node}
    assert {"/encoder/layer.1/attention/self/query/MatMul", "/encoder/layer.0/output/LayerNorm/Sqrt",
            "/embeddings/word_embeddings/Gather", "/pooler/activation/Tanh"} <= bert
    for m in small_models.values():
        assert len({n.name for n in m.graph.node}) == len(m.graph.node)


# -- the seeds -------------------------------------------------------------------------
def test_seed_elementwise_models_compute_what_they_claim(small_models):
    outs, f = _run(small_models["seed_addge"])
    np.testing.assert_array_equal(outs["output"], (f["x"] + f["y"]) >= f["z"])
    outs, f = _run(small_models["seed_mulreducesum"])
    np.testing.assert_allclose(outs["output"], (f["x"] * f["y"]).sum(-1), rtol=1e-5, atol=1e-5)
    red = [n for n in small_models["seed_mulreducesum"].graph.node if n.op_type == "ReduceSum"][0]
    assert len(red.input) == 2   # axes as an input


def test_seed_testmodel_is_three_conv_bn_relu():
    ops = [n.op_type for n in zoo.build("seed_testmodel").graph.node if n.op_type != "Constant"]
    assert ops == ["Conv", "BatchNormalization", "Relu"] * 3 + ["GlobalAveragePool", "Flatten", "Gemm"]


# -- CNNs ------------------------------------------------------------------------------
def test_resnet50_full_has_53_conv_and_53_bn():
    ops = _ops(zoo.build("resnet50"))
    assert ops["Conv"] == 53 and ops["BatchNormalization"] == 53
    assert ops["Add"] == 16 and ops["Relu"] == 49 and ops["MaxPool"] == 1 and ops["Gemm"] == 1


def test_resnet101_small_keeps_full_depth(small_models):
    ops = _ops(small_models["resnet101"])
    assert ops["Conv"] == 104 and ops["BatchNormalization"] == 104 and ops["Add"] == 33


def test_densenet121_full_has_torchvisions_layer_counts():
    ops = _ops(zoo.build("densenet121"))
    # 58 dense layers x 2 convs + 3 transitions + conv0; every dense layer and block concatenates
    assert ops["Conv"] == 120 and ops["BatchNormalization"] == 121 and ops["Relu"] == 121
    assert ops["Concat"] == 58 + 4 and ops["AveragePool"] == 3 and ops["Gemm"] == 1


def test_densenet_concatenates_every_earlier_feature_map(small_models):
    concats = [n for n in small_models["densenet121"].graph.node if n.op_type == "Concat"]
    first, second = concats[0], concats[1]
    assert len(first.input) == 1 and len(second.input) == 2    # torch.cat([x]) / cat([x, f1])
    assert second.input[0] == first.input[0]


@pytest.mark.parametrize("name,options,shapes", [
    ("resnet50", {"batch": 3}, {"output": (3, 10)}),
    ("densenet121", {"batch": 2}, {"output": (2, 10)}),
    ("bert_base", {"batch": 2, "seq": 4}, {"last_hidden_state": (2, 4, 32), "pooler_output": (2, 32)}),
])
def test_batch_and_sequence_options_fix_the_shapes(name, options, shapes):
    model = zoo.build(name, small=True, **options)
    onnx.checker.check_model(model, full_check=True)
    outs, _ = _run(model)
    assert {k: v.shape for k, v in outs.items()} == shapes


def test_efficientnet_has_depthwise_se_silu_and_skip(small_models):
    model = small_models["efficientnet_b4"]
    inits = {t.name: t for t in model.graph.initializer}
    depthwise = [n for n in model.graph.node if n.op_type == "Conv"
                 and helper.get_attribute_value(next(a for a in n.attribute if a.name == "group")) > 1]
    assert depthwise
    for n in depthwise:   # group == channels
        group = helper.get_attribute_value(next(a for a in n.attribute if a.name == "group"))
        w = inits[n.input[1]]
        assert w.dims[0] == group and w.dims[1] == 1
    ops = _ops(model)
    assert ops["GlobalAveragePool"] == len(depthwise) + 1   # one SE per block + head
    adds = sorted(n.name for n in model.graph.node if n.op_type == "Add")
    # stride-1 blocks with cin == cout: the repeats, and stage 1 (8 -> 8 at width 0.25)
    assert adds == ["/features/features.1/features.1.0/Add", "/features/features.2/features.2.1/Add",
                    "/features/features.5/features.5.1/Add"]
    assert ops["Sigmoid"] == ops["Mul"]        # every SiLU and SE gate is Sigmoid + Mul


# -- transformers ----------------------------------------------------------------------
LN_CHAIN = ["ReduceMean", "Sub", "Pow", "ReduceMean", "Add", "Sqrt", "Div", "Mul", "Add"]


def _layernorm_chains(model):
    by_scope = {}
    for n in model.graph.node:
        if "/LayerNorm/" in n.name and n.op_type != "Constant":
            by_scope.setdefault(n.name.rsplit("/", 1)[0], []).append(n)
    return by_scope


def test_bert_layernorm_is_decomposed_opset17(small_models):
    model = small_models["bert_base"]
    assert model.opset_import[0].version == 17
    assert "LayerNormalization" not in _ops(model)
    chains = _layernorm_chains(model)
    assert len(chains) == 1 + 2 * 2      # embeddings + 2 per layer
    for nodes in chains.values():
        assert [n.op_type for n in nodes] == LN_CHAIN
        mean = nodes[0]
        assert len(mean.input) == 1
        assert list(helper.get_attribute_value(next(a for a in mean.attribute if a.name == "axes"))) == [-1]


def test_bert_opset18_moves_reducemean_axes_to_an_input(small_models):
    m18 = zoo.build("bert_base", small=True, opset=18)
    onnx.checker.check_model(m18, full_check=True)
    assert m18.opset_import[0].version == 18
    consts = {n.output[0]: onnx.numpy_helper.to_array(n.attribute[0].t) for n in m18.graph.node
              if n.op_type == "Constant"}
    means = [n for n in m18.graph.node if n.op_type == "ReduceMean"]
    assert len(means) == 10
    for n in means:
        assert len(n.input) == 2 and not any(a.name == "axes" for a in n.attribute)
        assert consts[n.input[1]].tolist() == [-1]
    # Same weights, same numbers.
    out17, feeds = _run(small_models["bert_base"])
    out18, _ = _run(m18, feeds)
    for k in out17:
        np.testing.assert_allclose(out18[k], out17[k], rtol=1e-5, atol=1e-5)


def test_bert_attention_mask_changes_the_result(small_models):
    model = small_models["bert_base"]
    ids = np.arange(8, dtype=np.int64)[None] + 3
    full, _ = _run(model, {"input_ids": ids, "attention_mask": np.ones((1, 8), np.int64)})
    masked = np.ones((1, 8), np.int64)
    masked[0, -3:] = 0
    part, _ = _run(model, {"input_ids": ids, "attention_mask": masked})
    assert not np.allclose(full["last_hidden_state"], part["last_hidden_state"], atol=1e-3)
    # Masked-out tokens' content must not matter to the others.
    ids2 = ids.copy()
    ids2[0, -1] = 99
    part2, _ = _run(model, {"input_ids": ids2, "attention_mask": masked})
    np.testing.assert_allclose(part2["last_hidden_state"][0, :5], part["last_hidden_state"][0, :5], atol=1e-4)


def test_gpt2_is_causal_with_packed_qkv(small_models):
    model = small_models["gpt2"]
    ops = _ops(model)
    assert ops["Split"] == 2 and ops["Where"] == 2 and ops["Slice"] == 2 and ops["LayerNormalization"] == 5
    ids = np.array([[5, 17, 3, 99, 42, 8, 0, 61]], np.int64)
    a, _ = _run(model, {"input_ids": ids})
    ids[0, -1] = 7
    b, _ = _run(model, {"input_ids": ids})
    np.testing.assert_allclose(a["logits"][0, :-1], b["logits"][0, :-1], atol=1e-5)
    assert not np.allclose(a["logits"][0, -1], b["logits"][0, -1], atol=1e-3)


def test_vit_structure(small_models):
    ops = _ops(small_models["vit_base"])
    assert ops["LayerNormalization"] == 2 * 2 + 1 and ops["Softmax"] == 2 and ops["Erf"] == 2
    assert ops["Concat"] == 1 and ops["Conv"] == 1 and ops["Gemm"] == 1


# -- the shared snippets against onnxruntime's own ops -----------------------------------
def _one_node(op, inputs, attrs, opset, n_out_shape):
    x = helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, list(inputs["x"].shape))
    extra = [onnx.numpy_helper.from_array(v, k) for k, v in inputs.items() if k != "x"]
    node = helper.make_node(op, ["x"] + [t.name for t in extra], ["y"], **attrs)
    y = helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, list(n_out_shape))
    model = helper.make_model(helper.make_graph([node], "ref", [x], [y], extra),
                              opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 9
    return _session(model).run(None, {"x": inputs["x"]})[0]


def _snippet(fn, x, opset=17):
    g = GraphBuilder("snippet", 7, opset=opset)
    inp = g.input("x", np.float32, x.shape)
    g.output(fn(g, inp), "y", np.float32, x.shape)
    model = g.model()
    onnx.checker.check_model(model, full_check=True)
    params = {t.name: onnx.numpy_helper.to_array(t) for t in model.graph.initializer}
    return _session(model).run(None, {"x": x})[0], params


@pytest.mark.parametrize("approx", ["none", "tanh"])
def test_gelu_snippets_match_onnx_gelu(approx):
    x = np.random.default_rng(1).standard_normal((4, 16)).astype(np.float32) * 3
    fn = L.gelu_erf if approx == "none" else L.gelu_tanh
    got, _ = _snippet(lambda g, v: fn(g, ROOT / "act", v), x)
    want = _one_node("Gelu", {"x": x}, {"approximate": approx}, 20, x.shape)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("opset", [17, 18])
def test_decomposed_layernorm_matches_layernormalization(opset):
    x = np.random.default_rng(2).standard_normal((2, 3, 16)).astype(np.float32) * 2 + 1
    got, params = _snippet(lambda g, v: L.layernorm_decomposed(g, ROOT / "LayerNorm", v, 16, 1e-5), x, opset)
    want = _one_node("LayerNormalization", {"x": x, "w": params["LayerNorm.weight"], "b": params["LayerNorm.bias"]},
                     {"axis": -1, "epsilon": 1e-5}, 17, x.shape)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)


def test_save_switches_to_external_data_above_the_limit(tmp_path, monkeypatch):
    monkeypatch.setattr(zoo, "_EXTERNAL_DATA_BYTES", 0)
    path = zoo.save("seed_testmodel", str(tmp_path), small=True)
    assert (tmp_path / "seed_testmodel.onnx.data").is_file()
    loaded = onnx.load(path)      # loads the external weights back
    built = zoo.build("seed_testmodel", small=True)
    assert loaded.graph.node == built.graph.node
    for a, b in zip(loaded.graph.initializer, built.graph.initializer):
        assert a.name == b.name
        np.testing.assert_array_equal(onnx.numpy_helper.to_array(a), onnx.numpy_helper.to_array(b))
