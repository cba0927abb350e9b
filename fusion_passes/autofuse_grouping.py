"""Autofuse's grouping: which ops may share a kernel, by TVM's FuseOps rules.

Why a separate module: the rules (kinds, iteration spaces, cycles, caps) are the part that
needs proof and tests; autofuse.py only turns the groups into kernels.

Roles (from the registry's OpKind):
- ``pointwise``: ELEMWISE and BROADCAST ops; they chain freely.
- ``reduce``: REDUCE ops; a group may end in one, and nothing in the group reads its output.
- ``view``: INJECTIVE ops that launch no task (Reshape/Squeeze/Unsqueeze/Flatten); they may sit
  inside a group, and a tensor the group reads only through views fits the group's iteration
  space when the views do.
- ``transpose``: a Transpose joins a group like a pointwise op (GE autofuse's category of that
  name; TVM's FuseOps fuses injective ops the same way): the kernel reads or writes its tensor
  through the permutation, the element count is the iteration space's, so no tensor moves
  through global memory for it alone (ConvNeXt's NHWC->NCHW permute between the second MLP
  GEMM and its layer scale + residual Add).  Every other INJECTIVE op (Concat, Slice,
  Gather...) is a boundary.
- ``tail``: an OUT_EWISE_FUSABLE op (Conv, MatMul, Gemm, pools, named fused kernels) may
  start a group and absorb the elementwise epilogue after it; it never takes a prologue.
- OPAQUE ops (and autofused kernels) never join a group.

Algorithm: nodes are visited in topological order; each fusable node tries to merge the
group of each of its producers into its own.  Before every merge the rules below are
checked, each refusal becoming a Miss with its NF code.  No cycle, proof: the groups form a
partition whose quotient graph is kept acyclic (true at the start: every group is one node
of a DAG).  Merging P into G along an edge P->G creates a cycle iff the quotient has another
path P ~> G through a third group; `_path_avoiding` searches exactly that before each
merge (NF1002 when found), so the invariant holds after every merge, and contracting the
final groups one by one never creates a cycle (a refinement of an acyclic partition of a
DAG is acyclic).  FusionPass.run re-checks every group with base.creates_cycle on the real
graph before its rewrite anyway.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Optional

import numpy as np

from codegen.registry import kernel_of
from fusion_passes import reasons
from fusion_passes.base import MISS_NODES_CAP, Miss, describe
from ge.errors import InvalidNode
from ge.ir import Graph, Node
from ge.ops.common import broadcast_shape
from ge.ops.registry import OpKind
from ge.symbolic import Dim, SymbolicDimError, provably

POINTWISE, REDUCE, VIEW, TRANSPOSE, TAIL = "pointwise", "reduce", "view", "transpose", "tail"
CATEGORIES = (POINTWISE, REDUCE, VIEW, TRANSPOSE, TAIL)
AUTOFUSED_OP = "AutofusedKernel"


def role(node: Node) -> Optional[str]:
    """The autofuse role of a node, or None for a boundary (opaque, data-moving, or held
    unfused by a named pass that a switch turned off: see base.FusionPass.run)."""
    if node.provenance.get("held_by"):
        return None
    return raw_role(node)


def raw_role(node: Node) -> Optional[str]:
    """The role from the op kind alone."""
    kernel = kernel_of(node.op_type)
    if kernel is None or node.op_type == AUTOFUSED_OP:
        return None
    kind = kernel.op.kind
    if kind in (OpKind.ELEMWISE, OpKind.BROADCAST) and len(node.outputs) == 1:
        return POINTWISE
    if kind == OpKind.REDUCE and len(node.outputs) == 1:
        return REDUCE
    if kind == OpKind.INJECTIVE and kernel.no_task and len(node.outputs) == 1:
        return VIEW
    if node.op_type == "Transpose" and len(node.outputs) == 1:
        return TRANSPOSE
    if kind == OpKind.OUT_EWISE_FUSABLE and len(node.outputs) == 1:
        return TAIL
    return None


def launches(node: Node) -> bool:
    return not kernel_of(node.op_type).no_task


def _size(shape):
    """Element count (a symbolic one for dynamic dims)."""
    if any(isinstance(d, Dim) for d in shape):
        return math.prod(shape)
    return int(np.prod(shape, dtype=np.int64))


def _fits(shape: tuple, space: tuple) -> bool:
    """A tensor fits an iteration space if it broadcasts into it, or is a view of it (same
    element count, e.g. across a Reshape).  Symbolic dims must provably fit."""
    if _size(shape) == _size(space):
        return True
    try:
        return tuple(broadcast_shape(tuple(shape), tuple(space))) == tuple(space)
    except InvalidNode:
        return False


def _viewed_fitting(node: Node, members: list, space: tuple) -> bool:
    """True when the group reads `node`'s output only through views that fit the space (a
    decoder's [B, S] mask cast, then viewed [B, 1, 1, S] and broadcast over [B, 1, S, S]):
    the kernel addresses the same elements through the view, whatever shape they had."""
    ids = {id(m) for m in members}
    readers = [user for value in node.outputs for user, _ in value.uses if id(user) in ids]
    return bool(readers) and all(role(user) == VIEW and _fits(tuple(user.outputs[0].desc.shape), space)
                                 for user in readers)


@dataclass
class Group:
    members: list                          # nodes, in graph order once finalized
    anchor: Optional[Node] = None          # the tail's OUT_EWISE_FUSABLE op
    reduce: Optional[Node] = None

    def space(self) -> tuple:
        """The group's output iteration space."""
        if self.anchor is not None:
            return tuple(self.anchor.outputs[0].desc.shape)
        if self.reduce is not None:
            return tuple(self.reduce.inputs[0].desc.shape)
        shapes = [tuple(n.outputs[0].desc.shape) for n in self.members]
        if not any(isinstance(d, Dim) for shape in shapes for d in shape):
            return max(shapes, key=_size)
        # Symbolic: a shape no other outgrows at any size (>=, as element counts that may be 0
        # tie: 32*B*S > B*S is undecided at B*S = 0, where any choice is the same kernel).
        for shape in shapes:
            if all(provably(_size(shape), ">=", _size(other)) for other in shapes):
                return shape
        raise SymbolicDimError("no member's output is provably the largest: "
                               + ", ".join(str(_size(shape)) for shape in dict.fromkeys(shapes)))


