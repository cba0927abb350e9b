"""Load an ONNX file and build the GE-like IR from it.

Everything a user can get wrong about the file surfaces here as an `AtcError`: a missing or
unreadable file, bytes that are not ONNX, external data that points outside the model's
folder, an opset outside 13..21 that cannot be converted, unknown inputs, cycles, dynamic
dimensions that `--input_shape` does not fix.  Attribute-vs-input differences between
opsets are resolved later by `ge.passes.infer_and_fold` (canonical form).
"""
from __future__ import annotations

import itertools
import math
import os
import re
from collections import Counter
from dataclasses import dataclass, field
from typing import NamedTuple, Optional, Union

import numpy as np
import onnx
from onnx import helper, numpy_helper

from ge import onnx_weights
from ge.errors import AtcError, InternalError
from ge.ir import Graph, Node, TensorDesc, Value
from ge.symbolic import Dim, is_symbol_name
from ge.ops.registry import all_ops, get_op
from ge.limits import HOST_COPIES, MAX_TENSOR_BYTES, current_budget, too_large
from ge.onnx_weights import MappedWeights
from om_format.attrs import om_holds
from ge.files import check_input, map_input, open_input

MIN_OPSET, MAX_OPSET = 13, 21
_MAX_EXTERNAL_BYTES = 1 << 40


def onnx_dtype(elem_type: int) -> np.dtype:
    try:
        return np.dtype(helper.tensor_dtype_to_np_dtype(elem_type))
    except (KeyError, TypeError, ValueError):
        raise AtcError("E16001", f"Tensor element type {elem_type} is not supported.",
                       "Convert the model to standard numeric types.")


@dataclass
class OnnxModel:
    """A parsed ONNX model whose large initializers stay in their files (ge.onnx_weights):
    `proto` marks them, `weights` holds the views; hand both to `import_model`."""

    proto: onnx.ModelProto
    weights: MappedWeights = field(default_factory=MappedWeights)


def load_model(path: str, map_min_bytes: Optional[int] = None) -> OnnxModel:
    """Read and parse an ONNX file, resolving external data inside the model's folder only.
    Initializers of at least `map_min_bytes` (default onnx_weights.MAP_MIN_BYTES) are
    memory-mapped, in the file itself or in their external data file, never copied."""
    map_min_bytes = onnx_weights.MAP_MIN_BYTES if map_min_bytes is None else map_min_bytes
    budget = current_budget()
    size = check_input(path, "--model").st_size
    budget.check_mapped(size, f"Model file [{path}]")
    mapped = map_input(path, "--model")
    model = onnx.ModelProto()
    try:
        try:
            parsed, weights = onnx_weights.skeleton(mapped.buffer, map_min_bytes)
        except onnx_weights.WireFormatUnsupported:   # protobuf parses it whole and says what is wrong
            parsed, weights = mapped.buffer, MappedWeights()
        budget.check_host(len(parsed) * HOST_COPIES, f"The host memory to convert model [{path}] (about "
                          f"{HOST_COPIES}x the {len(parsed)} bytes of it that are parsed)")
        model.ParseFromString(parsed)
    except AtcError:
        raise
    except Exception as exc:  # protobuf raises DecodeError (or RuntimeWarning-like) on bad bytes
        raise AtcError("E16001", f"Failed to parse model file [{path}] as ONNX: {exc}.",
                       "Check that the file is a complete ONNX model (not truncated).")
    del parsed
    if not model.HasField("graph") or not model.opset_import or len(model.graph.node) == 0:
        raise AtcError("E16001", f"Model file [{path}] is not a valid ONNX model: it has no graph, "
                       "no nodes or no opset_import.",
                       "Check that the file is a complete ONNX model (not truncated).")
    _check_text(model, path)
    loaded = OnnxModel(model, weights)
    _map_external_data(loaded, os.path.dirname(os.path.abspath(path)), map_min_bytes)
    return loaded


def _check_text(model: onnx.ModelProto, path: str) -> None:
    """Every name must be UTF-8 text: protobuf hands a proto2 string with invalid UTF-8 back as
    bytes, which would fail far downstream."""
    graph = model.graph
    named = [("node", n.name or n.op_type, [n.name, n.op_type, n.domain, *n.input, *n.output,
                                             *(a.name for a in n.attribute)]) for n in graph.node]
    named += [("value", v.name, [v.name]) for v in (*graph.input, *graph.output, *graph.value_info)]
    named += [("initializer", t.name, [t.name]) for t in graph.initializer]
    named += [("opset", o.domain, [o.domain]) for o in model.opset_import]
    for kind, owner, texts in named:
        if any(isinstance(text, bytes) for text in texts):
            shown = owner.decode("utf-8", "replace") if isinstance(owner, bytes) else owner
            raise AtcError("E16001", f"Model file [{path}] has a {kind} [{shown}] whose name or references are not "
                           "valid UTF-8 text.", "Re-export the model; ONNX names are UTF-8 strings.")


