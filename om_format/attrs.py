"""Python values <-> ge.proto AttrDef, and numpy dtypes <-> ge DataType.

The mapping is chosen so that ``from_attr(to_attr(v))`` gives back ``v`` exactly
(lists come back as lists, tuples as lists):

=========================  =================================================
Python value               AttrDef
=========================  =================================================
bool / np.bool_            ``b``
int / np.integer           ``i`` (int64)
float / np.floating        ``f`` -- float32 on the wire (as in GE): only
                           float32-representable values round-trip exactly
str                        ``s`` (UTF-8 bytes)
bytes                      ``bt`` -- not ``s``, so str and bytes stay apart
np.dtype / numpy scalar    ``dt`` (ge DataType number; a type held in a
                           storage type, see below, cannot be an ``dt``)
  type (np.float32)
np.ndarray                 ``t``: TensorDef, desc dtype/shape/layout "ND",
                           raw little-endian data inline
list of bool/int/float/    ``list`` with ``val_type`` set (VT_LIST_BOOL, ...
str/bytes/dtype/ndarray    VT_LIST_DATA_TYPE, VT_LIST_TENSOR)
[] (empty list)            ``list`` with ``val_type`` VT_LIST_NONE
list of lists of int       ``list_list_int``
list of lists of float     ``list_list_float`` (Netron cannot show it)
TensorDescriptor/GraphDef  ``td`` / ``g`` / ``func``, passed through
/NamedAttrs message
dict (str keys)            ``func``: NamedAttrs whose ``attr`` map holds the
                           values (GE's form for grouped attributes such as
                           the Aipp op's ``aipp``); comes back as a dict
=========================  =================================================

A list mixing ints and floats is stored as floats.  ``s`` read from a foreign file that is
not valid UTF-8 comes back as bytes.

Tensor element types (``tensor_desc`` / ``tensor_def`` / ``tensor_from_def``):

- a type with a ge DataType is written as that type;
- strings (numpy ``object`` arrays of ``str``, as onnx gives them) are ``DT_STRING`` in GE's
  own layout: one 16-byte head ``{int64 offset, int64 length}`` per element (the offset counts
  from the tensor's first byte), then each string's UTF-8 bytes and a NUL;
- int4 (``DT_INT4``) is packed two values a byte, the first in the low nibble, and its
  descriptor's ``size`` counts the packed bytes (om_format/int4.py);
- ONNX types GE has no DataType for (``float8e4m3fnuz``, ``float8e5m2fnuz``, ``uint4``: one
  value a byte) are written as their storage type ``DT_UINT8`` (the bit
  patterns; a uint4 byte holds one value 0..15) with the ONNX type's name in the descriptor's
  attribute ``_onnx_data_type`` (LOGICAL_TYPE_ATTR): Netron and GE readers see a valid uint8
  tensor, our reader gives back the ONNX type.
"""
from __future__ import annotations

import math
from typing import Any, Mapping, Optional

import numpy as np

from om_format import int4
from om_format.errors import OmFormatError
from om_format.schema import (AttrDef, DataType, GraphDef, ListValueType, NamedAttrs,
                              TensorDef, TensorDescriptor)

try:  # optional: bfloat16 numpy dtype
    import ml_dtypes as _ml_dtypes
except ImportError:  # pragma: no cover - depends on the environment
    _ml_dtypes = None

_NP_TO_GE = {
    np.dtype(np.float32): DataType.DT_FLOAT,
    np.dtype(np.float16): DataType.DT_FLOAT16,
    np.dtype(np.int8): DataType.DT_INT8,
    np.dtype(np.uint8): DataType.DT_UINT8,
    np.dtype(np.int16): DataType.DT_INT16,
    np.dtype(np.uint16): DataType.DT_UINT16,
    np.dtype(np.int32): DataType.DT_INT32,
    np.dtype(np.int64): DataType.DT_INT64,
    np.dtype(np.uint32): DataType.DT_UINT32,
    np.dtype(np.uint64): DataType.DT_UINT64,
    np.dtype(np.bool_): DataType.DT_BOOL,
    np.dtype(np.float64): DataType.DT_DOUBLE,
    np.dtype(np.complex64): DataType.DT_COMPLEX64,
    np.dtype(np.complex128): DataType.DT_COMPLEX128,
}
if _ml_dtypes is not None:   # the low-precision types GE has (no FNUZ float8, no uint4 in GE)
    _NP_TO_GE[np.dtype(_ml_dtypes.bfloat16)] = DataType.DT_BF16
    _NP_TO_GE[np.dtype(_ml_dtypes.float8_e4m3fn)] = DataType.DT_FLOAT8_E4M3FN
    _NP_TO_GE[np.dtype(_ml_dtypes.float8_e5m2)] = DataType.DT_FLOAT8_E5M2
    _NP_TO_GE[np.dtype(_ml_dtypes.int4)] = DataType.DT_INT4
