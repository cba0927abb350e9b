"""Small CNNs made of the blocks torchvision and timm models are made of, written in torch.nn
(the test venv has torch but no torchvision), exported by both torch exporters with their
default settings (BatchNorm folded, as users export).

Each model strings several blocks so one export per exporter covers a family of patterns:
- ``activations``: a 3x3 conv and a Linear followed by each activation as torch writes it
  (GELU both forms, SiLU, QuickGELU, HardSwish, HardSigmoid, ReLU6, Mish, hand-written
  hard_swish/hard_sigmoid as timm writes them, clamp by min/max);
- ``mobile``: MobileNetV2 inverted residuals (stride 2 opening a stage, stride 1 with the
  residual), a MobileNetV3 block (HardSwish, squeeze-excite with HardSigmoid), an
  EfficientNet MBConv (SiLU, SE with Sigmoid, residual) and the classification head;
- ``grouped``: a ResNeXt bottleneck (grouped 3x3), an FCN/DeepLab-style dilated block, an
  ASPP-like concat of dilated branches and a segmentation head (classifier conv, bilinear
  upsampling);
- ``dense``: two DenseNet dense blocks (torchvision's cat-of-the-list dense layers) with a
  transition, ShuffleNetV2 units (stride 2 and 1, channel shuffle) and an Inception-style
  head (four branches concatenated, pooled, classified);
- ``convnext``: torchvision's ConvNeXt stage opening (LayerNorm2d through permutes, a 2x2
  stride-2 conv) and two CNBlocks (depthwise 7x7, permute to NHWC, LayerNorm, Linear, GELU,
  Linear, permute back, layer scale, residual Add);
- ``ghost``: timm's GhostNet bottleneck with stride 2 and squeeze-excite (ghost modules: a
  primary conv and a cheap depthwise conv concatenated; the linear stride-2 depthwise conv
  feeding the SE; a depthwise + pointwise shortcut).
"""
from __future__ import annotations

import warnings

MODELS = ("activations", "mobile", "grouped", "dense", "convnext", "ghost")
EXPORTERS = ("torchscript", "dynamo")
BATCH, IMAGE = 2, 16


