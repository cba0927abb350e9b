"""Kernels of the conv fusions: the conv block (ConvBNReluFusionOp and its depthwise, grouped
and dilated variants, one kernel under four names so the report tells them apart) and
ConvPoolFCFusionOp.

Why one module: the classification-head kernel runs the same conv block (conv + folded BN
bias + residual + activation) as ConvBNReluFusionOp before its pooling and FC, so both
share `_conv_block`.  BatchNorm is already folded into the weights and bias at compile
time (fusion_passes/conv_bn_relu.py), so the kernel sees a plain conv with an epilogue.

Input slots (codegen/fused/slots.py; absent optional slots are None): the conv blocks,
BLOCK_SLOTS = x, w, bias, residual, res_x, res_w, scale, then the other operands of the
concatenation the block writes into (`parts`); ConvPoolFCFusionOp, HEAD_SLOTS = x, w, bias,
residual, fc_w, fc_b, res_x, res_w, parts: an Inception/GoogLeNet head pools the channel
concatenation the conv block is one operand of (the pooled vector is the concatenation of
each part's pooled vector; the parts are read, never copied).  Attrs: the Conv attrs, the epilogue's (`activation` and its
`act_*`, `residual_after_act`: codegen/fused/epilogue.py), `has_residual`; the head adds
`fc_transB`, `fc_alpha`, `fc_beta`.

Residual convolution (`residual_conv` true; `res_` + the Conv attrs of the second conv):
ResNet's downsample branch.  The kernel computes conv(x, W) + conv(res_x, res_W) + b, i.e. one
GEMM over the concatenated K dimension [W | res_W] x [im2col(x); im2col(res_x)]: both
products accumulate into the same output tile, so the downsample output never reaches
global memory; b is the sum of both convs' (BN-folded) biases.  No broadcast: both convs
have the same output shape.

Input scale (`input_scale`, the conv blocks only): squeeze-excite's x * gate feeding the
projection conv.  conv(x * s) with s one value per sample and input channel is conv(x) with
each sample's weights scaled per input channel, W * s (C_out x C_in x k multiplies per
sample, cheaper than scaling x); x * s is never written.

Pooled store (`pool_op` = AveragePool | MaxPool and its attrs prefixed `pool_`): DenseNet's
transition conv -> AvgPool 2x2/2, VGG's conv block -> MaxPool 2x2/2.  Non-overlapping
windows only (kernel = stride, no padding), so each output tile reduces its own rows and the
full-resolution block is never written.

Permuted store (`output_shape`, `output_perm`, the conv blocks only): ViT's patch
embedding `Conv -> Reshape[N, C, HW] -> Transpose[0, 2, 1]`.  The output tile is written
at permuted addresses, out = block.reshape(output_shape).transpose(output_perm); the cube's
output path (FixPipe) writes its NZ tiles out as row-major [HW, C] rows anyway, so the
layout change costs no vector work and no extra pass over memory.

Concatenated store (`concat_axis`, `concat_index`, `concat_parts`, the conv blocks; the head
over a channel concat below):
ViT's `Concat(CLS token, patches)`.  The conv tile is stored at its offset of the Concat
output (an address offset, free) and the kernel copies the other `concat_parts` operands,
its `parts`, into their places (vector `move` work of their size).

Shuffled concatenation (`concat_view_shape`, `concat_perm` after a concatenated store):
ShuffleNet's channel shuffle Concat -> Reshape[N, g, C/g, H, W] -> Transpose[0, 2, 1, 3, 4]:
the tile and the copied operands are written at their interleaved channel addresses, so
the shuffle costs no kernel and no pass over memory.

Numerics: the epilogue's float16 rule (codegen/fused/epilogue.py) -- the conv accumulates in
float32 and bias, residual, activation, pooling and FC stay float32 on chip; only the
kernel's output is rounded back to float16, one rounding where the unfused graph has one
per op.  Every piece of arithmetic reuses the ONNX ops of ge.ops, and the work
rules reuse their kernels', so fused and unfused kernels are priced by one ruler.
"""
from __future__ import annotations

from dataclasses import replace

import numpy as np