STRING = np.dtype(object)       # what onnx (and so our IR) gives a string tensor
_NP_TO_GE[STRING] = DataType.DT_STRING
_GE_TO_NP = {ge: dt for dt, ge in _NP_TO_GE.items()}

LOGICAL_TYPE_ATTR = "_onnx_data_type"
_STRING_HEAD = 16               # GE's StringHead: int64 addr (offset here), int64 len
# numpy dtype -> (storage ge DataType, ONNX TensorProto type name) of the types GE lacks
_LOGICAL: dict = {}
if _ml_dtypes is not None:
    _LOGICAL = {np.dtype(_ml_dtypes.float8_e4m3fnuz): (DataType.DT_UINT8, "FLOAT8E4M3FNUZ"),
                np.dtype(_ml_dtypes.float8_e5m2fnuz): (DataType.DT_UINT8, "FLOAT8E5M2FNUZ"),
                np.dtype(_ml_dtypes.uint4): (DataType.DT_UINT8, "UINT4")}
_LOGICAL_BY_NAME = {name: (dt, storage) for dt, (storage, name) in _LOGICAL.items()}


def to_ge_dtype(dtype) -> int:
    """ge DataType number of a numpy dtype (byte order ignored).  ValueError if none."""
    dt = np.dtype(dtype)
    key = dt.newbyteorder("=") if dt.byteorder not in ("=", "|") else dt
    try:
        return _NP_TO_GE[key]
    except KeyError:
        raise ValueError(f"numpy dtype {dt} has no ge DataType") from None


def om_holds(dtype) -> bool:
    """Whether an .om can hold tensors of `dtype`: its own ge DataType, or a storage type
    with the ONNX type recorded (see the module docstring)."""
    dt = np.dtype(dtype)
    key = dt.newbyteorder("=") if dt.byteorder not in ("=", "|") else dt
    return key in _NP_TO_GE or key in _LOGICAL


def storage_type(dtype) -> tuple:
    """(ge DataType number written for `dtype`, ONNX type name to record or None)."""
    dt = np.dtype(dtype)
    if dt in _LOGICAL:
        return _LOGICAL[dt]
    return to_ge_dtype(dt), None


def desc_dtype(desc: TensorDescriptor) -> np.dtype:
    """numpy dtype of a TensorDescriptor read from a file: its DataType, or the ONNX type its
    ``_onnx_data_type`` attribute records over a matching storage type (OmFormatError else)."""
    dtype = from_ge_dtype(desc.dtype)
    if LOGICAL_TYPE_ATTR not in desc.attr:
        return dtype
    name = desc.attr[LOGICAL_TYPE_ATTR].s.decode("utf-8", "replace")
    if name not in _LOGICAL_BY_NAME:
        raise OmFormatError(f"Tensor '{desc.name}' records ONNX type {name[:40]!r}, which is not one of "
                            f"{sorted(_LOGICAL_BY_NAME)}.")
    logical, storage = _LOGICAL_BY_NAME[name]
    if int(desc.dtype) != storage:
        raise OmFormatError(f"Tensor '{desc.name}' records ONNX type {name} over {DataType.Name(int(desc.dtype))}; "
                            f"it is held as {DataType.Name(storage)}.")
    return logical


def from_ge_dtype(value: int) -> np.dtype:
    """numpy dtype of a ge DataType number read from a file; OmFormatError if unsupported."""
    try:
        return _GE_TO_NP[int(value)]
    except KeyError:
        try:
            name = DataType.Name(int(value))
        except KeyError:
            name = "unknown"
        raise OmFormatError(f"ge DataType {value} ({name}) has no numpy equivalent.",
                            "Only float, integer, bool, string and (with ml_dtypes installed) bfloat16, "
                            "float8 (e4m3fn, e5m2) and int4 tensors are supported.") from None


