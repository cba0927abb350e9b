"""`--mode=3`: check every node of the model without compiling; report supported or not, and why."""
from __future__ import annotations

from ge.errors import AtcError
from ge.onnx_import import OnnxModel, load_model, node_names, normalize_opset
from ge.ops.registry import get_op


def check_model(options) -> tuple:
    """Returns (report dict, all supported?)."""
    loaded = load_model(options.model)
    model = normalize_opset(loaded)
    nodes = []
    names = node_names(model.graph)          # the compiled graph's names for unnamed nodes
    for index, node in enumerate(model.graph.node):
        name = names[index] or f"{node.op_type}_{index}"
        if node.domain not in ("", "ai.onnx"):
            entry = {"supported": False, "reason": f"custom domain [{node.domain}] is not supported"}
        elif node.op_type == "Constant" or get_op(node.op_type) is not None:
            entry = {"supported": True, "reason": ""}
        else:
            entry = {"supported": False, "reason": f"op type [{node.op_type}] has no kernel in atc_py"}
        nodes.append({"name": name, "op_type": node.op_type, **entry})
    graph_result = {"result": "success", "reason": ""}
    if all(n["supported"] for n in nodes):
        # The structural checks need a full import: shapes, folding, config inputs.
        from ge.onnx_import import import_model
        from ge.passes import run_generic
        try:
            from atc_py.compiler import input_shapes
            run_generic(import_model(OnnxModel(model, loaded.weights), input_shapes(options, model),
                                     options.input_format))
        except AtcError as err:
            graph_result = {"result": "failed", "reason": err.render()}
    supported = sum(n["supported"] for n in nodes)
    report = {
        "model": options.model,
        "summary": {"total": len(nodes), "supported": supported, "unsupported": len(nodes) - supported,
                    "graph": graph_result},
        "op_list": nodes,
    }
    ok = supported == len(nodes) and graph_result["result"] == "success"
    return report, ok