def _classes():
    import torch
    import torch.nn as nn
    import torch.nn.functional as F

    def conv_bn(cin, cout, k=3, stride=1, groups=1, dilation=1, act=None):
        layers = [nn.Conv2d(cin, cout, k, stride, dilation * (k // 2), dilation=dilation, groups=groups, bias=False),
                  nn.BatchNorm2d(cout)]
        return nn.Sequential(*layers, *([act] if act is not None else []))

    class HandHardSwish(nn.Module):          # timm's hard_swish when written by hand
        def forward(self, x):
            return x * F.relu6(x + 3.0) / 6.0

    class HandHardSigmoid(nn.Module):
        def forward(self, x):
            return F.relu6(x + 3.0) / 6.0

    class QuickGELU(nn.Module):              # CLIP's
        def forward(self, x):
            return x * torch.sigmoid(1.702 * x)

    class MinMaxClamp(nn.Module):            # a clamp with tensor bounds: Max then Min
        def forward(self, x):
            return torch.minimum(torch.maximum(x, torch.tensor(-1.5)), torch.tensor(2.0))

    acts = {
        "gelu": lambda: nn.GELU(), "gelu_tanh": lambda: nn.GELU(approximate="tanh"), "silu": lambda: nn.SiLU(),
        "quick_gelu": QuickGELU, "hardswish": lambda: nn.Hardswish(), "hardsigmoid": lambda: nn.Hardsigmoid(),
        "relu6": lambda: nn.ReLU6(), "mish": lambda: nn.Mish(), "hand_hardswish": HandHardSwish,
        "hand_hardsigmoid": HandHardSigmoid, "minmax_clamp": MinMaxClamp,
    }

    class Activations(nn.Module):
        def __init__(self):
            super().__init__()
            self.convs = nn.ModuleList(nn.Sequential(nn.Conv2d(4, 6, 3, padding=1), make()) for make in acts.values())
            self.linears = nn.ModuleList(nn.Sequential(nn.Linear(IMAGE, 12), make()) for make in acts.values())

        def forward(self, x):
            return tuple(c(x) for c in self.convs) + tuple(lin(x) for lin in self.linears)

    class SqueezeExcite(nn.Module):          # torchvision's SqueezeExcitation
        def __init__(self, c, squeeze, act, gate):
            super().__init__()
            self.fc1, self.fc2 = nn.Conv2d(c, squeeze, 1), nn.Conv2d(squeeze, c, 1)
            self.act, self.gate = act, gate

        def forward(self, x):
            s = F.adaptive_avg_pool2d(x, 1)
            return x * self.gate(self.fc2(self.act(self.fc1(s))))

    class InvertedResidual(nn.Module):       # MobileNetV2 / V3 / EfficientNet MBConv
        def __init__(self, cin, cout, stride, expand, act, se=None):
            super().__init__()
            mid = cin * expand
            self.expand = conv_bn(cin, mid, 1, act=act()) if expand != 1 else nn.Identity()
            self.dw = conv_bn(mid, mid, 3, stride, groups=mid, act=act())
            self.se = se(mid) if se is not None else nn.Identity()
            self.project = conv_bn(mid, cout, 1)
            self.residual = stride == 1 and cin == cout

        def forward(self, x):
            y = self.project(self.se(self.dw(self.expand(x))))
            return x + y if self.residual else y

    class Mobile(nn.Module):
        def __init__(self):
            super().__init__()
            self.stem = conv_bn(3, 8, 3, 2, act=nn.ReLU6())
            self.v2 = nn.Sequential(InvertedResidual(8, 12, 2, 4, nn.ReLU6), InvertedResidual(12, 12, 1, 4, nn.ReLU6))
            self.v3 = InvertedResidual(12, 16, 1, 3, nn.Hardswish,
                                       lambda c: SqueezeExcite(c, 8, nn.ReLU(), nn.Hardsigmoid()))
            self.eff = InvertedResidual(16, 16, 1, 4, nn.SiLU, lambda c: SqueezeExcite(c, 4, nn.SiLU(), nn.Sigmoid()))
            self.head = conv_bn(16, 32, 1, act=nn.SiLU())
            self.fc = nn.Linear(32, 10)

        def forward(self, x):
            x = self.head(self.eff(self.v3(self.v2(self.stem(x)))))
            return self.fc(torch.flatten(F.adaptive_avg_pool2d(x, 1), 1))

    class Grouped(nn.Module):
        def __init__(self):
            super().__init__()
            self.stem = conv_bn(3, 16, 3, act=nn.ReLU())
            self.reduce = conv_bn(16, 16, 1, act=nn.ReLU())
            self.grouped = conv_bn(16, 16, 3, groups=4, act=nn.ReLU())      # ResNeXt's cardinality 4
            self.expand = conv_bn(16, 16, 1)
            self.dilated = conv_bn(16, 16, 3, dilation=2, act=nn.ReLU())    # FCN/DeepLab backbone
            self.aspp = nn.ModuleList([conv_bn(16, 8, 1, act=nn.ReLU())] +
                                      [conv_bn(16, 8, 3, dilation=d, act=nn.ReLU()) for d in (2, 3)])
            self.project = conv_bn(24, 16, 1, act=nn.ReLU())
            self.classifier = nn.Conv2d(16, 5, 1)

        def forward(self, x):
            x = self.stem(x)
            x = F.relu(x + self.expand(self.grouped(self.reduce(x))))
            x = self.dilated(x)
            x = self.project(torch.cat([b(x) for b in self.aspp], 1))
            return F.interpolate(self.classifier(x), scale_factor=2.0, mode="bilinear", align_corners=False)

    class DenseLayer(nn.Module):             # torchvision's _DenseLayer (memory-inefficient path)
        def __init__(self, cin, growth):
            super().__init__()
            self.norm1, self.conv1 = nn.BatchNorm2d(cin), nn.Conv2d(cin, 2 * growth, 1, bias=False)
            self.norm2, self.conv2 = nn.BatchNorm2d(2 * growth), nn.Conv2d(2 * growth, growth, 3, padding=1, bias=False)

        def forward(self, features):
            x = torch.cat(features, 1)
            x = self.conv1(F.relu(self.norm1(x)))
            return self.conv2(F.relu(self.norm2(x)))

    class DenseBlock(nn.Module):
        def __init__(self, cin, layers, growth):
            super().__init__()
            self.layers = nn.ModuleList(DenseLayer(cin + i * growth, growth) for i in range(layers))

        def forward(self, x):
            features = [x]
            for layer in self.layers:
                features.append(layer(features))
            return torch.cat(features, 1)

    def channel_shuffle(x, groups):
        b, c, h, w = x.shape
        return x.view(b, groups, c // groups, h, w).transpose(1, 2).contiguous().view(b, -1, h, w)

    class ShuffleUnit(nn.Module):            # torchvision's ShuffleNetV2 InvertedResidual
        def __init__(self, cin, cout, stride):
            super().__init__()
            half = cout // 2
            self.stride = stride
            if stride > 1:
                self.branch1 = nn.Sequential(conv_bn(cin, cin, 3, stride, groups=cin), conv_bn(cin, half, 1, act=nn.ReLU()))
            self.branch2 = nn.Sequential(conv_bn(cin if stride > 1 else half, half, 1, act=nn.ReLU()),
                                         conv_bn(half, half, 3, stride, groups=half), conv_bn(half, half, 1, act=nn.ReLU()))

        def forward(self, x):
            if self.stride == 1:
                x1, x2 = x.chunk(2, dim=1)
                out = torch.cat((x1, self.branch2(x2)), dim=1)
            else:
                out = torch.cat((self.branch1(x), self.branch2(x)), dim=1)
            return channel_shuffle(out, 2)

    class Dense(nn.Module):
        def __init__(self):
            super().__init__()
            self.stem = conv_bn(3, 8, 3, act=nn.ReLU())
            self.block1 = DenseBlock(8, 3, 4)
            self.transition = nn.Sequential(nn.BatchNorm2d(20), nn.ReLU(), nn.Conv2d(20, 10, 1, bias=False),
                                            nn.AvgPool2d(2, 2))
            self.block2 = DenseBlock(10, 2, 4)
            self.shuffle = nn.Sequential(ShuffleUnit(18, 16, 2), ShuffleUnit(16, 16, 1))
            self.branches = nn.ModuleList([conv_bn(16, 8, 1, act=nn.ReLU()),
                                           nn.Sequential(conv_bn(16, 6, 1, act=nn.ReLU()), conv_bn(6, 8, 3, act=nn.ReLU())),
                                           nn.Sequential(nn.MaxPool2d(3, 1, 1), conv_bn(16, 8, 1, act=nn.ReLU()))])
            self.fc = nn.Linear(24, 10)

        def forward(self, x):
            x = self.block2(self.transition(self.block1(self.stem(x))))
            x = self.shuffle(F.relu(x))
            x = torch.cat([b(x) for b in self.branches], 1)
            return self.fc(torch.flatten(F.adaptive_avg_pool2d(x, 1), 1))

    class LayerNorm2d(nn.LayerNorm):         # torchvision's: normalize channels through NHWC
        def forward(self, x):
            return super().forward(x.permute(0, 2, 3, 1)).permute(0, 3, 1, 2)

    class CNBlock(nn.Module):                # torchvision's ConvNeXt block (stochastic depth off in eval)
        def __init__(self, dim):
            super().__init__()
            self.dwconv = nn.Conv2d(dim, dim, 7, padding=3, groups=dim)
            self.norm = nn.LayerNorm(dim, eps=1e-6)
            self.fc1, self.fc2 = nn.Linear(dim, 4 * dim), nn.Linear(4 * dim, dim)
            self.layer_scale = nn.Parameter(torch.rand(dim, 1, 1) + 0.5)

        def forward(self, x):
            y = self.fc2(F.gelu(self.fc1(self.norm(self.dwconv(x).permute(0, 2, 3, 1))))).permute(0, 3, 1, 2)
            return x + self.layer_scale * y

    class ConvNeXt(nn.Module):
        def __init__(self):
            super().__init__()
            self.stem = nn.Sequential(nn.Conv2d(3, 8, 4, 4), LayerNorm2d(8, eps=1e-6))
            self.stage1 = CNBlock(8)
            self.down = nn.Sequential(LayerNorm2d(8, eps=1e-6), nn.Conv2d(8, 16, 2, 2))
            self.stage2 = nn.Sequential(CNBlock(16), CNBlock(16))

        def forward(self, x):
            return self.stage2(self.down(self.stage1(self.stem(x))))

    class GhostModule(nn.Module):            # timm's GhostModule (ratio 2, dw 3x3)
        def __init__(self, cin, cout, relu):
            super().__init__()
            self.out = cout
            act = [nn.ReLU()] if relu else []
            self.primary = nn.Sequential(nn.Conv2d(cin, cout // 2, 1, bias=False), nn.BatchNorm2d(cout // 2), *act)
            self.cheap = nn.Sequential(nn.Conv2d(cout // 2, cout // 2, 3, 1, 1, groups=cout // 2, bias=False),
                                       nn.BatchNorm2d(cout // 2), *act)

        def forward(self, x):
            x1 = self.primary(x)
            return torch.cat([x1, self.cheap(x1)], 1)[:, :self.out]

    class GhostSE(nn.Module):                # timm's SqueezeExcite with hard_sigmoid gate
        def __init__(self, c):
            super().__init__()
            self.reduce, self.expand = nn.Conv2d(c, c // 4, 1), nn.Conv2d(c // 4, c, 1)

        def forward(self, x):
            s = self.expand(F.relu(self.reduce(x.mean((2, 3), keepdim=True))))
            return x * F.hardsigmoid(s)

    class Ghost(nn.Module):                  # timm's GhostBottleneck, stride 2 with SE
        def __init__(self):
            super().__init__()
            self.stem = conv_bn(3, 16, 3, act=nn.ReLU())
            self.ghost1 = GhostModule(16, 32, relu=True)
            self.conv_dw = conv_bn(32, 32, 3, 2, groups=32)
            self.se = GhostSE(32)
            self.ghost2 = GhostModule(32, 24, relu=False)
            self.shortcut = nn.Sequential(conv_bn(16, 16, 3, 2, groups=16), conv_bn(16, 24, 1))

        def forward(self, x):
            x = self.stem(x)
            return self.ghost2(self.se(self.conv_dw(self.ghost1(x)))) + self.shortcut(x)

    return {"activations": Activations, "mobile": Mobile, "grouped": Grouped, "dense": Dense, "convnext": ConvNeXt,
            "ghost": Ghost}


def build(name: str):
    """(module in eval mode with perturbed weights and BN statistics, example inputs, names)."""
    import torch
    from exporters import _perturb_parameters, _randomize_batchnorm
    torch.manual_seed(0)
    model = _classes()[name]().eval()
    _randomize_batchnorm(model)
    _perturb_parameters(model)
    size = (BATCH, 4, IMAGE, IMAGE) if name == "activations" else (BATCH, 3, IMAGE, IMAGE)
    x = torch.randn(*size, generator=torch.Generator().manual_seed(5))
    return model, (x,), ["x"]


def export(name: str, exporter: str, path: str) -> str:
    """Export with the exporter's defaults (TorchScript opset 17 with constant folding, which
    folds BatchNorm into the convs; dynamo opset 18 with its optimizer)."""
    import torch
    model, args, names = build(name)
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if exporter == "torchscript":
            torch.onnx.export(model, args, path, dynamo=False, opset_version=17, input_names=names)
        else:
            torch.onnx.export(model, args, dynamo=True, opset_version=18, input_names=names, verbose=False).save(path)
    return path
