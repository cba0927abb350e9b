"""The .om protobuf schemas, built at import time from plain Python data.

Why not protoc-generated code: generated ``*_pb2.py`` files are tied to the protobuf
release that produced them.  Building ``FileDescriptorProto``s by hand works with any
protobuf >= 4.21, and the same data renders the ``.proto`` text (`proto_text`), so the
committed ``ge.proto`` / ``task.proto`` can never drift from what the code encodes.

Two files:

* ``ge.proto`` (package ``ge.proto``): GE's graph IR as published in GE/metadef
  (``ge_ir.proto``) and mirrored by Netron's ``om-proto.js``.  Field numbers are GE's;
  they decide whether Netron and GE tools can read our partition 0.
* ``task.proto`` (package ``domi``): the task list of partition 2.  OURS.  ModelTaskDef
  and TaskDef keep the numbers of GE's ``task.proto`` for the fields they share (from
  memory, UNCONFIRMED); every field numbered >= 100 is an atc_py extension (provenance,
  kernel description), so a GE decoder just skips them.
"""
from __future__ import annotations

from google.protobuf import descriptor_pb2, descriptor_pool

try:  # protobuf >= 4.22
    from google.protobuf.message_factory import GetMessageClass as _get_class
except ImportError:  # pragma: no cover - protobuf 4.21
    from google.protobuf import message_factory as _mf

    def _get_class(descriptor):
        return _mf.MessageFactory(descriptor.file.pool).GetPrototype(descriptor)

# ---------------------------------------------------------------------------------------
# Schema data.  A field is (label, type, name, number[, oneof]); label is "" (singular),
# "repeated" or "map" (type is then "key_type,value_type").  A message is
# (name, fields, nested_messages, nested_enums).  An enum is (name, [(value_name, number)]).
# ---------------------------------------------------------------------------------------

_DATA_TYPES = [
    "DT_UNDEFINED", "DT_FLOAT", "DT_FLOAT16", "DT_INT8", "DT_UINT8", "DT_INT16", "DT_UINT16",
    "DT_INT32", "DT_INT64", "DT_UINT32", "DT_UINT64", "DT_BOOL", "DT_DOUBLE", "DT_STRING",
    "DT_DUAL_SUB_INT8", "DT_DUAL_SUB_UINT8", "DT_COMPLEX64", "DT_COMPLEX128", "DT_QINT8",
    "DT_QINT16", "DT_QINT32", "DT_QUINT8", "DT_QUINT16", "DT_RESOURCE", "DT_STRING_REF",
    "DT_DUAL", "DT_VARIANT", "DT_BF16", "DT_INT4", "DT_UINT1", "DT_INT2", "DT_UINT2",
    # GE's newer types (metadef's DataType after DT_UINT2; Netron's om.js table stops before them)
    "DT_COMPLEX32", "DT_HIFLOAT8", "DT_FLOAT8_E5M2", "DT_FLOAT8_E4M3FN", "DT_FLOAT8_E8M0",
    "DT_FLOAT6_E3M2", "DT_FLOAT6_E2M3", "DT_FLOAT4_E2M1", "DT_FLOAT4_E1M2",
]
NETRON_DATA_TYPES = 32      # DT_UNDEFINED .. DT_UINT2: what Netron's om.js can name

_LIST_VALUE_TYPES = [
    "VT_LIST_NONE", "VT_LIST_STRING", "VT_LIST_INT", "VT_LIST_FLOAT", "VT_LIST_BOOL",
    "VT_LIST_BYTES", "VT_LIST_TENSOR_DESC", "VT_LIST_TENSOR", "VT_LIST_GRAPH",
    "VT_LIST_NAMED_ATTRS", "VT_LIST_DATA_TYPE",
]

