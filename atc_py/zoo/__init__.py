"""The model zoo: deterministic ONNX models shaped like PyTorch exports, for tests and benches.

Why: the converter, the fusion passes and the simulator need the real graphs users bring
(ResNet, DenseNet, EfficientNet, MobileNetV2, BERT, ViT, GPT-2 and the seeds' test cases) without downloading
weights; weights are seeded random so builds are byte-identical and numerically tame.

    build(name, small=False, **options) -> onnx.ModelProto
    save(name, out_dir, small=False, **options) -> str (the written path)
    MODELS: name -> builder(small=False, **options)
"""
from __future__ import annotations

import os
from typing import Callable, Dict

import onnx

from ge.errors import AtcError

from atc_py.zoo import bert, densenet, efficientnet, gpt2, mobilenet, resnet, seeds, vit

MODELS: Dict[str, Callable[..., onnx.ModelProto]] = {
    "seed_testmodel": seeds.build_seed_testmodel,
    "seed_addge": seeds.build_seed_addge,
    "seed_mulreducesum": seeds.build_seed_mulreducesum,
    "resnet50": resnet.build_resnet50,
    "resnet101": resnet.build_resnet101,
    "densenet121": densenet.build_densenet121,
    "efficientnet_b4": efficientnet.build_efficientnet_b4,
    "mobilenet_v2": mobilenet.build_mobilenet_v2,
    "bert_base": bert.build_bert_base,
    "vit_base": vit.build_vit_base,
    "gpt2": gpt2.build_gpt2,
}

# protobuf cannot serialise a message above 2 GB; bigger models keep weights outside.
_EXTERNAL_DATA_BYTES = 1_800_000_000


def unknown_model(name) -> AtcError:
    return AtcError("E10001", f"Value [{name}] for parameter [model] is invalid. "
                    f"Reason: no zoo model has this name.",
                    "Use one of: " + ", ".join(MODELS))


def build(name: str, small: bool = False, **options) -> onnx.ModelProto:
    """Build zoo model `name`; `small` gives the tiny config used by tests."""
    if name not in MODELS:
        raise unknown_model(name)
    return MODELS[name](small=small, **options)


def _weight_bytes(model: onnx.ModelProto) -> int:
    return sum(len(t.raw_data) for t in model.graph.initializer)


def save(name: str, out_dir: str, small: bool = False, **options) -> str:
    """Build `name` and write it to out_dir/name.onnx (creating out_dir); returns the path."""
    model = build(name, small=small, **options)
    os.makedirs(out_dir, exist_ok=True)
    path = os.path.join(out_dir, f"{name}.onnx")
    if _weight_bytes(model) > _EXTERNAL_DATA_BYTES:
        onnx.save_model(model, path, save_as_external_data=True, all_tensors_to_one_file=True,
                        location=f"{name}.onnx.data")
    else:
        onnx.save_model(model, path)
    return path
