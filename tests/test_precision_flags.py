"""Precision overrides by ONNX node name or op type, through fusion: --keep_dtype,
--customize_dtypes, --modify_mixlist, --op_precision_mode, --op_select_implmode +
--optypelist_for_implmode.  Checked by the dtype and implementation each kernel records in
the .om, by the report line per changed kernel, and by atc-sim --compare."""
from __future__ import annotations

import json

import numpy as np
import pytest

from codegen.om_import import load_om_graph

import models_small
from test_atc_flags import atc, base, failed, run_sim, work  # noqa: F401  (fixtures)


@pytest.fixture
def mlp(work):
    return models_small.save(models_small.mlp(), work / "mlp.onnx")


def kernels(om) -> dict:
    """kernel name -> (op type, compute dtype, impl mode, origin ONNX nodes)."""
    loaded = load_om_graph(str(om))
    return {n.name: (n.op_type, str(loaded.compute_dtypes[n.name]), n.attrs.get("op_impl_mode", ""), n.origin)
            for n in loaded.graph.nodes}


def kernel_of(om, onnx_name):
    return next(v for v in kernels(om).values() if onnx_name in v[3])


def write(path, text):
    path.write_text(text)
    return path


# --------------------------------------------------------------------------- --keep_dtype

def test_keep_dtype_by_node_name_reaches_the_fused_kernel(work, capsys, mlp):
    cfg = write(work / "keep.cfg", "# keep the second layer's sigmoid in fp32\nsig\n")
    rc, text = atc(capsys, *base(mlp, work / "m"), f"--keep_dtype={cfg}", "--log=info")
    assert rc == 0, text
    fc2 = kernel_of(work / "m.om", "sig")
    assert fc2[0] == "MatMulBiasSigmoidFusionOp" and fc2[1] == "float32"     # sig was fused with fc2
    assert kernel_of(work / "m.om", "gelu")[1] == "float16"
    assert kernel_of(work / "m.om", "softmax")[1] == "float16"
    line = next(l for l in text.splitlines() if "Precision override" in l)
    assert "float16 -> float32" in line and "--keep_dtype (line 2: sig)" in line and "MatMulBiasSigmoidFusionOp" in line


def test_keep_dtype_by_op_type_and_compare_sees_fp32(work, capsys, mlp):
    cfg = write(work / "keep.cfg", "OpType::MatMulV2\nOpType::SoftmaxV2\n")
    rc, text = atc(capsys, *base(mlp, work / "m"), f"--keep_dtype={cfg}")
    assert rc == 0, text
    assert all(v[1] == "float32" for v in kernels(work / "m.om").values())
    rc, text = run_sim(capsys, "--model", work / "m.om", "--compare", mlp)
    assert rc == 0 and "(fp32) PASS" in text, text         # every kernel fp32: judged at fp32 tolerance


def test_keep_dtype_entries_that_match_nothing_warn(work, capsys, mlp):
    cfg = write(work / "keep.cfg", "no_such_node\nOpType::Conv2D\n")
    rc, text = atc(capsys, *base(mlp, work / "m"), f"--keep_dtype={cfg}")
    assert rc == 0, text
    assert text.count("W10102") == 2 and "no_such_node" in text and "Conv2D" in text


def test_keep_dtype_under_must_keep_origin_dtype_warns(work, capsys, mlp):
    cfg = write(work / "keep.cfg", "sig\n")
    rc, text = atc(capsys, *base(mlp, work / "m"), f"--keep_dtype={cfg}", "--precision_mode=must_keep_origin_dtype")
    assert rc == 0 and "W10103" in text, text


@pytest.mark.parametrize("content,words", [("OpType::\n", "line 1"), ("a::b\n", "line 1"),
                                           ("sig\nOpType::Soft max\n", "line 2")])
def test_keep_dtype_bad_lines(work, capsys, mlp, content, words):
    cfg = write(work / "keep.cfg", content)
    rc, text = atc(capsys, *base(mlp, work / "m"), f"--keep_dtype={cfg}")
    failed(rc, text, "E10001", work / "m.om")
    assert words in text and "--keep_dtype" in text


def test_keep_dtype_missing_file(work, capsys, mlp):
    rc, text = atc(capsys, *base(mlp, work / "m"), f"--keep_dtype={work / 'none.cfg'}")
    failed(rc, text, "E10001", work / "m.om")


# --------------------------------------------------------------------------- --customize_dtypes