def _map_external_data(loaded: OnnxModel, base_dir: str, map_min_bytes: int) -> None:
    """Map (initializers) or read (tensors of node attributes, and initializers below
    `map_min_bytes` or of a type that is not mapped) every external tensor, after checking
    its path and range (never trust the file)."""
    base_real = os.path.realpath(base_dir)
    budget, read_total = current_budget(), 0
    files: dict = {}
    for initializer, tensor in _all_tensors(loaded.proto):
        if tensor.data_location != onnx.TensorProto.EXTERNAL:
            continue
        info = {entry.key: entry.value for entry in tensor.external_data}
        if onnx_weights.MAPPED_KEY in info:
            if not (initializer and len(info) == 1 and loaded.weights.owns(tensor)):
                raise AtcError("E16003", f"External data of tensor [{tensor.name}] uses the key "
                               f"[{onnx_weights.MAPPED_KEY}], which atc_py reserves.", "Re-export the model.")
            continue
        location = info.get("location", "")
        if "\0" in location:
            raise AtcError("E16003", f"External data location {location!r} of tensor [{tensor.name}] contains a "
                           "NUL character, which no file path can hold.", "Re-export the model with its data file.")
        target = os.path.realpath(os.path.join(base_real, location))
        if not location or os.path.isabs(location) or os.path.commonpath([base_real, target]) != base_real:
            raise AtcError("E16003", f"External data [{location}] of tensor [{tensor.name}] is outside "
                           f"the model folder [{base_dir}].",
                           "Keep external data files next to the model (relative paths, no '..').")
        if not os.path.exists(target):
            raise AtcError("E16003", f"External data file [{location}] of tensor [{tensor.name}] "
                           "does not exist.", "Copy the external data file next to the model.")
        file_size = check_input(target, f"external data of tensor [{tensor.name}]", "E16003").st_size
        try:
            offset = int(info.get("offset", 0))
            expected = int(np.prod(tensor.dims, dtype=np.int64)) * onnx_dtype(tensor.data_type).itemsize
            length = int(info["length"]) if "length" in info else file_size - offset
        except ValueError:
            raise AtcError("E16003", f"External data of tensor [{tensor.name}] has a malformed "
                           "offset or length.", "Re-export the model.")
        if offset < 0 or length < 0 or offset + length > file_size or length > _MAX_EXTERNAL_BYTES \
                or length != expected:
            raise AtcError("E16003", f"External data of tensor [{tensor.name}] (offset {offset}, length "
                           f"{length}) does not fit file [{location}] of {file_size} bytes or the "
                           f"tensor's {expected} bytes.", "Re-export the model with its data file.")
        if initializer and tensor.data_type in onnx_weights.MAPPABLE_TYPES and length >= map_min_bytes:
            if target not in files:
                budget.check_mapped(file_size, f"The external data file [{location}] of the model")
                files[target] = map_input(target, f"external data of tensor [{tensor.name}]", missing_code="E16003")
            mapped = files[target]
            if mapped.size != file_size:
                raise AtcError("E16003", f"External data file [{location}] changed size while the model was read.",
                               "Do not modify the model's files while atc reads them.")
            loaded.weights.mark(tensor, mapped.view(offset, length))
            continue
        read_total += length
        budget.check_host(read_total * HOST_COPIES, f"The host memory to convert the model's external data (about "
                          f"{HOST_COPIES}x the {read_total} bytes read so far)")
        with open_input(target, f"external data of tensor [{tensor.name}]", missing_code="E16003") as f:
            f.seek(offset)
            tensor.raw_data = f.read(length)
        tensor.data_location = onnx.TensorProto.DEFAULT
        del tensor.external_data[:]


def _all_tensors(model: onnx.ModelProto):
    """(is an initializer, tensor) for every tensor that may hold external data."""
    for tensor in model.graph.initializer:
        yield True, tensor
    for node in model.graph.node:
        for attr in node.attribute:
            if attr.type == onnx.AttributeProto.TENSOR:
                yield False, attr.t


def default_opset(model: onnx.ModelProto) -> int:
    for entry in model.opset_import:
        if entry.domain in ("", "ai.onnx"):
            return int(entry.version)
    raise AtcError("E16001", "The model does not import the default ONNX opset.", "Re-export the model.")


_PARKED = "atc_py.not_onnx"   # where ops without an ONNX schema wait while the opset converter runs


def _is_onnx_op(node: onnx.NodeProto) -> bool:
    """True for an op of ONNX's own schema (custom ops -- AMCT's AscendQuant in the default
    domain, com.microsoft's QLinearAdd -- have none)."""
    if node.domain not in ("", "ai.onnx"):
        return False
    return onnx.defs.has(node.op_type, "")


def _converter_message(exc: Exception) -> str:
    """onnx's converter message without its C++ assertion text and unfilled printf slots."""
    text = " ".join(str(exc).split())
    text = re.sub(r"^.*?Assertion `[^`]*` failed: ", "", text)
    if re.search(r"%(s|l*d)", text):
        text = re.sub(r"%(s|l*d)", "?", text.split(".")[0]) + "."
    return text.rstrip(".")


