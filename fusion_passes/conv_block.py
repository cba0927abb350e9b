"""The conv block: Conv [+ BatchNormalization] [+ residual Add] [+ activation] [+ stores] as one
kernel -- the walk, GE's shared constraints and the rewrite of the four conv-block passes
(conv_bn_relu.py: plain convs; depthwise_conv.py, group_conv.py, dilated_conv.py: the
variants GE's ConvBatchnormFusionPass leaves out, each under its own pass name and fused op
type so the report tells them apart; one kernel computes them all, codegen/fused/conv.py).

Why: on the NPU a conv's epilogue (bias, BN affine, residual add, activation) costs one
more trip through global memory per op when run as separate kernels; fused, it is applied
to the accumulator on chip.  BN is folded into the conv weights and bias at compile time
(float64, cast back to the weight dtype), so the kernel is conv + bias + add + act.

Walk from the Conv anchor.  Upstream, an input scale: the conv's input is Mul(x, s) with s
one run-time value per sample and channel (squeeze-excite's gate), read by nothing else.
Downstream, greedily: BN, then Add (either operand order; the other operand comes from
elsewhere and broadcasts to the conv output), then one canonical activation (any op of
codegen/fused/epilogue.ACTIVATIONS: the canonical stage has already turned SiLU, QuickGelu,
HardSwish, GELU... into their ops), then the stores, each optional:
- pooled: AveragePool/MaxPool with non-overlapping windows (DenseNet's transitions, VGG);
- permuted: a view op (Reshape, Flatten, Squeeze, Unsqueeze) and a Transpose (ViT's patch
  embedding, `output_shape` / `output_perm`);
- concatenated: a Concat taking the result as one operand (ViT's CLS token, Inception's
  branches, DenseNet's growing feature map once the canonical stage has nested its concats;
  the kernel copies the other operands);
- a permuted store of the concatenation (ShuffleNet's channel shuffle: Reshape[N, g, C/g,
  ...] -> Transpose, `concat_view_shape` / `concat_perm`).
Autofuse may then absorb the elementwise tail (ViT's position-embedding Add, DenseNet's next
BN + ReLU).  A later intermediate with other consumers ends the pattern there (what came
before still fuses, its output stays visible).

Residual convolution: when the Add's other operand is the output of another Conv [+ BN]
(ResNet's downsample branch) used by nothing else, with the same output shape, that conv
joins the kernel (`residual_conv`, its attrs prefixed `res_`): the two GEMMs accumulate into
one output tile (codegen/fused/conv.py), with the BN of either folded first -- the same
rule for BN-kept (TorchScript, zoo) and BN-folded (dynamo) exports.  When it cannot join,
the Add takes it as a plain residual input and the lone conv's own anchor records why.

Which pass takes a conv (`conv_variant`): depthwise (group = input channels > 1), grouped
(1 < group < input channels), dilated (group 1, a dilation != 1), else plain.  A conv with
nothing to fuse is not a candidate; its pass still says why it stays a plain Conv kernel (a
miss outside match_times) -- ConvPoolFC or ConvChain may take it later.

Misses (GE's constraints): the conv output itself used elsewhere (NF2001: BN cannot be
folded, nothing can fuse), non-constant weights or BN parameters (NF2002), BN length !=
output channels (NF2004); an intermediate read elsewhere (NF2001) and a cycle (NF1002) are
refused by the pass runner; a conv left out of a residual-conv kernel: its
output used elsewhere (NF2001), its shape differs (NF2004), dtype (NF2005), or any
constraint above.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple, Optional

import numpy as np

from codegen.fused.conv import BLOCK_SLOTS, CONV_ATTR_NAMES, CONV_BLOCK_OPS, POOL_PREFIX, RES_PREFIX
from codegen.fused.epilogue import ACTIVATIONS, activation_attrs, is_activation
from fusion_passes import reasons
from fusion_passes.base import FusionPass, FusionResult, Match, fuse, operands, single_consumer
from ge.ir import Graph, Node, Value
from ge.ops.registry import TensorType, get_op
from ge.symbolic import Dim

PLAIN, DEPTHWISE, GROUPED, DILATED = "plain", "depthwise", "grouped", "dilated"
_CONV_ATTRS = CONV_ATTR_NAMES
_VIEW_OPS = ("Reshape", "Flatten", "Squeeze", "Unsqueeze")


class Activation(NamedTuple):
    nodes: list          # the activation's nodes, in order
    attrs: dict          # the fused kernel's activation attrs
    output: Value


class Residual(NamedTuple):
    add: Node
    other: Value         # the operand added to the conv block


class ResidualConv(NamedTuple):
    conv: Node
    bn: Optional[Node]


class PooledStore(NamedTuple):
    node: Node           # AveragePool | MaxPool with non-overlapping windows
    output: Value


class PermutedStore(NamedTuple):
    nodes: list          # [view op,] Transpose
    view_shape: list
    perm: list
    output: Value


class ConcatStore(NamedTuple):
    node: Node           # the Concat
    index: int           # where the conv block sits among its operands
    axis: int
    others: list         # the other operands, in order
    output: Value


class InputScale(NamedTuple):
    mul: Node            # Mul(x, scale) read only by the conv
    x: Value
    scale: Value         # one value per (sample, input channel): [N or 1, C_in, 1, ...]


class Problem(NamedTuple):
    """A GE constraint a candidate breaks: NF code, the constraint in words, the values."""

    code: str
    constraint: str
    values: list


def activation_at(value: Value) -> Optional[Activation]:
    """The canonical activation that reads `value` alone, or None.  Clip qualifies only with
    constant bounds (canonical form has them as attributes)."""
    node = single_consumer(value)
    if node is None or not is_activation(node) or node.inputs[0] is not value:
        return None
    return Activation([node], activation_attrs(node), node.outputs[0])


def input_scale_at(conv: Node) -> Optional[InputScale]:
    """The channel scaling before `conv` -- its input is Mul(x, s), read by nothing else, with
    s one run-time value per sample and input channel (a squeeze-excite gate) -- or None."""
    value = conv.inputs[0]
    mul = value.producer
    if mul is None or mul.op_type != "Mul" or single_consumer(value) is not conv:
        return None
    shape = tuple(value.desc.shape)
    for x, s in ((mul.inputs[0], mul.inputs[1]), (mul.inputs[1], mul.inputs[0])):
        scale = tuple(s.desc.shape)
        if tuple(x.desc.shape) == shape and not s.is_const and len(scale) == len(shape) \
                and scale[0] in (1, shape[0]) and scale[1] == shape[1] and all(d == 1 for d in scale[2:]) \
                and np.dtype(s.desc.dtype) == np.dtype(x.desc.dtype):
            return InputScale(mul, x, s)
    return None


def residual_at(value: Value) -> Optional[Residual]:
    """The Add and its other operand if `value`'s only consumer is an Add whose other operand
    is a different value broadcasting to `value`'s shape and dtype; else None."""
    add = single_consumer(value)
    if add is None or add.op_type != "Add":
        return None
    pair = operands(add, lambda v: v is value)
    if pair is None or pair.other is value:
        return None
    other = pair.other
    if np.dtype(other.desc.dtype) != np.dtype(value.desc.dtype):
        return None
    try:
        shape = tuple(np.broadcast_shapes(tuple(value.desc.shape), tuple(other.desc.shape)))
    except ValueError:
        return None
    return Residual(add, other) if shape == tuple(value.desc.shape) else None