def tensor_desc(name: str, dtype, shape, layout: str = "ND") -> TensorDescriptor:
    """A TensorDescriptor; `dtype` is a numpy dtype or a ge DataType number.

    ``size`` is the byte size for a static shape (GE's runtime adds alignment on top),
    0 when a dim is unknown (negative) or the elements have no fixed size (strings).  A type
    GE lacks gets its storage type and ``_onnx_data_type`` (module docstring)."""
    logical = None
    if isinstance(dtype, (int, np.integer)):
        ge_dtype = int(dtype)
    else:
        ge_dtype, logical = storage_type(dtype)
    dims = [int(d) for d in shape]
    desc = TensorDescriptor(name=name, dtype=ge_dtype, layout=layout, real_dim_cnt=len(dims))
    desc.shape.dim.extend(dims)
    desc.shape.SetInParent()  # a scalar still has a (empty) shape: Netron needs it
    if logical is not None:
        desc.attr[LOGICAL_TYPE_ATTR].s = logical.encode("ascii")
    if all(d >= 0 for d in dims) and ge_dtype == DataType.DT_INT4:
        desc.size = int4.packed_size(math.prod(dims))          # two values a byte (om_format/int4.py)
    elif all(d >= 0 for d in dims) and ge_dtype in _GE_TO_NP and ge_dtype != DataType.DT_STRING:
        desc.size = int(np.prod(dims, dtype=np.int64)) * _GE_TO_NP[ge_dtype].itemsize
    return desc


def string_bytes(array: np.ndarray) -> bytes:
    """GE's DT_STRING layout of an array of str (or bytes): the heads, then the NUL-ended data."""
    items = [v.encode("utf-8") if isinstance(v, str) else bytes(v) for v in np.asarray(array).reshape(-1)]
    heads = np.empty((len(items), 2), dtype="<i8")
    offset = _STRING_HEAD * len(items)
    for k, item in enumerate(items):
        heads[k] = (offset, len(item))
        offset += len(item) + 1
    return heads.tobytes() + b"".join(item + b"\0" for item in items)


def strings_from_bytes(data, shape: tuple, name: str) -> np.ndarray:
    """The object array of str GE's DT_STRING bytes hold; every head is checked against the
    buffer (OmFormatError), nothing is trusted."""
    count = math.prod(shape)
    if any(d < 0 for d in shape) or len(data) < count * _STRING_HEAD:
        raise OmFormatError(f"String tensor '{name}' of shape {list(shape)} has {len(data)} data bytes, less than "
                            f"its {max(count, 0)} heads of {_STRING_HEAD} bytes.")
    heads = np.frombuffer(data, dtype="<i8", count=2 * count).reshape(count, 2)
    raw = bytes(data)
    out = np.empty(count, dtype=object)
    for k, (start, length) in enumerate(heads.tolist()):
        if start < count * _STRING_HEAD or length < 0 or start + length > len(raw):
            raise OmFormatError(f"String {k} of tensor '{name}' lies at [{start}, {start + length}), outside its "
                                f"{len(raw)}-byte data.")
        try:
            out[k] = raw[start:start + length].decode("utf-8")
        except UnicodeDecodeError:
            raise OmFormatError(f"String {k} of tensor '{name}' is not UTF-8.") from None
    return out.reshape(shape)


def tensor_bytes(array: np.ndarray):
    """What a tensor's data holds: C-order little-endian bytes, GE's string layout, or int4
    values two a byte (om_format/int4.py)."""
    dtype = np.asarray(array).dtype
    if dtype == STRING:
        return string_bytes(array)
    if int4.is_int4(dtype):
        return int4.pack(array).tobytes()
    return _le_bytes(array)


def _le_bytes(array: np.ndarray) -> bytes:
    arr = np.ascontiguousarray(array)
    if arr.dtype.byteorder == ">":
        arr = arr.astype(arr.dtype.newbyteorder("<"))
    return arr.tobytes()


def tensor_def(array: np.ndarray, name: str = "", layout: str = "ND") -> TensorDef:
    """A TensorDef holding `array` inline (raw little-endian bytes in ``data``)."""
    t = TensorDef(data=tensor_bytes(array))
    t.desc.CopyFrom(tensor_desc(name, array.dtype, array.shape, layout))
    return t