@dataclass
class Grouping:
    groups: list                           # Group, each with >= 1 member
    misses: list = field(default_factory=list)


class _Partition:
    """Union-find over nodes with member lists and quotient-graph reachability."""

    def __init__(self, nodes: list):
        self.parent = {id(n): id(n) for n in nodes}
        self.groups = {id(n): Group([n], n if role(n) == TAIL else None, n if role(n) == REDUCE else None)
                       for n in nodes}

    def find(self, node: Node) -> int:
        key = id(node)
        while self.parent[key] != key:
            self.parent[key] = self.parent[self.parent[key]]
            key = self.parent[key]
        return key

    def successors(self, gid: int) -> set:
        return {self.find(user) for n in self.groups[gid].members for v in n.outputs
                for user, _ in v.uses if id(user) in self.parent} - {gid}

    def path_avoiding(self, src: int, dst: int) -> bool:
        """True if the quotient graph has a path src ~> dst through some third group."""
        frontier = [g for g in self.successors(src) if g != dst]
        seen = set(frontier)
        while frontier:
            gid = frontier.pop()
            for nxt in self.successors(gid):
                if nxt == dst:
                    return True
                if nxt not in seen and nxt != src:
                    seen.add(nxt)
                    frontier.append(nxt)
        return False

    def union(self, a: int, b: int) -> int:
        ga, gb = self.groups.pop(a), self.groups.pop(b)
        merged = Group(ga.members + gb.members, ga.anchor or gb.anchor, ga.reduce or gb.reduce)
        self.parent[a] = b
        self.groups[b] = merged
        return b


def _check(p: Group, g: Group, consumer: Node, categories: set, max_size: int) -> Optional[tuple]:
    """(code, constraint) refusing the merge of producer group `p` into `g`, or None."""
    if p.reduce is not None:
        return (reasons.REDUCE_NOT_SINK, f"{p.reduce.op_type} {p.reduce.name} is a reduction: a reduce ends its "
                f"group, nothing in the same kernel may read its output")
    if (p.anchor is not None or g.anchor is not None) and TAIL not in categories:
        return (reasons.PASS_DISABLED, "absorbing an elementwise tail into a Conv/MatMul kernel is off "
                "(AUTOFUSE_FLAGS --autofuse_disable_pass=tail)")
    if p.anchor is not None and g.anchor is not None:
        return (reasons.MULTIPLE_ANCHORS, f"one kernel has one iteration space: two cube/anchor ops "
                f"({p.anchor.op_type} {p.anchor.name}, {g.anchor.op_type} {g.anchor.name}) cannot share an epilogue")
    anchor = p.anchor or g.anchor
    reduce = g.reduce
    if anchor is not None and reduce is not None:
        return (reasons.SHAPE_INCOMPATIBLE, f"a reduction ({reduce.op_type} {reduce.name}) changes the iteration "
                f"space of {anchor.op_type} {anchor.name}'s epilogue: it cannot end an anchored kernel")
    other = g if p.anchor is not None else p
    if anchor is not None and any(v is not None and any(v.producer is m for m in other.members)
                                  for v in anchor.inputs):
        return (reasons.NO_PROLOGUE, f"{anchor.op_type} {anchor.name} takes no prologue: its inputs "
                f"must come from outside its kernel (only the elementwise tail after it joins)")
    size = len(p.members) + len(g.members)
    if size > max_size:
        return (reasons.EXCEED_MAX_FUSION_SIZE, f"the merged group would have {size} ops, more than "
                f"--max_fusion_size={max_size}")
    merged = Group(p.members + g.members, anchor, reduce)
    try:
        space = merged.space()
    except SymbolicDimError as exc:
        return (reasons.DYNAMIC_DIM, f"the merged group's iteration space depends on dynamic dims: {exc}")
    for node in merged.members:
        if node is reduce:
            continue
        shape = tuple(node.outputs[0].desc.shape)
        if not _fits(shape, space) and not _viewed_fitting(node, merged.members, space):
            return (reasons.SHAPE_INCOMPATIBLE, f"{node.op_type} {node.name} produces {list(shape)}, which does "
                    f"not broadcast into the kernel's iteration space {list(space)}")
    return None