def normalize_opset(model: Union[onnx.ModelProto, OnnxModel]) -> onnx.ModelProto:
    """Accept opsets 13..21; convert older ones up to 13 with onnx's version converter.  Ops
    that are not ONNX's (AMCT's, com.microsoft's) are not sent through it: they are parked in
    a domain of their own, which the converter passes through, and put back afterwards.
    Mapped weights stay mapped in a model of opsets 13..21; the converter needs them inline."""
    weights = model.weights if isinstance(model, OnnxModel) else None
    model = model.proto if isinstance(model, OnnxModel) else model
    opset = default_opset(model)
    if MIN_OPSET <= opset <= MAX_OPSET:
        return model
    if opset < MIN_OPSET:
        # checked at its own opset first: the converter rewrites without validating (a
        # Softmax-11 axis out of range became a valid-looking Softmax-13 that onnxruntime refuses)
        check_types(model, weights)
        if weights is not None and len(weights):
            current_budget().check_host(weights.nbytes * HOST_COPIES, "The host memory to convert the opset "
                                        f"{opset} model's weights (about {HOST_COPIES}x their {weights.nbytes} bytes)")
            for tensor in model.graph.initializer:
                weights.inline(tensor)
        from onnx import version_converter
        parked = [n for n in model.graph.node if n.domain in ("", "ai.onnx") and not _is_onnx_op(n)]
        for node in parked:
            node.domain = _PARKED
        if parked:
            model.opset_import.append(helper.make_opsetid(_PARKED, 1))
        try:
            converted = version_converter.convert_version(model, MIN_OPSET)
        except Exception as exc:
            raise AtcError("E16006", f"ONNX opset {opset} is not supported and conversion to opset "
                           f"{MIN_OPSET} failed: {_converter_message(exc)}.",
                           f"Export the model with opset {MIN_OPSET}..{MAX_OPSET}.") from None
        finally:
            for node in parked:
                node.domain = ""
        for node in converted.graph.node:
            if node.domain == _PARKED:
                node.domain = ""
        kept = [o for o in converted.opset_import if o.domain != _PARKED]
        del converted.opset_import[:]
        converted.opset_import.extend(kept)
        return converted
    raise AtcError("E16006", f"ONNX opset {opset} is not supported (supported: {MIN_OPSET}..{MAX_OPSET}).",
                   f"Export the model with opset {MIN_OPSET}..{MAX_OPSET}.")


def tensor_array(tensor: onnx.TensorProto, weights: Optional[MappedWeights] = None) -> np.ndarray:
    """An initializer or constant as numpy, after checking its dims and data size: the dims
    and bytes come from the file and may disagree (numpy would reshape with -1, or fail).
    A mapped tensor (ge.onnx_weights) is a read-only view of its file: no copy."""
    dims = [int(d) for d in tensor.dims]
    dtype = onnx_dtype(tensor.data_type)
    if any(d < 0 for d in dims) or too_large(dims, dtype):
        raise AtcError("E16001", f"Tensor [{tensor.name}] has invalid dims {dims} (negative, or more than "
                       f"{MAX_TENSOR_BYTES} bytes).", "Check the model with onnx.checker.")
    if onnx_weights.token_of(tensor) is not None:
        if weights is None:
            raise InternalError(f"tensor [{tensor.name}] is memory-mapped but its weights were not handed over")
        view = weights.view_of(tensor)
        if len(view) != math.prod(dims) * dtype.itemsize:
            raise AtcError("E16001", f"Tensor [{tensor.name}] ({dtype}, dims {dims}) has {len(view)} data bytes; "
                           f"its dims need {math.prod(dims) * dtype.itemsize}.",
                           "Check the model with onnx.checker or re-export it.")
        return np.frombuffer(view, dtype=dtype.newbyteorder("<")).reshape(dims)
    try:
        array = numpy_helper.to_array(tensor)
    except Exception as exc:   # raw_data or *_data of the wrong length, unknown storage
        raise AtcError("E16001", f"Tensor [{tensor.name}] ({dtype}, dims {dims}) has data that does not match "
                       f"its dims: {exc}.", "Check the model with onnx.checker or re-export it.") from None
    if tuple(array.shape) != tuple(dims):
        raise AtcError("E16001", f"Tensor [{tensor.name}] holds shape {list(array.shape)}, its dims say {dims}.",
                       "Check the model with onnx.checker or re-export it.")
    if array.dtype.hasobject:       # a string tensor: onnx gives its elements as bytes
        return _strings(array, tensor.name)
    return array


def _strings(array: np.ndarray, name: str) -> np.ndarray:
    """An object array of str (our IR's string tensor) from onnx's bytes elements."""
    out = np.empty(array.shape, dtype=object)
    try:
        out.reshape(-1)[:] = [v.decode("utf-8") if isinstance(v, bytes) else str(v) for v in array.reshape(-1)]
    except UnicodeDecodeError:
        raise AtcError("E16001", f"String tensor [{name}] holds bytes that are not UTF-8.",
                       "Store UTF-8 text in string tensors (ONNX requires it).") from None
    return out


def attribute_value(attr: onnx.AttributeProto):
    """ONNX attribute -> plain Python value (str for strings, numpy arrays for tensors)."""
    if attr.type in (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS):
        raise AtcError("E16002", f"Attribute [{attr.name}] holds a subgraph; control flow is not supported.",
                       "Export the model without If/Loop/Scan.")
    value = helper.get_attribute_value(attr)
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    if isinstance(value, onnx.TensorProto):
        return tensor_array(value)
    if isinstance(value, list):
        return [v.decode("utf-8", "replace") if isinstance(v, bytes) else
                tensor_array(v) if isinstance(v, onnx.TensorProto) else v for v in value]
    return value