def _first_followers(value: Value) -> list:
    """Consumers of the conv output that would start a pattern (for the NF2001 miss)."""
    return [n for n in value.consumers
            if n.op_type in ("BatchNormalization", "Add", "Concat", "Transpose") + _VIEW_OPS + ACTIVATIONS]


def conv_variant(conv: Node) -> str:
    """Which conv-block pass takes `conv`: depthwise, grouped, dilated or plain."""
    group = int(conv.attrs.get("group", 1))
    if group > 1:
        cin = int(conv.inputs[0].desc.shape[1])
        return DEPTHWISE if group == cin else GROUPED
    nd = len(conv.inputs[1].desc.shape) - 2
    return DILATED if any(d != 1 for d in _attr_ints(conv.attrs.get("dilations"), nd, 1)) else PLAIN


def _attr_ints(value, n: int, default: int) -> list:
    """An int-list attribute, or `default` on each of `n` axes when it is absent or empty."""
    if value is None or (hasattr(value, "__len__") and len(value) == 0):
        return [default] * n
    return [int(v) for v in np.atleast_1d(value)]


def residual_conv_at(value: Value) -> Optional[ResidualConv]:
    """The conv (and bn, or None) when `value` is a Conv's output or a BatchNormalization's reading a
    Conv's output: the structure of a residual convolution (the checks are separate)."""
    node = value.producer
    if node is None:
        return None
    if node.op_type == "Conv":
        return ResidualConv(node, None)
    source = node.inputs[0] if node.op_type == "BatchNormalization" and node.inputs else None
    if source is not None and source.producer is not None and source.producer.op_type == "Conv":
        return ResidualConv(source.producer, node)
    return None


