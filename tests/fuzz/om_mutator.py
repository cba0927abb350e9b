"""A seeded mutator of .om files: each mutation is a short list of edits, replayable.

Why edits and not bytes: a crasher is kept in the corpus as the edits that made it from a
seed model the zoo builds (`corpus/om/*.json`), so no model file is committed and a case
still means the same thing after the compiler changes the seed's bytes.

Edit kinds (`KINDS`), each re-sealing the checksum unless it is about the header or the
checksum itself (a bad checksum alone only ever tests one line of the reader):
- bitflip: flip bits anywhere after the header;
- truncate / extend: cut the file or add bytes;
- header: set a header field to an extreme value;
- table: edit a partition table entry (type, offset, size, count);
- modeldef: structured edits of ge.proto ModelDef -- dims, dtypes, attributes, input
  references, output descs, op types, graph attributes;
- taskdef: structured edits of the task list;
- subgraph: edits of an AutofusedKernel's JSON sub-graph (refs, types, op types, attrs).
"""
from __future__ import annotations

import hashlib
import json
import random
import struct

from google.protobuf.message import DecodeError

from om_format.container import HEADER_SIZE, _HEADER, _TABLE_ENTRY, _TABLE_HEAD, PartitionType
from om_format.schema import ModelDef, ModelTaskDef

KINDS = ("bitflip", "truncate", "extend", "header", "table", "modeldef", "modeldef", "modeldef", "taskdef",
         "subgraph", "subgraph", "subgraph")
EXTREME_INTS = [0, 1, -1, 2, 3, 7, 64, 255, 256, 65535, 1 << 31, (1 << 31) - 1, -(1 << 31), 1 << 32,
                (1 << 62), (1 << 63) - 1, -(1 << 63), 99999999999]


def _reseal(data: bytearray) -> bytearray:
    """Checksum and lengths made to agree with the (mutated) payload."""
    payload = bytes(data[HEADER_SIZE:])
    fields = list(_HEADER.unpack(bytes(data[:HEADER_SIZE])))
    fields[3] = hashlib.sha256(payload).digest().ljust(64, b"\0")
    fields[4] = len(payload) & 0xFFFFFFFF
    fields[17] = len(payload)
    return bytearray(_HEADER.pack(*fields)) + payload


def _partitions(data: bytes) -> list:
    """[(index, type, start, size)] read from the table (positions relative to the file)."""
    num = _TABLE_HEAD.unpack_from(data, HEADER_SIZE)[0]
    base = HEADER_SIZE + _TABLE_HEAD.size + num * _TABLE_ENTRY.size
    out = []
    for i in range(min(num, 64)):
        ptype, _, offset, size = _TABLE_ENTRY.unpack_from(data, HEADER_SIZE + _TABLE_HEAD.size + i * _TABLE_ENTRY.size)
        out.append((i, ptype, base + offset, size))
    return out


def _replace_partition(data: bytes, ptype: int, content: bytes) -> bytearray:
    """The file with partition `ptype` replaced (table offsets rewritten)."""
    parts = {t: bytes(data[start:start + size]) for _, t, start, size in _partitions(data)}
    parts[ptype] = content
    order = sorted(parts)
    table = bytearray(_TABLE_HEAD.pack(len(order), 0))
    body = bytearray()
    for t in order:
        table.extend(_TABLE_ENTRY.pack(t, 0, len(body), len(parts[t])))
        body.extend(parts[t])
        body.extend(b"\0" * (-len(body) % 8))
    return _reseal(bytearray(data[:HEADER_SIZE]) + table + body)


# --------------------------------------------------------------------------- applying edits

def apply(data: bytes, edits: list) -> bytes:
    """Apply a list of edits (dicts) to an .om's bytes."""
    out = bytearray(data)
    for edit in edits:
        try:
            out = _APPLY[edit["kind"]](out, edit)
        except (DecodeError, struct.error, ValueError, TypeError, IndexError):
            pass   # an earlier edit left nothing this one can parse: it does nothing
    return bytes(out)


def _apply_bitflip(data, e):
    for pos, bit in e["bits"]:
        if HEADER_SIZE <= pos < len(data):
            data[pos] ^= 1 << bit
    return _reseal(data) if e.get("reseal") else data


