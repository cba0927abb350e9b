"""What every fusion pass is: a pattern, a check that gives a reason, a rewrite.

A pass subclasses `FusionPass` and implements `match(graph, anchor)`, which returns
- `None` when the anchor does not start the pattern at all (not counted),
- a `Miss` when the structure matched but a constraint failed (counted in match_times,
  recorded with its reason for the report, `--log=debug` and the failure dumps),
- a `Match` carrying what `rewrite` needs.
`rewrite(graph, match)` builds the fused node with `fuse()` and returns it.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterable, Optional, Sequence

import numpy as np

from ge.ir import Graph, Node, Value
from fusion_passes import reasons


@dataclass
class Miss:
    """A candidate that failed a check, with everything a user needs to see why."""

    code: str                      # e.g. NF2001, see fusion_passes/reasons.py
    pass_name: str
    anchor: str                    # anchor node name
    nodes: list                    # [(name, op_type)] of the candidate
    constraint: str                # the violated constraint, in words
    tensors: dict = field(default_factory=dict)   # value name -> {"shape": [...], "dtype": "..."}

    @property
    def reason_name(self) -> str:
        return reasons.NAMES.get(self.code, "Unknown")

    def to_json(self) -> dict:
        return {"error_code": self.code, "reason": self.reason_name, "pass": self.pass_name,
                "anchor": self.anchor, "op_names": [n for n, _ in self.nodes],
                "op_types": [t for _, t in self.nodes], "constraint": self.constraint,
                "tensors": self.tensors}


@dataclass
class Match:
    """A candidate that passed every check.  `nodes` are replaced by one fused node of type
    `fused_op`; `data` holds whatever the pass's rewrite needs."""

    nodes: list
    fused_op: str
    data: dict = field(default_factory=dict)


@dataclass
class PassStats:
    pattern_name: str
    pass_name: str
    match_times: int = 0
    effect_times: int = 0
    disabled_by: str = ""
    misses: list = field(default_factory=list)
    fused_nodes: list = field(default_factory=list)    # names of the nodes it created
    fused_types: dict = field(default_factory=dict)    # fused op type -> count

    def record_effect(self, node) -> None:
        """Count one rewrite that produced `node`."""
        self.effect_times += 1
        self.fused_nodes.append(node.name)
        self.fused_types[node.op_type] = self.fused_types.get(node.op_type, 0) + 1


def describe(values: Iterable[Optional[Value]]) -> dict:
    """Shapes and dtypes of values, for a Miss."""
    out = {}
    for value in values:
        if value is not None:
            out[value.name] = {"shape": list(value.desc.shape or []),
                               "dtype": str(np.dtype(value.desc.dtype)) if value.desc.dtype is not None else "?"}
    return out


class FusionPass:
    """Base of the named fusion passes.  Subclasses set the four names and `anchor_types`."""

    pattern_name = ""          # the report's "Pattern:" line, e.g. ConvBNReLU
    pass_name = ""             # GE pass name: fusion_result.json and the switch file
    fused_ops: tuple = ()      # fused op types it can produce: GE_FUSION_DISABLE_LIST names
    anchor_types: tuple = ()   # op types where matching starts

    def match(self, graph: Graph, anchor: Node):  # -> Optional[Match | Miss]
        raise NotImplementedError

    def rewrite(self, graph: Graph, match: Match) -> Node:
        raise NotImplementedError

    # helpers for subclasses ------------------------------------------------------------
    def miss(self, code: str, anchor: Node, nodes: Sequence[Node], constraint: str,
             values: Iterable[Optional[Value]] = ()) -> Miss:
        return Miss(code, self.pass_name, anchor.name, [(n.name, n.op_type) for n in nodes],
                    constraint, describe(values))


def escaping_values(nodes: Sequence[Node], outputs: Sequence[Value]) -> list:
    """Outputs of `nodes` other than `outputs` that are used outside the group or are graph
    outputs: fusing would hide them, so their presence is a reason not to fuse."""
    members = {id(n) for n in nodes}
    keep = {id(v) for v in outputs}
    escaping = []
    for node in nodes:
        for value in node.outputs:
            if id(value) in keep:
                continue
            if value.is_graph_output or any(id(user) not in members for user, _ in value.uses):
                escaping.append(value)
    return escaping


def creates_cycle(nodes: Sequence[Node]) -> bool:
    """True if some path leaves the group and re-enters it: fusing would create a cycle."""
    members = {id(n) for n in nodes}
    frontier = [user for n in nodes for v in n.outputs for user, _ in v.uses if id(user) not in members]
    seen: set = set()
    while frontier:
        node = frontier.pop()
        if id(node) in seen:
            continue
        seen.add(id(node))
        for value in node.outputs:
            for user, _ in value.uses:
                if id(user) in members:
                    return True
                frontier.append(user)
    return False


def fuse(graph: Graph, nodes: Sequence[Node], op_type: str, inputs: Sequence[Optional[Value]],
         outputs: Sequence[Value], attrs: dict, pass_name: str, name: str = "") -> Node:
    """Replace `nodes` by one node of `op_type`.  The fused node takes over the `outputs`
    values themselves (their names, types and uses stay), and is stamped with the pass
    name and the ONNX nodes it covers."""
    assert not escaping_values(nodes, outputs), "fuse() called with escaping intermediates"
    origin: list = []
    for node in nodes:
        origin.extend(n for n in node.origin if n not in origin)
    for node in nodes:
        node.detach()
    for value in outputs:
        value.producer = None
    for node in nodes:
        graph.nodes.remove(node)
        node.graph = None
    fused = Node(op_type, list(inputs), list(outputs), attrs,
                 name=graph.unique_name(name or f"{nodes[-1].name}/{op_type}"),
                 provenance={"pass": pass_name, "origin": origin})
    graph.add_node(fused)
    return fused


def single_consumer(value: Value) -> Optional[Node]:
    """The only consumer of `value`, if it has exactly one and is not a graph output."""
    if value.is_graph_output or len(value.uses) != 1:
        return None
    return value.uses[0][0]


def producer(value: Optional[Value], *op_types: str) -> Optional[Node]:
    """The node producing `value` if its type is one of `op_types` (any type if none given)."""
    if value is None or value.producer is None:
        return None
    if op_types and value.producer.op_type not in op_types:
        return None
    return value.producer


def operands(node: Node, is_first) -> Optional[tuple]:
    """For a commutative binary node: (a, b) such that is_first(a) holds, trying both orders.
    Patterns use this instead of being written twice."""
    if len(node.inputs) != 2:
        return None
    a, b = node.inputs
    if is_first(a):
        return a, b
    if is_first(b):
        return b, a
    return None


def scalar_const(value: Optional[Value]) -> Optional[float]:
    """The float of a constant holding one element (any rank), else None."""
    if value is None or not value.is_const or value.const.size != 1:
        return None
    return float(value.const.reshape(()))