from codegen.fused import epilogue
from codegen.fused.slots import Slots
from codegen.registry import kernel_of, register
from codegen.work import Work
from ge import workspace
from ge.ops.common import own_dtype_inside
from ge.ops.nn import conv_forward, conv_output_shape, conv_workspace
from ge.ops.registry import OpDef, OpKind, TensorType, get_op
from ge.errors import InvalidNode

CONV_BLOCK_OPS = ("ConvBNReluFusionOp", "DepthwiseConvBNReluFusionOp", "GroupConvBNReluFusionOp",
                  "DilatedConvBNReluFusionOp")
CONV_ATTR_NAMES = ("kernel_shape", "pads", "strides", "dilations", "group", "auto_pad")
RES_PREFIX = "res_"
POOL_PREFIX = "pool_"                   # a pooled store: pool_op and the pooling op's attrs
BLOCK_SLOTS = Slots("x", "w", "bias", "residual", "res_x", "res_w", "scale", required=("x", "w"), rest="parts")
HEAD_SLOTS = Slots("x", "w", "bias", "residual", "fc_w", "fc_b", "res_x", "res_w", required=("x", "w", "fc_w"),
                   rest="parts")


def residual_conv_attrs(attrs: dict) -> dict:
    """The Conv attrs of the residual convolution (stored with the `res_` prefix)."""
    return {k: attrs[RES_PREFIX + k] for k in CONV_ATTR_NAMES if RES_PREFIX + k in attrs}


def _conv_block(s: dict, attrs: dict) -> np.ndarray:
    """conv (+ residual conv) + bias + residual + activation, in the on-chip (accumulation)
    dtype; `s` is the kernel's inputs by slot name.  As the cube accumulates into L0C, the
    bias, a residual added before the activation and the residual conv's product all go
    into the conv's accumulator (ge.ops.nn.conv_forward) rather than being added after."""
    x, w, b = s["x"], s["w"], s["bias"]
    acc = epilogue.accumulate_dtype(x.dtype)
    xa = workspace.astype(x, acc)
    if attrs.get("input_scale"):
        xa = xa * s["scale"].astype(acc, copy=False)
    residual, base = s["residual"], None
    if _residual_is_base(s, attrs):
        residual, base = None, workspace.astype(residual, acc)
    relu = epilogue.relu_first(attrs, residual is not None)     # ReLU on the accumulator, in the conv's own pass
    second = bool(attrs.get("residual_conv"))
    y = conv_forward(xa, w, attrs, b, base, relu=relu and not second)   # w stays the constant the executor keeps
    if second:
        y = conv_forward(workspace.astype(s["res_x"], acc), s["res_w"], residual_conv_attrs(attrs), base=y,
                         base_owned=True, relu=relu)
    if relu:
        attrs = epilogue.without_activation(attrs)
    return epilogue.apply(y, attrs, None, residual, x.dtype, owned=True)     # y is this kernel's own


def _residual_is_base(s: dict, attrs: dict) -> bool:
    """Whether the residual goes into the conv's accumulator (added before the activation, same shape)."""
    return s["residual"] is not None and epilogue.residual_first(attrs) \
        and tuple(s["residual"].shape) == conv_output_shape(s["x"].shape, s["w"].shape, attrs)


def _block_workspace(s: dict, attrs: dict) -> tuple:
    """What `_conv_block` takes from the workspace (ge/workspace.py), in order; the index of
    the take its result is (None: an array of its own); whether that is C-contiguous."""
    x, w = s["x"], s["w"]
    acc = epilogue.accumulate_dtype(x.dtype)
    takes = [] if np.dtype(x.dtype) == acc else [workspace.nbytes(x.shape, acc)]
    base = None
    if _residual_is_base(s, attrs):
        base = False
        if np.dtype(s["residual"].dtype) != acc:
            takes.append(workspace.nbytes(s["residual"].shape, acc))
    conv, result, contiguous = conv_workspace(x.shape, acc, w.shape, attrs, base)
    result = None if result is None else len(takes) + result
    takes += conv
    if attrs.get("residual_conv"):
        res_x = s["res_x"]
        if np.dtype(res_x.dtype) != acc:
            takes.append(workspace.nbytes(res_x.shape, acc))
        takes += conv_workspace(res_x.shape, acc, s["res_w"].shape, residual_conv_attrs(attrs), True)[0]
    act = epilogue.activation_of(attrs)
    in_place = act is None or (act[0] == "Relu" and (not own_dtype_inside(act[1]) or
                                                     epilogue.relu_first(attrs, base is None and s["residual"] is not None)))
    if epilogue.gated(attrs) or not in_place:
        result = None
    return takes, result, contiguous