GE_FILE = {
    "name": "ge.proto",
    "package": "ge.proto",
    "deps": [],
    "enums": [("DataType", list(zip(_DATA_TYPES, range(len(_DATA_TYPES)))))],
    "messages": [
        ("ModelDef", [
            ("", "string", "name", 1),
            ("", "uint32", "version", 2),
            ("", "string", "custom_version", 3),
            ("repeated", "GraphDef", "graph", 7),
            ("map", "string,AttrDef", "attr", 11),
        ], [], []),
        ("GraphDef", [
            ("", "string", "name", 1),
            ("repeated", "string", "input", 4),
            ("repeated", "string", "output", 5),
            ("repeated", "OpDef", "op", 6),
            ("map", "string,AttrDef", "attr", 11),
        ], [], []),
        ("OpDef", [
            ("", "string", "name", 1),
            ("", "string", "type", 2),
            ("repeated", "string", "input", 5),
            ("map", "string,AttrDef", "attr", 10),
            ("", "bool", "has_out_attr", 20),
            ("", "int64", "id", 21),
            ("", "int64", "stream_id", 22),
            ("repeated", "string", "input_name", 23),
            ("repeated", "string", "src_name", 24),
            ("repeated", "int64", "src_index", 25),
            ("repeated", "string", "dst_name", 26),
            ("repeated", "int64", "dst_index", 27),
            ("repeated", "int64", "input_i", 28),
            ("repeated", "int64", "output_i", 29),
            ("repeated", "int64", "workspace", 30),
            ("repeated", "int64", "workspace_bytes", 31),
            ("repeated", "bool", "is_input_const", 32),
            ("repeated", "TensorDescriptor", "input_desc", 33),
            ("repeated", "TensorDescriptor", "output_desc", 34),
            ("repeated", "string", "subgraph_name", 35),
        ], [], []),
        ("AttrDef", [
            ("", "ListValue", "list", 1, "value"),
            ("", "bytes", "s", 2, "value"),
            ("", "int64", "i", 3, "value"),
            ("", "float", "f", 4, "value"),
            ("", "bool", "b", 5, "value"),
            ("", "bytes", "bt", 7, "value"),
            ("", "NamedAttrs", "func", 10, "value"),
            ("", "TensorDescriptor", "td", 11, "value"),
            ("", "TensorDef", "t", 12, "value"),
            ("", "GraphDef", "g", 13, "value"),
            ("", "ListListInt", "list_list_int", 14, "value"),
            ("", "int64", "dt", 15, "value"),  # a ge::DataType value
            ("", "ListListFloat", "list_list_float", 16, "value"),
        ], [
            ("ListValue", [
                ("repeated", "bytes", "s", 2),
                ("repeated", "int64", "i", 3),
                ("repeated", "float", "f", 4),
                ("repeated", "bool", "b", 5),
                ("repeated", "bytes", "bt", 7),
                ("repeated", "TensorDescriptor", "td", 8),
                ("repeated", "TensorDef", "t", 9),
                ("repeated", "GraphDef", "g", 10),
                ("repeated", "NamedAttrs", "na", 11),
                ("repeated", "int64", "dt", 12),  # ge::DataType values
                ("", "ListValueType", "val_type", 20),
            ], [], [("ListValueType", list(zip(_LIST_VALUE_TYPES, range(len(_LIST_VALUE_TYPES)))))]),
            ("ListListInt", [("repeated", "ListInt", "list_list_i", 1)],
             [("ListInt", [("repeated", "int64", "list_i", 1)], [], [])], []),
            ("ListListFloat", [("repeated", "ListFloat", "list_list_f", 1)],
             [("ListFloat", [("repeated", "float", "list_f", 1)], [], [])], []),
        ], []),
        ("NamedAttrs", [
            ("", "string", "name", 1),
            ("map", "string,AttrDef", "attr", 2),
        ], [], []),
        ("ShapeDef", [("repeated", "int64", "dim", 1)], [], []),
        ("TensorDescriptor", [
            ("", "string", "name", 1),
            ("", "DataType", "dtype", 2),
            ("", "ShapeDef", "shape", 3),
            ("", "string", "layout", 4),
            ("map", "string,AttrDef", "attr", 5),
            ("", "bool", "has_out_attr", 9),
            ("", "int64", "size", 10),
            ("", "int64", "weight_size", 11),
            ("", "bool", "reuse_input", 12),
            ("", "bool", "output_tensor", 13),
            ("", "string", "device_type", 14),
            ("", "bool", "input_tensor", 15),
            ("", "int64", "real_dim_cnt", 16),
            ("", "int64", "reuse_input_index", 17),
            ("", "int64", "data_offset", 18),
            ("", "int64", "cmps_size", 19),
            ("", "string", "cmps_tab", 20),
            ("", "int64", "cmps_tab_offset", 21),
        ], [], []),
        ("TensorDef", [
            ("", "TensorDescriptor", "desc", 1),
            ("", "bytes", "data", 2),
        ], [], []),
    ],
}

