"""Export one (family, exporter, attention implementation) to ONNX; run as a subprocess.

usage: python -m bench.sweep.export FAMILY EXPORTER ATTN OUT.onnx
Prints one JSON line: export seconds, the torch model's attention module count (a cross-check
of the ONNX-structural count), parameters.  TorchScript: opset 17, dynamo=False; dynamo:
opset 18, its default optimizer.  Unnamed ONNX nodes get a name (`<op>_sweep<i>`), so the
kernels' provenance can be matched to ONNX nodes; nothing else in the file is changed.
"""
from __future__ import annotations

import json
import os
import re
import sys
import time
import warnings

ATTENTION_CLASS = re.compile(r"(Attention|Attn)$|^MultiheadAttention$")


def attention_modules(model) -> int:
    """Innermost modules whose class name ends in Attention/Attn (BertSelfAttention inside
    BertAttention counts once; nn.MultiheadAttention counts)."""
    hits = [m for m in model.modules() if ATTENTION_CLASS.search(type(m).__name__)]
    inner = [m for m in hits if not any(o is not m and o in hits for o in m.modules())]
    return len(inner)


def name_unnamed_nodes(path: str) -> int:
    import onnx
    model = onnx.load(path, load_external_data=False)
    taken = {n.name for n in model.graph.node if n.name}
    renamed = 0
    for i, node in enumerate(model.graph.node):
        if not node.name:
            name = f"{node.op_type}_sweep{i}"
            while name in taken:
                name += "_"
            node.name = name
            taken.add(name)
            renamed += 1
    if renamed:
        onnx.save(model, path)
    return renamed


def export(family: str, exporter: str, attn: str, out: str) -> dict:
    import torch
    from bench.sweep.models import BY_NAME
    model, args, names = BY_NAME[family].build(attn)
    record = {"attn_modules": attention_modules(model),
              "params": int(sum(p.numel() for p in model.parameters()))}
    tmp = out + ".part"
    start = time.time()
    # No torch.no_grad(): under it nn.MultiheadAttention takes its fast path
    # (aten::_native_multi_head_attention), which the TorchScript exporter cannot export and
    # which a plain torch.onnx.export(model.eval(), ...) as users write it does not take.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if exporter == "torchscript":
            torch.onnx.export(model, args, tmp, input_names=names, opset_version=17, dynamo=False)
        else:
            program = torch.onnx.export(model, args, input_names=names, opset_version=18, dynamo=True)
            program.save(tmp)
    record["export_s"] = round(time.time() - start, 2)
    record["renamed_nodes"] = name_unnamed_nodes(tmp)
    os.replace(tmp, out)
    return record


def main(argv) -> int:
    family, exporter, attn, out = argv
    print(json.dumps(export(family, exporter, attn, out)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
