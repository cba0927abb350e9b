"""MHA fusion: Q/K/V projections .. Softmax .. merged heads -> MultiHeadAttentionFusionOp.

Anchored on Softmax and walked both ways (fusion_passes/attention_patterns.py), so the
exporter's choices -- scale on scores or on Q and K, Mul or Div, K transposed by one or two
Transposes, separate or packed (Split/Slice) QKV, padding-mask Add, causal Where -- all
land on one kernel.  Projections are MatMul(+bias Add) or GPT-2's Conv1D `Reshape -> Gemm(W, C)
-> Reshape` (transB/alpha/beta folded); heads merged to [B*S,H*D] (GPT-2 dynamo, straight into
the c_proj Gemm) are read through a Reshape view of the kernel's [B,S,H*D] output; an Add of an
all-zero constant (ViT dynamo) is no mask.  Head count and head dim come from the head
Reshape's output shape.  The QKV weights are always packed into one [hidden, 3*H*D]
constant (reused as is when the graph already has it packed) so the kernel does one
projection GEMM.  The output projection is left to MatMulBiasAct.

A Softmax is a candidate (counted in match_times) when a MatMul of two computed tensors
feeds it within a few nodes and its output is the left operand of another such MatMul;
any failed check after that is a Miss with its NF code.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from codegen.fused.attention import OP_TYPE
from fusion_passes import reasons
from fusion_passes.attention_patterns import (K_PERM, Q_PERM, Reject, ScoreChain, find_qk, walk_heads,
                                              walk_projection, walk_scores)
from fusion_passes.base import FusionPass, Match, creates_cycle, escaping_values, fuse
from ge.ir import Graph, Node, TensorDesc, Value


class MultiHeadAttentionFusionPass(FusionPass):
    pattern_name = "MHA"
    pass_name = "MultiHeadAttentionFusionPass"
    fused_ops = (OP_TYPE,)
    anchor_types = ("Softmax",)

    def match(self, graph: Graph, anchor: Node):
        probs = anchor.outputs[0]
        pv = next((user for user, i in probs.uses if user.op_type == "MatMul" and i == 0
                   and user.inputs[1] is not None and not user.inputs[1].is_const), None)
        qk = find_qk(anchor.inputs[0])
        if pv is None or qk is None:
            return None
        core = [qk, anchor, pv]
        try:
            return self._match(graph, anchor, pv)
        except Reject as err:
            nodes = core + [n for n in err.nodes if n not in core]
            return self.miss(err.code, anchor, nodes, err.constraint,
                             err.values or [anchor.inputs[0], probs])

    def _match(self, graph: Graph, softmax: Node, pv: Node) -> "AttentionMatch":
        scores = walk_scores(softmax.inputs[0])
        qk = scores.qk
        rank = len(softmax.inputs[0].desc.shape)
        axis = int(softmax.attrs.get("axis", -1))
        if rank != 4 or axis % rank != rank - 1:
            raise Reject(reasons.UNSUPPORTED_ATTRIBUTE,
                         f"Softmax {softmax.name} axis={axis} over rank-{rank} scores: the kernel normalises "
                         "the last (key) axis of [B,H,S,S] scores", [softmax], [softmax.inputs[0]])
        q = walk_heads(qk.inputs[0], "Q", Q_PERM)
        k = walk_heads(qk.inputs[1], "K", K_PERM)
        v = walk_heads(pv.inputs[1], "V", Q_PERM)
        merge, out = self._merge_heads(pv)
        if not (q.heads == k.heads == v.heads) or not (q.head_dim == k.head_dim == v.head_dim):
            raise Reject(reasons.SHAPE_MISMATCH,
                         f"head count/dim differ between Q ({q.heads}x{q.head_dim}), K ({k.heads}x{k.head_dim}) "
                         f"and V ({v.heads}x{v.head_dim}); the kernel needs one [B,S,H,D] split for all three",
                         q.nodes[-1:] + k.nodes[-1:] + v.nodes[-1:], [q.projected, k.projected, v.projected])
        if v.scale != 1.0:
            raise Reject(reasons.UNSUPPORTED_VARIANT,
                         f"V is scaled by {v.scale:g}: a scale on V scales the output, not the scores, "
                         "and the kernel has no output scale", v.nodes, [v.projected])
        heads, head_dim = q.heads, q.head_dim
        projections = [walk_projection(p.projected, role) for p, role in ((q, "Q"), (k, "K"), (v, "V"))]
        if not (projections[0].x is projections[1].x is projections[2].x):
            raise Reject(reasons.UNSUPPORTED_VARIANT,
                         "cross attention: Q, K and V projections read different tensors "
                         f"({', '.join(p.x.name for p in projections)}); the kernel fuses self-attention only",
                         [p.nodes[-1] for p in projections], [p.x for p in projections])
        x = projections[0].x
        batch, seq = (tuple(x.desc.shape[:2]) + (0, 0))[:2]
        if tuple(out.desc.shape) not in ((batch, seq, heads * head_dim), (batch * seq, heads * head_dim)):
            raise Reject(reasons.SHAPE_MISMATCH,
                         f"merged output {list(out.desc.shape)} is neither [B,S,H*D] nor [B*S,H*D] of input "
                         f"{list(x.desc.shape)} with H={heads}, D={head_dim}", merge, [x, out])
        if np.dtype(x.desc.dtype).kind != "f":
            raise Reject(reasons.DTYPE_MISMATCH, f"hidden states {x.name} are {np.dtype(x.desc.dtype)}, "
                         "not a float type", [], [x])
        nodes = _unique([n for p in projections for n in p.nodes]
                        + q.nodes + k.nodes + v.nodes + [qk] + scores.nodes + [softmax, pv] + merge)
        nodes.sort(key=_position(graph))
        escaping = escaping_values(nodes, [out])
        if escaping:
            users = sorted({u.name for e in escaping for u, _ in e.uses if u not in nodes})
            raise Reject(reasons.OTHER_CONSUMERS,
                         "intermediate(s) " + ", ".join(e.name for e in escaping) + " are used outside the "
                         f"attention block ({', '.join(users) or 'graph output'}); fusing would hide them",
                         [e.producer for e in escaping], escaping)
        if creates_cycle(nodes):
            raise Reject(reasons.WILL_CREATE_CYCLE, "a path leaves the attention block and re-enters it",
                         nodes)
        return AttentionMatch(nodes, OP_TYPE, [out], x=x, projections=projections, heads=heads,
                              head_dim=head_dim, scale=scores.scale * q.scale * k.scale, scores=scores)

    @staticmethod
    def _merge_heads(pv: Node):
        """The Transpose [0,2,1,3] + Reshape [B,S,H*D] (or [B*S,H*D] straight into a Gemm, GPT-2
        dynamo) after P.V; returns (nodes, output)."""
        ctx = pv.outputs[0]
        transpose = next((u for u, _ in ctx.uses if u.op_type == "Transpose"), None)
        if transpose is None or tuple(transpose.attrs.get("perm", ())) != Q_PERM:
            raise Reject(reasons.UNSUPPORTED_VARIANT,
                         f"merge heads: the P.V MatMul {pv.name} output must go through Transpose "
                         f"perm {list(Q_PERM)}", [pv] + ([transpose] if transpose else []), [ctx])
        reshape = next((u for u, _ in transpose.outputs[0].uses if u.op_type == "Reshape"), None)
        if reshape is None or len(reshape.outputs[0].desc.shape) not in (2, 3):
            raise Reject(reasons.UNSUPPORTED_VARIANT,
                         f"merge heads: Transpose {transpose.name} must feed a Reshape to [B,S,H*D] "
                         "(or [B*S,H*D])",
                         [transpose] + ([reshape] if reshape else []), [transpose.outputs[0]])
        return [transpose, reshape], reshape.outputs[0]

    def rewrite(self, graph: Graph, match: "AttentionMatch") -> Node:
        weight, bias = _packed_qkv(graph, match.projections, match.nodes[-1].name)
        scores = match.scores
        attrs = {"num_heads": match.heads, "head_dim": match.head_dim,
                 "scale": float(match.scale), "mask_kind": scores.mask_kind}
        inputs = [match.x, weight, bias]
        if scores.mask_kind == "add":
            inputs.append(scores.mask)
        elif scores.mask_kind == "where_causal":
            attrs["mask_value"] = float(scores.mask_value)
            mask = scores.mask
            if scores.mask_inverted:   # Where(cond, fill, scores): keep where cond is False
                mask = graph.constant(f"{mask.name}/inverted", np.logical_not(mask.const))
            inputs.append(mask)
        out = match.outputs[0]
        merge = out.producer
        fused = fuse(graph, match.nodes, OP_TYPE, inputs, match.outputs, attrs, self.pass_name)
        if len(out.desc.shape) == 2:
            _rows_view(graph, fused, merge.origin, match.x.desc.shape[:2])
        return fused


@dataclass
class AttentionMatch(Match):
    """Self-attention from the hidden states `x` to the merged heads (`outputs[0]`)."""

    x: Value
    projections: list          # Projection of Q, K, V (attention_patterns.Projection)
    heads: int
    head_dim: int
    scale: float               # applied to Q.K^T: the scores' scale times Q's and K's
    scores: ScoreChain


def _rows_view(graph: Graph, fused: Node, origin: list, batch_seq) -> Node:
    """The kernel writes [B,S,H*D]; a graph that merged heads straight to [B*S,H*D] reads it
    through a Reshape (a view: no kernel, no copy) that keeps the output value and its name.
    The view stands for the exporter's own merge Reshape (`origin`), not for the kernel."""
    out = fused.outputs[0]
    fused.provenance["origin"] = [o for o in fused.origin if o not in origin]
    shape = tuple(batch_seq) + tuple(out.desc.shape[-1:])
    merged = graph.new_value(f"{fused.name}:merged", TensorDesc(out.desc.dtype, shape))
    out.producer = None
    fused.outputs[0] = merged
    merged.producer, merged.index = fused, 0
    view = Node("Reshape", [merged], [out], {"shape": list(out.desc.shape), "allowzero": 0},
                name=graph.unique_name(f"{fused.name}/rows"), provenance={"origin": list(origin)})
    return graph.add_node(view)