TASK_FILE = {
    "name": "task.proto",
    "package": "domi",
    "deps": ["ge.proto"],
    "enums": [],
    "messages": [
        ("ModelTaskDef", [
            ("", "string", "version", 1),
            ("map", "string,string", "attr", 9),
            ("repeated", "TaskDef", "task", 10),
            ("", "uint64", "memory_size", 11),
            ("", "uint32", "stream_num", 12),
            ("", "uint32", "event_num", 13),
            ("", "uint64", "weight_size", 14),
            # atc_py extensions
            ("", "string", "soc_version", 100),
            ("", "string", "precision_mode", 101),
        ], [], []),
        ("TaskDef", [
            ("", "uint32", "id", 1),
            ("", "uint32", "type", 2),          # GE rtModelTaskType; 0 = kernel launch
            ("", "uint32", "stream_id", 10),
            ("", "uint32", "event_id", 11),
            # atc_py extensions: what the kernel is and where it came from
            ("", "string", "op_name", 100),     # OpDef.name in partition 0
            ("", "string", "op_type", 101),     # OpDef.type (the om type)
            ("", "string", "kernel_type", 102), # "AI_CORE", "AI_VECTOR", "AI_CPU"
            ("repeated", "string", "inputs", 103),   # "srcOp:index", as OpDef.input
            ("repeated", "string", "outputs", 104),  # "op:index"
            ("repeated", "string", "origin_op_names", 105),  # ONNX nodes this kernel covers
            ("", "string", "fusion_pass", 106),  # rule that produced it, "" if none
            ("", "ge.proto.DataType", "compute_dtype", 107),
            ("", "uint32", "block_dim", 108),
            ("repeated", "int64", "workspace_bytes", 109),
            ("repeated", "ge.proto.TensorDescriptor", "input_desc", 110),
            ("repeated", "ge.proto.TensorDescriptor", "output_desc", 111),
            ("map", "string,ge.proto.AttrDef", "attr", 112),
        ], [], []),
    ],
}

_SCALARS = {
    "double": descriptor_pb2.FieldDescriptorProto.TYPE_DOUBLE,
    "float": descriptor_pb2.FieldDescriptorProto.TYPE_FLOAT,
    "int64": descriptor_pb2.FieldDescriptorProto.TYPE_INT64,
    "uint64": descriptor_pb2.FieldDescriptorProto.TYPE_UINT64,
    "int32": descriptor_pb2.FieldDescriptorProto.TYPE_INT32,
    "uint32": descriptor_pb2.FieldDescriptorProto.TYPE_UINT32,
    "bool": descriptor_pb2.FieldDescriptorProto.TYPE_BOOL,
    "string": descriptor_pb2.FieldDescriptorProto.TYPE_STRING,
    "bytes": descriptor_pb2.FieldDescriptorProto.TYPE_BYTES,
}


def _enum_names(spec) -> set:
    """Fully-qualified names of every enum in a file spec (to tell enums from messages)."""
    names = {f"{spec['package']}.{name}" for name, _ in spec["enums"]}

    def walk(prefix, messages):
        for name, _fields, nested, enums in messages:
            full = f"{prefix}.{name}"
            names.update(f"{full}.{e}" for e, _ in enums)
            walk(full, nested)

    walk(spec["package"], spec["messages"])
    return names


_ALL_ENUMS = _enum_names(GE_FILE) | _enum_names(TASK_FILE)


def _resolve(type_name: str, scope: str, package: str) -> str:
    """Proto scoping: look the name up from the innermost message scope outwards."""
    if "." in type_name:  # already package-qualified, e.g. ge.proto.DataType
        return "." + type_name
    parts = scope.split(".")
    known = _known_types()
    while True:
        candidate = ".".join(parts + [type_name])
        if candidate in known:
            return "." + candidate
        if len(parts) <= len(package.split(".")):
            raise KeyError(f"unknown type {type_name} in {scope}")
        parts.pop()


def _known_types() -> set:
    names = set(_ALL_ENUMS)
    for spec in (GE_FILE, TASK_FILE):
        def walk(prefix, messages):
            for name, _fields, nested, _enums in messages:
                names.add(f"{prefix}.{name}")
                walk(f"{prefix}.{name}", nested)
        walk(spec["package"], spec["messages"])
    return names