def _conv_block_type(s: dict, attrs: dict) -> TensorType:
    out = get_op("Conv").infer([s["x"], s["w"]], attrs)[0]
    if attrs.get("residual_conv"):
        side = get_op("Conv").infer([s["res_x"], s["res_w"]], residual_conv_attrs(attrs))[0]
        if tuple(side.shape) != tuple(out.shape):
            raise InvalidNode(f"the residual conv output {list(side.shape)} differs from the main conv "
                              f"output {list(out.shape)}", "Both convolutions of a residual-conv kernel must "
                              "produce the same shape.")
    return out


def _conv_block_work(s: dict, out: TensorType, attrs: dict) -> Work:
    """Cube MACs of the conv (and of the residual conv: its products accumulate into the same
    tile, so it adds MACs but no vector op), vector ops of the epilogue, and the
    intermediates kept on chip (codegen/fused/epilogue.py: the accumulator, and one tile per
    epilogue stage after the first)."""
    work = kernel_of("Conv").work([s["x"], s["w"]], [out], attrs)
    if attrs.get("residual_conv"):
        side = kernel_of("Conv").work([s["res_x"], s["res_w"]], [out], residual_conv_attrs(attrs))
        # One product over the concatenated K: [W | res_W] x [im2col(x); im2col(res_x)].
        main, other = work.gemms[0], side.gemms[0]
        merged = replace(main, k=main.k + other.k, k_window=1, a_elements=main.a_elements + other.a_elements)
        work = replace(work, cube_macs=work.cube_macs + side.cube_macs, gemms=(merged,), vector_ops=dict(work.vector_ops))
    if attrs.get("input_scale"):        # each sample's weights scaled by its channel gates
        work.add_vector("alu", int(s["x"].shape[0]) * s["w"].size)
    tail = epilogue.work(out, attrs, bias=s["bias"] is not None, residual=s["residual"] is not None,
                         bias_is_a_stage=False, min_stages=1)
    return work + tail


# -- ConvBNReluFusionOp ------------------------------------------------------------------


def _permuted(shape: tuple, attrs: dict, prefix: str = "") -> tuple:
    """The stored shape: output_shape permuted by output_perm (a view of the block first);
    with prefix "concat_", concat_view_shape and concat_perm applied to the concatenation."""
    view = tuple(int(d) for d in attrs[prefix + "view_shape" if prefix else "output_shape"])
    perm = [int(p) for p in attrs[prefix + "perm" if prefix else "output_perm"]]
    if int(np.prod(view, dtype=np.int64)) != int(np.prod(shape, dtype=np.int64)) or sorted(perm) != list(range(len(view))):
        raise InvalidNode(f"cannot store a conv block of shape {list(shape)} as {list(view)} permuted by {perm}",
                          "output_shape must hold the block's elements and output_perm be a permutation of its axes.")
    return tuple(view[p] for p in perm)


def _concat_parts(s: dict, attrs: dict, tile):
    """The Concat operands in order, the conv tile at `concat_index`."""
    parts = list(s["parts"][:int(attrs["concat_parts"])])
    parts.insert(int(attrs["concat_index"]), tile)
    return parts


def pool_attrs(attrs: dict) -> tuple:
    """(pooling op type, its attrs) of a pooled store, or (None, {})."""
    op = attrs.get("pool_op")
    if not op:
        return None, {}
    return op, {k[len(POOL_PREFIX):]: v for k, v in attrs.items() if k.startswith(POOL_PREFIX) and k != "pool_op"}


def conv_bn_relu_compute(inputs, attrs):
    s = BLOCK_SLOTS.read(inputs)
    y = _conv_block(s, attrs)
    pool, pattrs = pool_attrs(attrs)
    if pool:
        y = get_op(pool).compute([y], pattrs)[0]
    if "output_perm" in attrs:
        _permuted(y.shape, attrs)
        y = y.reshape([int(d) for d in attrs["output_shape"]]).transpose([int(p) for p in attrs["output_perm"]])
    if "concat_axis" in attrs:
        parts = [p.astype(y.dtype, copy=False) for p in _concat_parts(s, attrs, y)]
        y = get_op("Concat").compute(parts, {"axis": int(attrs["concat_axis"])})[0]
        if "concat_perm" in attrs:
            _permuted(y.shape, attrs, "concat_")
            y = y.reshape([int(d) for d in attrs["concat_view_shape"]]).transpose([int(p) for p in attrs["concat_perm"]])
    return [workspace.contiguous(workspace.astype(y, inputs[0].dtype))]