def _apply_truncate(data, e):
    return data[:e["length"]]


def _apply_extend(data, e):
    data = data + bytes(e["tail"])
    return _reseal(data) if e.get("reseal") else data


def _apply_header(data, e):
    fields = list(_HEADER.unpack(bytes(data[:HEADER_SIZE])))
    value = e["value"]
    if isinstance(fields[e["field"]], bytes):
        value = bytes(e["value"]) if isinstance(e["value"], list) else str(e["value"]).encode("utf-8")
    fields[e["field"]] = value
    try:
        packed = _HEADER.pack(*fields)
    except struct.error:
        return data
    return bytearray(packed) + data[HEADER_SIZE:]


def _apply_table(data, e):
    if len(data) < HEADER_SIZE + _TABLE_HEAD.size:
        return data
    if e["what"] == "num":
        struct.pack_into("<I", data, HEADER_SIZE, e["value"] & 0xFFFFFFFF)
    else:
        pos = HEADER_SIZE + _TABLE_HEAD.size + e["entry"] * _TABLE_ENTRY.size
        if pos + _TABLE_ENTRY.size > len(data):
            return data
        ptype, pad, offset, size = _TABLE_ENTRY.unpack_from(data, pos)
        values = {"type": ptype, "pad": pad, "offset": offset, "size": size}
        values[e["what"]] = e["value"]
        _TABLE_ENTRY.pack_into(data, pos, values["type"] & 0xFFFFFFFF, values["pad"] & 0xFFFFFFFF,
                               values["offset"] & 0xFFFFFFFFFFFFFFFF, values["size"] & 0xFFFFFFFFFFFFFFFF)
    return _reseal(data)


def _load(data, ptype, message):
    part = next(((s, n) for _, t, s, n in _partitions(data) if t == ptype), None)
    if part is None:
        return None
    msg = message()
    msg.ParseFromString(bytes(data[part[0]:part[0] + part[1]]))
    return msg


def _ops(model):
    return [op for graph in model.graph for op in graph.op]


def _apply_modeldef(data, e):
    model = _load(data, PartitionType.MODEL_DEF, ModelDef)
    if model is None or not _ops(model):
        return data
    ops = _ops(model)
    op = ops[e["op"] % len(ops)]
    what, value = e["what"], e.get("value")
    descs = list(op.input_desc) + list(op.output_desc)
    if what == "dim" and descs:
        desc = descs[e["desc"] % len(descs)]
        if desc.shape.dim:
            desc.shape.dim[e["axis"] % len(desc.shape.dim)] = value
        else:
            desc.shape.dim.append(value)
    elif what == "rank" and descs:
        desc = descs[e["desc"] % len(descs)]
        del desc.shape.dim[:]
        desc.shape.dim.extend(value)
    elif what == "dtype" and descs:
        descs[e["desc"] % len(descs)].dtype = value
    elif what == "input":
        if value is None and op.input:
            del op.input[e["index"] % len(op.input)]
        elif value is not None:
            if op.input:
                op.input[e["index"] % len(op.input)] = value
            else:
                op.input.append(value)
    elif what == "drop_output" and op.output_desc:
        del op.output_desc[-1]
    elif what == "type":
        op.type = value
    elif what == "remove_op":
        graph = model.graph[0]
        names = [o.name for o in graph.op]
        if op.name in names:
            del graph.op[names.index(op.name)]
    elif what == "attr":
        keys = sorted(op.attr.keys())
        if keys:
            key = keys[e["key"] % len(keys)]
            _set_attr(op.attr[key], value)
    elif what == "graph_attr":
        keys = sorted(model.attr.keys())
        if keys:
            model.attr[keys[e["key"] % len(keys)]].s = str(value).encode("utf-8")
    return _replace_partition(data, PartitionType.MODEL_DEF, model.SerializeToString())