def _entry_name(field_name: str) -> str:
    return "".join(p.capitalize() for p in field_name.split("_")) + "Entry"


def _fill_field(fd, type_name, scope, package):
    if type_name in _SCALARS:
        fd.type = _SCALARS[type_name]
        return
    full = _resolve(type_name, scope, package)
    fd.type_name = full
    fd.type = (descriptor_pb2.FieldDescriptorProto.TYPE_ENUM if full[1:] in _ALL_ENUMS
               else descriptor_pb2.FieldDescriptorProto.TYPE_MESSAGE)


def _fill_message(mp, spec_msg, scope, package):
    name, fields, nested, enums = spec_msg
    mp.name = name
    full = f"{scope}.{name}"
    for ename, values in enums:
        ep = mp.enum_type.add(name=ename)
        for vname, number in values:
            ep.value.add(name=vname, number=number)
    for sub in nested:
        _fill_message(mp.nested_type.add(), sub, full, package)
    oneofs: list = []
    for field in fields:
        label, type_name, fname, number = field[:4]
        fd = mp.field.add(name=fname, number=number, json_name=_json_name(fname))
        if label == "map":
            key_type, value_type = type_name.split(",")
            entry = mp.nested_type.add(name=_entry_name(fname))
            entry.options.map_entry = True
            key = entry.field.add(name="key", number=1, json_name="key",
                                  label=descriptor_pb2.FieldDescriptorProto.LABEL_OPTIONAL)
            _fill_field(key, key_type, full, package)
            value = entry.field.add(name="value", number=2, json_name="value",
                                    label=descriptor_pb2.FieldDescriptorProto.LABEL_OPTIONAL)
            _fill_field(value, value_type, full, package)
            fd.label = descriptor_pb2.FieldDescriptorProto.LABEL_REPEATED
            fd.type = descriptor_pb2.FieldDescriptorProto.TYPE_MESSAGE
            fd.type_name = f".{full}.{entry.name}"
            continue
        fd.label = (descriptor_pb2.FieldDescriptorProto.LABEL_REPEATED if label == "repeated"
                    else descriptor_pb2.FieldDescriptorProto.LABEL_OPTIONAL)
        _fill_field(fd, type_name, full, package)
        if len(field) > 4:
            if field[4] not in oneofs:
                oneofs.append(field[4])
                mp.oneof_decl.add(name=field[4])
            fd.oneof_index = oneofs.index(field[4])


