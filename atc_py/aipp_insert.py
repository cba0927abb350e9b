"""Insert the Aipp ops of `--insert_op_conf` after the Data nodes they serve, as GE does.

For each `aipp_op` block: the graph input of rank `related_input_rank` becomes a raw uint8
image (NHWC, or the YUV420SP buffer), and an `Aipp` node named `<input>_0_huawei_aipp`
computes the model's original input from it (codegen/aipp.py).  Everything is checked
against the model first, with the config line that is wrong: the input must be a float
4-D NCHW/NHWC tensor (as --input_format says), its channels 3 (or 1 for YUV400 / a gray
CSC), the crop window inside the source image, and the output size after crop and padding
equal to the model's H and W (GE refuses the same: "the data output H and W is not equal
with aipp output H and W").
"""
from __future__ import annotations

import numpy as np

from atc_py.aipp_config import PARAM, AippConfig
from codegen.aipp import OP_TYPE, output_hw, raw_shape, src_size
from ge.errors import AtcError
from ge.ir import Graph, Node, TensorDesc, Value

FLOATS = (np.dtype(np.float16), np.dtype(np.float32))


def _error(config: AippConfig, field: str, reason: str, solution: str = "") -> AtcError:
    return AtcError("E10001", f"Value for parameter [{PARAM}] is invalid. Reason: line {config.line_of(field)}: "
                    f"{reason}", solution or "Make the aipp_op match the model input (docs/FORMATS.md, AIPP).")


def aipp_targets(graph: Graph, configs: list) -> dict:
    """input name -> its AippConfig (related_input_rank counts the graph inputs in order)."""
    targets = {}
    for config in configs:
        rank = config.input_rank
        if rank >= len(graph.inputs):
            raise _error(config, "related_input_rank", f"related_input_rank {rank}: the model has "
                         f"{len(graph.inputs)} input(s) {[v.name for v in graph.inputs]}; can not find the data "
                         "node of that rank.", "related_input_rank counts the model inputs from 0.")
        targets[graph.inputs[rank].name] = config
    return targets


def _geometry(config: AippConfig, value: Value, input_format: str) -> dict:
    """The Aipp attributes for this input, after every check against the model."""
    p = config.params
    shape, dtype = tuple(value.desc.shape), np.dtype(value.desc.dtype)
    if input_format not in ("NCHW", "NHWC") or len(shape) != 4:
        raise _error(config, "related_input_rank", f"input [{value.name}] is {list(shape)} with --input_format="
                     f"{input_format}; AIPP feeds a 4-D NCHW or NHWC image input.",
                     "Pass --input_format=NCHW or NHWC for the image input.")
    if dtype not in FLOATS:
        raise _error(config, "related_input_rank", f"input [{value.name}] is {dtype}; AIPP produces a float image.")
    n, c, h, w = (shape[0], shape[1], shape[2], shape[3]) if input_format == "NCHW" else \
        (shape[0], shape[3], shape[1], shape[2])
    fmt = p["input_format"]
    allowed = (1,) if fmt == "YUV400_U8" else (3, 1)
    if c not in allowed:
        raise _error(config, "input_format", f"input [{value.name}] has {c} channels; {fmt} gives "
                     f"{' or '.join(map(str, allowed))}.", "Feed AIPP a 3-channel (or 1-channel) image input.")
    src_h, src_w = src_size(p, h, w)
    if p.get("crop"):
        ch, cw = int(p.get("crop_size_h") or src_h), int(p.get("crop_size_w") or src_w)
        for axis, start, size, total in (("h", p["load_start_pos_h"], ch, src_h), ("w", p["load_start_pos_w"], cw,
                                                                                    src_w)):
            if start + size > total:
                raise _error(config, f"load_start_pos_{axis}", f"the crop window load_start_pos_{axis} {start} + "
                             f"crop_size_{axis} {size} goes past the source image ({total}).",
                             "Keep the crop inside src_image_size_w x src_image_size_h.")
    out_h, out_w = output_hw(p, src_h, src_w)
    if (out_h, out_w) != (h, w):
        field = "padding" if p.get("padding") else ("crop_size_h" if p.get("crop") else "src_image_size_h")
        raise _error(config, field, f"aipp output is {out_h}x{out_w} (H x W after crop and padding) but input "
                     f"[{value.name}] is {h}x{w}: the data output H and W must equal the aipp output H and W.",
                     "Set src_image_size / crop / padding so the result has the model's H and W.")
    if fmt == "YUV420SP_U8" and (src_h % 2 or src_w % 2):
        raise _error(config, "src_image_size_w", f"a YUV420SP_U8 image must have even width and height, not "
                     f"{src_w}x{src_h}.")
    return {"aipp": dict(p), "output_channels": c, "output_format": input_format, "output_dtype": str(dtype),
            "src_h": src_h, "src_w": src_w, "_raw_shape": raw_shape(p, n, src_h, src_w)}


def insert_aipp_ops(graph: Graph, configs: list, input_format: str) -> dict:
    """Insert one Aipp node per aipp_op; returns {input name: {format, raw shape, node}}."""
    done = {}
    for name, config in aipp_targets(graph, configs).items():
        value = next(v for v in graph.inputs if v.name == name)
        attrs = _geometry(config, value, input_format)
        shape = attrs.pop("_raw_shape")
        edges = config.written.get("input_edge_idx")
        if edges and sorted(set(edges)) != list(range(len(value.uses))):
            raise _error(config, "input_edge_idx", f"input_edge_idx {edges} applies AIPP to some of the "
                         f"{len(value.uses)} consumer(s) of [{name}] only; atc_py applies AIPP to every consumer.",
                         "Leave input_edge_idx out (AIPP on every consumer).")
        value.name = graph.unique_name(f"{name}_0_huawei_aipp:0")
        raw = Value(name, TensorDesc(np.dtype(np.uint8), shape, "NHWC"))
        raw.graph = graph
        graph.inputs = [raw if v is value else v for v in graph.inputs]
        node = Node(OP_TYPE, [raw], [value], attrs, name=graph.unique_name(f"{name}_0_huawei_aipp"),
                    provenance={"origin": [], "inserted_by": "--insert_op_conf"})
        graph.add_node(node, before=graph.nodes[0] if graph.nodes else None)
        done[name] = {"input_format": config.params["input_format"], "raw_shape": list(shape), "node": node.name}
    return done
