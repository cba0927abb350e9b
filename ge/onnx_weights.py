"""ONNX weights that stay in their files: memory-mapped initializers, never copied.

Why: protobuf copies every `raw_data` into the parsed message and numpy copies it again, so
a model's weights were held several times over (BERT-base peaked at 5.2x its weights).
Here the model file is memory-mapped and walked at the protobuf wire level: each
initializer of at least `MAP_MIN_BYTES` keeps its bytes where they are in the file, and
what protobuf parses is the rest (a "skeleton": the same message without those
`raw_data` fields).  External data files are mapped the same way.  A mapped tensor is
marked in the parsed model (data_location EXTERNAL, one external_data entry
`atc_py.mapped` = a token of this load), and `MappedWeights` turns the token into a
read-only numpy view of the map.  A token this load did not make is refused, so a file
cannot point a tensor at bytes of its choosing.

Only initializers are mapped: tensors inside node attributes (Constant nodes) are small in
practice, and ONNX's type check reads their values.  Only the element types whose raw
bytes are exactly numpy's are mapped (no packed 4-bit, no strings).  A file whose wire
format this walker does not follow (groups, a graph field given twice, a malformed length)
is parsed whole, as before, and protobuf reports what is wrong with it.
"""
from __future__ import annotations

import secrets
from typing import Optional

import onnx

MAPPED_KEY = "atc_py.mapped"
MAP_MIN_BYTES = 64 << 10
# ONNX element types whose raw_data is the little-endian numpy array itself.
MAPPABLE_TYPES = frozenset({
    onnx.TensorProto.FLOAT, onnx.TensorProto.UINT8, onnx.TensorProto.INT8, onnx.TensorProto.UINT16,
    onnx.TensorProto.INT16, onnx.TensorProto.INT32, onnx.TensorProto.INT64, onnx.TensorProto.BOOL,
    onnx.TensorProto.FLOAT16, onnx.TensorProto.DOUBLE, onnx.TensorProto.UINT32, onnx.TensorProto.UINT64,
})

# Field numbers of onnx.proto3 the walker follows.
_MODEL_GRAPH = 7          # ModelProto.graph
_GRAPH_INITIALIZER = 5    # GraphProto.initializer
_TENSOR_DATA_TYPE = 2     # TensorProto.data_type
_TENSOR_RAW_DATA = 9      # TensorProto.raw_data
_TENSOR_EXTERNAL = 13     # TensorProto.external_data
_TENSOR_LOCATION = 14     # TensorProto.data_location
_VARINT, _FIXED64, _LENGTH, _FIXED32 = 0, 1, 2, 5


class WireFormatUnsupported(Exception):
    """The bytes are not protobuf this walker follows: parse them whole instead."""


class MappedWeights:
    """The views of one load's mapped tensors, by token: `<nonce of this load>.<index>`."""

    def __init__(self):
        self._views: list = []
        self._nonce = secrets.token_hex(8)

    @property
    def nbytes(self) -> int:
        return sum(len(v) for v in self._views)

    def __len__(self) -> int:
        return len(self._views)

    def add(self, view: memoryview) -> str:
        self._views.append(view)
        return f"{self._nonce}.{len(self._views) - 1}"

    def owns(self, tensor: onnx.TensorProto) -> bool:
        """True when `tensor` is marked with a token of this load."""
        token = token_of(tensor)
        nonce, _, index = (token or "").partition(".")
        return nonce == self._nonce and index.isdigit() and int(index) < len(self._views)

    def mark(self, tensor: onnx.TensorProto, view: memoryview) -> None:
        """Point `tensor` at `view` (bytes that stay in their file)."""
        mark(tensor, self.add(view))

    def view_of(self, tensor: onnx.TensorProto) -> Optional[memoryview]:
        """The mapped bytes of `tensor`; None when it is not mapped.  ValueError for a token
        this load did not make."""
        token = token_of(tensor)
        if token is None:
            return None
        if not self.owns(tensor):
            raise ValueError(f"tensor [{tensor.name}] names mapped data [{token}] that this load did not map")
        return self._views[int(token.partition(".")[2])]

    def inline(self, tensor: onnx.TensorProto) -> None:
        """Copy the mapped bytes into the tensor's raw_data (for tools that need them inline)."""
        view = self.view_of(tensor)
        if view is not None:
            tensor.raw_data = view.tobytes()
            del tensor.external_data[:]
            tensor.data_location = onnx.TensorProto.DEFAULT


def mark(tensor: onnx.TensorProto, token: str) -> None:
    del tensor.external_data[:]
    entry = tensor.external_data.add()
    entry.key, entry.value = MAPPED_KEY, token
    tensor.data_location = onnx.TensorProto.EXTERNAL