def _json_name(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(p[:1].upper() + p[1:] for p in rest)


def file_descriptor_proto(spec) -> descriptor_pb2.FileDescriptorProto:
    """The FileDescriptorProto for one file spec (GE_FILE or TASK_FILE)."""
    fp = descriptor_pb2.FileDescriptorProto(name=spec["name"], package=spec["package"],
                                            syntax="proto3")
    fp.dependency.extend(spec["deps"])
    for ename, values in spec["enums"]:
        ep = fp.enum_type.add(name=ename)
        for vname, number in values:
            ep.value.add(name=vname, number=number)
    for msg in spec["messages"]:
        _fill_message(fp.message_type.add(), msg, spec["package"], spec["package"])
    return fp


# ---------------------------------------------------------------------------------------
# .proto text, rendered from the same data.
# ---------------------------------------------------------------------------------------

_HEADERS = {
    "ge.proto": ("// GE graph IR (package ge.proto), field numbers as in GE/metadef ge_ir.proto.\n"
                 "// GENERATED by om_format.schema.proto_text() -- do not edit by hand."),
    "task.proto": ("// atc_py task list for .om partition 2 (TASK_INFO).  Ours, not GE's: fields\n"
                   "// numbered < 100 follow GE's task.proto, fields >= 100 are atc_py extensions.\n"
                   "// GENERATED by om_format.schema.proto_text() -- do not edit by hand."),
}


def _render_enum(name, values, indent) -> list:
    pad = "  " * indent
    lines = [f"{pad}enum {name} {{"]
    lines += [f"{pad}  {vname} = {number};" for vname, number in values]
    lines.append(f"{pad}}}")
    return lines


def _render_field(field, pad) -> str:
    label, type_name, fname, number = field[:4]
    if label == "map":
        key_type, value_type = type_name.split(",")
        return f"{pad}map<{key_type}, {value_type}> {fname} = {number};"
    prefix = "repeated " if label == "repeated" else ""
    return f"{pad}{prefix}{type_name} {fname} = {number};"


def _render_message(msg, indent) -> list:
    name, fields, nested, enums = msg
    pad = "  " * indent
    lines = [f"{pad}message {name} {{"]
    for ename, values in enums:
        lines += _render_enum(ename, values, indent + 1)
    for sub in nested:
        lines += _render_message(sub, indent + 1)
    emitted_oneofs = set()
    for field in fields:
        if len(field) > 4:
            group = field[4]
            if group in emitted_oneofs:
                continue
            emitted_oneofs.add(group)
            lines.append(f"{pad}  oneof {group} {{")
            lines += [_render_field(f, pad + "    ") for f in fields if len(f) > 4 and f[4] == group]
            lines.append(f"{pad}  }}")
        else:
            lines.append(_render_field(field, pad + "  "))
    lines.append(f"{pad}}}")
    return lines


def proto_text(spec) -> str:
    """The .proto source text of a file spec; committed as om_format/<name>."""
    lines = [_HEADERS[spec["name"]], 'syntax = "proto3";', ""]
    lines += [f'import "{dep}";' for dep in spec["deps"]]
    if spec["deps"]:
        lines.append("")
    lines += [f"package {spec['package']};", ""]
    for ename, values in spec["enums"]:
        lines += _render_enum(ename, values, 0) + [""]
    for msg in spec["messages"]:
        lines += _render_message(msg, 0) + [""]
    return "\n".join(lines).rstrip("\n") + "\n"


def write_proto_files(directory: str) -> list:
    """Regenerate ge.proto and task.proto in `directory`; returns the paths written."""
    import os

    paths = []
    for spec in (GE_FILE, TASK_FILE):
        path = os.path.join(directory, spec["name"])
        with open(path, "w", encoding="utf-8", newline="\n") as f:
            f.write(proto_text(spec))
        paths.append(path)
    return paths


# ---------------------------------------------------------------------------------------
# Message classes.  A private pool, so another copy of ge.proto loaded elsewhere in the
# process (e.g. a generated module) cannot clash with ours.
# ---------------------------------------------------------------------------------------

POOL = descriptor_pool.DescriptorPool()
for _spec in (GE_FILE, TASK_FILE):
    POOL.Add(file_descriptor_proto(_spec))


def message_class(full_name: str):
    """The message class for a fully-qualified name, e.g. 'ge.proto.OpDef'."""
    return _get_class(POOL.FindMessageTypeByName(full_name))


ModelDef = message_class("ge.proto.ModelDef")
GraphDef = message_class("ge.proto.GraphDef")
OpDef = message_class("ge.proto.OpDef")
AttrDef = message_class("ge.proto.AttrDef")
NamedAttrs = message_class("ge.proto.NamedAttrs")
TensorDef = message_class("ge.proto.TensorDef")
TensorDescriptor = message_class("ge.proto.TensorDescriptor")
ShapeDef = message_class("ge.proto.ShapeDef")
ModelTaskDef = message_class("domi.ModelTaskDef")
TaskDef = message_class("domi.TaskDef")


class _EnumNamespace:
    """Enum values as attributes (DataType.DT_FLOAT == 1) plus Name()/Value()."""

    def __init__(self, descriptor):
        self.DESCRIPTOR = descriptor
        for value in descriptor.values:
            setattr(self, value.name, value.number)

    def Name(self, number: int) -> str:
        return self.DESCRIPTOR.values_by_number[number].name

    def Value(self, name: str) -> int:
        return self.DESCRIPTOR.values_by_name[name].number


DataType = _EnumNamespace(POOL.FindEnumTypeByName("ge.proto.DataType"))
ListValueType = _EnumNamespace(POOL.FindEnumTypeByName("ge.proto.AttrDef.ListValue.ListValueType"))


def serialize(message) -> bytes:
    """Deterministic wire bytes (map entries sorted), so equal models give equal .om files."""
    return message.SerializeToString(deterministic=True)


if __name__ == "__main__":  # python -m om_format.schema  regenerates the .proto files
    import os

    for written in write_proto_files(os.path.dirname(os.path.abspath(__file__))):
        print(written)
