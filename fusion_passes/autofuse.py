"""AutoFusePass: fuse what the named passes left -- elementwise/broadcast chains, a reduce at
their end, and the elementwise tail of a Conv/MatMul kernel -- into AutofusedKernel nodes.

Why: real models are full of mask arithmetic, SiLU and squeeze-excite chains and residual
adds that no named pattern covers; each costs a kernel launch and a global-memory round trip.
The grouping rules live in autofuse_grouping.py; this module reads AUTOFUSE_FLAGS, turns
each group into one kernel node.

AUTOFUSE_FLAGS (read when the pass runs; "--k=v" items separated by ";"):
  --enable_autofuse=true|false      default true; false leaves the graph unfused
  --autofuse_enable_pass=a,b        categories to switch on (all five are on by default)
  --autofuse_disable_pass=a,b       categories to switch off
  --max_fusion_size=N               ops per group, default 64 (NF1004 beyond)
Categories: pointwise (elementwise/broadcast chains), reduce (a reduce ending a chain),
view (Reshape/Squeeze/Unsqueeze/Flatten inside a group), transpose (a Transpose inside a
group: read or written through its permutation), tail (Conv/MatMul/fused kernel absorbs the
elementwise ops after it).  GE's other names (concat, slice, gather, split) are accepted but
fuse nothing here: those ops stay boundaries (a warning says so).

Kernel naming: node attr ``kernel_name`` = ``autofused_<op>_<op>..._<hash8>`` (lower-cased
op types in topological order, at most NAME_OPS of them, then ``_xN`` for the rest);
hash8 = sha256 of the sub-graph JSON, which holds op types, attrs, internal edges and
input/output types but no node names -- identical blocks share it, runs reproduce it.
The node name is the kernel name made unique in the graph.
"""
from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass, field
from typing import Optional, Union

from codegen.fused.autofused import OP_TYPE, decode_subgraph, encode_subgraph
from fusion_passes import autofuse_grouping as grouping
from fusion_passes import reasons
from fusion_passes.base import MISS_NODES_CAP, FusionPass, FusionResult, Match, Miss, describe, fuse
from fusion_passes.switches import FusionSwitches, parse_env_flags
from ge.errors import AtcError
from ge.ir import Graph, Node, Value
from ge.ops.registry import TensorType

FLAGS_ENV = "AUTOFUSE_FLAGS"
DEFAULT_MAX_FUSION_SIZE = 64
NAME_OPS = 6
GE_ONLY_CATEGORIES = ("concat", "slice", "gather", "split")
_KNOWN_KEYS = ("enable_autofuse", "autofuse_enable_pass", "autofuse_disable_pass", "max_fusion_size")


@dataclass
class AutofuseFlags:
    enabled: bool = True
    categories: set = field(default_factory=lambda: set(grouping.CATEGORIES))
    max_fusion_size: int = DEFAULT_MAX_FUSION_SIZE
    warnings: list = field(default_factory=list)

    @classmethod
    def parse(cls, text: str) -> "AutofuseFlags":
        """Parse an AUTOFUSE_FLAGS string; bad values raise AtcError E10001."""
        raw = parse_env_flags(text)
        flags = cls()
        for key in raw:
            if key not in _KNOWN_KEYS:
                flags.warnings.append(f"{FLAGS_ENV} option [--{key}] is not an autofuse option; valid: "
                                      f"{', '.join('--' + k for k in _KNOWN_KEYS)}.")
        if "enable_autofuse" in raw:
            value = raw["enable_autofuse"].lower()
            if value not in ("true", "false"):
                raise _bad(f"--enable_autofuse={raw['enable_autofuse']}", "it must be true or false.",
                           "Write --enable_autofuse=true or --enable_autofuse=false.")
            flags.enabled = value == "true"
        if "max_fusion_size" in raw:
            text_n = raw["max_fusion_size"]
            if not (text_n.isascii() and text_n.isdigit()) or int(text_n) < 1:   # isdigit alone takes "²"
                raise _bad(f"--max_fusion_size={text_n}", "it must be a positive integer.",
                           "Write e.g. --max_fusion_size=64.")
            flags.max_fusion_size = int(text_n)
        for key, add in (("autofuse_enable_pass", True), ("autofuse_disable_pass", False)):
            for name in filter(None, (n.strip().lower() for n in raw.get(key, "").split(","))):
                if name in grouping.CATEGORIES:
                    (flags.categories.add if add else flags.categories.discard)(name)
                elif name in GE_ONLY_CATEGORIES:
                    if add:
                        flags.warnings.append(f"{FLAGS_ENV} --{key}={name}: atc_py's autofuse does not fuse "
                                              f"{name}; those ops stay kernel boundaries.")
                else:
                    flags.warnings.append(f"{FLAGS_ENV} --{key} names unknown category [{name}]; valid: "
                                          f"{', '.join(grouping.CATEGORIES + GE_ONLY_CATEGORIES)}.")
        return flags

    @classmethod
    def from_env(cls) -> "AutofuseFlags":
        return cls.parse(os.environ.get(FLAGS_ENV, ""))


def _bad(value: str, reason: str, solution: str) -> AtcError:
    return AtcError("E10001", f"Value [{value}] in environment variable [{FLAGS_ENV}] is invalid. Reason: {reason}",
                    solution)


# -- one group -> one kernel node ---------------------------------------------------------

def _tt(value: Value) -> TensorType:
    return TensorType(value.desc.dtype, tuple(value.desc.shape))


