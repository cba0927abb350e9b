"""Hypothesis strategies for hostile ONNX models.

Why hypothesis (and not atheris): our inputs are structured -- graphs whose nodes follow the
ONNX op schemas -- and the bugs live in how attribute values, shapes and constants combine,
not in the protobuf bytes (byte-level damage is the .om mutator's job, and the ONNX parser's
is protobuf's).  Hypothesis draws such structures directly from the schemas, replays a
seed exactly (the suite runs derandomized), shrinks a failure to a minimal model, runs in
pytest, and is pure Python (atheris needs a libFuzzer build of the interpreter's
extensions to guide it, and its coverage feedback buys little against schema-shaped input).

A model is drawn as a *spec* -- plain JSON data (`spec_to_model` builds the ModelProto) -- so
a crasher is kept in the corpus as a small JSON file, never as a model file.
"""
from __future__ import annotations

import math

import numpy as np
import onnx
from hypothesis import strategies as st
from onnx import TensorProto, helper, numpy_helper

DTYPES = {"float32": TensorProto.FLOAT, "float16": TensorProto.FLOAT16, "int64": TensorProto.INT64,
          "int32": TensorProto.INT32, "bool": TensorProto.BOOL, "int8": TensorProto.INT8, "uint8": TensorProto.UINT8}
INTS = [-(1 << 63), -(1 << 31), -5, -2, -1, 0, 1, 2, 3, 4, 7, 64, 1 << 20, 1 << 31, (1 << 63) - 1]
FLOATS = [0.0, -0.0, 1e-12, 1e-5, 0.5, -1.0, 2.0, 1e30, -1e30, math.inf, -math.inf, math.nan]
STRINGS = ["constant", "reflect", "edge", "wrap", "nearest", "linear", "cubic", "NOTSET", "SAME_UPPER", "SAME_LOWER",
           "VALID", "half_pixel", "asymmetric", "align_corners", "round_prefer_floor", "floor", "ceil", "DCR", "CRD",
           "tanh", "none", "", "bogus", "\u00b2", "x" * 300]
DIMS = [1, 1, 1, 2, 2, 3, 4, 4, 5, 8, 0, 1 << 16, 1 << 40]


def supported_ops(opset: int = 17) -> list:
    """ONNX ops our IR accepts that the default domain defines at `opset`."""
    from ge.ops.registry import all_ops
    out = []
    for name in sorted(all_ops()):
        try:
            onnx.defs.get_schema(name, opset, "")
        except Exception:
            continue
        out.append(name)
    return out


@st.composite
def shapes(draw, max_rank=4):
    return [draw(st.sampled_from(DIMS)) for _ in range(draw(st.integers(0, max_rank)))]


@st.composite
def constants(draw, dtype=None):
    """A small constant: dtype, shape (at most 64 elements) and values, as JSON data."""
    dtype = dtype or draw(st.sampled_from(sorted(DTYPES)))
    shape = [draw(st.sampled_from([1, 1, 2, 3, 4])) for _ in range(draw(st.integers(0, 3)))]
    count = math.prod(shape)
    if dtype.startswith("float"):
        values = [draw(st.sampled_from(FLOATS + [1.0, 0.25, 3.0])) for _ in range(count)]
    elif dtype == "bool":
        values = [draw(st.booleans()) for _ in range(count)]
    else:
        info = np.iinfo(dtype)
        values = [max(min(draw(st.sampled_from(INTS)), int(info.max)), int(info.min)) for _ in range(count)]
    return {"dtype": dtype, "shape": shape, "values": values}


def _attribute(draw, kind):
    A = onnx.AttributeProto
    if kind == A.INT:
        return draw(st.sampled_from(INTS))
    if kind == A.INTS:
        return [draw(st.sampled_from(INTS)) for _ in range(draw(st.integers(0, 5)))]
    if kind == A.FLOAT:
        return draw(st.sampled_from(FLOATS))
    if kind == A.FLOATS:
        return [draw(st.sampled_from(FLOATS)) for _ in range(draw(st.integers(0, 4)))]
    if kind == A.STRING:
        return draw(st.sampled_from(STRINGS))
    if kind == A.STRINGS:
        return [draw(st.sampled_from(STRINGS)) for _ in range(draw(st.integers(0, 3)))]
    if kind == A.TENSOR:
        return {"tensor": draw(constants())}
    return None


_TYPE_NAMES = {f"tensor({'float' if k == 'float32' else k})": k for k in DTYPES}


def _allowed(schema, type_str: str) -> list:
    """Our dtypes a formal parameter of `schema` may take (a type variable's constraint, or
    the fixed type it names)."""
    for constraint in schema.type_constraints:
        if constraint.type_param_str == type_str:
            return [_TYPE_NAMES[t] for t in constraint.allowed_type_strs if t in _TYPE_NAMES]
    return [_TYPE_NAMES[type_str]] if type_str in _TYPE_NAMES else []