def conv_bn_relu_workspace(inputs, attrs) -> list:
    """The Takes of conv_bn_relu_compute (ge/workspace.py): the block's, then the output's
    own buffer where the block's result is cast or copied to a contiguous one."""
    s = BLOCK_SLOTS.read(inputs)
    takes, result, contiguous = _block_workspace(s, attrs)
    if pool_attrs(attrs)[0] or "concat_axis" in attrs:      # a new array: pooled, or concatenated
        result, contiguous = None, "concat_perm" not in attrs
    contiguous = contiguous and "output_perm" not in attrs
    out = conv_bn_relu_infer(inputs, attrs)[0]
    if np.dtype(inputs[0].dtype) != epilogue.accumulate_dtype(inputs[0].dtype) or not contiguous:
        return [workspace.Take(n) for n in takes] + [workspace.Take(workspace.nbytes(out.shape, inputs[0].dtype),
                                                                    True)]
    return [workspace.Take(n, i == result) for i, n in enumerate(takes)]


def _pool_store_type(block: TensorType, attrs) -> TensorType:
    pool, pattrs = pool_attrs(attrs)
    return get_op(pool).infer([block], pattrs)[0] if pool else block


def _stored_type(s: dict, attrs) -> TensorType:
    block = _pool_store_type(_conv_block_type(s, attrs), attrs)
    if "output_perm" in attrs:
        block = TensorType(block.dtype, _permuted(block.shape, attrs))
    return block


def conv_bn_relu_infer(inputs, attrs):
    s = BLOCK_SLOTS.read(inputs)
    stored = _stored_type(s, attrs)
    if "concat_axis" in attrs:
        cat = get_op("Concat").infer(_concat_parts(s, attrs, stored), {"axis": int(attrs["concat_axis"])})[0]
        if "concat_perm" in attrs:
            cat = TensorType(cat.dtype, _permuted(cat.shape, attrs, "concat_"))
        return [cat]
    return [stored]


def conv_bn_relu_work(inputs, outputs, attrs):
    """The conv block's work, sized by the tile it computes, the pooling of a pooled store
    (the block tile stays on chip until its windows are reduced), plus the copy of the other
    Concat operands (the permuted and concatenated stores themselves are address changes)."""
    s = BLOCK_SLOTS.read(inputs)
    block = TensorType(outputs[0].dtype, _conv_block_type(s, attrs).shape)
    work = _conv_block_work(s, block, attrs)
    pool, pattrs = pool_attrs(attrs)
    if pool:
        pooled = TensorType(outputs[0].dtype, _pool_store_type(block, attrs).shape)
        work = work + kernel_of(pool).work([block], [pooled], pattrs)
        work.onchip_bytes += block.nbytes
    if "concat_axis" in attrs:
        copied = sum(p.size for p in s["parts"][:int(attrs["concat_parts"])])
        work.add_vector("move", copied)
    return work


def _block_prepare(slots: Slots):
    """At load, what the block's conv precomputes from its constant weight (ge/ops/nn.py)."""
    def prepare(inputs, attrs):
        s = slots.read(inputs)
        get_op("Conv").prepare([s["x"], s["w"]], attrs)
        if attrs.get("residual_conv") and s.get("res_x") is not None and s.get("res_w") is not None:
            get_op("Conv").prepare([s["res_x"], s["res_w"]], residual_conv_attrs(attrs))     # ResNet's downsample
    return prepare


for _op_type in CONV_BLOCK_OPS:
    register(OpDef(_op_type, OpKind.OUT_EWISE_FUSABLE, conv_bn_relu_compute, conv_bn_relu_infer,
                   prepare=_block_prepare(BLOCK_SLOTS), workspace=conv_bn_relu_workspace), conv_bn_relu_work)