def tensor_from_def(t: TensorDef, weights: Optional[bytes] = None) -> np.ndarray:
    """The array of a TensorDef: inline ``data``, else ``weights[desc.data_offset:][:weight_size]``
    (read-only; a view of `weights` when it is a buffer of the file, e.g. its memory map).

    Raises OmFormatError when the bytes do not match the shape or lie outside `weights`."""
    desc = t.desc
    dtype = desc_dtype(desc).newbyteorder("<")
    shape = tuple(int(d) for d in desc.shape.dim)
    data = t.data
    if not data and desc.weight_size > 0:
        if weights is None:
            raise OmFormatError(f"Tensor '{desc.name}' lives in the weights partition, which was not given.",
                                "Pass the WEIGHTS_DATA partition bytes.")
        start, size = int(desc.data_offset), int(desc.weight_size)
        if start < 0 or start + size > len(weights):
            raise OmFormatError(f"Tensor '{desc.name}' data [{start}, {start + size}) lies "
                                f"outside the {len(weights)}-byte weights partition.")
        data = weights[start:start + size]
    if dtype == STRING:
        return strings_from_bytes(data, shape, desc.name)
    if int4.is_int4(dtype):
        return int4.unpack(data, shape, desc.name)
    count = math.prod(shape)   # exact: an int64 product can wrap around to match len(data)
    if any(d < 0 for d in shape) or len(data) != count * dtype.itemsize:
        raise OmFormatError(f"Tensor '{desc.name}' has {len(data)} data bytes, shape "
                            f"{list(shape)} of {dtype} needs {max(count, 0) * dtype.itemsize}.")
    array = np.frombuffer(data, dtype=dtype).reshape(shape)   # a read-only view of `weights`: no copy
    return array if array.dtype.isnative else array.astype(dtype.newbyteorder("="))


def _is_dtype_like(value) -> bool:
    return isinstance(value, np.dtype) or (isinstance(value, type) and issubclass(value, np.generic))


def _kind(value) -> str:
    if isinstance(value, (bool, np.bool_)):
        return "bool"
    if isinstance(value, (int, np.integer)):
        return "int"
    if isinstance(value, (float, np.floating)):
        return "float"
    if isinstance(value, str):
        return "str"
    if isinstance(value, bytes):
        return "bytes"
    if _is_dtype_like(value):
        return "dtype"
    if isinstance(value, np.ndarray):
        return "tensor"
    if isinstance(value, (list, tuple)):
        return "list"
    return type(value).__name__


def _fill_list(lv, values: list) -> None:
    kinds = {_kind(v) for v in values}
    if kinds == {"int", "float"}:
        kinds = {"float"}
    if len(kinds) != 1:
        raise TypeError(f"attribute list mixes element kinds {sorted(kinds)}")
    kind = kinds.pop()
    if kind == "bool":
        lv.b.extend(bool(v) for v in values); lv.val_type = ListValueType.VT_LIST_BOOL
    elif kind == "int":
        lv.i.extend(int(v) for v in values); lv.val_type = ListValueType.VT_LIST_INT
    elif kind == "float":
        lv.f.extend(float(v) for v in values); lv.val_type = ListValueType.VT_LIST_FLOAT
    elif kind == "str":
        lv.s.extend(v.encode("utf-8") for v in values); lv.val_type = ListValueType.VT_LIST_STRING
    elif kind == "bytes":
        lv.bt.extend(values); lv.val_type = ListValueType.VT_LIST_BYTES
    elif kind == "dtype":
        lv.dt.extend(to_ge_dtype(v) for v in values); lv.val_type = ListValueType.VT_LIST_DATA_TYPE
    elif kind == "tensor":
        lv.t.extend(tensor_def(v) for v in values); lv.val_type = ListValueType.VT_LIST_TENSOR
    else:
        raise TypeError(f"unsupported attribute list element type {kind}")