def pool_at(value: Value) -> Optional[PooledStore]:
    """The pooling that reads `value` alone when its windows do not overlap (kernel = stride,
    no padding, no dilation, no index output): each output tile pools its own rows."""
    node = single_consumer(value)
    if node is None or node.op_type not in ("AveragePool", "MaxPool") or node.inputs[0] is not value:
        return None
    if any(v.uses or v.is_graph_output for v in node.outputs[1:]):
        return None
    nd = len(value.desc.shape) - 2
    kernel = _attr_ints(node.attrs.get("kernel_shape"), nd, 1)
    strides = _attr_ints(node.attrs.get("strides"), nd, 1)
    pads = _attr_ints(node.attrs.get("pads"), 2 * nd, 0)
    dilations = _attr_ints(node.attrs.get("dilations"), nd, 1)
    auto_pad = node.attrs.get("auto_pad", "NOTSET")
    auto_pad = auto_pad.decode() if isinstance(auto_pad, bytes) else auto_pad
    if kernel != strides or any(pads) or any(d != 1 for d in dilations) or auto_pad not in ("NOTSET", "VALID") \
            or int(node.attrs.get("ceil_mode", 0)) and not all(_divides(k, d) for d, k in zip(value.desc.shape[2:], kernel)):
        return None
    return PooledStore(node, node.outputs[0])


def _divides(k: int, d) -> bool:
    """k divides d for certain: a dynamic d counts only when its expression says so (H % 2
    depends on the run, so a ceil_mode pool over H stays outside the block, which still fuses)."""
    rest = d % k
    return not isinstance(rest, Dim) and rest == 0


def store_permute_at(value: Value) -> Optional[PermutedStore]:
    """The store when `value` alone feeds [one view op ->] a Transpose, each intermediate
    used by nothing else; else None."""
    node = single_consumer(value)
    nodes: list = []
    view_shape = tuple(value.desc.shape)
    if node is not None and node.op_type in _VIEW_OPS and [v for v in node.inputs if v is not None] == [value]:
        nodes.append(node)
        view_shape = tuple(node.outputs[0].desc.shape)
        node = single_consumer(node.outputs[0])
    if node is None or node.op_type != "Transpose":
        return None
    perm = node.attrs.get("perm")
    perm = list(range(len(view_shape)))[::-1] if perm is None or len(perm) == 0 else [int(p) for p in perm]
    return PermutedStore(nodes + [node], [int(d) for d in view_shape], perm, node.outputs[0])


