"""AMCT's custom ops: attributes per Huawei's ONNX operator spec, their errors, the opset
converter bypass, and AMCT-style deploy models against onnxruntime on their standard-ONNX
lowering (simulator/amct_reference.py)."""
import numpy as np
import onnx
import pytest
from onnx import helper, numpy_helper

from atc_py.zoo import build
from atc_py.zoo.amct import amct_deploy
from ge.errors import AtcError
from ge.onnx_import import import_model
from simulator.amct_reference import to_standard_onnx

from helpers import fuse_model as fuse, lower, op_types, random_feeds, run_ir, run_ort

RNG = np.random.default_rng(11)


def one_node(op_type, x, attrs, opset=17, extra=()):
    inputs = [helper.make_tensor_value_info("x", helper.np_dtype_to_tensor_dtype(x.dtype), list(x.shape))]
    node = helper.make_node(op_type, ["x"] + [n for n, _ in extra], ["y"], **attrs)
    graph = helper.make_graph([node], "g", inputs, [onnx.ValueInfoProto(name="y")],
                              [numpy_helper.from_array(a, n) for n, a in extra])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 8
    return model


def run(model, x):
    return run_ir(lower(model), {"x": x})["y"]


@pytest.mark.parametrize("mode,expect", [("Round", [2, 2, -2, 4]), ("Floor", [1, 2, -3, 3]),
                                         ("Ceil", [2, 3, -2, 4]), ("Trunc", [1, 2, -2, 3])])
def test_ascend_quant_round_modes(mode, expect):
    x = np.array([0.75, 1.25, -1.25, 1.75], np.float32)
    y = run(one_node("AscendQuant", x, dict(scale=2.0, offset=0.0, round_mode=mode)), x)
    assert y.dtype == np.int8 and y.tolist() == expect


def test_ascend_quant_sqrt_mode_offset_and_saturation():
    x = np.array([1.0, -100.0, 100.0, 0.0], np.float32)
    y = run(one_node("AscendQuant", x, dict(scale=2.0, offset=3.0, sqrt_mode=1)), x)
    assert y.tolist() == [7, -128, 127, 3]            # x * 2 * 2 + 3, saturated


def test_ascend_dequant_uint64_scale_relu_and_dtype():
    x = np.array([[100, -100, 7]], np.int32)
    deq = np.array([0.5, 0.25, 2.0], np.float32).view(np.uint32).astype(np.uint64)
    y = run(one_node("AscendDequant", x, dict(relu_flag=1, dtype=1), extra=[("deq", deq)]), x)
    assert y.dtype == np.float16 and y.tolist() == [[50.0, 0.0, 14.0]]


def test_ascend_anti_quant_offset_sign():
    x = np.array([10, -10], np.int8)
    y = run(one_node("AscendAntiQuant", x, dict(scale=0.5, offset=2.0)), x)
    assert y.tolist() == [4.0, -6.0]                  # (x - offset) * scale, the ONNX plugin's sign


@pytest.mark.parametrize("op,attrs,extra,word", [
    ("AscendQuant", dict(offset=0.0), (), "scale"),
    ("AscendQuant", dict(scale=1.0, offset=0.0, round_mode="Nearest"), (), "round_mode"),
    ("AscendQuant", dict(scale=1.0, offset=0.0, dst_type="INT4"), (), "dst_type"),
    ("AscendQuant", dict(scale=0.0, offset=0.0), (), "scale"),
    ("AscendQuant", dict(scale=1.0, offset=0.0, sqrt_mode=5), (), "sqrt_mode"),
    ("AscendAntiQuant", dict(scale=1.0, offset=0.0, dtype=3), (), "dtype"),
    ("AscendDequant", dict(), (("deq", np.array([1 << 40], np.uint64)),), "high 32 bits"),
])
def test_custom_op_attribute_errors(op, attrs, extra, word):
    x = np.zeros(2, np.int32 if op == "AscendDequant" else np.int8 if op == "AscendAntiQuant" else np.float32)
    with pytest.raises(AtcError) as err:
        lower(one_node(op, x, attrs, extra=extra))
    assert err.value.code == "E16004" and word in err.value.message and "%s" not in err.value.message


def test_old_opset_with_amct_ops_bypasses_the_converter():
    x = np.array([1.0, 2.0], np.float32)
    nodes = [helper.make_node("AscendQuant", ["x"], ["q"], scale=4.0, offset=0.0),
             helper.make_node("AscendAntiQuant", ["q"], ["y"], scale=0.25, offset=0.0)]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", 1, [2])], [onnx.ValueInfoProto(name="y")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 11)])
    model.ir_version = 6
    graph_ir = lower(model)
    assert graph_ir.opset == 13 and op_types(graph_ir) == ["AscendQuant", "AscendAntiQuant"]
    assert run_ir(graph_ir, {"x": x})["y"].tolist() == [1.0, 2.0]


def test_converter_failure_message_is_formatted():
    bad = helper.make_node("Upsample", ["x"], ["y"], mode="bogus")
    graph = helper.make_graph([bad], "g", [helper.make_tensor_value_info("x", 1, [1, 1, 2, 2])], [onnx.ValueInfoProto(name="y")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 7)])
    model.ir_version = 4
    try:
        import_model(model)
    except AtcError as err:
        assert "%s" not in err.message and "%lld" not in err.message


@pytest.mark.parametrize("name", ["resnet50", "mobilenet_v2", "bert_base"])
def test_amct_deploy_models_fuse_into_int8_kernels_and_match_onnxruntime(name):
    model = build(name, small=True)
    deploy = amct_deploy(model, [random_feeds(model, seed=s) for s in range(2)])
    graph, results = fuse(deploy)
    fused = results["QuantConvBNReluFusionPass"].changes + results["QuantMatMulBiasActFusionPass"].changes
    cubes = sum(1 for n in deploy.graph.node if n.op_type == "AscendDequant")
    assert fused == cubes and "AscendDequant" not in op_types(graph)
    assert not [n for n in graph.nodes if n.op_type in ("Conv", "Gemm", "MatMul") and n.inputs[0].desc.dtype == np.int8]
    feeds = random_feeds(deploy, seed=9)
    expected = run_ort(to_standard_onnx(deploy), feeds)
    got = run_ir(graph, feeds)
    for key, ref in expected.items():
        np.testing.assert_allclose(got[key], ref, rtol=1e-5, atol=1e-5)


def test_the_reference_of_a_plain_model_is_its_file_decided_without_reading_its_weights(tmp_path):
    """--compare hands onnxruntime the file itself unless it holds AMCT ops; telling which
    reads the nodes only, not the external weights (the file below has none to read)."""
    from simulator.compare import reference_model
    w = numpy_helper.from_array(np.ones((4, 4), np.float32), "w")
    model = helper.make_model(helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["y"])], "g",
        [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [1, 4])],
        [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [1, 4])], [w]))
    path = tmp_path / "m.onnx"
    onnx.save_model(model, str(path), save_as_external_data=True, all_tensors_to_one_file=True,
                    location="m.data", size_threshold=0)
    (tmp_path / "m.data").unlink()
    assert reference_model(str(path)) == str(path)