def to_attr(value: Any) -> AttrDef:
    """The AttrDef for a Python value (see the module table).  TypeError if unsupported."""
    attr = AttrDef()
    kind = _kind(value)
    if kind == "bool":
        attr.b = bool(value)
    elif kind == "int":
        attr.i = int(value)
    elif kind == "float":
        attr.f = float(value)
    elif kind == "str":
        attr.s = value.encode("utf-8")
    elif kind == "bytes":
        attr.bt = value
    elif kind == "dtype":
        attr.dt = to_ge_dtype(value)
    elif kind == "tensor":
        attr.t.CopyFrom(tensor_def(value))
    elif isinstance(value, TensorDescriptor):
        attr.td.CopyFrom(value)
    elif isinstance(value, GraphDef):
        attr.g.CopyFrom(value)
    elif isinstance(value, NamedAttrs):
        attr.func.CopyFrom(value)
    elif isinstance(value, dict):
        if not all(isinstance(k, str) for k in value):
            raise TypeError("a dict attribute needs string keys")
        attr.func.SetInParent()
        set_attrs(attr.func.attr, value)
    elif kind == "list":
        values = list(value)
        if values and all(isinstance(v, (list, tuple)) for v in values):
            flat = {_kind(x) for v in values for x in v}
            if flat <= {"int"}:
                attr.list_list_int.SetInParent()
                for v in values:
                    attr.list_list_int.list_list_i.add().list_i.extend(int(x) for x in v)
            elif flat <= {"int", "float"}:
                attr.list_list_float.SetInParent()
                for v in values:
                    attr.list_list_float.list_list_f.add().list_f.extend(float(x) for x in v)
            else:
                raise TypeError(f"unsupported nested attribute list of {sorted(flat)}")
        else:
            attr.list.SetInParent()
            if values:
                _fill_list(attr.list, values)
            else:
                attr.list.val_type = ListValueType.VT_LIST_NONE
    else:
        raise TypeError(f"cannot store a {kind} as a ge attribute")
    return attr


def _text(raw: bytes):
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        return bytes(raw)


def _from_list(lv, weights) -> list:
    vt = lv.val_type
    if vt == ListValueType.VT_LIST_BOOL:
        return [bool(v) for v in lv.b]
    if vt == ListValueType.VT_LIST_INT:
        return [int(v) for v in lv.i]
    if vt == ListValueType.VT_LIST_FLOAT:
        return [float(v) for v in lv.f]
    if vt == ListValueType.VT_LIST_STRING:
        return [_text(v) for v in lv.s]
    if vt == ListValueType.VT_LIST_BYTES:
        return [bytes(v) for v in lv.bt]
    if vt == ListValueType.VT_LIST_DATA_TYPE:
        return [from_ge_dtype(v) for v in lv.dt]
    if vt == ListValueType.VT_LIST_TENSOR:
        return [tensor_from_def(t, weights) for t in lv.t]
    if vt == ListValueType.VT_LIST_TENSOR_DESC:
        return list(lv.td)
    if vt == ListValueType.VT_LIST_GRAPH:
        return list(lv.g)
    if vt == ListValueType.VT_LIST_NAMED_ATTRS:
        return list(lv.na)
    # VT_LIST_NONE: empty, or a foreign writer that left val_type unset: first non-empty wins.
    for field, convert in (("s", _text), ("i", int), ("f", float), ("b", bool), ("bt", bytes),
                           ("dt", from_ge_dtype)):
        items = getattr(lv, field)
        if len(items):
            return [convert(v) for v in items]
    if len(lv.t):
        return [tensor_from_def(t, weights) for t in lv.t]
    return []


def from_attr(attr: AttrDef, weights: Optional[bytes] = None) -> Any:
    """The Python value of an AttrDef; `weights` resolves tensors stored in WEIGHTS_DATA."""
    which = attr.WhichOneof("value")
    if which is None:
        return None
    if which == "s":
        return _text(attr.s)
    if which == "bt":
        return bytes(attr.bt)
    if which in ("i", "f", "b"):
        return {"i": int, "f": float, "b": bool}[which](getattr(attr, which))
    if which == "dt":
        return from_ge_dtype(attr.dt)
    if which == "t":
        return tensor_from_def(attr.t, weights)
    if which == "list":
        return _from_list(attr.list, weights)
    if which == "list_list_int":
        return [[int(x) for x in v.list_i] for v in attr.list_list_int.list_list_i]
    if which == "list_list_float":
        return [[float(x) for x in v.list_f] for v in attr.list_list_float.list_list_f]
    if which == "func":
        return get_attrs(attr.func.attr, weights)
    return getattr(attr, which)  # td, g: the message itself


def set_attrs(attr_map, values: Mapping[str, Any]) -> None:
    """Fill a protobuf ``map<string, AttrDef>`` (e.g. ``op.attr``) from a dict."""
    for key, value in values.items():
        attr_map[key].CopyFrom(to_attr(value))


def get_attrs(attr_map, weights: Optional[bytes] = None) -> dict:
    """A protobuf ``map<string, AttrDef>`` as a dict of Python values, keys sorted."""
    return {key: from_attr(attr_map[key], weights) for key in sorted(attr_map)}