def token_of(tensor: onnx.TensorProto) -> Optional[str]:
    if tensor.data_location != onnx.TensorProto.EXTERNAL:
        return None
    for entry in tensor.external_data:
        if entry.key == MAPPED_KEY:
            return entry.value
    return None


# --------------------------------------------------------------------------- wire format

def _varint(buf, pos: int, end: int) -> tuple:
    result = shift = 0
    while True:
        if pos >= end or shift > 63:
            raise WireFormatUnsupported("truncated or overlong varint")
        byte = buf[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return result, pos
        shift += 7


def _fields(buf, start: int, end: int):
    """(field, wire type, tag start, value start, value end, varint value) of each field."""
    pos = start
    while pos < end:
        tag_start = pos
        tag, pos = _varint(buf, pos, end)
        field, wire = tag >> 3, tag & 7
        if field == 0:
            raise WireFormatUnsupported("field number 0")
        value = None
        if wire == _VARINT:
            value_start = pos
            value, pos = _varint(buf, pos, end)
        elif wire == _FIXED64:
            value_start, pos = pos, pos + 8
        elif wire == _FIXED32:
            value_start, pos = pos, pos + 4
        elif wire == _LENGTH:
            length, value_start = _varint(buf, pos, end)
            pos = value_start + length
        else:
            raise WireFormatUnsupported(f"wire type {wire}")
        if pos > end:
            raise WireFormatUnsupported("a field runs past its message")
        yield field, wire, tag_start, value_start, pos, value


def _encode_varint(value: int) -> bytes:
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        if value:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def _length_field(field: int, payload) -> bytes:
    return _encode_varint(field << 3 | _LENGTH) + _encode_varint(len(payload)) + bytes(payload)


def _strip_tensor(buf, start: int, end: int, min_bytes: int, weights: MappedWeights) -> Optional[bytes]:
    """The TensorProto without its raw_data and marked as mapped, or None to keep it as is."""
    fields = list(_fields(buf, start, end))
    raw = [f for f in fields if f[0] == _TENSOR_RAW_DATA and f[1] == _LENGTH]
    types = [f[5] for f in fields if f[0] == _TENSOR_DATA_TYPE and f[1] == _VARINT]
    if not raw or not types or types[-1] not in MAPPABLE_TYPES \
            or any(f[0] in (_TENSOR_EXTERNAL, _TENSOR_LOCATION) for f in fields):
        return None
    _, _, _, data_start, data_end, _ = raw[-1]       # protobuf: the last occurrence wins
    if data_end - data_start < min_bytes:
        return None
    token = weights.add(memoryview(buf)[data_start:data_end])
    out = bytearray()
    for field, wire, tag_start, _, value_end, _ in fields:
        if field != _TENSOR_RAW_DATA:
            out += buf[tag_start:value_end]
    entry = _length_field(1, MAPPED_KEY.encode()) + _length_field(2, token.encode())
    out += _length_field(_TENSOR_EXTERNAL, entry)
    out += _encode_varint(_TENSOR_LOCATION << 3 | _VARINT) + _encode_varint(onnx.TensorProto.EXTERNAL)
    return bytes(out)


def _strip_graph(buf, start: int, end: int, min_bytes: int, weights: MappedWeights) -> bytes:
    out = bytearray()
    for field, wire, tag_start, value_start, value_end, _ in _fields(buf, start, end):
        stripped = None
        if field == _GRAPH_INITIALIZER and wire == _LENGTH:
            stripped = _strip_tensor(buf, value_start, value_end, min_bytes, weights)
        out += buf[tag_start:value_end] if stripped is None else _length_field(field, stripped)
    return bytes(out)


def skeleton(buf, min_bytes: int = MAP_MIN_BYTES) -> tuple:
    """(the ModelProto bytes without the raw_data of its large initializers, the
    MappedWeights holding views of those bytes in `buf`).  Raises WireFormatUnsupported."""
    weights = MappedWeights()
    out = bytearray()
    graphs = 0
    for field, wire, tag_start, value_start, value_end, _ in _fields(buf, 0, len(buf)):
        if field == _MODEL_GRAPH and wire == _LENGTH:
            graphs += 1
            if graphs > 1:      # protobuf would merge the two; not worth following
                raise WireFormatUnsupported("the graph field appears twice")
            out += _length_field(field, _strip_graph(buf, value_start, value_end, min_bytes, weights))
        else:
            out += buf[tag_start:value_end]
    return bytes(out), weights