def _constant_value(node: onnx.NodeProto) -> np.ndarray:
    """The tensor of a Constant node, from whichever value_* attribute it uses."""
    for attr in node.attribute:
        value = attribute_value(attr)
        if attr.name == "value":
            return np.asarray(value)
        if attr.name in ("value_float", "value_floats"):
            return np.asarray(value, dtype=np.float32)
        if attr.name in ("value_int", "value_ints"):
            return np.asarray(value, dtype=np.int64)
        if attr.name in ("value_string", "value_strings"):
            strings = np.empty(() if isinstance(value, str) else (len(value),), dtype=object)
            strings.reshape(-1)[:] = [value] if isinstance(value, str) else list(value)
            return strings
    raise AtcError("E16002", f"Constant node [{node.name}] has no supported value attribute "
                   "(sparse constants are not supported).", "Re-export the model.")


def _value_desc(value_info: onnx.ValueInfoProto) -> TensorDesc:
    ttype = value_info.type.tensor_type
    if not value_info.type.HasField("tensor_type"):
        raise AtcError("E16001", f"Value [{value_info.name}] is not a tensor; sequences and maps are "
                       "not supported.", "Export the model with tensor inputs and outputs only.")
    dtype = onnx_dtype(ttype.elem_type)
    if not om_holds(dtype):
        raise AtcError("E16001", f"Value [{value_info.name}] has element type {dtype}, which an .om cannot "
                       "hold (no ge DataType, and no storage type for it).",
                       "Use float, integer, bool or string inputs and outputs.")
    shape = None
    if ttype.HasField("shape"):
        shape = tuple(int(d.dim_value) if d.HasField("dim_value") else (d.dim_param or "?")
                      for d in ttype.shape.dim)
    return TensorDesc(dtype, shape, "ND")


class DimRange(NamedTuple):
    """A dim known only at run time, between lo and hi (hi None: unbounded)."""

    lo: int
    hi: Optional[int]


DYNAMIC_DIM = DimRange(0, None)   # what -1 means without gears: GE's range [0, -1]


def parse_input_shape(text: str) -> dict[str, list]:
    """`--input_shape "name1:1,3,224,224;name2:1,128"` -> {name: dims}.  A dim is an int,
    -1 (dynamic: a gear flag's, or any size at run time) or `lo~hi` (a DimRange, as GE takes
    it since --input_shape_range was folded into --input_shape)."""
    shapes: dict[str, list[int]] = {}
    for item in filter(None, (part.strip() for part in text.split(";"))):
        name, sep, dims = item.rpartition(":")
        if not sep or not name:
            raise AtcError("E10002", f"Value [{text}] for parameter [--input_shape] is invalid. Reason: "
                           f"[{item}] is not of the form name:d1,d2,...",
                           'Use --input_shape="input_name1:n1,c1,h1,w1;input_name2:n2,c2,h2,w2".')
        try:
            parsed = [_range_dim(d, text, "--input_shape") if "~" in d else _dim(d)
                      for d in dims.split(",")] if dims.strip() else []
        except ValueError:
            raise AtcError("E10002", f"Value [{text}] for parameter [--input_shape] is invalid. Reason: "
                           f"dims [{dims}] of input [{name}] are not integers.",
                           'Use --input_shape="input_name1:n1,c1,h1,w1".')
        if any(not isinstance(d, DimRange) and (d < -1 or d == 0) for d in parsed):
            raise AtcError("E10011", f"Value [{text}] for parameter [--input_shape] is invalid. Reason: "
                           f"input [{name}] has a dim that is 0 or below -1.",
                           "Each dim must be a positive integer (-1 marks a dynamic dim).")
        if name in shapes and shapes[name] != parsed:
            raise AtcError("E10002", f"Value [{text}] for parameter [--input_shape] is invalid. Reason: input "
                           f"[{name}] is given twice with different dims.", "Give each input once.")
        shapes[name] = parsed
    return shapes


def _dim(text: str) -> int:
    """One --input_shape dim: ASCII digits with an optional '-' (int() would also take '1_0', '２')."""
    text = text.strip()
    if not re.fullmatch(r"-?[0-9]{1,19}", text):
        raise ValueError(text)
    return int(text)


_RANGE_SAMPLE = '"input_name1:[1~20,3,3~6,-1];input_name2:[1~20,3,3~6,-1]"'


def _range_error(text: str, param: str, reason: str) -> AtcError:
    """E10048, GE's code for a shape range it cannot parse."""
    return AtcError("E10048", f"Value [{text}] for parameter [{param}] is invalid. Reason: {reason}",
                    f"Use the form {_RANGE_SAMPLE} (lo~hi, a fixed n, or -1 for any size).")


def _range_dim(text: str, whole: str, param: str) -> DimRange:
    """`lo~hi` (both non-negative, lo <= hi) as GE's ParseShapeRangePair takes it."""
    lo, sep, hi = text.strip().partition("~")
    try:
        lo, hi = _dim(lo), _dim(hi)
    except ValueError:
        raise _range_error(whole, param, f"[{text.strip()}] is not of the form lo~hi with integers.") from None
    if lo < 0 or hi < 0 or lo > hi:
        raise _range_error(whole, param, f"range [{text.strip()}] must have 0 <= lo <= hi.")
    return DimRange(lo, hi)


