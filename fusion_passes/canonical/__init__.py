"""The canonicalization stage: exporter idioms -> one canonical form, before the named fusions.

Why: torch's TorchScript and dynamo exporters and transformers' attention implementations
spell the same computation many ways (a NaN guard after Softmax, Squeeze or Reshape, Gemm
or MatMul+Add, ...).  Rewriting them here into one form means each named pass (fusion_passes/*.py) matches one pattern, once.

One file per rewrite (a `Rewrite`, fusion_passes/canonical/rewrite.py); `REWRITES` is their
order.  The stage runs the list over the graph until nothing changes (at most `MAX_ROUNDS`
times: one rewrite can expose another's idiom), removes what the rewrites left unused, and
reports how often each rewrite changed the graph (`CanonicalResult.by_rewrite`, printed
under --log=debug).  It is one entry of fusion_passes.pipeline.fusion_passes(), before the
named passes, and is not a fusion pass: the switch file and the Graph Fusion Report do not
list it.  It runs whenever a pass it prepares the graph for runs (it changes how the graph
is written, not what it computes); with every fusion switched off (`active=False`) the
graph stays as the exporter wrote it, op for op.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional, Sequence

from fusion_passes.canonical.clip import Clip
from fusion_passes.canonical.concat_prefix import ConcatPrefix
from fusion_passes.canonical.concat_single import ConcatSingle
from fusion_passes.canonical.const_dequantize import ConstantDequantize
from fusion_passes.canonical.conv_crop import ConvCrop
from fusion_passes.canonical.dequantized_nan_guard import DequantizedNanGuard
from fusion_passes.canonical.gelu_erf import GeluErf
from fusion_passes.canonical.gelu_tanh import GeluTanh
from fusion_passes.canonical.gemm_as_matmul import GemmAsMatMul
from fusion_passes.canonical.hard_sigmoid import HardSigmoid
from fusion_passes.canonical.hard_swish import HardSwish
from fusion_passes.canonical.identity_gather import IdentityGather
from fusion_passes.canonical.linear_batchnorm import BatchNormIntoLinear
from fusion_passes.canonical.linear_views import ViewAboveLinear, ViewBelowLinear
from fusion_passes.canonical.mish import Mish
from fusion_passes.canonical.quant_views import QuantizedView
from fusion_passes.canonical.rewrite import Rewrite
from fusion_passes.canonical.rotary import RotaryEmbedding, RotaryPrefix
from fusion_passes.canonical.simplified_layer_norm import SimplifiedLayerNorm
from fusion_passes.canonical.slice_noop import SliceNoop
from fusion_passes.canonical.slices_as_split import SlicesAsSplit
from fusion_passes.canonical.softmax_guard import SoftmaxNanGuard
from fusion_passes.canonical.swish import Swish
from fusion_passes.canonical.view_chains import ReshapeChain, TransposeChain
from fusion_passes.canonical.view_forms import ViewAsReshape
from fusion_passes.switches import FusionSwitches
from ge.ir import Graph
from ge.passes.contract import CANONICAL, TYPED, GraphPass, PassResult
from ge.passes.dead_code import remove_dead_nodes
from ge.symbolic import SymbolicDimError

MAX_ROUNDS = 8

# The rewrites, in the order they run in each round.
REWRITES: tuple = (
    # activations, recognized once into the ONNX op the conv/GEMM epilogues and autofuse read
    Clip(), HardSigmoid(), HardSwish(), Swish(), GeluErf(), GeluTanh(), Mish(),
    # DenseNet's re-concatenations as one growing concat, so each conv can write into it
    ConcatSingle(), ConcatPrefix(),
    SliceNoop(),            # timm's GhostModule slices its concat to the channels it already has
    ConvCrop(),             # Wav2Vec2's positional conv drops its last step: less end padding
    # decoders: onnxruntime's RMS norm op -> RMSNormalization; a gather of every element in order
    # (the padding mask) -> Reshape
    SimplifiedLayerNorm(), IdentityGather(),
    # views, linear layers and attention idioms
    ViewAsReshape(),        # Squeeze/Unsqueeze/Flatten -> Reshape
    QuantizedView(),        # DQ -> views -> Q (same scale) -> the views on the int8 tensor
    ConstantDequantize(),   # DQ of a small constant no cube op reads -> its float constant
    GemmAsMatMul(),         # Gemm -> MatMul [+ Add]
    BatchNormIntoLinear(),  # linear -> BatchNorm over its features -> one linear
    ReshapeChain(),         # Reshape(Reshape(x)) -> Reshape(x); same-shape Reshape -> x
    TransposeChain(),       # Transpose(Transpose(x)) -> Transpose(x) or x
    ViewBelowLinear(),      # token views cross linear layers, to the views they belong with
    ViewAboveLinear(),
    SoftmaxNanGuard(),      # Where(IsNaN(softmax), 0, softmax) -> softmax, when proved a no-op
    DequantizedNanGuard(),  # Where(IsNaN(DQ(int)), c, DQ(int)) -> DQ(int): never NaN
    RotaryEmbedding(),      # x*cos + rotate_half(x)*sin -> RotaryEmbedding(x)
    RotaryPrefix(),         # cat(x[:, :, :p], rope(x[:, :, p:])) -> RotaryEmbedding(x)
    SlicesAsSplit(),        # TorchScript's channel chunk (ShuffleNetV2): Slices tiling the channels -> Split
)


@dataclass
class CanonicalResult(PassResult):
    """What the stage changed: `changes` in total, and per rewrite name."""

    by_rewrite: dict = field(default_factory=dict)

    def count(self, rewrite: Rewrite) -> None:
        self.changes += 1
        self.by_rewrite[rewrite.name] = self.by_rewrite.get(rewrite.name, 0) + 1


class CanonicalizePass(GraphPass):
    """The stage as one pass of the fusion pipeline.  Built like every pipeline entry from
    the switches (which do not reach it: canonical rewrites are not fusions)."""

    name = pass_name = "CanonicalizePass"
    requires = frozenset({TYPED, CANONICAL})

    def __init__(self, switches: Optional[FusionSwitches] = None,
                 rewrites: Optional[Sequence[Rewrite]] = None, active: bool = True):
        self.rewrites = tuple(REWRITES if rewrites is None else rewrites)
        self.active = active

    def run(self, graph: Graph) -> CanonicalResult:
        result = CanonicalResult(self.name)
        for _ in range(MAX_ROUNDS if self.active else 0):
            before = result.changes
            for rewrite in self.rewrites:
                changes = result.changes
                for node in list(graph.nodes):
                    if node.graph is graph and node.op_type in rewrite.anchor_types and _live(node) \
                            and _apply(rewrite, graph, node):
                        result.count(rewrite)
                if result.changes != changes:
                    while remove_dead_nodes(graph):     # rewrites append nodes out of order: repeat
                        pass                            # so the next rewrite sees true reader counts
            if result.changes == before:
                break
        return result


def _apply(rewrite: Rewrite, graph: Graph, node) -> bool:
    """Apply one rewrite; one whose checks a dynamic dim's range does not decide (a rewrite
    decides before it edits) leaves the idiom as it is."""
    try:
        return rewrite.apply(graph, node)
    except SymbolicDimError:
        return False


def _live(node) -> bool:
    """A node an earlier rewrite bypassed (nothing reads it) is not rewritten again."""
    return any(v.uses or v.is_graph_output for v in node.outputs)
