"""The GE-like intermediate representation: values, nodes, graphs.

The IR is value-centric (after onnx-ir): every `Value` knows the node that produces it
and the ordered list of (node, input index) pairs that use it.  Nodes register themselves
as users of their inputs, so passes never edit use-lists by hand: they call
`Node.set_input`, `Graph.replace_all_uses_with` and `Graph.remove_node`.

Constants (ONNX initializers and folded results) are `Value`s with `const` set and no
producer; the .om writer turns each into a `Const` op backed by the weights partition.
"""
from __future__ import annotations

import itertools
import math
from dataclasses import dataclass
from typing import Any, Iterable, Iterator, Optional, Sequence

import numpy as np

from ge.deferred import is_deferred
from ge.errors import AtcError, InternalError
from ge.symbolic import Dim, Symbol

Shape = tuple  # a tuple of dims: ints, or ge.symbolic.Dim for sizes known only at run time


@dataclass
class TensorDesc:
    """Type of a value: element dtype, shape and layout format ("NCHW" or "ND")."""

    dtype: Optional[np.dtype] = None
    shape: Optional[Shape] = None
    format: str = "ND"

    def is_static(self) -> bool:
        return self.shape is not None and all(isinstance(d, int) and d >= 0 for d in self.shape)

    def is_dynamic(self) -> bool:
        """Some dim is a symbolic expression (known only at run time)."""
        return self.shape is not None and any(isinstance(d, Dim) for d in self.shape)

    def has_shape(self) -> bool:
        """A known rank, every dim a non-negative int or a symbolic dim."""
        return self.shape is not None and all(isinstance(d, Dim) or (isinstance(d, int) and d >= 0)
                                              for d in self.shape)

    @property
    def size(self):
        if self.shape is None:
            return 0
        if self.is_dynamic():
            return math.prod(self.shape)      # a symbolic element count
        return int(np.prod(self.shape, dtype=np.int64))

    @property
    def nbytes(self) -> int:
        return self.size * np.dtype(self.dtype).itemsize


class Value:
    """An SSA value: a graph input, a constant, or the output of one node."""

    __slots__ = ("name", "desc", "producer", "index", "uses", "_const", "graph")

    def __init__(self, name: str, desc: Optional[TensorDesc] = None, const: Optional[np.ndarray] = None):
        self.name = name
        self.desc = desc or TensorDesc()
        self.producer: Optional[Node] = None
        self.index = 0
        self.uses: list[tuple[Node, int]] = []
        self._const = None
        self.graph: Optional[Graph] = None
        if const is not None:
            self.set_const(const)

    def set_const(self, array) -> None:
        """Make this a constant: an array, or a deferred one (ge.deferred) kept as it is."""
        array = array if is_deferred(array) else np.asarray(array)
        self._const = array
        self.desc = TensorDesc(array.dtype, tuple(int(d) for d in array.shape), self.desc.format)

    @property
    def const(self) -> Optional[np.ndarray]:
        """The constant's values (None for a computed value); a deferred constant is computed
        here, once."""
        if is_deferred(self._const):
            self._const = self._const.materialize()
        return self._const

    @const.setter
    def const(self, array) -> None:
        self._const = array

    @property
    def stored_const(self):
        """The constant as stored: an array, or a deferred one not computed yet (what the
        .om writer streams without holding it)."""
        return self._const

    @property
    def is_const(self) -> bool:
        return self._const is not None

    @property
    def consumers(self) -> list["Node"]:
        """Distinct consuming nodes, in use order."""
        seen: dict[int, Node] = {}
        for node, _ in self.uses:
            seen.setdefault(id(node), node)
        return list(seen.values())

    @property
    def is_graph_output(self) -> bool:
        return self.graph is not None and id(self) in self.graph.outputs.ids

    def __repr__(self) -> str:
        return f"Value({self.name!r}, {self.desc.dtype}, {self.desc.shape})"