def concat_at(value: Value) -> Optional[ConcatStore]:
    """The store when `value` alone feeds a Concat once, with operands of its dtype; else None."""
    node = single_consumer(value)
    if node is None or node.op_type != "Concat" or any(v is None for v in node.inputs):
        return None
    where = [i for i, v in enumerate(node.inputs) if v is value]
    others = [v for v in node.inputs if v is not value]
    if len(where) != 1 or any(np.dtype(v.desc.dtype) != np.dtype(value.desc.dtype) for v in others):
        return None
    axis = int(node.attrs.get("axis", 0)) % len(value.desc.shape)
    return ConcatStore(node, where[0], axis, others, node.outputs[0])


def conv_problem(conv: Node, bn: Optional[Node], role: str = "Conv", any_variant: bool = False) -> Optional[Problem]:
    """The first GE constraint `conv` [+ `bn`] breaks, else None.  Without `any_variant`, GE's
    ConvBatchnormFusionPass constraint holds: group 1 and dilation 1 only."""
    w = conv.inputs[1]
    y = conv.outputs[0]
    if not any_variant:
        variant = conv_variant(conv)
        taken = f"; {VARIANT_PASSES[variant]} fuses it" if role == "Conv" and variant != PLAIN else ""
        if variant in (DEPTHWISE, GROUPED):
            return Problem(reasons.UNSUPPORTED_ATTRIBUTE, f"group != 1 is not fused, as GE's ConvBatchnormFusionPass "
                    f"documents ({role} {conv.name}: group = {conv.attrs.get('group')}){taken}", [conv.inputs[0], w, y])
        if variant == DILATED:
            dilations = _attr_ints(conv.attrs.get("dilations"), len(w.desc.shape) - 2, 1)
            return Problem(reasons.UNSUPPORTED_ATTRIBUTE, f"dilation != 1 is not fused, as GE's ConvBatchnormFusionPass "
                    f"documents ({role} {conv.name}: dilations = {dilations}){taken}", [conv.inputs[0], w, y])
    bias = conv.inputs[2] if len(conv.inputs) > 2 else None
    for name, value in (("weight", w), ("bias", bias)):
        if value is not None and not value.is_const:
            return Problem(reasons.NON_CONSTANT, f"the {role} {name} {value.name} must be a constant", [value])
    if bn is None:
        return None
    params = bn.inputs[1:5]
    loose = [v for v in params if v is None or not v.is_const]
    if loose:
        return Problem(reasons.NON_CONSTANT, "BatchNormalization parameters (scale, B, mean, var) must be constants "
                f"to fold into the conv weights; {[v.name for v in loose if v]} are not", loose)
    cout = int(w.desc.shape[0])
    if any(v.const.size != cout for v in params):
        return Problem(reasons.SHAPE_MISMATCH, f"BatchNormalization parameters must have one value per output "
                f"channel ({cout})", params)
    if int(bn.attrs.get("training_mode", 0)):
        return Problem(reasons.UNSUPPORTED_ATTRIBUTE, "BatchNormalization in training mode cannot be folded", [])
    return None


def residual_conv_problem(conv: Node, bn: Optional[Node], shape: tuple, dtype) -> Optional[Problem]:
    """Why `conv` [+ `bn`] cannot be the residual convolution of a conv block whose
    pre-Add output has `shape`/`dtype`, or None when it can."""
    exits = [conv.outputs[0]] + ([bn.outputs[0]] if bn is not None else [])
    if bn is not None and bn.inputs[0] is not conv.outputs[0]:
        return Problem(reasons.UNSUPPORTED_VARIANT, "the BatchNormalization does not read the conv output", exits)
    for value in exits:
        if value.is_graph_output or len(value.uses) != 1:
            return Problem(reasons.OTHER_CONSUMERS, f"the residual conv's output {value.name} has {len(value.consumers)} "
                    f"consumer(s){' and is a graph output' if value.is_graph_output else ''}; it must feed only the "
                    "residual Add, whose kernel would keep it on chip", [value])
    out = exits[-1]
    if tuple(out.desc.shape) != tuple(shape):
        return Problem(reasons.SHAPE_MISMATCH, f"the residual conv output {list(out.desc.shape)} differs from the main "
                f"conv output {list(shape)}: both GEMMs must accumulate into the same output tile", [out])
    if np.dtype(out.desc.dtype) != np.dtype(dtype):
        return Problem(reasons.DTYPE_MISMATCH, f"the residual conv output is {np.dtype(out.desc.dtype)}, the main conv "
                f"output {np.dtype(dtype)}", [out])
    return conv_problem(conv, bn, "residual conv")