def _range_entry(text: str, whole: str, param: str):
    """One dim of --input_shape_range: n (fixed), -1 (any size) or lo~hi."""
    text = text.strip()
    if "~" in text:
        return _range_dim(text, whole, param)
    try:
        value = _dim(text)
    except ValueError:
        raise _range_error(whole, param, f"[{text}] is not an integer.") from None
    if value < -1:
        raise _range_error(whole, param, f"[{text}] is below -1.")
    return DYNAMIC_DIM if value == -1 else value


def parse_input_shape_range(text: str, input_names: list) -> dict[str, list]:
    """`--input_shape_range` (deprecated by GE in favour of ranges in --input_shape):
    "name:[1~20,3,3~6,-1];name2:[...]" or by input index "[1~20,3],[4,-1]".  Brackets
    around single dims ("x:[1~8],3,[224~448],[224~448]") are taken too."""
    param = "--input_shape_range"
    text = text.strip()
    shapes: dict = {}
    if ":" not in text:                       # by index: [..],[..]
        groups = re.findall(r"\[([^\[\]]*)\]", text)
        if not groups or re.sub(r"\[[^\[\]]*\]", "", text).replace(",", "").strip():
            raise _range_error(text, param, "it is neither name:[dims] items nor [dims] groups.")
        if len(groups) > len(input_names):
            raise _range_error(text, param, f"it gives {len(groups)} shapes for {len(input_names)} inputs.")
        for name, group in zip(input_names, groups):
            shapes[name] = [_range_entry(d, text, param) for d in group.split(",")] if group.strip() else []
        return shapes
    for item in filter(None, (part.strip() for part in text.split(";"))):
        name, sep, dims = item.rpartition(":")
        if not sep or not name.strip():
            raise _range_error(text, param, f"[{item}] is not of the form name:[dims].")
        dims = dims.strip()
        if not re.fullmatch(r"(\[[^\[\]]*\]|[^\[\]])+", dims) or "[" not in dims:
            raise _range_error(text, param, f"[{dims}] must be in square brackets.")
        dims = dims.replace("[", "").replace("]", "")
        name = name.strip()
        if name in shapes:
            raise _range_error(text, param, f"input [{name}] is given twice.")
        shapes[name] = [_range_entry(d, text, param) for d in dims.split(",")] if dims.strip() else []
    return shapes


def input_names(model: Union[onnx.ModelProto, OnnxModel]) -> list:
    """The model's real inputs (not initializers listed as inputs), in order."""
    model = model.proto if isinstance(model, OnnxModel) else model
    inits = {t.name for t in model.graph.initializer}
    return [i.name for i in model.graph.input if i.name not in inits]


def node_names(onnx_graph: onnx.GraphProto) -> list:
    """The name of each node of `onnx_graph` (opset-normalized, as `import_model` reads it) in
    the IR, and so in the .om's origins and the fusion report: its own, or for an unnamed node
    `{op_type}_{index}`, made unique against the initializers, graph inputs, explicit node
    names and the nodes and values named before it.  One rule, so a tool that reads the ONNX
    file again (atc-sim --compare, --mode=3) finds an unnamed node under the .om's name for it.
    A Constant becomes a constant, not a node: it keeps its own name, empty or not."""
    taken = {t.name for t in onnx_graph.initializer} | {i.name for i in onnx_graph.input}
    taken |= {n.name for n in onnx_graph.node if n.name}
    suffixes, names = itertools.count(), []
    for index, node in enumerate(onnx_graph.node):
        if node.op_type == "Constant":
            names.append(node.name)
            continue
        name = base = node.name or f"{node.op_type}_{index}"
        while not node.name and name in taken:
            name = f"{base}_{next(suffixes)}"
        taken.add(name)
        taken.update(out or f"{node.name}:unused{i}" for i, out in enumerate(node.output))
        names.append(name)
    return names


def named_as_imported(model: onnx.ModelProto) -> onnx.ModelProto:
    """`model` as `import_model` reads it -- its opset normalized -- with every unnamed node
    given its IR name (`node_names`).  Names the nodes of `model` itself when its opset needs
    no conversion."""
    model = normalize_opset(model)
    for node, name in zip(model.graph.node, node_names(model.graph)):
        node.name = name
    return model