# -- ConvPoolFCFusionOp --------------------------------------------------------------------

def _fc_attrs(attrs: dict) -> dict:
    return {"transB": int(attrs.get("fc_transB", 0)), "alpha": float(attrs.get("fc_alpha", 1.0)),
            "beta": float(attrs.get("fc_beta", 1.0))}


def _head_parts(s: dict, attrs, block):
    """What the head pools: the conv block, or the concatenation it is one operand of (its
    `parts`, `concat_index` places the block)."""
    if "concat_axis" not in attrs:
        return [block]
    parts = list(s["parts"][:int(attrs["concat_parts"])])
    parts.insert(int(attrs["concat_index"]), block)
    return parts


def _check_channel_concat(attrs, rank: int) -> None:
    if "concat_axis" in attrs and int(attrs["concat_axis"]) % rank != 1:
        raise InvalidNode(f"ConvPoolFCFusionOp pools a concatenation along axis {attrs['concat_axis']}; only the "
                          "channel axis (1) keeps the pooled vector a concatenation of the parts' pooled vectors",
                          "Recompile the model with this version of atc_py.")


def _fc_inputs(s: dict, pooled) -> list:
    return [pooled, s["fc_w"]] + ([s["fc_b"]] if s["fc_b"] is not None else [])


def conv_pool_fc_compute(inputs, attrs):
    s = HEAD_SLOTS.read(inputs)
    y = _conv_block(s, attrs)                                                       # (N, C, *spatial)
    acc = y.dtype
    _check_channel_concat(attrs, y.ndim)
    pooled = np.concatenate([np.mean(p.astype(acc, copy=False), axis=tuple(range(2, y.ndim)), dtype=acc)
                             for p in _head_parts(s, attrs, y)], axis=1)            # (N, C), global average
    fc_in = [v.astype(acc, copy=False) for v in _fc_inputs(s, pooled)]
    out = get_op("Gemm").compute(fc_in, _fc_attrs(attrs))[0]
    return [out.astype(inputs[0].dtype, copy=False)]


def conv_pool_fc_workspace(inputs, attrs) -> list:
    """The Takes of conv_pool_fc_compute: the conv block's, all scratch (the pooled FC output is small)."""
    return [workspace.Take(n) for n in _block_workspace(HEAD_SLOTS.read(inputs), attrs)[0]]


def _pooled_type(s: dict, attrs) -> tuple:
    block = _conv_block_type(s, attrs)
    _check_channel_concat(attrs, len(block.shape))
    channels = sum(int(p.shape[1]) for p in _head_parts(s, attrs, block))
    return block, TensorType(block.dtype, (int(block.shape[0]), channels))


def conv_pool_fc_infer(inputs, attrs):
    s = HEAD_SLOTS.read(inputs)
    _, pooled = _pooled_type(s, attrs)
    return get_op("Gemm").infer(_fc_inputs(s, pooled), _fc_attrs(attrs))


def conv_pool_fc_work(inputs, outputs, attrs):
    """Conv block + global average (one add per pooled element -- the block's and the other
    concatenated parts', read once each -- one divide per channel) + FC; on chip: the
    block's intermediates, the block output and the pooled vector."""
    s = HEAD_SLOTS.read(inputs)
    block, pooled = _pooled_type(s, attrs)
    block = TensorType(outputs[0].dtype, block.shape)       # sized in the compute dtype
    pooled = TensorType(outputs[0].dtype, pooled.shape)
    work = _conv_block_work(s, block, attrs)
    work.add_vector("alu", sum(p.size for p in _head_parts(s, attrs, block))).add_vector("div", pooled.size)
    fc = kernel_of("Gemm").work(_fc_inputs(s, pooled), outputs, _fc_attrs(attrs))
    fc = replace(fc, gemms=tuple(replace(g, a_onchip=True) for g in fc.gemms))   # the pooled vector
    total = work + fc
    total.onchip_bytes = work.onchip_bytes + block.nbytes + pooled.nbytes
    return total


register(OpDef("ConvPoolFCFusionOp", OpKind.OUT_EWISE_FUSABLE, conv_pool_fc_compute, conv_pool_fc_infer,
               prepare=_block_prepare(HEAD_SLOTS), workspace=conv_pool_fc_workspace), conv_pool_fc_work)