VARIANT_PASSES = {PLAIN: "ConvBNReluFusionPass", DEPTHWISE: "DepthwiseConvBNReluFusionPass",
                  GROUPED: "GroupConvBNReluFusionPass", DILATED: "DilatedConvBNReluFusionPass"}


class ConvBlockPass(FusionPass):
    """A conv-block pass: the walk and the rewrite; subclasses say which convs are theirs
    (`variant`) and which op type they fuse into."""

    anchor_types = ("Conv",)
    variant = PLAIN

    @property
    def fused_op(self) -> str:
        return self.fused_ops[0]

    def candidates(self, graph: Graph, result: FusionResult):
        """The conv blocks; a conv of this pass's variant with nothing to fuse after it is
        no candidate, but its reason is recorded (outside match_times) so no plain Conv
        kernel goes unexplained."""
        for found in super().candidates(graph, result):
            yield found
        for conv in list(graph.nodes):
            if conv.op_type == "Conv" and conv_variant(conv) == self.variant and conv.graph is graph \
                    and not self._known(result, conv):
                result.misses.append(self._plain_conv(conv))

    @staticmethod
    def _known(result: FusionResult, conv: Node) -> bool:
        return any(m.anchor == conv.name or conv.name in (n for n, _ in m.nodes) for m in result.misses)

    def _plain_conv(self, conv: Node):
        y = conv.outputs[0]
        readers = sorted({n.op_type for n in y.consumers})
        where = (f"it feeds {', '.join(readers)}" if readers else "nothing reads it") \
            + (" and is a graph output" if y.is_graph_output else "")
        return self.miss(reasons.UNSUPPORTED_VARIANT, conv, [conv] + y.consumers[:8],
                         f"nothing this pass fuses follows the conv ({where}): it stays a plain Conv kernel "
                         "unless a later pass takes it", [y])

    def match(self, graph: Graph, conv: Node):
        y = conv.outputs[0]
        bn = add = residual = side = store = concat = None
        act = None
        cur = y
        scale = input_scale_at(conv)
        # -- structure: greedy walk downstream -------------------------------------------
        first = single_consumer(y)
        if first is not None and first.op_type == "BatchNormalization" and first.inputs[0] is y:
            bn, cur = first, first.outputs[0]
        found = residual_at(cur)
        if found:
            pre_add = cur
            add, residual = found
            cur = add.outputs[0]
            side = residual_conv_at(residual)
            if side is not None and (side.conv is conv or residual_conv_problem(
                    *side, tuple(pre_add.desc.shape), pre_add.desc.dtype) is not None):
                side = None                         # a plain residual input; its own anchor says why
        act = activation_at(cur)
        if act:
            cur = act.output
        pool = pool_at(cur)
        if pool:
            cur = pool.output
        store = store_permute_at(cur)
        if store:
            cur = store.output
        concat = concat_at(cur)
        shuffle = None
        if concat:
            cur = concat.output
            shuffle = store_permute_at(cur)
            if shuffle:
                cur = shuffle.output
        side_nodes = [n for n in side if n is not None] if side else []
        nodes = ([scale.mul] if scale else []) + side_nodes + [conv] + [n for n in (bn, add) if n is not None] \
            + (act.nodes if act else []) + ([pool.node] if pool else []) + (store.nodes if store else []) \
            + ([concat.node] if concat else []) + (shuffle.nodes if shuffle else [])
        mine = conv_variant(conv) == self.variant
        if len(nodes) == 1:
            followers = _first_followers(y)
            if not mine:
                return None
            if followers and (len(y.uses) > 1 or y.is_graph_output):
                return self.miss(reasons.OTHER_CONSUMERS, conv, [conv] + followers,
                                 f"the Conv output {y.name} has {len(y.consumers)} consumers"
                                 f"{' and is a graph output' if y.is_graph_output else ''}; fusing would "
                                 "hide it (it must have exactly one consumer)", [y])
            return self._left_out_residual_conv(conv)
        # -- GE's constraints ----------------------------------------------------------------
        if not mine and self.variant != PLAIN:
            return None                             # another variant's pass (or ConvBNRelu's miss)
        problem = conv_problem(conv, bn, any_variant=self.variant != PLAIN)
        if problem:
            return self.miss(problem.code, conv, nodes, problem.constraint, problem.values)
        return ConvBlockMatch(nodes, self.fused_op, [cur], conv=conv, bn=bn, residual=residual, side=side,
                              activation=act.attrs if act else {}, store=store, concat=concat, scale=scale,
                              pool=pool, shuffle=shuffle)

    def _left_out_residual_conv(self, conv: Node):
        """A bare Conv whose output is the residual operand of a conv block: a Miss saying
        why it cannot be that block's residual convolution (None when it can: the block's
        anchor takes it, before or after this one)."""
        y = conv.outputs[0]
        for user in y.consumers:
            if user.op_type == "Add":
                pair = operands(user, lambda v: v is y)
                main = pair.other if pair is not None else None
                if main is not None and main is not y and residual_conv_at(main) is not None:
                    shape, dtype, block = tuple(main.desc.shape), main.desc.dtype, main.producer
                    break
            elif user.op_type in CONV_BLOCK_OPS and len(user.inputs) > 3 and user.inputs[3] is y:
                x, w = user.inputs[0], user.inputs[1]
                out = get_op("Conv").infer([TensorType(x.desc.dtype, tuple(x.desc.shape)),
                                            TensorType(w.desc.dtype, tuple(w.desc.shape))], user.attrs)[0]
                shape, dtype, block = tuple(out.shape), out.dtype, user
                break
        else:
            return None
        problem = residual_conv_problem(conv, None, shape, dtype)
        if problem is None:
            return None
        return self.miss(problem.code, conv, [conv, user],
                         f"not fused as the residual convolution of {block.op_type} {block.name}: "
                         f"{problem.constraint}", list(problem.values) + [y])

    def rewrite(self, graph: Graph, match: "ConvBlockMatch") -> Node:
        conv, bn, side = match.conv, match.bn, match.side
        w, bias = conv_params(graph, conv, bn)
        attrs = conv_attrs(conv)
        attrs.update(match.activation)
        attrs["has_bn"] = bn is not None
        attrs["has_residual"] = match.residual is not None and side is None
        slots = dict(x=match.scale.x if match.scale else conv.inputs[0], w=w, bias=bias,
                     residual=None if side else match.residual)
        if side is not None:
            side_w, side_bias = conv_params(graph, side.conv, side.bn)
            slots.update(bias=_sum_bias(graph, conv, bias, side_bias), res_x=side.conv.inputs[0], res_w=side_w)
            attrs["residual_conv"] = True
            attrs["res_has_bn"] = side.bn is not None
            attrs.update({RES_PREFIX + k: v for k, v in conv_attrs(side.conv).items()})
        if match.scale is not None:
            slots["scale"] = match.scale.scale
            attrs["input_scale"] = True
        if match.pool is not None:
            attrs["pool_op"] = match.pool.node.op_type
            attrs.update({POOL_PREFIX + k: v for k, v in match.pool.node.attrs.items() if v is not None})
        if match.store is not None:
            attrs["output_shape"], attrs["output_perm"] = match.store.view_shape, match.store.perm
        if match.concat is not None:
            slots["parts"] = match.concat.others
            attrs.update(concat_axis=match.concat.axis, concat_index=match.concat.index,
                         concat_parts=len(match.concat.others))
        if match.shuffle is not None:
            attrs["concat_view_shape"], attrs["concat_perm"] = match.shuffle.view_shape, match.shuffle.perm
        return fuse(graph, match.nodes, match.fused_op, BLOCK_SLOTS.pack(**slots), match.outputs, attrs,
                    self.pass_name)


