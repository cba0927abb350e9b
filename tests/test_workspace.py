"""ge/workspace.py: a buffer is reused only when nothing refers to it, the plan picks buffers
by the same best-fit rule the forward does, and kernels outside a workspace allocate as numpy."""
import gc

import numpy as np

from ge import workspace
from ge.workspace import Take, Workspace, plan_sizes


def test_a_buffer_is_reused_only_once_nothing_refers_to_it():
    ws = Workspace()
    ws.reserve([4096, 1 << 20])
    with ws.active():
        a = workspace.empty((256,), np.float32)            # best fit: the 4 KB buffer
        b = workspace.empty((100,), np.float32)            # the 4 KB one is taken: the 1 MB one
        assert not np.shares_memory(a, b)
        ws.release_held()
        view = a.reshape(16, 16)[1:]                       # a view keeps a's buffer busy
        del a
        gc.collect()
        c = workspace.empty((256,), np.float32)
        assert not np.shares_memory(c, view) and ws.grown == 1
        ws.release_held()
        del view, b, c
        d = workspace.empty((256,), np.float32)            # now free again: no new buffer
        assert ws.grown == 1 and ws.owns(d)
    assert workspace.current() is None


def test_what_a_kernel_took_stays_held_until_it_returns():
    ws = Workspace()
    ws.reserve([4096])
    with ws.active():
        workspace.empty((10,), np.float32)                 # dropped at once, but held: the kernel runs on
        workspace.empty((10,), np.float32)
        assert ws.grown == 1
        ws.release_held()
        workspace.empty((10,), np.float32)
        assert ws.grown == 1


def test_outside_a_workspace_kernels_get_plain_numpy_arrays():
    a = workspace.zeros((3, 4), np.float32)
    assert a.base is None and not a.any()
    x = np.arange(6, dtype=np.float32).reshape(2, 3).T
    assert workspace.astype(x, np.float16).dtype == np.float16
    assert workspace.contiguous(x).flags.c_contiguous


def test_conversions_in_a_workspace_give_numpys_values():
    rng = np.random.default_rng(0)
    x = (rng.standard_normal((64, 33)) * 1e5).astype(np.float32)      # some overflow float16
    ws = Workspace()
    with ws.active(), np.errstate(over="ignore"):
        got = workspace.astype(x, np.float16)
        assert ws.owns(got)
        np.testing.assert_array_equal(got, x.astype(np.float16))
        np.testing.assert_array_equal(workspace.contiguous(x.T), np.ascontiguousarray(x.T))


def test_the_plan_reuses_freed_buffers_best_fit_and_keeps_outputs_alive():
    # step 0 makes value 1 (read by step 2), step 1 value 2 (read by step 2), step 2 value 3 (graph output)
    steps = [([Take(1000), Take(400, True)], [], [1], [2], True),
             ([Take(900), Take(400, True)], [1], [2], [2], True),
             ([Take(300, True)], [1, 2], [3], [None], True)]
    made = plan_sizes(steps)
    # step 1 reuses step 0's 1000-byte scratch for its 900; step 2's output takes neither
    # live 400 (values 1, 2 are read by it) but the free 1024-byte one
    assert sorted(made) == sorted([workspace._round(1000), workspace._round(400), workspace._round(400)])


def test_an_undeclared_kernels_outputs_keep_its_inputs_buffers_alive():
    # step 1 declares nothing (a Reshape: its output may be a view of value 1)
    steps = [([Take(400, True)], [], [1], [1], True),
             ([], [1], [2], [2], False),
             ([Take(400)], [2], [3], [None], True)]
    assert len(plan_sizes(steps)) == 2            # value 1's buffer lives while value 2 does
