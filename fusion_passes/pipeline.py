"""The fusion stage: one ordered list of passes, built for one compilation's switches.

Order matters: ConvBNReLU first so the head pattern (ConvPoolFC) can take a fused conv;
LayerNorm recognition before attention so MHA sees one LayerNorm op; MHA before
MatMulBiasAct so the Q/K/V projections go into the attention kernel; LayerNormMatMul after
MatMulBiasAct so it can absorb a fused GEMM; autofuse last, on whatever is left.  Before
them all, the canonicalization stage (fusion_passes/canonical/) rewrites exporter idioms
into the one form the named passes match.  Every entry is a `GraphPass`
(ge/passes/contract.py), run by the same loop.
"""
from __future__ import annotations

from typing import Optional

from fusion_passes.autofuse import AutoFusePass, AutofuseFlags
from fusion_passes.base import FusionPass
from fusion_passes.canonical import CanonicalizePass
from fusion_passes.conv_bn_relu import ConvBNReluFusionPass
from fusion_passes.conv_chain import ConvChainFusionPass
from fusion_passes.conv_pool_fc import ConvPoolFCFusionPass
from fusion_passes.depthwise_conv import DepthwiseConvBNReluFusionPass
from fusion_passes.dilated_conv import DilatedConvBNReluFusionPass
from fusion_passes.gated_mlp import GatedMlpFusionPass
from fusion_passes.group_conv import GroupConvBNReluFusionPass
from fusion_passes.layer_norm import LayerNormFusionPass
from fusion_passes.layer_norm_matmul import LayerNormMatMulFusionPass
from fusion_passes.layer_norm_quant import LayerNormQuantFusionPass
from fusion_passes.matmul_bias_act import MatMulBiasActFusionPass
from fusion_passes.multi_head_attention import MultiHeadAttentionFusionPass
from fusion_passes.quant_attention import QuantAttentionFusionPass
from fusion_passes.quant_attention_projection import QuantAttentionProjectionFusionPass
from fusion_passes.quant_conv_bn_relu import QuantConvBNReluFusionPass
from fusion_passes.quant_matmul_bias_act import QuantMatMulBiasActFusionPass
from fusion_passes.rms_norm import RmsNormFusionPass
from fusion_passes.rms_norm_matmul import RmsNormMatMulFusionPass
from fusion_passes.squeeze_excitation import SqueezeExcitationFusionPass
from fusion_passes.switches import FusionSwitches


def fusion_passes(switches: Optional[FusionSwitches] = None,
                  autofuse_flags: Optional[AutofuseFlags] = None) -> list:
    """The fusion passes, in the order they run."""
    named = [
        QuantConvBNReluFusionPass(switches),      # int8 first: they take the DequantizeLinear-fed
        QuantAttentionFusionPass(switches),       # convs, attention products and GEMMs before
        QuantMatMulBiasActFusionPass(switches),   # the float passes look
        SqueezeExcitationFusionPass(switches),     # before the conv blocks: it takes the SE's two 1x1 convs
        ConvBNReluFusionPass(switches),
        DepthwiseConvBNReluFusionPass(switches),   # the conv blocks GE's ConvBNReLU leaves out,
        GroupConvBNReluFusionPass(switches),       # each under its own name
        DilatedConvBNReluFusionPass(switches),
        ConvPoolFCFusionPass(switches),
        ConvChainFusionPass(switches),            # a conv still plain joins the 1x1 conv next to it
        LayerNormFusionPass(switches),
        RmsNormFusionPass(switches),            # after LayerNorm: a LayerNorm's variance is an RMS of x - mean
        LayerNormQuantFusionPass(switches),     # a LayerNorm its readers quantize writes int8 (int8 graphs only)
        QuantAttentionProjectionFusionPass(switches),   # after it: QOperator's Q/K/V inputs are one tensor now
        MultiHeadAttentionFusionPass(switches),
        GatedMlpFusionPass(switches),           # before MatMulBiasAct takes the gate GEMM + its activation
        MatMulBiasActFusionPass(switches),
        LayerNormMatMulFusionPass(switches),
        RmsNormMatMulFusionPass(switches),
        AutoFusePass(switches, autofuse_flags),
    ]
    # canonical forms serve the passes: with every pass switched off the graph stays as written
    active = switches is None or any(switches.pass_enabled(p.pass_name) for p in named
                                     if isinstance(p, FusionPass))
    return [CanonicalizePass(switches, active=active)] + named


def known_names() -> tuple:
    """(pass names, fused op names): what the switch file and GE_FUSION_DISABLE_LIST accept."""
    passes = [p for p in fusion_passes() if isinstance(p, FusionPass)]
    return [p.pass_name for p in passes], sorted({op for p in passes for op in p.fused_ops})