def _set_attr(attr, value) -> None:
    """Overwrite an AttrDef with `value`, keeping its kind where possible."""
    kind = attr.WhichOneof("value")
    if kind == "i":
        attr.i = int(value) if isinstance(value, int) else 0
    elif kind == "f":
        attr.f = float(value) if isinstance(value, (int, float)) else float("nan")
    elif kind == "s":
        attr.s = str(value).encode("utf-8")
    elif kind == "b":
        attr.b = bool(value)
    elif kind == "list":
        lst = attr.list
        for field in ("i", "f", "s", "b"):
            getattr(lst, field)[:] = []
        if isinstance(value, list):
            lst.i.extend(int(v) for v in value if isinstance(v, int) and -(1 << 63) <= v < 1 << 63)
    else:
        attr.s = str(value).encode("utf-8")


def _apply_taskdef(data, e):
    tasks = _load(data, PartitionType.TASK_INFO, ModelTaskDef)
    if tasks is None or not tasks.task:
        return data
    task = tasks.task[e["task"] % len(tasks.task)]
    what, value = e["what"], e["value"]
    if what == "op_name":
        task.op_name = value
    elif what == "duplicate":
        tasks.task.add().CopyFrom(task)
    elif what == "remove":
        del tasks.task[e["task"] % len(tasks.task)]
    elif what in ("id", "stream_id"):
        setattr(task, what, value & 0xFFFFFFFF)
    elif what == "kernel_type":
        task.kernel_type = value
    return _replace_partition(data, PartitionType.TASK_INFO, tasks.SerializeToString())


def _apply_subgraph(data, e):
    model = _load(data, PartitionType.MODEL_DEF, ModelDef)
    if model is None:
        return data
    fused = [op for op in _ops(model) if "subgraph" in op.attr]
    if not fused:
        return data
    op = fused[e["op"] % len(fused)]
    try:
        doc = json.loads(op.attr["subgraph"].s.decode("utf-8"))
    except (ValueError, RecursionError):   # not JSON (any more), or nested deeper than json reads
        return data
    doc = _edit_json(doc, e)
    op.attr["subgraph"].s = (doc if isinstance(doc, str) else json.dumps(doc)).encode("utf-8")
    return _replace_partition(data, PartitionType.MODEL_DEF, model.SerializeToString())


def _edit_json(doc, e):
    what, value = e["what"], e.get("value")
    if what == "raw":
        return value
    if not isinstance(doc, dict):
        return doc
    if what == "drop_key":
        doc.pop(e["key"], None)
    elif what == "set_key":
        doc[e["key"]] = value
    elif what in ("op_field", "input_type", "output_ref") :
        seq = doc.get({"op_field": "ops", "input_type": "inputs", "output_ref": "outputs"}[what])
        if isinstance(seq, list) and seq:
            i = e["index"] % len(seq)
            if what == "op_field" and isinstance(seq[i], list) and seq[i]:
                seq[i][e["field"] % len(seq[i])] = value
            else:
                seq[i] = value
    elif what == "ref" and isinstance(doc.get("ops"), list) and doc["ops"]:
        entry = doc["ops"][e["index"] % len(doc["ops"])]
        if isinstance(entry, list) and len(entry) > 2 and isinstance(entry[2], list) and entry[2]:
            entry[2][e["field"] % len(entry[2])] = value
    elif what == "attr" and isinstance(doc.get("ops"), list) and doc["ops"]:
        entry = doc["ops"][e["index"] % len(doc["ops"])]
        if isinstance(entry, list) and len(entry) > 1 and isinstance(entry[1], dict):
            keys = sorted(entry[1]) or ["new"]
            entry[1][keys[e["field"] % len(keys)]] = value
    return doc


_APPLY = {"bitflip": _apply_bitflip, "truncate": _apply_truncate, "extend": _apply_extend,
          "header": _apply_header, "table": _apply_table, "modeldef": _apply_modeldef,
          "taskdef": _apply_taskdef, "subgraph": _apply_subgraph}


# --------------------------------------------------------------------------- drawing edits

_WEIRD_TEXT = ["", "x", "NetOutput", "Data", "Const", "\u00b2", "a" * 300, "op:0", "op:99", ":", "nan", "\0"]
_OP_TYPES = ["Relu", "Conv2D", "MatMulV2", "AutofusedKernel", "NoSuchOp", "Data", "Const", "NetOutput", "Fill",
             "Range", "Gather", "Reshape", "Add", "Softmax", "LayerNorm"]
_DTYPES = ["float32", "float16", "int64", "int8", "bool", "object", "U8", "float128", "nonsense", 42]