def import_model(model: Union[onnx.ModelProto, OnnxModel], input_shapes: Optional[dict[str, list[int]]] = None,
                 input_format: str = "NCHW") -> Graph:
    """Build the IR graph of an ONNX model (nodes in ONNX form; run the generic passes next).
    Initializers mapped by `load_model` become constants that are views of their files."""
    weights = model.weights if isinstance(model, OnnxModel) else None
    model = normalize_opset(model)
    onnx_graph = model.graph
    graph = Graph(onnx_graph.name or "graph")
    graph.opset = default_opset(model)
    values: dict[str, Value] = {}

    if not onnx_graph.output:
        raise AtcError("E16001", "The model's graph has no outputs.", "Check the model with onnx.checker.")
    for init in onnx_graph.initializer:
        if init.name in values:
            raise AtcError("E16001", f"Initializer [{init.name}] is defined twice.", "Check the model with onnx.checker.")
        values[init.name] = Value(init.name, const=tensor_array(init, weights))
    graph.reserve_names(values)
    for info in onnx_graph.input:
        if info.name in values and values[info.name].is_const:  # old-style input that is also an initializer
            continue
        if info.name in values:
            raise AtcError("E16001", f"Graph input [{info.name}] is listed twice.", "Check the model with onnx.checker.")
        desc = _value_desc(info)
        # NCHW/NHWC name 4-D inputs, NCDHW/NDHWC 5-D ones; other ranks (and ND) are ND
        desc.format = input_format if desc.shape is not None and len(desc.shape) == len(input_format) else "ND"
        value = Value(info.name, desc)
        graph.inputs.append(value)
        values[info.name] = value
    _apply_input_shapes(graph, input_shapes or {})
    graph.reserve_names(values)

    explicit = [n.name for n in onnx_graph.node if n.name]
    counts = Counter(explicit)
    if len(counts) != len(explicit):
        twice = sorted(n for n, c in counts.items() if c > 1)[:5]
        raise AtcError("E16001", f"Node name(s) {twice} are used by more than one node.",
                       "Give every node a unique name (onnxruntime refuses this model too).")
    graph.reserve_names(explicit)
    names = node_names(onnx_graph)
    for index, onnx_node in enumerate(onnx_graph.node):
        _check_domain(onnx_node, index)
        for out in onnx_node.output:
            if out and out in values:
                raise AtcError("E16001", f"Value [{out}] is defined twice (node [{onnx_node.name}]).",
                               "Check the model with onnx.checker.")
        _check_schema(onnx_node, graph.opset, index)
        if onnx_node.op_type == "Constant":
            values[onnx_node.output[0]] = Value(onnx_node.output[0], const=_constant_value(onnx_node))
            continue
        outputs = [Value(name or f"{onnx_node.name}:unused{i}") for i, name in enumerate(onnx_node.output)]
        for value in outputs:
            values[value.name] = value
        attrs = {attr.name: attribute_value(attr) for attr in onnx_node.attribute}
        name = names[index]
        node = Node(onnx_node.op_type, [], outputs, attrs, name=name)
        node.provenance["pending_inputs"] = list(onnx_node.input)
        graph.add_node(node)

    for node in graph.nodes:
        for name in node.provenance.pop("pending_inputs"):
            if name == "":
                node.append_input(None)
                continue
            if name not in values:
                raise AtcError("E16001", f"Input [{name}] of node [{node.name}] is not produced by any "
                               "node, initializer or graph input.", "Check the model with onnx.checker.")
            value = values[name]
            if value.graph is None:
                value.graph = graph
            node.append_input(value)
        node.provenance["origin"] = [node.name]
    for value in values.values():
        value.graph = graph
    for info in onnx_graph.output:
        if info.name not in values:
            raise AtcError("E16001", f"Graph output [{info.name}] is not produced.", "Check the model.")
        graph.outputs.append(values[info.name])
    graph.topological_sort()
    check_types(model, weights)
    return graph


_TYPE_CHECK_INLINE_BYTES = 4096   # initializers up to this size stay (shape constants fold)


def check_types(model: onnx.ModelProto, weights: Optional[MappedWeights] = None) -> None:
    """ONNX's own strict type and shape check (what onnxruntime refuses, e.g. Add of float and
    int64).  Large initializers are handed over as typed inputs, so the check does not copy
    the weights; small ones stay so constant shape inputs are seen.  No data propagation:
    ONNX would compute the values of shape chains (a 140-byte Range 0..2^40 materializes
    terabytes) before anything bounded them; our folding computes them under the budget."""
    light = onnx.ModelProto()
    light.CopyFrom(onnx.ModelProto(ir_version=model.ir_version, opset_import=model.opset_import))
    light.graph.name = model.graph.name
    light.graph.node.extend(model.graph.node)
    _park_int8_cube_ops(light, model)
    light.graph.output.extend(model.graph.output)
    names = {i.name for i in model.graph.input}
    light.graph.input.extend(model.graph.input)
    for init in model.graph.initializer:
        size = math.prod(int(d) for d in init.dims)
        if size * 8 <= _TYPE_CHECK_INLINE_BYTES or init.data_type == onnx.TensorProto.INT64:
            light.graph.initializer.append(init)
            if weights is not None and onnx_weights.token_of(init) is not None:
                weights.inline(light.graph.initializer[-1])      # ONNX reads shape inputs' values
        elif init.name not in names:
            light.graph.input.append(helper.make_tensor_value_info(init.name, init.data_type, list(init.dims)))
    try:
        onnx.shape_inference.infer_shapes(light, check_type=True, strict_mode=True, data_prop=False)
    except Exception as exc:   # onnx raises InferenceError / ValidationError with the node named
        text = " ".join(str(exc).split())
        raise AtcError("E16004", f"The model fails ONNX's type and shape check: {text[:600]}",
                       "Fix the node it names (onnxruntime refuses this model too) or re-export the model.")