@dataclass
class ConvBlockMatch(Match):
    """A conv block: [input scale ->] conv [+ BN] [+ residual Add (of a residual conv)]
    [+ activation] [+ pooled store] [+ permuted store] [+ concatenated store [+ permuted]]."""

    conv: Node
    bn: Optional[Node]
    residual: Optional[Value]          # the Add's other operand
    side: Optional[ResidualConv]       # set when that operand is a residual convolution
    activation: dict                   # the kernel's activation attrs ({} for none)
    store: Optional[PermutedStore]
    concat: Optional[ConcatStore]
    scale: Optional[InputScale] = None  # a channel scaling of the input (squeeze-excite's Mul)
    pool: Optional[PooledStore] = None
    shuffle: Optional[PermutedStore] = None  # a view + Transpose of the concatenation (channel shuffle)


def conv_params(graph: Graph, conv: Node, bn: Optional[Node]) -> tuple:
    """(weight, bias | None) of the conv as the kernel uses them: BN folded when present."""
    if bn is not None:
        return fold_batch_norm(graph, conv, bn)
    return conv.inputs[1], (conv.inputs[2] if len(conv.inputs) > 2 else None)


def _sum_bias(graph: Graph, conv: Node, a: Optional[Value], b: Optional[Value]) -> Optional[Value]:
    """One bias for the two accumulated GEMMs: a + b in float64, in the weight dtype."""
    if a is None or b is None:
        return a if b is None else b
    total = a.const.astype(np.float64).reshape(-1) + b.const.astype(np.float64).reshape(-1)
    return graph.constant(f"{conv.name}/residual_conv_bias", total.astype(conv.inputs[1].desc.dtype))


