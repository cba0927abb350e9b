"""ONNX files from real exporters: torch.onnx (TorchScript and dynamo) on torch/transformers models.

The zoo builds exporter-*style* graphs by hand; these helpers run the real tools so the
import, folding and fusion code sees what users actually bring.  Models are built from
configs with seeded random weights (never downloaded).  `size="small"` gives 2-layer
configs for the test suite; `size="full"` gives ResNet-50 / BERT-base-like sizes for bench/.

Needs torch (and transformers for BERT/ViT/GPT-2, onnxscript for dynamo): the `export`
extra.  Callers skip when they are missing (pytest.importorskip).
"""
from __future__ import annotations

import os
import warnings
from typing import Optional

import numpy as np
import onnx
import pytest

MODELS = ("resnet50", "bert", "vit", "gpt2")
EXPORTERS = ("torchscript", "dynamo")
TORCHSCRIPT_OPSET = 17
DYNAMO_OPSET = 18
# Small test shapes: batch 2, image 32x32, 8 tokens; bench sizes: batch 1, 224x224, 128 tokens.
SHAPES = {"small": dict(batch=2, image=32, seq=8, vocab=100),
          "full": dict(batch=1, image=224, seq=128, vocab=30522)}


# ---------------------------------------------------------------- torchvision-style ResNet

def _resnet_classes():
    import torch.nn as nn

    class Bottleneck(nn.Module):
        """torchvision's Bottleneck (v1.5: stride on the 3x3 conv)."""
        expansion = 4

        def __init__(self, inplanes, planes, stride=1, downsample=None):
            super().__init__()
            self.conv1 = nn.Conv2d(inplanes, planes, 1, bias=False)
            self.bn1 = nn.BatchNorm2d(planes)
            self.conv2 = nn.Conv2d(planes, planes, 3, stride, 1, bias=False)
            self.bn2 = nn.BatchNorm2d(planes)
            self.conv3 = nn.Conv2d(planes, planes * 4, 1, bias=False)
            self.bn3 = nn.BatchNorm2d(planes * 4)
            self.relu = nn.ReLU(inplace=True)
            self.downsample = downsample

        def forward(self, x):
            identity = x if self.downsample is None else self.downsample(x)
            out = self.relu(self.bn1(self.conv1(x)))
            out = self.relu(self.bn2(self.conv2(out)))
            out = self.bn3(self.conv3(out))
            return self.relu(out + identity)

    class ResNet(nn.Module):
        """torchvision's ResNet: stem, four stages of Bottlenecks, avgpool, flatten, fc."""

        def __init__(self, layers=(3, 4, 6, 3), width=64, num_classes=1000):
            super().__init__()
            self.inplanes = width
            self.conv1 = nn.Conv2d(3, width, 7, 2, 3, bias=False)
            self.bn1 = nn.BatchNorm2d(width)
            self.relu = nn.ReLU(inplace=True)
            self.maxpool = nn.MaxPool2d(3, 2, 1)
            self.stages = nn.Sequential(*[self._stage(width * 2 ** i, n, 1 if i == 0 else 2)
                                          for i, n in enumerate(layers)])
            self.avgpool = nn.AdaptiveAvgPool2d((1, 1))
            self.fc = nn.Linear(self.inplanes, num_classes)

        def _stage(self, planes, blocks, stride):
            downsample = None
            if stride != 1 or self.inplanes != planes * 4:
                downsample = nn.Sequential(nn.Conv2d(self.inplanes, planes * 4, 1, stride, bias=False),
                                           nn.BatchNorm2d(planes * 4))
            layers = [Bottleneck(self.inplanes, planes, stride, downsample)]
            self.inplanes = planes * 4
            layers += [Bottleneck(self.inplanes, planes) for _ in range(1, blocks)]
            return nn.Sequential(*layers)

        def forward(self, x):
            x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
            x = self.avgpool(self.stages(x))
            return self.fc(x.flatten(1))

    return ResNet