def _check_domain(node: onnx.NodeProto, index: int) -> None:
    """A node of another domain than ONNX's is accepted when the op table has it from that
    domain (com.microsoft's quantized ops); AMCT's ops are in the default domain."""
    domain = "" if node.domain == "ai.onnx" else node.domain
    op = get_op(node.op_type)
    if op is not None and op.domain == domain:
        return
    where = f"[{node.domain}::{node.op_type}]" if domain else f"[{node.op_type}]"
    known = sorted(name for name, o in all_ops().items() if o.domain == domain) if domain else []
    if domain and not known:
        raise AtcError("E16002", f"Node [{node.name or index}] has op type {where} from custom domain "
                       f"[{node.domain}], which is not supported.",
                       "Export the model with standard ONNX ops (or the com.microsoft quantized ops).")
    if domain:
        raise AtcError("E16002", f"Node [{node.name or index}] has op type {where}, which is not supported; "
                       f"from domain [{node.domain}] the supported ops are {known}.",
                       "Replace the op in the model.")


_CUBE_OPS = ("Conv", "ConvTranspose", "Gemm", "MatMul")


def _park_int8_cube_ops(light: onnx.ModelProto, model: onnx.ModelProto) -> None:
    """AMCT deploy graphs feed Conv/Gemm/MatMul with int8 (GE's int8 cube ops, int32 out),
    which ONNX's type rules do not allow: the type check skips those nodes (their shape and
    type rules are ours, ge/ops/nn.py)."""
    int8 = {onnx.TensorProto.INT8, onnx.TensorProto.UINT8}
    int8_values = {i.name for i in model.graph.initializer if i.data_type in int8}
    int8_values |= {n.output[0] for n in model.graph.node if n.op_type == "AscendQuant" and n.output}
    parked = False
    for node in light.graph.node:
        if node.domain in ("", "ai.onnx") and node.op_type in _CUBE_OPS and \
                any(name in int8_values for name in node.input[:2]):
            node.domain = _PARKED
            parked = True
    if parked:
        light.opset_import.append(helper.make_opsetid(_PARKED, 1))


def _check_schema(node: onnx.NodeProto, opset: int, index: int) -> None:
    """Input/output counts and attribute types as the ONNX op schema states them, so a node
    onnxruntime would refuse does not compile into a kernel that reads past its inputs."""
    try:
        schema = onnx.defs.get_schema(node.op_type, opset, "")
    except Exception:   # not an ONNX op: the registry decides (E16002 if unsupported)
        return
    name = node.name or f"{node.op_type}_{index}"
    for what, count, low, high in (("inputs", len(node.input), schema.min_input, schema.max_input),
                                   ("outputs", len(node.output), schema.min_output, schema.max_output)):
        if not low <= count <= high:
            raise AtcError("E16001", f"Node [{name}] ({node.op_type}) has {count} {what}; opset {opset} allows "
                           f"{low} to {high}.", "Check the model with onnx.checker.")
    formal = list(schema.inputs)
    for position, value in enumerate(node.input):
        # "" leaves out an optional input; a required or variadic one cannot be (a Max with
        # an empty second input crashed our canonicalization and segfaults onnxruntime)
        param = formal[min(position, len(formal) - 1)] if formal else None
        if not value and param is not None and param.option != onnx.defs.OpSchema.FormalParameterOption.Optional:
            raise AtcError("E16004", f"Node [{name}] ({node.op_type}) leaves input {position} ({param.name}) empty; "
                           "only an optional input may be left out.", "Connect the input or remove it.")
    for attr in node.attribute:
        spec = schema.attributes.get(attr.name)
        if spec is None:   # onnxruntime refuses an attribute the op does not define
            raise AtcError("E16004", f"Op [{node.op_type}] has attribute [{attr.name}] which is invalid. Reason: "
                           f"node [{name}]: {node.op_type} (opset {opset}) has no such attribute; it has "
                           f"{sorted(schema.attributes) or 'none'}.", f"Remove [{attr.name}] from the node.")
        if attr.type != spec.type.value:
            raise AtcError("E16004", f"Op [{node.op_type}] has attribute [{attr.name}] of type "
                           f"{onnx.AttributeProto.AttributeType.Name(attr.type)} which is invalid. Reason: node "
                           f"[{name}] needs {onnx.AttributeProto.AttributeType.Name(spec.type.value)}.",
                           f"Fix the {node.op_type} node in the ONNX model or re-export it.")
        _guard_onnx_inference(node, attr, name)


# Attribute values ONNX's C++ shape inference indexes with unchecked (found by the fuzzer:
# GatherND batch_dims=-5 segfaults onnx 1.2x).  Checked before ONNX ever sees them.
_NON_NEGATIVE_ATTRS = {("GatherND", "batch_dims")}


def _guard_onnx_inference(node: onnx.NodeProto, attr: onnx.AttributeProto, name: str) -> None:
    if (node.op_type, attr.name) in _NON_NEGATIVE_ATTRS and attr.i < 0:
        raise AtcError("E16004", f"Op [{node.op_type}] has attribute [{attr.name}] = [{attr.i}] which is invalid. "
                       f"Reason: node [{name}]: it must be 0 or more.", f"Fix the {node.op_type} node.")