def conv_attrs(conv: Node) -> dict:
    """The Conv attributes the fused kernel needs, kernel_shape made explicit."""
    attrs = {k: conv.attrs[k] for k in _CONV_ATTRS if k in conv.attrs}
    attrs.setdefault("kernel_shape", [int(d) for d in conv.inputs[1].desc.shape[2:]])
    attrs.setdefault("group", 1)
    return attrs


def fold_batch_norm(graph: Graph, conv: Node, bn: Node) -> tuple:
    """W' = W * s, b' = (b - mean) * s + B with s = scale / sqrt(var + eps), in float64,
    cast back to the weight dtype; returns the new constant Values (W', b')."""
    w = conv.inputs[1].const
    bias = conv.inputs[2] if len(conv.inputs) > 2 else None
    scale, beta, mean, var = (v.const.astype(np.float64).reshape(-1) for v in bn.inputs[1:5])
    eps = float(bn.attrs.get("epsilon", 1e-5))
    s = scale / np.sqrt(var + eps)
    b = bias.const.astype(np.float64).reshape(-1) if bias is not None else np.zeros_like(s)
    w_new = (w.astype(np.float64) * s.reshape((-1,) + (1,) * (w.ndim - 1))).astype(w.dtype)
    b_new = ((b - mean) * s + beta).astype(w.dtype)
    return (graph.constant(f"{conv.name}/folded_weight", w_new),
            graph.constant(f"{conv.name}/folded_bias", b_new))
