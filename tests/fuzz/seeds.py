"""The models fuzzing starts from: small, generated, never committed.

`SEEDS` name builders of ONNX models; `om_seed(name, folder)` compiles one with atc and
returns the .om bytes.  "mixed" has a fused conv, an autofused element-wise group (the JSON
sub-graph the .om carries), a MatMul and a super kernel; the zoo seeds add MHA and
LayerNorm kernels.
"""
from __future__ import annotations

import functools
import os

import numpy as np
from onnx import TensorProto, helper, numpy_helper


def mixed_model():
    rng = np.random.default_rng(0)
    init = [numpy_helper.from_array(rng.standard_normal(s).astype(np.float32), n)
            for n, s in (("w", (4, 3, 3, 3)), ("b", (4,)), ("m", (144, 5)), ("c", (5,)), ("k", (1, 5)))]
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["conv"], name="conv", pads=[0, 0, 0, 0]),
             helper.make_node("Relu", ["conv"], ["relu"], name="relu"),
             helper.make_node("Flatten", ["relu"], ["flat"], name="flat"),
             helper.make_node("MatMul", ["flat", "m"], ["mm"], name="mm"),
             helper.make_node("Add", ["mm", "c"], ["add"], name="add"),
             helper.make_node("Mul", ["add", "k"], ["mul"], name="mul"),
             helper.make_node("Sigmoid", ["mul"], ["sig"], name="sig"),
             helper.make_node("ReduceSum", ["sig"], ["y"], name="sum", keepdims=1)]
    graph = helper.make_graph(nodes, "mixed", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 1])], init)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])




SEEDS = {"mixed": mixed_model}
ZOO_SEEDS = ("seed_testmodel", "bert_base", "efficientnet_b4")


@functools.lru_cache(maxsize=None)
def om_seed(name: str, folder: str, extra: tuple = ("--super_kernel_scope=all",)) -> bytes:
    """Compile seed `name` (a SEEDS builder or a zoo model) in `folder`; the .om's bytes."""
    import cli
    from atc_py import zoo

    os.makedirs(folder, exist_ok=True)
    if name in SEEDS:
        path = os.path.join(folder, f"{name}.onnx")
        with open(path, "wb") as f:
            f.write(SEEDS[name]().SerializeToString())
    else:
        path = zoo.save(name, folder, small=True)
    out = os.path.join(folder, name)
    cwd = os.getcwd()
    os.chdir(folder)
    try:
        import contextlib
        import io
        with contextlib.redirect_stdout(io.StringIO()):
            rc = cli.main([f"--model={path}", "--framework=5", f"--output={out}", "--soc_version=Ascend910",
                           "--precision_mode=force_fp32", *extra])
    finally:
        os.chdir(cwd)
    assert rc == 0, f"seed {name} does not compile"
    with open(out + ".om", "rb") as f:
        return f.read()