def test_customize_dtypes_by_name_and_by_type(work, capsys, mlp):
    cfg = write(work / "custom.cfg", "gelu::InputDtype:float32,OutputDtype:float32\n"
                "OpType::SoftmaxV2:InputDtype:float16,OutputDtype:float16\n")
    rc, text = atc(capsys, *base(mlp, work / "m"), f"--customize_dtypes={cfg}", "--precision_mode=force_fp32",
                   "--log=info")
    assert rc == 0, text
    assert kernel_of(work / "m.om", "gelu")[1] == "float32"          # was already fp32: listed, unchanged
    assert kernel_of(work / "m.om", "softmax")[1] == "float16"
    assert kernel_of(work / "m.om", "sig")[1] == "float32"
    assert "float32 -> float16" in text and "OpType::SoftmaxV2" in text


def test_customize_dtypes_wins_over_keep_dtype(work, capsys, mlp):
    keep = write(work / "keep.cfg", "softmax\n")
    custom = write(work / "custom.cfg", "softmax::InputDtype:float16,OutputDtype:float16\n")
    rc, text = atc(capsys, *base(mlp, work / "m"), f"--keep_dtype={keep}", f"--customize_dtypes={custom}",
                   "--precision_mode=force_fp32")
    assert rc == 0, text
    assert kernel_of(work / "m.om", "softmax")[1] == "float16"


@pytest.mark.parametrize("content,words", [
    ("gelu::InputDtype:float16,OutputDtype:float32\n", "mixes float16 and float32"),
    ("gelu::InputDtype:bfloat16\n", "bfloat16"),
    ("gelu:InputDtype:float16\n", "line 1"),
    ("gelu::float16\n", "InputDtype"),
    ("OpType::Gelu\n", "OpType::<type>:InputDtype"),
    ("gelu::InputDtype:int32\n", "no float type")])
def test_customize_dtypes_bad_lines(work, capsys, mlp, content, words):
    cfg = write(work / "custom.cfg", content)
    rc, text = atc(capsys, *base(mlp, work / "m"), f"--customize_dtypes={cfg}")
    failed(rc, text, "E10001", work / "m.om")
    assert words in text


# --------------------------------------------------------------------------- --modify_mixlist

def test_modify_mixlist_moves_types_between_lists(work, capsys, mlp):
    mix = write(work / "ops_info.json", json.dumps({"black-list": {"to-add": ["MatMulV2"]},
                                                    "white-list": {"to-add": ["SoftmaxV2"]}}))
    rc, text = atc(capsys, *base(mlp, work / "m"), f"--modify_mixlist={mix}", "--precision_mode=allow_mix_precision")
    assert rc == 0, text
    assert kernel_of(work / "m.om", "fc1")[1] == "float32"     # cube kernels off to the block list
    assert kernel_of(work / "m.om", "fc2")[1] == "float32"
    assert kernel_of(work / "m.om", "softmax")[1] == "float16"  # gray -> trust list
    rc, text = atc(capsys, *base(mlp, work / "plain"), "--precision_mode=allow_mix_precision")
    assert kernel_of(work / "plain.om", "fc1")[1] == "float16"
    assert kernel_of(work / "plain.om", "softmax")[1] == "float32"


def test_modify_mixlist_white_list_to_remove(work, capsys, mlp):
    mix = write(work / "ops_info.json", json.dumps({"white-list": {"to-remove": ["Gelu"]}}))
    rc, text = atc(capsys, *base(mlp, work / "m"), f"--modify_mixlist={mix}", "--precision_mode=allow_mix_precision")
    assert rc == 0, text
    assert kernel_of(work / "m.om", "gelu")[1] == "float32"    # its fused GEMM left the trust list
    assert kernel_of(work / "m.om", "sig")[1] == "float16"


def test_modify_mixlist_without_mixed_precision_warns(work, capsys, mlp):
    mix = write(work / "ops_info.json", json.dumps({"black-list": {"to-add": ["MatMulV2"]}}))
    rc, text = atc(capsys, *base(mlp, work / "m"), f"--modify_mixlist={mix}")
    assert rc == 0 and "W10103" in text, text
    assert kernel_of(work / "m.om", "fc1")[1] == "float16"


@pytest.mark.parametrize("content,words", [("{not json", "not valid JSON"),
                                           (json.dumps({"red-list": {}}), "red-list"),
                                           (json.dumps({"black-list": {"to-move": []}}), "to-move"),
                                           (json.dumps({"black-list": {"to-add": "Conv2D"}}), "list of op type")])
def test_modify_mixlist_bad_files(work, capsys, mlp, content, words):
    mix = write(work / "ops_info.json", content)
    rc, text = atc(capsys, *base(mlp, work / "m"), f"--modify_mixlist={mix}", "--precision_mode=allow_mix_precision")
    failed(rc, text, "E10001", work / "m.om")
    assert words in text