def _weird_value(rng: random.Random):
    return rng.choice([rng.choice(EXTREME_INTS), rng.choice(_WEIRD_TEXT), None, [], {}, 1.5, float("inf"),
                       [rng.choice(EXTREME_INTS)] * rng.randint(0, 4), ["i", rng.choice(EXTREME_INTS)],
                       ["o", rng.choice(EXTREME_INTS), rng.choice(EXTREME_INTS)], True,
                       {"__ndarray__": [1, 2], "dtype": rng.choice(_DTYPES), "shape": [rng.choice(EXTREME_INTS)]},
                       [rng.choice(_DTYPES), [rng.choice(EXTREME_INTS)] * rng.randint(0, 3)]])


def draw(rng: random.Random, data: bytes) -> list:
    """1 to 3 edits for `data`, drawn from `rng`."""
    edits = []
    for _ in range(rng.choice((1, 1, 1, 2, 3))):
        kind = rng.choice(KINDS)
        if kind == "bitflip":
            edits.append({"kind": kind, "reseal": rng.random() < 0.9,
                          "bits": [[rng.randrange(HEADER_SIZE, max(HEADER_SIZE + 1, len(data))), rng.randrange(8)]
                                   for _ in range(rng.randint(1, 8))]})
        elif kind == "truncate":
            edits.append({"kind": kind, "length": rng.randrange(0, max(1, len(data)))})
        elif kind == "extend":
            edits.append({"kind": kind, "reseal": rng.random() < 0.5,
                          "tail": [rng.randrange(256) for _ in range(rng.randint(1, 64))]})
        elif kind == "header":
            field = rng.randrange(len(_HEADER.unpack(bytes(data[:HEADER_SIZE]))) if len(data) >= HEADER_SIZE else 1)
            edits.append({"kind": kind, "field": field, "value": rng.choice(EXTREME_INTS + _WEIRD_TEXT[:6])})
        elif kind == "table":
            edits.append({"kind": kind, "what": rng.choice(("num", "type", "pad", "offset", "size")),
                          "entry": rng.randrange(4), "value": rng.choice(EXTREME_INTS + [5, 6, 20, 31, 32])})
        elif kind == "modeldef":
            what = rng.choice(("dim", "dim", "rank", "dtype", "input", "input", "drop_output", "type", "remove_op",
                               "attr", "attr", "attr", "graph_attr"))
            value = {"dim": rng.choice(EXTREME_INTS), "rank": [rng.choice(EXTREME_INTS) for _ in range(rng.randint(0, 9))],
                     "dtype": rng.randrange(-2, 40), "input": rng.choice([None, "nope:0", "x:1", ":", ""] +
                                                                         [f"{t}:{rng.randrange(3)}" for t in ("conv", "relu")]),
                     "type": rng.choice(_OP_TYPES), "attr": _weird_value(rng),
                     "graph_attr": rng.choice(_WEIRD_TEXT + ["Ascend999", "force_fp16"])}.get(what)
            edits.append({"kind": kind, "what": what, "op": rng.randrange(64), "desc": rng.randrange(8),
                          "axis": rng.randrange(8), "index": rng.randrange(8), "key": rng.randrange(16), "value": value})
        elif kind == "taskdef":
            what = rng.choice(("op_name", "duplicate", "remove", "id", "stream_id", "kernel_type"))
            value = rng.choice(_WEIRD_TEXT) if what in ("op_name", "kernel_type") else rng.choice(EXTREME_INTS)
            edits.append({"kind": kind, "what": what, "task": rng.randrange(64), "value": value})
        else:
            what = rng.choice(("raw", "drop_key", "set_key", "op_field", "op_field", "input_type", "output_ref", "ref",
                               "ref", "attr", "attr"))
            value = (rng.choice(["", "{", "[]", "null", "[" * 50000, '{"inputs": 1}', "\u00b2"]) if what == "raw"
                     else rng.choice(_OP_TYPES) if what == "op_field" and rng.random() < 0.3 else _weird_value(rng))
            edits.append({"kind": "subgraph", "what": what, "op": rng.randrange(16), "index": rng.randrange(16),
                          "field": rng.randrange(4), "key": rng.choice(("inputs", "ops", "outputs", "x")),
                          "value": value})
    return edits