def _randomize_batchnorm(model) -> None:
    """Non-trivial running stats and affine params, so a wrong BN fold shows in the numbers."""
    import torch
    gen = torch.Generator().manual_seed(1)
    for module in model.modules():
        if isinstance(module, torch.nn.BatchNorm2d):
            n = module.num_features
            module.running_mean.copy_(torch.randn(n, generator=gen) * 0.1)
            module.running_var.copy_(torch.rand(n, generator=gen) * 0.5 + 0.75)
            module.weight.data.copy_(torch.rand(n, generator=gen) * 0.5 + 0.75)
            module.bias.data.copy_(torch.randn(n, generator=gen) * 0.1)


def _perturb_parameters(model, scale: float = 0.05) -> None:
    """Seeded noise on every parameter.  Fresh transformers models have all-zero biases and
    unit LayerNorm weights, which exporters then drop (onnxscript's optimizer removes a zero
    Gemm bias) and which would hide a lost bias or a wrong LayerNorm in the comparisons."""
    import torch
    gen = torch.Generator().manual_seed(4)
    with torch.no_grad():
        for param in model.parameters():
            param.add_(torch.randn(param.shape, generator=gen) * scale)


# ---------------------------------------------------------------- model builders

class _LastHidden:
    """Wraps a transformers model so the exported graph has plain tensor outputs."""

    @staticmethod
    def wrap(model, names):
        import torch

        class Wrapper(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.model = model

            def forward(self, *args):
                out = self.model(**dict(zip(names, args)))
                return out.last_hidden_state

        return Wrapper()


def build(name: str, size: str = "small", layers: Optional[int] = None):
    """(torch module in eval mode, example input tuple, input names) for a model name."""
    model, args, names = _build(name, size, layers)
    _perturb_parameters(model)
    return model, args, names


def _build(name: str, size: str, layers: Optional[int]):
    import torch
    torch.manual_seed(0)
    s = SHAPES[size]
    small = size == "small"
    if name == "resnet50":
        ResNet = _resnet_classes()
        model = ResNet(layers=(1, 1, 1, 1), width=8, num_classes=10) if small else ResNet()
        _randomize_batchnorm(model)
        args = (torch.randn(s["batch"], 3, s["image"], s["image"]),)
        return model.eval(), args, ["input"]
    import transformers as tf
    n_layers = layers or (2 if small else 12)
    hidden, heads, inter = (64, 4, 128) if small else (768, 12, 3072)
    if name == "bert":
        config = tf.BertConfig(vocab_size=s["vocab"], hidden_size=hidden, num_hidden_layers=n_layers,
                               num_attention_heads=heads, intermediate_size=inter,
                               max_position_embeddings=max(64, s["seq"]), attn_implementation="eager")
        model = tf.BertModel(config, add_pooling_layer=False)
        gen = torch.Generator().manual_seed(2)
        ids = torch.randint(0, s["vocab"], (s["batch"], s["seq"]), generator=gen)
        mask = torch.ones(s["batch"], s["seq"], dtype=torch.int64)
        mask[0, s["seq"] // 2:] = 0          # padding in the first sequence
        token_types = torch.zeros_like(ids)
        names = ["input_ids", "attention_mask", "token_type_ids"]
        return _LastHidden.wrap(model.eval(), names).eval(), (ids, mask, token_types), names
    if name == "vit":
        patch = 8 if small else 16
        config = tf.ViTConfig(image_size=s["image"], patch_size=patch, hidden_size=hidden,
                              num_hidden_layers=n_layers, num_attention_heads=heads,
                              intermediate_size=inter, attn_implementation="eager")
        model = tf.ViTModel(config, add_pooling_layer=False)
        names = ["pixel_values"]
        args = (torch.randn(s["batch"], 3, s["image"], s["image"]),)
        return _LastHidden.wrap(model.eval(), names).eval(), args, names
    if name == "gpt2":
        config = tf.GPT2Config(vocab_size=s["vocab"] if small else 50257, n_positions=max(64, s["seq"]),
                               n_embd=hidden, n_layer=n_layers, n_head=heads, use_cache=False,
                               attn_implementation="eager")
        model = tf.GPT2Model(config)
        gen = torch.Generator().manual_seed(3)
        ids = torch.randint(0, config.vocab_size, (s["batch"], s["seq"]), generator=gen)
        # An explicit mask (right padding in the first sequence): the causal mask is combined
        # with it, and transformers skips its packed-sequence probe (aten::diff, which the
        # TorchScript exporter cannot export).
        mask = torch.ones(s["batch"], s["seq"], dtype=torch.int64)
        mask[0, s["seq"] // 2:] = 0
        names = ["input_ids", "attention_mask"]
        return _LastHidden.wrap(model.eval(), names).eval(), (ids, mask), names
    raise ValueError(f"unknown model {name!r}; known: {MODELS}")


def export(name: str, exporter: str, path: str, size: str = "small", layers: Optional[int] = None) -> str:
    """Export `name` with `exporter` to `path` (static shapes); returns the path."""
    return _export(build(name, size, layers), exporter, path)


def _export(built, exporter: str, path: str) -> str:
    import torch
    model, args, names = built
    # The exporters' own tracer/deprecation warnings say nothing about our code: keep them out.
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if exporter == "torchscript":
            torch.onnx.export(model, args, path, dynamo=False, do_constant_folding=False,
                              opset_version=TORCHSCRIPT_OPSET, input_names=names, output_names=["output"])
        elif exporter == "dynamo":
            program = torch.onnx.export(model, args, dynamo=True, opset_version=DYNAMO_OPSET,
                                        input_names=names, output_names=["output"], verbose=False)
            program.save(path)
        else:
            raise ValueError(f"unknown exporter {exporter!r}; known: {EXPORTERS}")
    return path


def export_dynamic(name: str, exporter: str, path: str) -> str:
    """Export the small `name` (bert, gpt2) with its batch and sequence length dynamic, as
    users export for serving (TorchScript's `dynamic_axes`, dynamo's `dynamic_shapes`)."""
    import torch
    model, args, names = build(name)
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if exporter == "torchscript":
            axes = {n: {0: "batch", 1: "seq"} for n in names + ["output"]}
            torch.onnx.export(model, args, path, dynamo=False, do_constant_folding=False,
                              opset_version=TORCHSCRIPT_OPSET, input_names=names, output_names=["output"],
                              dynamic_axes=axes)
        elif exporter == "dynamo":
            from torch.export import Dim
            batch, seq = Dim("batch", max=64), Dim("seq", min=2, max=64)
            shapes = (tuple({0: batch, 1: seq} for _ in names),)      # forward(*args): one tuple
            program = torch.onnx.export(model, args, dynamo=True, opset_version=DYNAMO_OPSET, input_names=names,
                                        output_names=["output"], dynamic_shapes=shapes, verbose=False)
            program.save(path)
        else:
            raise ValueError(f"unknown exporter {exporter!r}; known: {EXPORTERS}")
    return path


def example_feeds(name: str, size: str = "small", layers: Optional[int] = None) -> dict:
    """The example inputs used at export time, as numpy feeds (BERT's mask has zeros)."""
    _, args, names = build(name, size, layers)
    return {n: a.numpy() for n, a in zip(names, args)}


def export_cache_or_skip(tmp_path_factory, name: str) -> "ExportCache":
    """The export cache a test module's fixture hands out; skips when the exporters are missing."""
    for module in ("torch", "transformers", "onnxscript"):
        pytest.importorskip(module)
    return ExportCache(tmp_path_factory.mktemp(name))


class ExportCache:
    """Exports each (model, exporter, size, layers) once into `root` and loads it as ModelProto."""

    def __init__(self, root: str):
        self.root = str(root)
        self._models: dict = {}

    def path(self, name: str, exporter: str, size: str = "small", layers: Optional[int] = None) -> str:
        tag = f"{name}_{exporter}_{size}" + (f"_l{layers}" if layers else "")
        folder = os.path.join(self.root, tag)
        path = os.path.join(folder, f"{tag}.onnx")
        if not os.path.exists(path):
            os.makedirs(folder, exist_ok=True)
            export(name, exporter, path, size, layers)
        return path

    def model(self, name: str, exporter: str, size: str = "small", layers: Optional[int] = None) -> onnx.ModelProto:
        key = (name, exporter, size, layers)
        if key not in self._models:
            self._models[key] = onnx.load(self.path(*key))
        return self._models[key]

    def attention(self, name: str, exporter: str, attn: str, dtype: str = "float32") -> onnx.ModelProto:
        """An attention family (ATTENTION) exported with `exporter` and attention implementation
        `attn` ("sdpa": transformers' default, or "eager"), in float32 or "float16"."""
        key = ("attention", name, exporter, attn, dtype)
        if key not in self._models:
            tag = f"{name}_{exporter}_{attn}" + ("" if dtype == "float32" else f"_{dtype}")
            path = os.path.join(self.root, tag, f"{tag}.onnx")
            if not os.path.exists(path):
                os.makedirs(os.path.dirname(path), exist_ok=True)
                _export(build_attention(name, attn, dtype), exporter, path)
            self._models[key] = onnx.load(path)
        return self._models[key]


# ---------------------------------------------------------------- attention families

# Tiny configs of the attention forms people export (1 layer, hidden 32, 4 heads of 8,
# batch 2, 8 tokens with padding in the first sequence), with transformers' default
# attention ("sdpa", F.scaled_dot_product_attention) or its explicit form ("eager").
# What each family exercises: bert -- SDPA's split Q/K scale and NaN guard; llama --
# grouped-query attention (2 KV heads) and rotary embeddings, and a decoder block's RMSNorm
# and SwiGLU MLP; qwen2 -- the same with Q/K/V biases; t5 -- no scale, a relative
# position bias; bart -- cross-attention; gpt_neox -- partial rotary, QKV interleaved per
# head; deberta -- a relative bias computed from Q and K (eager only in transformers);
# swin -- window attention with a position bias and the shifted-window mask added through
# views; distilbert -- masked_fill (an inverted Where); nn_mha -- torch's
# nn.MultiheadAttention (3-D [B*H,S,D] heads, packed in-projection, heads by Gather).
# Three more are written the way timm and torchvision write them (those libraries are not
# test dependencies): levit -- Linear + BatchNorm1d projections ("LinearNorm"), a learned
# attention bias, Hardswish on the merged heads; eva -- rotary embedding of feature pairs
# that leaves the class token out; window -- torchvision Swin's shifted-window attention
# (q scaled after the head split, relative bias, the window mask added through a view).
TINY = dict(hidden_size=32, num_attention_heads=4, intermediate_size=64, num_hidden_layers=1, vocab_size=64,
            max_position_embeddings=32)
ATTENTION = {
    "bert": ("BertConfig", "BertModel", TINY, "text"),
    "llama": ("LlamaConfig", "LlamaModel", dict(TINY, num_key_value_heads=2), "text"),
    "qwen2": ("Qwen2Config", "Qwen2Model", dict(TINY, num_key_value_heads=2), "text"),
    "t5": ("T5Config", "T5EncoderModel", dict(d_model=32, d_kv=8, num_heads=4, d_ff=64, num_layers=1,
                                              vocab_size=64), "text"),
    "bart": ("BartConfig", "BartModel", dict(d_model=32, encoder_attention_heads=4, decoder_attention_heads=4,
                                             encoder_ffn_dim=64, decoder_ffn_dim=64, encoder_layers=1,
                                             decoder_layers=1, vocab_size=64, max_position_embeddings=32,
                                             pad_token_id=1, bos_token_id=0, eos_token_id=2,
                                             decoder_start_token_id=2), "seq2seq"),
    "gpt_neox": ("GPTNeoXConfig", "GPTNeoXModel", dict(TINY, rotary_pct=0.5), "text"),
    "deberta": ("DebertaV2Config", "DebertaV2Model", dict(TINY, relative_attention=True, position_buckets=8,
                                                          pos_att_type=["p2c", "c2p"], max_relative_positions=-1,
                                                          norm_rel_ebd="layer_norm", share_att_key=True), "text"),
    "swin": ("SwinConfig", "SwinModel", dict(image_size=32, patch_size=4, embed_dim=16, depths=[2], num_heads=[2],
                                             window_size=4), "image"),
    "distilbert": ("DistilBertConfig", "DistilBertModel", dict(dim=32, n_heads=4, hidden_dim=64, n_layers=1,
                                                               vocab_size=64, max_position_embeddings=32), "text"),
    "nn_mha": (None, None, {}, "hidden"),
    "levit": (None, None, {}, "hidden"),
    "eva": (None, None, {}, "hidden7"),      # a class token and 6 rotated tokens
    "window": (None, None, {}, "hidden"),
}
ATTN_IMPLS = ("sdpa", "eager")
ATTENTION_SHAPE = dict(batch=2, seq=8, image=32)


def build_attention(name: str, attn: str, dtype: str = "float32"):
    """(module in eval mode, example inputs, input names) of an ATTENTION family; "float16"
    gives the half-precision model (a decoder's RMSNorm then has its Cast-to-float32 wrapper)."""
    import torch
    torch.manual_seed(0)
    config_cls, model_cls, config, kind = ATTENTION[name]
    if config_cls is None:
        model = {"nn_mha": _mha_block, "levit": _levit_block, "eva": _eva_block, "window": _window_block}[name]()
    else:
        import transformers as tf
        cfg = getattr(tf, config_cls)(**config)
        if hasattr(cfg, "use_cache"):
            cfg.use_cache = False
        model = getattr(tf, model_cls)._from_config(cfg, attn_implementation=attn)
    _perturb_parameters(model)
    if dtype == "float16":
        model = model.half()
    args, names = _attention_inputs(kind)
    return (_LastHidden.wrap(model.eval(), names).eval() if config_cls is not None else model.eval()), args, names


def _attention_inputs(kind: str):
    import torch
    b, s = ATTENTION_SHAPE["batch"], ATTENTION_SHAPE["seq"]
    gen = torch.Generator().manual_seed(2)
    mask = torch.ones(b, s, dtype=torch.int64)
    mask[0, s // 2:] = 0                              # padding in the first sequence
    ids = torch.randint(3, 60, (b, s), generator=gen)
    if kind == "text":
        return (ids, mask), ["input_ids", "attention_mask"]
    if kind == "seq2seq":
        return (ids, mask, torch.randint(3, 60, (b, s // 2), generator=gen)), \
            ["input_ids", "attention_mask", "decoder_input_ids"]
    if kind == "image":
        image = ATTENTION_SHAPE["image"]
        return (torch.randn(b, 3, image, image, generator=gen),), ["pixel_values"]
    tokens = 7 if kind == "hidden7" else s
    return (torch.randn(b, tokens, 32, generator=gen),), ["hidden"]


def _mha_block():
    """A pre-LN encoder block around torch.nn.MultiheadAttention(batch_first=True), as
    torchvision's ViT writes it."""
    import torch

    class Block(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.norm = torch.nn.LayerNorm(32)
            self.attn = torch.nn.MultiheadAttention(32, 4, batch_first=True)

        def forward(self, hidden):
            y = self.norm(hidden)
            y, _ = self.attn(y, y, y, need_weights=False)
            return hidden + y

    return Block()


def _levit_block():
    """timm LeViT's Attention: LinearNorm qkv split per head into q, k, v of different sizes,
    a learned bias per head, Hardswish on the merged heads, LinearNorm projection."""
    import torch

    class LinearNorm(torch.nn.Module):
        def __init__(self, fan_in, fan_out):
            super().__init__()
            self.linear = torch.nn.Linear(fan_in, fan_out, bias=False)
            self.bn = torch.nn.BatchNorm1d(fan_out)
            with torch.no_grad():
                self.bn.running_mean.uniform_(-0.5, 0.5)
                self.bn.running_var.uniform_(0.5, 1.5)

        def forward(self, x):
            y = self.linear(x)
            return self.bn(y.flatten(0, 1)).reshape_as(y)

    class Attention(torch.nn.Module):
        def __init__(self, dim=32, heads=4, key_dim=4, val_dim=8):
            super().__init__()
            self.heads, self.key_dim, self.val_dim, self.scale = heads, key_dim, val_dim, key_dim ** -0.5
            self.qkv = LinearNorm(dim, heads * (2 * key_dim + val_dim))
            self.bias = torch.nn.Parameter(torch.randn(heads, 8, 8) * 0.1)
            self.proj = torch.nn.Sequential(torch.nn.Hardswish(), LinearNorm(heads * val_dim, dim))

        def forward(self, hidden):
            b, n, _ = hidden.shape
            q, k, v = self.qkv(hidden).view(b, n, self.heads, -1).split([self.key_dim, self.key_dim, self.val_dim], dim=3)
            q, k, v = q.permute(0, 2, 1, 3), k.permute(0, 2, 3, 1), v.permute(0, 2, 1, 3)
            attn = (q @ k * self.scale + self.bias).softmax(dim=-1)
            return hidden + self.proj((attn @ v).transpose(1, 2).reshape(b, n, -1))

    return Attention()


def _eva_block():
    """timm EVA's attention: packed qkv, rotary embedding of feature pairs on every token but
    the class token (`apply_rot_embed_cat`), explicit softmax."""
    import torch

    class Attention(torch.nn.Module):
        def __init__(self, dim=32, heads=4):
            super().__init__()
            self.heads, self.head_dim = heads, dim // heads
            self.qkv, self.proj = torch.nn.Linear(dim, 3 * dim), torch.nn.Linear(dim, dim)
            freqs = torch.arange(1.0, 7.0)[:, None] * (10000.0 ** (-torch.arange(0, self.head_dim, 2) / self.head_dim))
            angles = freqs.repeat_interleave(2, dim=-1)                 # [6 tokens, head_dim], pairs equal
            self.register_buffer("rope", torch.cat([angles.sin(), angles.cos()], dim=-1))

        @staticmethod
        def rot(x):
            return torch.stack([-x[..., 1::2], x[..., ::2]], -1).reshape(x.shape)

        def forward(self, hidden):
            b, n, c = hidden.shape
            q, k, v = self.qkv(hidden).reshape(b, n, 3, self.heads, -1).permute(2, 0, 3, 1, 4).unbind(0)
            sin, cos = self.rope[:, :self.head_dim], self.rope[:, self.head_dim:]
            q = torch.cat([q[:, :, :1], q[:, :, 1:] * cos + self.rot(q[:, :, 1:]) * sin], dim=2)
            k = torch.cat([k[:, :, :1], k[:, :, 1:] * cos + self.rot(k[:, :, 1:]) * sin], dim=2)
            attn = (q * self.head_dim ** -0.5 @ k.transpose(-2, -1)).softmax(dim=-1)
            return hidden + self.proj((attn @ v).transpose(1, 2).reshape(b, n, c))

    return Attention()


def _window_block():
    """torchvision Swin's shifted-window attention on 2 windows of 4 tokens: q scaled after
    the head split, a relative position bias, the window mask added through a
    [B/nW, nW, H, N, N] view of the scores."""
    import torch

    class Attention(torch.nn.Module):
        def __init__(self, dim=32, heads=4, windows=2, tokens=4):
            super().__init__()
            self.heads, self.windows, self.tokens = heads, windows, tokens
            self.qkv, self.proj = torch.nn.Linear(dim, 3 * dim), torch.nn.Linear(dim, dim)
            self.bias = torch.nn.Parameter(torch.randn(heads, tokens, tokens) * 0.1)
            mask = torch.zeros(windows, tokens, tokens)
            mask[1, :2, 2:] = mask[1, 2:, :2] = -100.0
            self.register_buffer("mask", mask)

        def forward(self, hidden):
            b, n, c = hidden.shape                                 # n = windows * tokens
            x = hidden.reshape(b * self.windows, self.tokens, c)
            qkv = self.qkv(x).reshape(x.shape[0], self.tokens, 3, self.heads, -1).permute(2, 0, 3, 1, 4)
            q, k, v = qkv[0], qkv[1], qkv[2]
            q = q * (c // self.heads) ** -0.5
            attn = q.matmul(k.transpose(-2, -1)) + self.bias
            attn = attn.view(b, self.windows, self.heads, self.tokens, self.tokens) + self.mask.unsqueeze(1).unsqueeze(0)
            attn = attn.view(-1, self.heads, self.tokens, self.tokens).softmax(dim=-1)
            out = (attn @ v).transpose(1, 2).reshape(x.shape[0], self.tokens, c)
            return hidden + self.proj(out).reshape(b, n, c)

    return Attention()


def attention_feeds(name: str) -> dict:
    args, names = _attention_inputs(ATTENTION[name][3])
    return {n: a.numpy() for n, a in zip(names, args)}


def op_histogram(model: onnx.ModelProto) -> dict:
    """{op_type: count} of the top-level graph, most frequent first."""
    counts: dict = {}
    for node in model.graph.node:
        key = node.op_type if node.domain in ("", "ai.onnx") else f"{node.domain}::{node.op_type}"
        counts[key] = counts.get(key, 0) + 1
    return dict(sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])))


def as_numpy_feeds(feeds: dict) -> dict:
    return {k: np.ascontiguousarray(v) for k, v in feeds.items()}


def default_opset(model: onnx.ModelProto) -> int:
    return next(int(o.version) for o in model.opset_import if o.domain in ("", "ai.onnx"))


def markdown_tables(cache: "ExportCache") -> str:
    """Per export: the ONNX op histogram and the IR's after import + folding (REAL_EXPORTS.md)."""
    import collections
    import sys
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    from ge.onnx_import import import_model
    from ge.passes import run_generic
    lines = []
    for name in MODELS:
        for exporter in EXPORTERS:
            model = cache.model(name, exporter)
            graph = import_model(model, {})
            run_generic(graph)
            folded = collections.Counter(n.op_type for n in graph.nodes)
            fmt = lambda h: ", ".join(f"{k} {v}" for k, v in h.items())  # noqa: E731
            lines += [f"### {name} / {exporter} (opset {default_opset(model)})", "",
                      f"- ONNX ({len(model.graph.node)} nodes): {fmt(op_histogram(model))}",
                      f"- IR after folding ({len(graph.nodes)} nodes): "
                      f"{fmt(dict(sorted(folded.items(), key=lambda kv: (-kv[1], kv[0]))))}", ""]
    return "\n".join(lines)


if __name__ == "__main__":
    import argparse
    import tempfile
    parser = argparse.ArgumentParser(description="Export the small real-exporter models and print "
                                     "their op histograms (markdown, for tests/REAL_EXPORTS.md).")
    parser.add_argument("--dir", default=None, help="keep the exported files here (default: a temp dir)")
    options = parser.parse_args()
    print(markdown_tables(ExportCache(options.dir or tempfile.mkdtemp(prefix="real_exports_"))))


# ---------------------------------------------------------------- decoders with a KV cache

DECODERS = ("llama", "qwen2", "gpt2")


def _decoder(name: str, attn: Optional[str] = None):
    """A tiny causal LM (2 layers, hidden 32, 4 heads; Llama and Qwen2 with 2 KV heads: GQA),
    with transformers' default attention implementation ("sdpa") or `attn` ("eager")."""
    import torch
    import transformers as tf
    torch.manual_seed(0)
    chosen = {} if attn is None else {"attn_implementation": attn}
    small = dict(vocab_size=100, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                 num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128, **chosen)
    if name == "llama":
        config = tf.LlamaConfig(**small)
        model = tf.LlamaForCausalLM(config)
    elif name == "qwen2":
        config = tf.Qwen2Config(**small)
        model = tf.Qwen2ForCausalLM(config)
    elif name == "gpt2":
        config = tf.GPT2Config(vocab_size=100, n_embd=32, n_layer=2, n_head=4, n_positions=128,
                               bos_token_id=0, eos_token_id=0, **chosen)
        model = tf.GPT2LMHeadModel(config)
    else:
        raise ValueError(f"unknown decoder {name!r}; known: {DECODERS}")
    _perturb_parameters(model)
    return model.eval(), config


class _WithCache:
    """Wraps a causal LM so the exported graph takes the cache as past_key_values.<i>.key/value
    inputs and returns logits and present.<i>.key/value, as transformers' ONNX exports name
    them (optimum's layout)."""

    @staticmethod
    def wrap(model, config):
        import torch
        from transformers import DynamicCache
        layers = config.num_hidden_layers

        class Wrapper(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.model = model

            def forward(self, input_ids, attention_mask, position_ids, *past):
                cache = DynamicCache(config=config)
                for i in range(layers):
                    cache.update(past[2 * i], past[2 * i + 1], i)
                out = self.model(input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids,
                                 past_key_values=cache, use_cache=True)
                present = []
                for layer in out.past_key_values.layers:
                    present += [layer.keys, layer.values]
                return (out.logits, *present)

        return Wrapper().eval()


def export_decoder(name: str, exporter: str, path: str, attn: Optional[str] = None) -> str:
    """Export a tiny decoder with dynamic batch, sequence and cache lengths; returns the path.
    `attn`: transformers' attention implementation (None: its default, "sdpa"; or "eager")."""
    import torch
    model, config = _decoder(name, attn)
    wrapper = _WithCache.wrap(model, config)
    layers = config.num_hidden_layers
    kv_heads = getattr(config, "num_key_value_heads", None) or config.num_attention_heads
    head_dim = config.hidden_size // config.num_attention_heads
    batch, seq, past = 2, 3, 5
    gen = torch.Generator().manual_seed(5)
    args = (torch.randint(0, config.vocab_size, (batch, seq), generator=gen),
            torch.ones(batch, past + seq, dtype=torch.int64),
            torch.arange(past, past + seq).unsqueeze(0).expand(batch, seq),
            *[torch.randn(batch, kv_heads, past, head_dim, generator=gen) for _ in range(2 * layers)])
    inputs = ["input_ids", "attention_mask", "position_ids"] + \
        [f"past_key_values.{i}.{kind}" for i in range(layers) for kind in ("key", "value")]
    outputs = ["logits"] + [f"present.{i}.{kind}" for i in range(layers) for kind in ("key", "value")]
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if exporter == "torchscript":
            axes = {"input_ids": {0: "batch", 1: "seq"}, "attention_mask": {0: "batch", 1: "total"},
                    "position_ids": {0: "batch", 1: "seq"}, "logits": {0: "batch", 1: "seq"}}
            axes.update({n: {0: "batch", 2: "past"} for n in inputs[3:]})
            axes.update({n: {0: "batch", 2: "total"} for n in outputs[1:]})
            torch.onnx.export(wrapper, args, path, dynamo=False, do_constant_folding=False,
                              opset_version=TORCHSCRIPT_OPSET, input_names=inputs, output_names=outputs,
                              dynamic_axes=axes)
        elif exporter == "dynamo":
            from torch.export import Dim
            b, s, p, t = Dim("batch", max=64), Dim("seq", max=128), Dim("past", max=128), Dim("total", max=256)
            shapes = ({0: b, 1: s}, {0: b, 1: t}, {0: b, 1: s}, tuple([{0: b, 2: p}] * (2 * layers)))
            program = torch.onnx.export(wrapper, args, dynamo=True, opset_version=DYNAMO_OPSET, input_names=inputs,
                                        output_names=outputs, dynamic_shapes=shapes, verbose=False)
            program.save(path)
        else:
            raise ValueError(f"unknown exporter {exporter!r}; known: {EXPORTERS}")
    return path


def decoder_input_shape(model: onnx.ModelProto) -> str:
    """--input_shape for a decoder export: every dynamic dim -1."""
    items = []
    for info in model.graph.input:
        dims = [str(d.dim_value) if d.HasField("dim_value") else "-1" for d in info.type.tensor_type.shape.dim]
        items.append(f"{info.name}:{','.join(dims)}")
    return ";".join(items)