def _miss(code: str, constraint: str, p: Group, consumer: Node, pass_name: str) -> Miss:
    nodes = (p.members + [consumer])[-MISS_NODES_CAP:]
    edge = [v for v in consumer.inputs if v is not None and v.producer is not None
            and any(v.producer is m for m in p.members)]
    return Miss(code, pass_name, consumer.name, [(n.name, n.op_type) for n in nodes], constraint,
                describe(edge + list(consumer.outputs)))


def _opaque_misses(graph: Graph, categories: set, pass_name: str) -> list:
    """NF1005 for every boundary op standing between fusable ops: it splits a group."""
    misses = []
    for node in graph.nodes:
        if role(node) is not None:
            continue
        if node.provenance.get("held_by") and raw_role(node) is not None:
            misses.append(Miss(reasons.PASS_DISABLED, pass_name, node.name, [(node.name, node.op_type)],
                               f"kept unfused: it belongs to a pattern of {node.provenance['held_by']}, "
                               f"and a switched-off pattern stays as it was", describe(node.outputs)))
            continue
        before = next((v.producer for v in node.inputs if v is not None and v.producer is not None
                       and role(v.producer) in categories), None)
        after = next((u for v in node.outputs for u, _ in v.uses if role(u) in categories and role(u) != TAIL),
                     None)
        if before is None or after is None:
            continue
        kernel = kernel_of(node.op_type)
        kind = kernel.op.kind.name if kernel is not None else "unknown"
        misses.append(Miss(reasons.OPAQUE_OP, pass_name, node.name,
                           [(before.name, before.op_type), (node.name, node.op_type), (after.name, after.op_type)],
                           f"{node.op_type} ({kind}) is a boundary autofuse never fuses across: "
                           f"{before.op_type} {before.name} and {after.op_type} {after.name} stay in separate kernels",
                           describe(list(node.inputs) + list(node.outputs))))
    return misses


def group_nodes(graph: Graph, categories: set, max_size: int, pass_name: str) -> Grouping:
    """Partition `graph.nodes` (topologically sorted) into fusion groups."""
    part = _Partition(graph.nodes)
    misses = []
    for node in graph.nodes:
        kind = role(node)
        if kind is None or kind == TAIL:
            continue                               # boundaries take nothing; anchors take no prologue
        tried: set = set()
        for value in node.inputs:
            if value is None or value.producer is None or id(value.producer) not in part.parent:
                continue
            producer = value.producer
            prole = role(producer)
            pid, gid = part.find(producer), part.find(node)
            if pid == gid or pid in tried or prole is None:
                continue
            tried.add(pid)
            p, g = part.groups[pid], part.groups[gid]
            if kind not in categories or (prole not in categories and prole != TAIL) \
                    or (prole == TAIL and TAIL not in categories):
                off = next(c for c in (kind, prole) if c not in categories)
                misses.append(_miss(reasons.PASS_DISABLED, f"{off} fusion is off (AUTOFUSE_FLAGS "
                                    f"--autofuse_disable_pass={off})", p, node, pass_name))
                continue
            refusal = _check(p, g, node, categories, max_size)
            if refusal is None and part.path_avoiding(pid, gid):
                refusal = (reasons.WILL_CREATE_CYCLE, f"a path leaves {producer.op_type} {producer.name}'s group "
                           f"and re-enters it at {node.op_type} {node.name}: one kernel would wait for itself")
            if refusal is not None:
                misses.append(_miss(refusal[0], refusal[1], p, node, pass_name))
                continue
            part.union(pid, gid)
    order = {id(n): i for i, n in enumerate(graph.nodes)}
    groups = []
    for group in part.groups.values():
        group.members.sort(key=lambda n: order[id(n)])
        groups.append(group)
    groups.sort(key=lambda grp: order[id(grp.members[0])])
    return Grouping(groups, misses + _opaque_misses(graph, categories, pass_name))
