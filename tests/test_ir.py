"""IR invariants: use-lists, replace_all_uses_with, removal, topological order, clone."""
import numpy as np
import pytest

import os
import subprocess
import sys

from ge.errors import AtcError, InternalError
from ge.ir import Graph, TensorDesc


def _chain():
    g = Graph("g")
    x = g.new_value("x", TensorDesc(np.dtype(np.float32), (2, 3)))
    g.inputs.append(x)
    a = g.make_node("Relu", [x], descs=[TensorDesc(np.dtype(np.float32), (2, 3))])
    b = g.make_node("Neg", [a.outputs[0]], descs=[TensorDesc(np.dtype(np.float32), (2, 3))])
    g.outputs.append(b.outputs[0])
    return g, x, a, b


def test_uses_follow_set_input_and_replace():
    g, x, a, b = _chain()
    assert x.uses == [(a, 0)] and a.outputs[0].uses == [(b, 0)]
    g.replace_all_uses_with(a.outputs[0], x)
    assert x.uses == [(a, 0), (b, 0)] and a.outputs[0].uses == []
    g.remove_node(a)
    assert x.uses == [(b, 0)]
    g.verify()


def test_remove_used_node_refused():
    g, x, a, b = _chain()
    with pytest.raises(InternalError):
        g.remove_node(a)


def test_topological_sort_and_cycle():
    g, x, a, b = _chain()
    g.nodes.reverse()
    g.topological_sort()
    assert g.nodes == [a, b]
    a.set_input(0, b.outputs[0])
    with pytest.raises(AtcError) as err:
        g.topological_sort()
    assert err.value.code == "E16005"


def _kahn(nodes):
    """The sort's definition, written out: Kahn's algorithm, ties broken by position."""
    position = {id(n): i for i, n in enumerate(nodes)}
    pending = {id(n): {id(v.producer) for v in n.inputs if v is not None and v.producer is not None
                       and id(v.producer) in position} for n in nodes}
    order = []
    while len(order) < len(nodes):
        ready = [n for n in nodes if n not in order and not pending[id(n)] - {id(m) for m in order}]
        order.append(min(ready, key=lambda n: position[id(n)]))
    return order


@pytest.mark.parametrize("seed", range(20))
def test_topological_sort_is_kahn_by_position_and_keeps_a_sorted_graph(seed):
    """Random DAGs in a shuffled order: the sort gives Kahn's order (ties by position); on a
    graph already in order it changes nothing, including a self-loop it must still refuse."""
    rng = np.random.default_rng(seed)
    g = Graph("g")
    f32 = TensorDesc(np.dtype(np.float32), (1,))
    x = g.new_value("x", f32)
    g.inputs.append(x)
    values, nodes = [x], []
    for _ in range(12):
        picks = rng.choice(len(values), size=int(rng.integers(1, 3)), replace=True)
        node = g.make_node("Sum", [values[int(i)] for i in picks], descs=[f32])
        nodes.append(node)
        values.append(node.outputs[0])
    g.outputs.append(values[-1])
    shuffled = [nodes[int(i)] for i in rng.permutation(len(nodes))]
    g.nodes = list(shuffled)
    want = _kahn(shuffled)
    g.topological_sort()
    assert g.nodes == want
    g.verify()
    before = list(g.nodes)
    g.topological_sort()
    assert g.nodes == before
    last = g.nodes[-1]
    last.set_input(0, last.outputs[0])
    with pytest.raises(AtcError):
        g.topological_sort()


def test_verify_catches_stale_use():
    g, x, a, b = _chain()
    b.inputs[0] = x   # edited by hand: the use-list no longer agrees
    with pytest.raises(InternalError) as err:
        g.verify()
    assert err.value.code == "E19999" and "stale use" in err.value.message


_UNDER_O = """
import numpy as np
from ge.errors import InternalError
from ge.ir import Graph, TensorDesc
from fusion_passes.base import fuse
assert False, "python -O strips this assert"
g = Graph("g")
x = g.new_value("x", TensorDesc(np.dtype(np.float32), (2,)))
g.inputs.append(x)
a = g.make_node("Relu", [x], descs=[TensorDesc(np.dtype(np.float32), (2,))])
b = g.make_node("Neg", [a.outputs[0]], descs=[TensorDesc(np.dtype(np.float32), (2,))])
g.outputs = [b.outputs[0], a.outputs[0]]
caught = []
b.inputs[0] = x
try:
    g.verify()
except InternalError as err:
    caught.append(err.code)
b.inputs[0] = a.outputs[0]
try:                    # Relu's output is a graph output: fusing would hide it
    fuse(g, [a, b], "ReluNeg", [x], [b.outputs[0]], {}, "test")
except InternalError as err:
    caught.append(err.code)
print(" ".join(caught))
"""


def test_structural_checks_survive_python_O():
    """The checks that guard the IR and fuse() are raises, not asserts: -O keeps them."""
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    proc = subprocess.run([sys.executable, "-O", "-c", _UNDER_O], cwd=root, capture_output=True, text=True,
                          env=dict(os.environ, PYTHONPATH=root))
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["E19999", "E19999"]


def test_clone_is_independent_and_shares_constants():
    g, x, a, b = _chain()
    w = g.constant("w", np.ones((2, 3), np.float32))
    b.append_input(w)
    c = g.clone()
    c.verify()
    assert [n.op_type for n in c.nodes] == ["Relu", "Neg"]
    assert c.nodes[1].inputs[1].const is w.const
    c.nodes[1].set_input(1, None)
    assert b.inputs[1] is w and w.uses == [(b, 1)]


def test_clone_of_a_long_chain_does_not_recurse():
    g = Graph("g")
    v = g.new_value("x", TensorDesc(np.dtype(np.float32), (1,)))
    g.inputs.append(v)
    for _ in range(5000):
        v = g.make_node("Relu", [v], descs=[TensorDesc(np.dtype(np.float32), (1,))]).outputs[0]
    g.outputs.append(v)
    assert len(g.clone().nodes) == 5000