def kernel_io(members: list) -> tuple:
    """(inputs, outputs) of the kernel: external values in first-use order; member outputs
    used outside the group or graph outputs, in member order."""
    inside = {id(n) for n in members}
    inputs, seen = [], set()
    for node in members:
        for v in node.inputs:
            if v is not None and (v.producer is None or id(v.producer) not in inside) and id(v) not in seen:
                seen.add(id(v))
                inputs.append(v)
    outputs = [v for node in members for v in node.outputs
               if v.is_graph_output or any(id(u) not in inside for u, _ in v.uses)]
    return inputs, outputs


def subgraph_of(members: list, inputs: list, outputs: list) -> str:
    position = {id(n): i for i, n in enumerate(members)}
    slot = {id(v): k for k, v in enumerate(inputs)}

    def ref(v: Optional[Value]):
        if v is None:
            return None
        if v.producer is not None and id(v.producer) in position:
            return ("o", position[id(v.producer)], v.index)
        return ("i", slot[id(v)])

    ops = [(n.op_type, n.attrs, [ref(v) for v in n.inputs], [_tt(v) for v in n.outputs]) for n in members]
    return encode_subgraph([_tt(v) for v in inputs], ops, [ref(v) for v in outputs])


def kernel_name(members: list, subgraph: str) -> tuple:
    """(name, hash8): autofused_<op>_..._<hash8>, stable and free of node names."""
    digest = hashlib.sha256(subgraph.encode("utf-8")).hexdigest()[:8]
    ops = [n.op_type.lower() for n in members]
    shown = ops[:NAME_OPS] + ([f"x{len(ops) - NAME_OPS}"] if len(ops) > NAME_OPS else [])
    return "autofused_" + "_".join(shown + [digest]), digest


@dataclass
class GroupMatch(Match):
    """One autofuse group ready to become a kernel: its JSON sub-graph, kernel name and
    inputs (`outputs` are the member outputs read outside the group)."""

    inputs: list
    subgraph: str
    kernel_name: str
    digest: str
    anchor: str          # op type of the tail's Conv/MatMul/fused kernel, or ""


class AutoFusePass(FusionPass):
    """Generic fusion, last in the pipeline.  Its candidates are the groups autofuse_grouping
    finds (not single anchors): match_times = candidate groups (>= 2 launching ops),
    effect_times = groups fused, misses = every refused merge with its NF code."""

    pattern_name = "AutoFuse"
    pass_name = "AutoFusePass"
    fused_ops = (OP_TYPE,)
    anchor_types = ()

    def __init__(self, switches: Optional[FusionSwitches] = None,
                 flags: Union[AutofuseFlags, str, None] = None):
        super().__init__(switches)
        self.flags = AutofuseFlags.parse(flags) if isinstance(flags, str) else flags

    def current_flags(self) -> AutofuseFlags:
        return self.flags if self.flags is not None else AutofuseFlags.from_env()

    def disabled_by(self) -> str:
        return "" if self.current_flags().enabled else f"{FLAGS_ENV} --enable_autofuse=false"

    def candidates(self, graph: Graph, result: FusionResult):
        flags = self.current_flags()
        self.switches.warnings.extend(w for w in flags.warnings if w not in self.switches.warnings)
        graph.topological_sort()
        found = grouping.group_nodes(graph, flags.categories, flags.max_fusion_size, self.pass_name)
        result.misses.extend(found.misses)
        for group in found.groups:
            if sum(grouping.launches(n) for n in group.members) < 2:
                continue
            if group.anchor is not None and not any(grouping.role(n) in (grouping.POINTWISE, grouping.REDUCE)
                                                    for n in group.members):
                result.misses.append(self._permutation_only(group))
                continue
            yield self._group_match(group.members)

    def _permutation_only(self, group) -> Miss:
        """An anchored group whose epilogue is only a permutation stays as it was: the anchor's
        own pass owns its permuted stores (a conv block's, the attention kernel's head merge),
        and a named kernel keeps its identity unless elementwise work joins it."""
        anchor = group.anchor
        moved = [n for n in group.members if n is not anchor and grouping.launches(n)]
        return Miss(reasons.UNSUPPORTED_VARIANT, self.pass_name, anchor.name,
                    [(n.name, n.op_type) for n in group.members][:MISS_NODES_CAP],
                    f"only a permutation ({', '.join(f'{n.op_type} {n.name}' for n in moved)}) follows "
                    f"{anchor.op_type} {anchor.name}: an anchored kernel takes a Transpose only with "
                    "elementwise work after it", describe(list(anchor.outputs)))

    def _group_match(self, members: list):
        inputs, outputs = kernel_io(members)
        try:
            subgraph = subgraph_of(members, inputs, outputs)
        except TypeError as exc:       # an attr the JSON sub-graph cannot carry: leave the group alone
            return Miss(reasons.UNKNOWN, self.pass_name, members[-1].name,
                        [(n.name, n.op_type) for n in members][:MISS_NODES_CAP],
                        f"the group's attributes cannot be stored in the kernel: {exc}", {})
        if not decode_subgraph(subgraph).bindable():
            return Miss(reasons.DYNAMIC_DIM, self.pass_name, members[-1].name,
                        [(n.name, n.op_type) for n in members][:MISS_NODES_CAP],
                        "the group's dynamic dims cannot all be told from its inputs' shapes when it runs", {})
        name, digest = kernel_name(members, subgraph)
        anchor = next((n.op_type for n in members if grouping.role(n) == grouping.TAIL), "")
        return GroupMatch(members, OP_TYPE, outputs, inputs, subgraph, name, digest, anchor)

    def rewrite(self, graph: Graph, match: GroupMatch) -> Node:
        attrs = {"subgraph": match.subgraph, "kernel_name": match.kernel_name, "topology_hash": match.digest,
                 "member_ops": [n.op_type for n in match.nodes], "anchor": match.anchor}
        return fuse(graph, match.nodes, OP_TYPE, match.inputs, match.outputs, attrs, self.pass_name,
                    name=match.kernel_name)