class Node:
    """One operator.  `op_type` is an ONNX op type in canonical form (see ARCHITECTURE.md)
    or a fused op type (e.g. ConvBNReluFusionOp).  `provenance` records the fusion pass
    that created the node and the ONNX nodes it replaced."""

    __slots__ = ("name", "op_type", "inputs", "outputs", "attrs", "provenance", "graph")

    def __init__(self, op_type: str, inputs: Sequence[Optional[Value]], outputs: Sequence[Value],
                 attrs: Optional[dict[str, Any]] = None, name: str = "",
                 provenance: Optional[dict[str, Any]] = None):
        self.name = name
        self.op_type = op_type
        self.inputs: list[Optional[Value]] = []
        self.outputs: list[Value] = []
        self.attrs: dict[str, Any] = dict(attrs or {})
        self.provenance: dict[str, Any] = dict(provenance or {})
        self.graph: Optional[Graph] = None
        for value in inputs:
            self.append_input(value)
        for i, value in enumerate(outputs):
            if value.producer is not None:
                raise InternalError(f"value {value.name} already has producer {value.producer.name}", name)
            value.producer, value.index = self, i
            self.outputs.append(value)

    def append_input(self, value: Optional[Value]) -> None:
        self.inputs.append(value)
        if value is not None:
            value.uses.append((self, len(self.inputs) - 1))

    def set_input(self, i: int, value: Optional[Value]) -> None:
        old = self.inputs[i]
        if old is not None:
            old.uses.remove((self, i))
        self.inputs[i] = value
        if value is not None:
            value.uses.append((self, i))

    def drop_inputs_from(self, start: int) -> None:
        """Remove inputs start.. (used when canonicalizing config inputs into attributes)."""
        for i in range(len(self.inputs) - 1, start - 1, -1):
            self.set_input(i, None)
            self.inputs.pop()

    def detach(self) -> None:
        """Unregister from all inputs (before removal)."""
        for i, value in enumerate(self.inputs):
            if value is not None:
                value.uses.remove((self, i))
        self.inputs = [None] * len(self.inputs)

    @property
    def origin(self) -> list[str]:
        """The ONNX node names this node stands for (itself if never fused)."""
        return list(self.provenance.get("origin", [self.name]))

    def __repr__(self) -> str:
        return f"Node({self.op_type}, {self.name!r})"


class ValueList(list):
    """`Graph.outputs`: a list that also knows the ids of its values, so a value can tell
    whether it is a graph output without scanning the list (passes ask that constantly).
    Every mutating list method refreshes `ids` (see the loop below the class)."""

    def __init__(self, values: Iterable = ()):
        super().__init__(values)
        self.ids = {id(v) for v in self}


def _refreshing(name: str):
    method = getattr(list, name)

    def mutate(self, *args):
        result = method(self, *args)
        self.ids = {id(v) for v in self}
        return result

    mutate.__name__ = name
    return mutate


for _name in ("append", "extend", "insert", "remove", "pop", "clear", "__setitem__", "__delitem__",
              "__iadd__", "__imul__"):
    setattr(ValueList, _name, _refreshing(_name))


