"""The sweep's model families: torchvision, timm and Hugging Face transformers, random weights.

Each family builds a torch module from a constructor or a config (never a download) plus
example inputs.  Sizes: images 64x64 (Inception-v3 96, EVA-02 70, VGG 224, Swin 112 in
torchvision and 224 in transformers, whose window attention needs every stage divisible by 7),
32 tokens, batch 1; 2 layers or blocks where the model is deep (the block structure is what
fusion sees, not the depth); encoders keep their real hidden size and head count; decoder LLMs are scaled down
consistently (hidden 512, 8 heads, 2 KV heads where the family uses grouped-query
attention, head_dim 64, MLP 1408); vocabularies are 1000 so the files stay small.
Imports of torch/torchvision/timm/transformers happen inside the builders: this module is
importable without them (the harness lists families and filters without loading torch).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Tuple

IMAGE = 64
SEQ = 32
VOCAB = 1000


@dataclass(frozen=True)
class Family:
    name: str
    source: str              # torchvision | timm | transformers
    category: str            # cnn | segmentation | vit | encoder | encoder-decoder | decoder | speech
    build: Callable = field(repr=False, compare=False)   # build(attn) -> (module, args, input names)
    attn_impls: Tuple[str, ...] = ("default",)           # transformers: ("sdpa", "eager")


def _seed():
    import torch
    torch.manual_seed(0)


def _perturb(model, scale: float = 0.05):
    """Seeded noise on every parameter and non-trivial BN stats: fresh models have zero
    biases and unit norms that exporters drop, which would hide wrong fusions in --compare."""
    import torch
    gen = torch.Generator().manual_seed(4)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn(p.shape, generator=gen) * scale)
        for m in model.modules():
            if isinstance(m, torch.nn.modules.batchnorm._BatchNorm) and m.running_var is not None:
                m.running_mean.copy_(torch.randn(m.num_features, generator=gen) * 0.1)
                m.running_var.copy_(torch.rand(m.num_features, generator=gen) * 0.5 + 0.75)
    return model.eval()


def _image(size: int = IMAGE):
    import torch
    return (torch.randn(1, 3, size, size, generator=torch.Generator().manual_seed(1)),), ["pixel"]


class _Out:
    """Plain-tensor outputs for modules that return dicts/dataclasses/tuples."""

    @staticmethod
    def wrap(model, names, key):
        import torch

        class Wrapper(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.model = model

            def forward(self, *args):
                out = self.model(**dict(zip(names, args)))
                if isinstance(out, dict) or hasattr(out, "keys"):
                    return out[key]
                return out[0] if isinstance(out, (tuple, list)) else out

        return Wrapper().eval()


# ------------------------------------------------------------------ torchvision

def _tv(ctor: str, size: int = IMAGE, key: str = "", **kwargs):
    def build(attn):
        import torchvision
        _seed()
        model = _perturb(getattr(torchvision.models, ctor)(weights=None, **kwargs))
        args, names = _image(size)
        if key:   # segmentation models return {"out": ...}
            model = _Out.wrap(model, ["x"], key)
        return model, args, names
    return build


def _tv_seg(ctor: str, **kwargs):
    def build(attn):
        import torchvision
        _seed()
        model = getattr(torchvision.models.segmentation, ctor)(weights=None, weights_backbone=None,
                                                                aux_loss=False, **kwargs)
        model = _Out.wrap(_perturb(model), ["x"], "out")
        args, names = _image()
        return model, args, names
    return build


def _tv_vgg(attn):
    """VGG-11-BN at 224x224 (its AdaptiveAvgPool2d(7) does not export from a smaller map):
    the real conv stack; the 25088x4096 classifier scaled to 256 wide (400 MB of weights
    otherwise, and it is two plain GEMMs)."""
    import torch
    import torchvision
    _seed()
    model = torchvision.models.vgg11_bn(weights=None)
    model.classifier = torch.nn.Sequential(torch.nn.Linear(512 * 7 * 7, 256), torch.nn.ReLU(True),
                                           torch.nn.Dropout(), torch.nn.Linear(256, 256), torch.nn.ReLU(True),
                                           torch.nn.Dropout(), torch.nn.Linear(256, 1000))
    args, names = _image(224)
    return _perturb(model), args, names


def _tv_vit(attn):
    from torchvision.models.vision_transformer import VisionTransformer
    _seed()
    model = VisionTransformer(image_size=IMAGE, patch_size=16, num_layers=2, num_heads=12,
                              hidden_dim=768, mlp_dim=3072)
    args, names = _image()
    return _perturb(model), args, names


def _tv_swin(attn):
    from torchvision.models.swin_transformer import SwinTransformer
    _seed()
    model = SwinTransformer(patch_size=[4, 4], embed_dim=96, depths=[2, 2, 2, 2], num_heads=[3, 6, 12, 24],
                            window_size=[7, 7])
    args, names = _image(112)
    return _perturb(model), args, names


# ------------------------------------------------------------------ timm

def _timm(name: str, size: int = IMAGE, keep_blocks: int = 0, **kwargs):
    """keep_blocks: keep the first N of `model.blocks`, for models whose constructor fixes the depth."""
    def build(attn):
        import timm
        import timm.layers
        _seed()
        timm.layers.set_fused_attn(attn != "eager")
        try:
            model = timm.create_model(name, pretrained=False, **kwargs)
        finally:
            timm.layers.set_fused_attn(True)
        if keep_blocks:
            model.blocks = model.blocks[:keep_blocks]
        args, names = _image(size)
        return _perturb(model), args, names
    return build


# ------------------------------------------------------------------ transformers

def _hf(config_cls: str, model_cls: str, config: dict, inputs: str = "text", key: str = "last_hidden_state"):
    def build(attn):
        import torch
        import transformers
        _seed()
        cfg = getattr(transformers, config_cls)(**config)
        kwargs = {} if attn == "default" else {"attn_implementation": attn}
        model = getattr(transformers, model_cls)._from_config(cfg, **kwargs)
        gen = torch.Generator().manual_seed(2)
        if inputs == "text":
            names = ["input_ids", "attention_mask"]
            args = (torch.randint(0, 10, (1, SEQ), generator=gen), torch.ones(1, SEQ, dtype=torch.int64))
        elif inputs == "image":
            names = ["pixel_values"]
            args = (torch.randn(1, 3, config.get("image_size", IMAGE), config.get("image_size", IMAGE), generator=gen),)
        elif inputs == "seq2seq":
            names = ["input_ids", "attention_mask", "decoder_input_ids"]
            args = (torch.randint(0, 10, (1, SEQ), generator=gen), torch.ones(1, SEQ, dtype=torch.int64),
                    torch.randint(0, 10, (1, 8), generator=gen))
        elif inputs == "whisper":
            names = ["input_features", "decoder_input_ids"]
            args = (torch.randn(1, config["num_mel_bins"], 2 * config["max_source_positions"], generator=gen),
                    torch.randint(0, 10, (1, 8), generator=gen))
        elif inputs == "audio":
            names = ["input_values"]
            args = (torch.randn(1, 4000, generator=gen),)
        else:
            raise ValueError(inputs)
        if hasattr(model.config, "use_cache"):
            model.config.use_cache = False
        return _Out.wrap(_perturb(model), names, key), args, names
    return build


BERT_SIZE = dict(hidden_size=768, num_attention_heads=12, intermediate_size=3072, num_hidden_layers=2,
                 vocab_size=VOCAB, max_position_embeddings=128)
LLM_SIZE = dict(hidden_size=512, num_attention_heads=8, num_key_value_heads=2, intermediate_size=1408,
                num_hidden_layers=2, vocab_size=VOCAB, max_position_embeddings=128)
HF_ATTN = ("sdpa", "eager")
TIMM_ATTN = ("sdpa", "eager")    # timm: fused_attn (F.scaled_dot_product_attention) or its explicit form

FAMILIES = [
    # torchvision CNNs
    Family("resnet18", "torchvision", "cnn", _tv("resnet18")),
    Family("resnext50_32x4d", "torchvision", "cnn", _tv("resnext50_32x4d")),
    Family("mobilenet_v2", "torchvision", "cnn", _tv("mobilenet_v2")),
    Family("mobilenet_v3_small", "torchvision", "cnn", _tv("mobilenet_v3_small")),
    Family("efficientnet_b0", "torchvision", "cnn", _tv("efficientnet_b0")),
    Family("regnet_y_400mf", "torchvision", "cnn", _tv("regnet_y_400mf")),
    Family("shufflenet_v2_x1_0", "torchvision", "cnn", _tv("shufflenet_v2_x1_0")),
    Family("densenet121", "torchvision", "cnn", _tv("densenet121")),
    Family("convnext_tiny", "torchvision", "cnn", _tv("convnext_tiny")),
    Family("googlenet", "torchvision", "cnn", _tv("googlenet", aux_logits=False, init_weights=True)),
    Family("inception_v3", "torchvision", "cnn", _tv("inception_v3", size=96, aux_logits=False, init_weights=True)),
    Family("squeezenet1_1", "torchvision", "cnn", _tv("squeezenet1_1")),
    Family("vgg11_bn", "torchvision", "cnn", _tv_vgg),
    Family("mnasnet0_5", "torchvision", "cnn", _tv("mnasnet0_5")),
    Family("fcn_resnet50", "torchvision", "segmentation", _tv_seg("fcn_resnet50")),
    Family("deeplabv3_mobilenet_v3_large", "torchvision", "segmentation", _tv_seg("deeplabv3_mobilenet_v3_large")),
    # torchvision transformers
    Family("tv_vit_b_16", "torchvision", "vit", _tv_vit),
    Family("tv_swin_t", "torchvision", "vit", _tv_swin),
    # timm
    Family("timm_deit_tiny", "timm", "vit", _timm("deit_tiny_patch16_224", depth=2, img_size=IMAGE), TIMM_ATTN),
    Family("timm_beit_base", "timm", "vit", _timm("beit_base_patch16_224", depth=2, img_size=IMAGE), TIMM_ATTN),
    Family("timm_eva02_tiny", "timm", "vit", _timm("eva02_tiny_patch14_224", size=70, depth=2, img_size=70), TIMM_ATTN),
    Family("timm_mobilevit_xxs", "timm", "vit", _timm("mobilevit_xxs"), TIMM_ATTN),
    Family("timm_levit_128s", "timm", "vit", _timm("levit_128s", img_size=IMAGE)),
    Family("timm_mixer_b16", "timm", "vit", _timm("mixer_b16_224", keep_blocks=2, img_size=IMAGE)),
    Family("timm_ghostnet_100", "timm", "cnn", _timm("ghostnet_100")),
    Family("timm_efficientnet_lite0", "timm", "cnn", _timm("efficientnet_lite0")),
    # transformers vision
    Family("hf_vit", "transformers", "vit", _hf("ViTConfig", "ViTModel", dict(
        BERT_SIZE, image_size=IMAGE, patch_size=16), "image"), HF_ATTN),
    Family("hf_swin", "transformers", "vit", _hf("SwinConfig", "SwinModel", dict(
        image_size=224, embed_dim=96, depths=[2, 2, 2, 2], num_heads=[3, 6, 12, 24], window_size=7), "image"), HF_ATTN),
    Family("hf_segformer", "transformers", "segmentation", _hf("SegformerConfig", "SegformerForSemanticSegmentation",
                                                               dict(num_labels=19), "image", key="logits"), HF_ATTN),
    Family("hf_clip_vision", "transformers", "vit", _hf("CLIPVisionConfig", "CLIPVisionModel", dict(
        hidden_size=768, num_attention_heads=12, intermediate_size=3072, num_hidden_layers=2, image_size=IMAGE,
        patch_size=16), "image"), HF_ATTN),
    # transformers encoders
    Family("bert", "transformers", "encoder", _hf("BertConfig", "BertModel", BERT_SIZE), HF_ATTN),
    Family("roberta", "transformers", "encoder", _hf("RobertaConfig", "RobertaModel", dict(
        BERT_SIZE, max_position_embeddings=130)), HF_ATTN),
    Family("distilbert", "transformers", "encoder", _hf("DistilBertConfig", "DistilBertModel", dict(
        dim=768, n_heads=12, hidden_dim=3072, n_layers=2, vocab_size=VOCAB, max_position_embeddings=128)), HF_ATTN),
    Family("albert", "transformers", "encoder", _hf("AlbertConfig", "AlbertModel", dict(
        BERT_SIZE, embedding_size=128)), HF_ATTN),
    Family("electra", "transformers", "encoder", _hf("ElectraConfig", "ElectraModel", dict(
        embedding_size=128, hidden_size=256, num_attention_heads=4, intermediate_size=1024, num_hidden_layers=2,
        vocab_size=VOCAB, max_position_embeddings=128)), HF_ATTN),
    Family("deberta_v2", "transformers", "encoder", _hf("DebertaV2Config", "DebertaV2Model", dict(
        BERT_SIZE, relative_attention=True, position_buckets=256, pos_att_type=["p2c", "c2p"],
        max_relative_positions=-1, norm_rel_ebd="layer_norm", share_att_key=True)), HF_ATTN),
    # transformers encoder-decoders
    Family("t5_encoder", "transformers", "encoder-decoder", _hf("T5Config", "T5EncoderModel", dict(
        d_model=512, d_kv=64, num_heads=8, d_ff=2048, num_layers=2, vocab_size=VOCAB)), HF_ATTN),
    Family("bart", "transformers", "encoder-decoder", _hf("BartConfig", "BartModel", dict(
        d_model=768, encoder_attention_heads=12, decoder_attention_heads=12, encoder_ffn_dim=3072,
        decoder_ffn_dim=3072, encoder_layers=2, decoder_layers=2, vocab_size=VOCAB,
        max_position_embeddings=128), "seq2seq"), HF_ATTN),
    Family("whisper", "transformers", "speech", _hf("WhisperConfig", "WhisperModel", dict(
        d_model=384, encoder_attention_heads=6, decoder_attention_heads=6, encoder_ffn_dim=1536,
        decoder_ffn_dim=1536, encoder_layers=2, decoder_layers=2, num_mel_bins=80, max_source_positions=50,
        max_target_positions=64, vocab_size=VOCAB, pad_token_id=0, bos_token_id=1, eos_token_id=2,
        decoder_start_token_id=1), "whisper"), HF_ATTN),
    # transformers decoder LLMs
    Family("gpt2", "transformers", "decoder", _hf("GPT2Config", "GPT2Model", dict(
        n_embd=768, n_head=12, n_layer=2, vocab_size=VOCAB, n_positions=128)), HF_ATTN),
    Family("gpt_neox", "transformers", "decoder", _hf("GPTNeoXConfig", "GPTNeoXModel", dict(
        hidden_size=512, num_attention_heads=8, intermediate_size=2048, num_hidden_layers=2, vocab_size=VOCAB,
        max_position_embeddings=128, rotary_pct=0.25)), HF_ATTN),
    Family("llama", "transformers", "decoder", _hf("LlamaConfig", "LlamaModel", LLM_SIZE), HF_ATTN),
    Family("qwen2", "transformers", "decoder", _hf("Qwen2Config", "Qwen2Model", LLM_SIZE), HF_ATTN),
    Family("mistral", "transformers", "decoder", _hf("MistralConfig", "MistralModel", dict(
        LLM_SIZE, sliding_window=None)), HF_ATTN),
    Family("phi", "transformers", "decoder", _hf("PhiConfig", "PhiModel", dict(
        hidden_size=512, num_attention_heads=8, intermediate_size=2048, num_hidden_layers=2, vocab_size=VOCAB,
        max_position_embeddings=128, partial_rotary_factor=0.5)), HF_ATTN),
    Family("opt", "transformers", "decoder", _hf("OPTConfig", "OPTModel", dict(
        hidden_size=768, num_attention_heads=12, ffn_dim=3072, num_hidden_layers=2, vocab_size=VOCAB,
        max_position_embeddings=128, word_embed_proj_dim=768)), HF_ATTN),
    # speech
    Family("wav2vec2", "transformers", "speech", _hf("Wav2Vec2Config", "Wav2Vec2Model", dict(
        hidden_size=768, num_attention_heads=12, intermediate_size=3072, num_hidden_layers=2,
        vocab_size=VOCAB), "audio"), HF_ATTN),
]

BY_NAME = {f.name: f for f in FAMILIES}
EXPORTERS = ("torchscript", "dynamo")