# --------------------------------------------------------------------------- implementation modes

def test_op_precision_mode_by_type_and_by_node_name(work, capsys, mlp):
    ini = write(work / "op_precision.ini", "[ByOpType]\nGelu=high_performance\nSigmoid=high_performance\n"
                "[ByNodeName]\nsig=high_precision\n")
    rc, text = atc(capsys, *base(mlp, work / "m"), f"--op_precision_mode={ini}", "--log=info")
    assert rc == 0, text
    assert kernel_of(work / "m.om", "gelu")[2] == "high_performance"
    assert kernel_of(work / "m.om", "sig")[2] == "high_precision"           # node name wins over type
    assert kernel_of(work / "m.om", "softmax")[2] == ""
    assert "impl high_performance" in text and "--op_precision_mode (line 2: OpType::Gelu)" in text


def test_op_precision_mode_without_sections_is_by_type(work, capsys, mlp):
    ini = write(work / "op_precision.ini", "SoftmaxV2=high_performance\n")
    rc, text = atc(capsys, *base(mlp, work / "m"), f"--op_precision_mode={ini}")
    assert rc == 0, text
    assert kernel_of(work / "m.om", "softmax")[2] == "high_performance"


def test_op_precision_mode_warnings(work, capsys, mlp):
    ini = write(work / "op_precision.ini", "[ByOpType]\nGatherV2=support_out_of_bound_index\nConv2D=high_precision\n"
                "MatMulV2=high_precision\n")
    rc, text = atc(capsys, *base(mlp, work / "m"), f"--op_precision_mode={ini}", "--op_select_implmode=high_precision")
    assert rc == 0, text
    assert "W10104" in text and "support_out_of_bound_index" in text      # accepted, no effect here
    assert "W10103" in text                                                # op_select_implmode ignored
    assert "[Conv2D], which no kernel" in text
    # MatMulV2 names the fused GEMMs, whose GELU / sigmoid epilogue has two implementations
    assert kernel_of(work / "m.om", "fc1")[2] == kernel_of(work / "m.om", "fc2")[2] == "high_precision"


def test_impl_mode_on_kernels_with_one_implementation_warns(work, capsys):
    two = models_small.save(models_small.two_inputs(), work / "two.onnx")
    ini = write(work / "op_precision.ini", "[ByNodeName]\nrelu=high_performance\n")
    rc, text = atc(capsys, *base(two, work / "t"), f"--op_precision_mode={ini}")
    assert rc == 0, text
    assert "node [relu], but no kernel it names has a high_performance/high_precision variant" in text


@pytest.mark.parametrize("content,words", [("[ByOpType]\nGelu=fast\n", "line 2"), ("[ByKernel]\n", "ByKernel"),
                                           ("Gelu high_precision\n", "key=mode")])
def test_op_precision_mode_bad_lines(work, capsys, mlp, content, words):
    ini = write(work / "op_precision.ini", content)
    rc, text = atc(capsys, *base(mlp, work / "m"), f"--op_precision_mode={ini}")
    failed(rc, text, "E10001", work / "m.om")
    assert words in text


def test_op_select_implmode_with_optypelist(work, capsys, mlp):
    rc, text = atc(capsys, *base(mlp, work / "m"), "--op_select_implmode=high_performance",
                   "--optypelist_for_implmode=Gelu")
    assert rc == 0, text
    assert kernel_of(work / "m.om", "gelu")[2] == "high_performance"
    assert kernel_of(work / "m.om", "sig")[2] == ""


def test_op_select_implmode_alone_applies_to_every_kernel_with_two_implementations(work, capsys, mlp):
    rc, text = atc(capsys, *base(mlp, work / "m"), "--op_select_implmode=high_performance_for_all")
    assert rc == 0, text
    assert {kernel_of(work / "m.om", n)[2] for n in ("gelu", "sig", "softmax")} == {"high_performance"}


@pytest.mark.parametrize("args,words", [(("--op_select_implmode=fastest",), "high_performance"),
                                        (("--optypelist_for_implmode=Gelu",), "--op_select_implmode"),
                                        (("--op_select_implmode=high_precision_for_all",
                                          "--optypelist_for_implmode=Gelu"), "high_precision"),
                                        (("--op_select_implmode=high_precision", "--optypelist_for_implmode=Gelu,"),
                                         "empty entry")])
def test_impl_mode_refusals(work, capsys, mlp, args, words):
    rc, text = atc(capsys, *base(mlp, work / "m"), *args)
    failed(rc, text, "E10001", work / "m.om")
    assert words in text