class Graph:
    """A dataflow graph.  Nodes are kept in a list that passes may leave unsorted; call
    `topological_sort()` before anything order-dependent (the .om writer does)."""

    def __init__(self, name: str = "graph"):
        self.name = name
        self.nodes: list[Node] = []
        self.inputs: list[Value] = []
        self._outputs = ValueList()
        self.opset: int = 0
        self.properties: set[str] = set()   # what passes have established (ge.passes.contract)
        self.symbols: dict[str, Symbol] = {}   # the symbols dynamic dims are written in (ge.symbolic)
        self._names: set[str] = set()
        self._counter = itertools.count()

    @property
    def outputs(self) -> ValueList:
        return self._outputs

    @outputs.setter
    def outputs(self, values: Iterable[Value]) -> None:
        self._outputs = ValueList(values)

    # -- construction -------------------------------------------------------------
    def unique_name(self, base: str) -> str:
        name = base
        while name in self._names:
            name = f"{base}_{next(self._counter)}"
        self._names.add(name)
        return name

    def reserve_names(self, names: Iterable[str]) -> None:
        self._names.update(names)

    def new_value(self, base: str, desc: Optional[TensorDesc] = None) -> Value:
        value = Value(self.unique_name(base), desc)
        value.graph = self
        return value

    def constant(self, base: str, array: np.ndarray) -> Value:
        value = Value(self.unique_name(base), const=array if is_deferred(array) else np.asarray(array))
        value.graph = self
        return value

    def add_node(self, node: Node, before: Optional[Node] = None) -> Node:
        if not node.name:
            node.name = self.unique_name(node.op_type)
        else:
            self._names.add(node.name)
        node.graph = self
        for value in node.outputs:
            value.graph = self
            self._names.add(value.name)
        for value in node.inputs:
            if value is not None and value.graph is None:
                value.graph = self
        if before is None:
            self.nodes.append(node)
        else:
            self.nodes.insert(self.nodes.index(before), node)
        return node

    def make_node(self, op_type: str, inputs: Sequence[Optional[Value]], n_outputs: int = 1,
                  attrs: Optional[dict] = None, name: str = "", descs: Sequence[TensorDesc] = (),
                  provenance: Optional[dict] = None, before: Optional[Node] = None) -> Node:
        base = name or op_type
        outputs = [self.new_value(f"{base}:{i}", descs[i] if i < len(descs) else None)
                   for i in range(n_outputs)]
        node = Node(op_type, inputs, outputs, attrs, name=self.unique_name(base) if not name else name,
                    provenance=provenance)
        return self.add_node(node, before)

    def remove_node(self, node: Node) -> None:
        """Remove a node whose outputs are no longer used."""
        for value in node.outputs:
            if value.uses or value.is_graph_output:
                raise InternalError(f"cannot remove {node.name}: output {value.name} still used", node.name)
        node.detach()
        self.nodes.remove(node)
        node.graph = None

    def replace_all_uses_with(self, old: Value, new: Value) -> None:
        for node, i in list(old.uses):
            node.set_input(i, new)
        self.outputs = [new if v is old else v for v in self.outputs]

    def clone(self) -> "Graph":
        """An independent copy of the structure; constant arrays are shared (read-only)."""
        other = self._copy(self.name, self.nodes, self.inputs, self.outputs)
        other.opset = self.opset
        other.properties = set(self.properties)
        other.symbols = dict(self.symbols)
        other._names = set(self._names)
        return other

    def subgraph(self, nodes: Iterable[Node], name: str) -> "Graph":
        """A standalone copy of `nodes` (kept in graph order): its inputs are the non-constant
        values they read from outside, in first-use order; its outputs the values they produce
        that are read outside them or are graph outputs.  Constants are shared (read-only)."""
        chosen = {id(n) for n in nodes}
        members = [n for n in self.nodes if id(n) in chosen]
        inputs, outputs, seen = [], [], set()
        for node in members:
            for v in node.inputs:
                if v is not None and not v.is_const and (v.producer is None or id(v.producer) not in chosen) \
                        and id(v) not in seen:
                    seen.add(id(v))
                    inputs.append(v)
            for v in node.outputs:
                if v.is_graph_output or any(id(u) not in chosen for u, _ in v.uses):
                    outputs.append(v)
        other = self._copy(name, members, inputs, outputs)
        other.opset = self.opset
        other.properties = set(self.properties)
        other.symbols = dict(self.symbols)
        return other

    @staticmethod
    def _copy(name: str, nodes: Sequence[Node], inputs: Sequence[Value], outputs: Sequence[Value]) -> "Graph":
        copy_of: dict = {}

        def twin(value: Optional[Value]) -> Optional[Value]:
            if value is None:
                return None
            if id(value) not in copy_of:
                new = Value(value.name, TensorDesc(value.desc.dtype, value.desc.shape, value.desc.format))
                new.const = value.stored_const
                copy_of[id(value)] = new
            return copy_of[id(value)]

        other = Graph(name)
        other.inputs = [twin(v) for v in inputs]
        for node in nodes:
            attrs = {k: (list(v) if isinstance(v, list) else v) for k, v in node.attrs.items()}
            prov = {k: (list(v) if isinstance(v, list) else v) for k, v in node.provenance.items()}
            new = Node(node.op_type, [twin(v) for v in node.inputs], [twin(v) for v in node.outputs],
                       attrs, name=node.name, provenance=prov)
            other.add_node(new)
        other.outputs = [twin(v) for v in outputs]
        for value in copy_of.values():
            value.graph = other
        return other

    # -- queries --------------------------------------------------------------------
    def values(self) -> Iterator[Value]:
        """Every value reachable from the graph: inputs, constants, node outputs."""
        seen: set[int] = set()
        for value in self.inputs:
            seen.add(id(value))
            yield value
        for node in self.nodes:
            for value in itertools.chain(node.inputs, node.outputs):
                if value is not None and id(value) not in seen:
                    seen.add(id(value))
                    yield value

    @property
    def is_dynamic(self) -> bool:
        """Some tensor size is known only at run time (the .om is an unknown-shape model)."""
        return bool(self.symbols)

    def new_symbol(self, base: str, lo: int = 0, hi: Optional[int] = None, origin: str = "data") -> Dim:
        """A fresh symbol for a size that only a kernel's output tells (`origin` "data") or a
        model input's dynamic dim ("input"); the name is `base`, made unique."""
        name, n = base, 0
        while name in self.symbols:
            n += 1
            name = f"{base}_{n}"
        atom = Symbol(name, lo, hi, origin)
        self.symbols[name] = atom
        return Dim.of_atom(atom)

    def find_node(self, name: str) -> Optional[Node]:
        return next((n for n in self.nodes if n.name == name), None)

    def op_type_counts(self) -> dict[str, int]:
        counts: dict[str, int] = {}
        for node in self.nodes:
            counts[node.op_type] = counts.get(node.op_type, 0) + 1
        return dict(sorted(counts.items()))

    # -- order and invariants -------------------------------------------------------------
    def topological_sort(self) -> None:
        """Stable topological order (Kahn, ties broken by current position).  Raises
        E19010-style AtcError on a cycle.  A graph already in order (most are: the pass loop
        sorts after every pass, and most passes keep the order) is left as it is, which is
        what the sort would give it, found in one pass over the edges."""
        position = {id(n): i for i, n in enumerate(self.nodes)}
        if all(position.get(id(v.producer), -1) < i for i, n in enumerate(self.nodes) for v in n.inputs
               if v is not None and v.producer is not None):
            return
        indegree = {id(n): 0 for n in self.nodes}
        for node in self.nodes:
            producers = {id(v.producer) for v in node.inputs
                         if v is not None and v.producer is not None and id(v.producer) in position}
            indegree[id(node)] = len(producers)
        import heapq
        ready = [(position[id(n)], n) for n in self.nodes if indegree[id(n)] == 0]
        heapq.heapify(ready)
        order: list[Node] = []
        while ready:
            _, node = heapq.heappop(ready)
            order.append(node)
            successors = {id(u): u for v in node.outputs for u, _ in v.uses if id(u) in position}
            for succ in successors.values():
                indegree[id(succ)] -= 1
                if indegree[id(succ)] == 0:
                    heapq.heappush(ready, (position[id(succ)], succ))
        if len(order) != len(self.nodes):
            stuck = [n.name for n in self.nodes if indegree[id(n)] > 0][:5]
            raise AtcError("E16005", f"The graph has a cycle through node(s) {stuck}.",
                           "Check the model: an ONNX graph must be acyclic.")
        self.nodes = order

    def verify(self, require_types: bool = True, require_static: Optional[bool] = None) -> None:
        """Check the invariants every pass must keep; raise InternalError (E19999) on a broken one
        (not `assert`: the check must hold under `python -O` too).  With `require_types`, every
        value has a dtype and a shape; static (every dim an int) unless `require_static` is
        False -- by default, unless the graph has symbols (a dynamic-shape graph)."""
        if require_static is None:
            require_static = not self.symbols
        in_graph = {id(n) for n in self.nodes}
        defined = {id(v) for v in self.inputs}
        names: set[str] = set()
        for node in self.nodes:
            if node.graph is not self:
                _broken(f"{node.name}: graph back-pointer wrong")
            if node.name in names:
                _broken(f"duplicate node name {node.name}")
            names.add(node.name)
            for i, value in enumerate(node.inputs):
                if value is None:
                    continue
                if (node, i) not in value.uses:
                    _broken(f"{node.name} input {i} missing from uses of {value.name}")
                if value.producer is None:
                    if not (value.is_const or id(value) in defined):
                        _broken(f"{node.name} reads {value.name}, which is neither input, constant nor produced")
                else:
                    if id(value.producer) not in in_graph:
                        _broken(f"{node.name} reads {value.name} of a removed node")
                    if id(value) not in defined:
                        _broken(f"{node.name} reads {value.name} before it is produced")
            for i, value in enumerate(node.outputs):
                if not (value.producer is node and value.index == i):
                    _broken(f"{value.name}: producer link wrong")
                defined.add(id(value))
                for user, j in value.uses:
                    if id(user) not in in_graph:
                        _broken(f"{value.name} used by removed node {user.name}")
                    if user.inputs[j] is not value:
                        _broken(f"{value.name}: stale use by {user.name}[{j}]")
        for value in self.outputs:
            if not (id(value) in defined or value.is_const):
                _broken(f"graph output {value.name} is not produced")
        if require_types:
            for value in self.values():
                if value.desc.dtype is None:
                    _broken(f"{value.name} has no dtype")
                if require_static and not value.desc.is_static():
                    _broken(f"{value.name} has no static shape: {value.desc.shape}")
                if not value.desc.has_shape():
                    _broken(f"{value.name} has no shape: {value.desc.shape}")


def _broken(message: str) -> None:
    raise InternalError(f"IR invariant broken: {message}")