def parse_input_hint_shape(text: str) -> dict:
    """`--input_hint_shape "0:[1,128];1:[1,128]"` (GE's ge.inputHintShape, by input index)
    -> {index: dims}; E10014 as GE when malformed."""
    hints: dict = {}
    for item in filter(None, (part.strip() for part in text.split(";"))):
        index, sep, dims = item.partition(":")
        dims = dims.strip()
        ok = sep and index.strip().isdigit() and dims.startswith("[") and dims.endswith("]")
        try:
            values = [_dim(d) for d in dims[1:-1].split(",") if d.strip()] if ok else []
        except ValueError:
            ok = False
        if not ok or any(v < 0 for v in values) or int(index) in hints:
            raise AtcError("E10014", f"Value [{text}] for parameter [--input_hint_shape] is invalid: [{item}] is not "
                           "of the form input_index:[n,c,h,w] with non-negative dims.",
                           'Use --input_hint_shape="0:[1,3,224,224];1:[1,128]".')
        hints[int(index)] = values
    return hints


def _symbol_name(value: Value, axis: int) -> str:
    """The symbol of a dynamic dim: the model's dim_param when it names one (made an
    identifier), else <input>_<axis>."""
    old = value.desc.shape
    param = old[axis] if old is not None and axis < len(old) and isinstance(old[axis], str) else ""
    base = param if param and param != "?" else f"{value.name}_{axis}"
    name = re.sub(r"\W", "_", base.strip(), flags=re.ASCII).strip("_") or f"dim_{axis}"
    return ("d_" + name) if name[0].isdigit() or not is_symbol_name(name) else name


def _dynamic_dim(graph: Graph, value: Value, axis: int, dim: DimRange) -> Dim:
    """The symbol for a dim given as -1 or lo~hi: one per name, its range the intersection of
    every range given for that name."""
    name = _symbol_name(value, axis)
    atom = graph.symbols.get(name)
    if atom is None:
        return graph.new_symbol(name, dim.lo, dim.hi, origin="input")
    atom.lo = max(atom.lo, dim.lo)
    atom.hi = dim.hi if atom.hi is None else atom.hi if dim.hi is None else min(atom.hi, dim.hi)
    if atom.lo > (atom.hi if atom.hi is not None else atom.lo):
        raise _range_error(f"{value.name}", "--input_shape", f"the ranges given for dim [{name}] do not overlap.")
    return Dim.of_atom(atom)


def _apply_input_shapes(graph: Graph, input_shapes: dict[str, list[int]]) -> None:
    by_name = {v.name: v for v in graph.inputs}
    for name, dims in input_shapes.items():
        if name not in by_name:
            raise AtcError("E10016", f"Input parameter [--input_shape]'s opname [{name}] does not exist "
                           f"in the model. Model inputs: {sorted(by_name)}.",
                           "Use the input names of the model in --input_shape.")
        value = by_name[name]
        old = value.desc.shape
        if old is not None and len(old) != len(dims):
            raise AtcError("E10011", f"Value [{name}:{','.join(map(str, dims))}] for parameter "
                           f"[--input_shape] is invalid. Reason: the model's input has rank {len(old)} "
                           f"(shape {list(old)}), not {len(dims)}.", "Give one dim per axis of the input.")
        shown = ",".join(f"{d.lo}~{d.hi if d.hi is not None else -1}" if isinstance(d, DimRange) else str(d)
                         for d in dims)
        if old is not None:
            for axis, (was, now) in enumerate(zip(old, dims)):
                if isinstance(was, int) and was > 0 and was != now:
                    raise AtcError("E10011", f"Value [{name}:{shown}] for parameter "
                                   f"[--input_shape] is invalid. Reason: axis {axis} of the input is fixed "
                                   f"to {was} by the model.", "Only dynamic dims can be set.")
        fixed = [d for d in dims if isinstance(d, int) and d > 0]
        if too_large(fixed, value.desc.dtype):
            raise AtcError("E10011", f"Value [{name}:{shown}] for parameter [--input_shape] "
                           f"is invalid. Reason: the input would take more than {MAX_TENSOR_BYTES} bytes.",
                           "Give smaller dims.")
        dims = [d.lo if isinstance(d, DimRange) and d.lo == d.hi and d.lo > 0 else d for d in dims]
        value.desc.shape = tuple(_dynamic_dim(graph, value, axis, DYNAMIC_DIM if d == -1 else d)
                                 if isinstance(d, DimRange) or d == -1 else d for axis, d in enumerate(dims))
    for value in graph.inputs:
        shape = value.desc.shape
        if shape is None or not value.desc.has_shape():
            dims = "unknown rank" if shape is None else ",".join(str(d) if isinstance(d, int) and d > 0
                                                                  else (str(d) if d != "?" else "-1")
                                                                  for d in shape)
            example = "1,3,224,224" if shape is None else ",".join(
                str(d) if isinstance(d, int) and d > 0 else "1" for d in shape)
            raise AtcError("E10001", f"Value [] for parameter [--input_shape] is invalid. Reason: model "
                           f"input [{value.name}] has dynamic shape [{dims}].",
                           f'Fix it with --input_shape="{value.name}:{example}" (your sizes; -1 or lo~hi '
                           "for a dim known only at run time).")
        if too_large([d for d in shape if isinstance(d, int)], value.desc.dtype):
            raise AtcError("E16001", f"Model input [{value.name}] of shape {list(shape)} would take more than "
                           f"{MAX_TENSOR_BYTES} bytes.", "Check the model's input dims.")
