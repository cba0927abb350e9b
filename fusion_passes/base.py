"""What every fusion pass is: a pattern, a check that gives a reason, a rewrite -- driven by
the one pass contract (`ge.passes.contract.GraphPass`).

A pass subclasses `FusionPass` and implements `match(graph, anchor)`, which returns
- `None` when the anchor does not start the pattern at all (not counted),
- a `Miss` when the structure matched but a constraint failed (counted in match_times,
  recorded with its reason for the report, `--log=debug` and the failure dumps); helpers
  deep inside a pattern raise `Reject` instead, which `candidates` turns into the same
  Miss for the anchor -- one way to fail, with an NF code, whoever finds the problem,
- a `Match` (the pass's own subclass, with typed fields) carrying what `rewrite` needs,
and `rewrite(graph, match)`, which builds the fused node with `fuse()` and returns it.
A pass never checks escaping intermediates or cycles itself: `run` does that for every
match (`refusal`).
`FusionPass.run(graph)` is the loop every fusion shares: it visits the candidates, records
misses, applies the switches (a switched-off match is held, not rewritten), refuses a match
whose rewrite would hide an intermediate or create a cycle, rewrites the rest and returns a
`FusionResult`.  A pass whose candidates are not anchored on single nodes (autofuse)
overrides `candidates` instead of `match`.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterable, Iterator, NamedTuple, Optional, Sequence, Union

import numpy as np

from fusion_passes import reasons
from fusion_passes.switches import FusionSwitches
from ge.errors import InternalError
from ge.ir import Graph, Node, Value
from ge.passes.contract import CANONICAL, TYPED, GraphPass, PassResult
from ge.symbolic import SymbolicDimError

MISS_NODES_CAP = 16        # a Miss lists at most this many op names


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


class Reject(Exception):
    """A constraint failed somewhere inside a pattern: the NF code, the check in words, the
    nodes and values involved.  Raised by pattern helpers; the pass records it as a Miss."""

    def __init__(self, code: str, constraint: str, nodes: Sequence[Node] = (), values: Iterable = ()):
        super().__init__(constraint)
        self.code, self.constraint = code, constraint
        self.nodes, self.values = list(nodes), list(values)


@dataclass
class Match:
    """A candidate that passed every check of its pass.  `nodes` are replaced by one fused
    node of type `fused_op`, which takes over the `outputs` values (names, types and uses
    stay).  Each pass subclasses it with the typed fields its rewrite needs."""

    nodes: list
    fused_op: str
    outputs: list
    anchor_node: Optional[Node] = field(default=None, init=False, repr=False)   # set by `candidates`


@dataclass
class FusionResult(PassResult):
    """What a fusion pass did: GE's match_times/effect_times (fusion_result.json), why it was
    off, every miss with its reason, and the nodes it created.  `changes` counts rewrites."""

    pattern_name: str = ""
    match_times: int = 0           # every candidate: fused, refused by a check, or held by a switch
    held: int = 0                  # candidates a switch kept unfused
    disabled_by: str = ""
    misses: list = field(default_factory=list)
    fused_nodes: list = field(default_factory=list)    # names of the nodes it created
    fused_types: dict = field(default_factory=dict)    # fused op type -> count
    symbolic_matches: int = 0     # matches checked on symbolic (dynamic) dims, rewritten or not

    @property
    def effect_times(self) -> int:
        return self.changes

    @property
    def rejected(self) -> int:
        """Candidates a check refused (each has a Miss; `misses` may also explain non-candidates)."""
        return self.match_times - self.changes - self.held

    def record_effect(self, node) -> None:
        """Count one rewrite that produced `node`."""
        self.changes += 1
        self.fused_nodes.append(node.name)
        self.fused_types[node.op_type] = self.fused_types.get(node.op_type, 0) + 1


def describe(values: Iterable[Optional[Value]]) -> dict:
    """Shapes and dtypes of values, for a Miss."""
    out = {}
    for value in values:
        if value is not None:
            out[value.name] = {"shape": [d if isinstance(d, int) else str(d) for d in (value.desc.shape or [])],
                               "dtype": str(np.dtype(value.desc.dtype)) if value.desc.dtype is not None else "?"}
            if value.desc.is_dynamic():
                out[value.name]["dynamic"] = True
    return out


class FusionPass(GraphPass):
    """Base of the fusion passes.  Subclasses set the four names and `anchor_types` and
    implement `match` and `rewrite`; `switches` say which fused ops the user switched off."""

    pattern_name = ""          # the report's "Pattern:" line, e.g. ConvBNReLU
    pass_name = ""             # GE pass name: fusion_result.json and the switch file
    fused_ops: tuple = ()      # fused op types it can produce: GE_FUSION_DISABLE_LIST names
    anchor_types: tuple = ()   # op types where matching starts
    requires = frozenset({TYPED, CANONICAL})

    def __init__(self, switches: Optional[FusionSwitches] = None):
        self.switches = switches if switches is not None else FusionSwitches()

    @property
    def name(self) -> str:
        return self.pass_name

    def match(self, graph: Graph, anchor: Node) -> Union[Match, "Miss", None]:
        raise NotImplementedError

    def rewrite(self, graph: Graph, match: Match) -> Node:
        raise NotImplementedError

    def candidates(self, graph: Graph, result: FusionResult) -> Iterator[Union[Match, "Miss"]]:
        """Every candidate in `graph`, each matched on the graph as earlier rewrites left it.
        A pass may also record misses that are not candidates in `result.misses`."""
        for anchor in list(graph.nodes):
            if anchor.graph is not graph or anchor.op_type not in self.anchor_types:
                continue
            try:
                found = self.match(graph, anchor)
            except Reject as err:
                found = self.miss(err.code, anchor, [anchor] + [n for n in err.nodes if n is not anchor],
                                  err.constraint, err.values)
            except SymbolicDimError as exc:    # a check the dynamic dims' ranges do not decide
                found = self.miss(reasons.DYNAMIC_DIM, anchor, [anchor], f"a check depends on a dynamic dim: {exc}",
                                  list(anchor.inputs) + list(anchor.outputs))
            if isinstance(found, Match):
                found.anchor_node = anchor
            if found is not None:
                yield found

    def disabled_by(self) -> str:
        """Why the pass itself is off (besides the switches), or ""."""
        return ""

    def run(self, graph: Graph) -> FusionResult:
        result = FusionResult(self.pass_name, pattern_name=self.pattern_name)
        if not self.switches.pass_enabled(self.pass_name):
            result.disabled_by = "--fusion_switch_file"
        for found in self.candidates(graph, result):
            result.match_times += 1
            if _on_dynamic_dims(found, graph):
                result.symbolic_matches += 1
            if isinstance(found, Miss):
                result.misses.append(found)
                continue
            why = self.disabled_by() or self.switches.why_disabled(self.pass_name, found.fused_op)
            if why:
                result.disabled_by = why
                result.held += 1
                for node in found.nodes:    # later passes (autofuse) leave a switched-off pattern as it was
                    node.provenance.setdefault("held_by", f"{self.pass_name} ({why})")
                continue
            refusal = self.refusal(found)
            if refusal is not None:
                result.misses.append(refusal)
                continue
            try:
                fused = self.rewrite(graph, found)
            except SymbolicDimError as exc:    # raised before the rewrite touched the graph
                result.misses.append(self._refuse(reasons.DYNAMIC_DIM, found, "the fused kernel needs a size "
                                                  f"known only at run time: {exc}", found.outputs))
                continue
            result.record_effect(fused)
        return result

    def refusal(self, match: Match) -> Optional["Miss"]:
        """The checks every rewrite needs, whatever the pattern: no intermediate may be read
        outside the match, and no path may leave the match and re-enter it."""
        escaping = escaping_values(match.nodes, match.outputs)
        if escaping:
            members = {id(n) for n in match.nodes}
            readers = sorted({u.name for v in escaping for u, _ in v.uses if id(u) not in members})
            return self._refuse(reasons.OTHER_CONSUMERS, match, f"intermediate(s) {[v.name for v in escaping]} "
                                f"are used outside the pattern (by {', '.join(readers) or 'the graph outputs'}); "
                                "fusing would hide them", escaping)
        if creates_cycle(match.nodes):
            return self._refuse(reasons.WILL_CREATE_CYCLE, match, "a path leaves the group and re-enters it", [])
        return None

    def _refuse(self, code: str, match: Match, constraint: str, values) -> "Miss":
        anchor = match.anchor_node if match.anchor_node is not None else match.nodes[-1]
        ordered = [anchor] + [n for n in match.nodes if n is not anchor]
        nodes = [(n.name, n.op_type) for n in ordered][:MISS_NODES_CAP]
        return Miss(code, self.pass_name, anchor.name, nodes, constraint, describe(values))

    # helpers for subclasses ------------------------------------------------------------
    def miss(self, code: str, anchor: Node, nodes: Sequence[Node], constraint: str,
             values: Iterable[Optional[Value]] = ()) -> "Miss":
        return Miss(code, self.pass_name, anchor.name, [(n.name, n.op_type) for n in nodes][:MISS_NODES_CAP],
                    constraint, describe(values))


def _on_dynamic_dims(found, graph: Graph) -> bool:
    """Whether a candidate touches a tensor with a symbolic dim (its checks ran on symbols)."""
    if not graph.is_dynamic:
        return False
    if isinstance(found, Miss):
        return any(t.get("dynamic") for t in found.tensors.values())
    return any(v is not None and v.desc.is_dynamic() for n in found.nodes for v in list(n.inputs) + n.outputs)


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
    escaping = escaping_values(nodes, outputs)
    if escaping:
        raise InternalError(f"{pass_name}: fuse() would hide intermediate(s) {[v.name for v in escaping]} "
                            "that are read outside the pattern", nodes[-1].name)
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


class Operands(NamedTuple):
    first: Value     # the operand that passed the test
    other: Value


def operands(node: Node, is_first) -> Optional[Operands]:
    """For a commutative binary node: its operands with `first` the one is_first accepts,
    trying both orders.  Patterns use this instead of being written twice."""
    if len(node.inputs) != 2:
        return None
    a, b = node.inputs
    if is_first(a):
        return Operands(a, b)
    if is_first(b):
        return Operands(b, a)
    return None


def scalar_const(value: Optional[Value]) -> Optional[float]:
    """The float of a constant holding one element (any rank), else None."""
    if value is None or not value.is_const or value.const.size != 1:
        return None
    return float(value.const.reshape(()))