def _packed_qkv(graph: Graph, projections, base: str):
    """One [hidden, 3*H*D] weight and [3*H*D] bias; the graph's own constants when the
    projections already are one packed GEMM in Q|K|V order (without transB/alpha/beta)."""
    q, k, v = projections
    width = q.stop - q.start
    same = q.weight is k.weight is v.weight and q.bias is k.bias is v.bias and q.plain
    if same and [(p.start, p.stop) for p in projections] == [(0, width), (width, 2 * width), (2 * width, 3 * width)] \
            and q.weight.desc.shape[-1] == 3 * width and (q.bias is None or q.bias.const.ndim == 1):
        weight = q.weight
        bias = q.bias if q.bias is not None else graph.constant(f"{base}/bqkv", np.zeros(3 * width, q.weight.const.dtype))
        return weight, bias
    dtype = q.weight.const.dtype
    w = np.concatenate([p.matrix()[:, p.start:p.stop] for p in projections], axis=1).astype(dtype)
    b = np.concatenate([p.bias_vector()[p.start:p.stop] if p.bias is not None
                        else np.zeros(p.stop - p.start, dtype) for p in projections]).astype(dtype)
    return graph.constant(f"{base}/Wqkv", w), graph.constant(f"{base}/bqkv", b)


def _unique(nodes: list) -> list:
    seen, out = set(), []
    for node in nodes:
        if id(node) not in seen:
            seen.add(id(node))
            out.append(node)
    return out


def _position(graph: Graph):
    index = {id(n): i for i, n in enumerate(graph.nodes)}
    return lambda n: index.get(id(n), len(index))