@st.composite
def specs(draw, ops=None):
    """A model spec: 1 to 4 nodes over a graph input and constants, inputs typed as the op
    schemas allow (mostly), attributes drawn from the schema's attribute types."""
    ops = ops or supported_ops()
    opset = draw(st.sampled_from([13, 17, 21]))
    x_dtype = draw(st.sampled_from(["float32", "float32", "float32", "float16", "int64", "bool"]))
    x_shape = draw(shapes())
    tensors = [("x", x_dtype)]
    consts, nodes = {}, []
    for n in range(draw(st.integers(1, 4))):
        op = draw(st.sampled_from(ops))
        try:
            schema = onnx.defs.get_schema(op, opset, "")
        except Exception:
            continue
        chosen = {}   # type variable -> dtype, as the node's inputs fix them
        inputs = []
        formal = list(schema.inputs)
        count = draw(st.integers(schema.min_input, min(schema.max_input, schema.min_input + 3)))
        for i in range(count):
            param = formal[min(i, len(formal) - 1)] if formal else None
            allowed = _allowed(schema, param.type_str) if param is not None else []
            want = chosen.get(param.type_str) if param is not None else None
            if want is None and allowed and draw(st.integers(0, 9)):   # now and then, a type it refuses
                candidates = [d for d in allowed if any(t[1] == d for t in tensors)] or allowed
                want = draw(st.sampled_from(sorted(candidates)))
            if param is not None and want is not None:
                chosen[param.type_str] = want
            choice = draw(st.integers(0, 3))
            matching = [t for t in tensors if want is None or t[1] == want]
            if choice == 0 and i >= schema.min_input:
                inputs.append("")
            elif choice == 1 or not matching:
                name = f"c{n}_{i}"
                consts[name] = draw(constants(want))
                inputs.append(name)
            else:
                inputs.append(draw(st.sampled_from(matching))[0])
        attrs = {}
        for name, spec in sorted(schema.attributes.items()):
            if draw(st.integers(0, 2)) == 0:
                value = _attribute(draw, spec.type)
                if value is not None:
                    attrs[name] = value
        if draw(st.integers(0, 19)) == 0:
            attrs["bogus_attr"] = 1
        outputs = [f"t{n}_{j}" for j in range(max(schema.min_output, 1) if schema.max_output >= 1 else 0)]
        nodes.append({"op": op, "name": f"n{n}", "inputs": inputs, "outputs": outputs, "attrs": attrs})
        for j, out in enumerate(outputs):
            param = list(schema.outputs)[min(j, len(schema.outputs) - 1)] if schema.outputs else None
            allowed = _allowed(schema, param.type_str) if param is not None else []
            dtype = chosen.get(param.type_str) if param is not None else None
            tensors.append((out, dtype or (allowed[0] if allowed else x_dtype)))
    if not nodes:
        nodes.append({"op": "Relu", "name": "n0", "inputs": ["x"], "outputs": ["t0_0"], "attrs": {}})
        tensors.append(("t0_0", x_dtype))
    out = nodes[-1]["outputs"][0] if nodes[-1]["outputs"] else "x"
    out_dtype = dict(tensors).get(out, x_dtype)
    return {"opset": opset, "x": {"dtype": x_dtype, "shape": x_shape}, "consts": consts, "nodes": nodes,
            "output": out, "output_dtype": out_dtype}


def _tensor(name, c):
    array = np.array(c["values"], dtype=np.float64 if c["dtype"].startswith("float") else None)
    with np.errstate(over="ignore"):
        return numpy_helper.from_array(array.astype(c["dtype"]).reshape(c["shape"]), name)


def spec_to_model(spec: dict) -> bytes:
    """The ONNX bytes of a spec (a model onnxruntime may well refuse: that is the point)."""
    nodes = []
    for n in spec["nodes"]:
        schema = onnx.defs.get_schema(n["op"], spec["opset"], "")
        node = helper.make_node(n["op"], n["inputs"], n["outputs"], name=n["name"])
        for key, value in n["attrs"].items():
            kind = schema.attributes[key].type if key in schema.attributes else onnx.AttributeProto.INT
            value = _tensor(key, value["tensor"]) if isinstance(value, dict) else value
            node.attribute.append(helper.make_attribute(key, value, attr_type=kind))
        nodes.append(node)
    x = helper.make_tensor_value_info("x", DTYPES[spec["x"]["dtype"]], spec["x"]["shape"])
    y = helper.make_tensor_value_info(spec["output"], DTYPES[spec.get("output_dtype", spec["x"]["dtype"])], None)
    inits = [_tensor(name, c) for name, c in sorted(spec["consts"].items())]
    graph = helper.make_graph(nodes, "fuzz", [x], [y], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", spec["opset"])])
    return model.SerializeToString()
