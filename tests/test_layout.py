"""The view algebra (fusion_passes/layout.py): a chain of view ops read as a strided layout
addresses exactly the elements numpy's views of an index array do, and refuses what is
not a strided view."""
from __future__ import annotations

import random

import numpy as np
import pytest

from fusion_passes.layout import Layout, NotAffine


def _random_chain(rng: random.Random):
    shape = [rng.choice([1, 2, 3, 4, 6]) for _ in range(rng.randint(1, 4))]
    arr = np.arange(int(np.prod(shape))).reshape(shape)
    layout = Layout.of_shape(shape)
    for _ in range(rng.randint(1, 6)):
        op, s = rng.choice(["reshape", "transpose", "slice", "select", "expand", "tile"]), arr.shape
        if op == "reshape":
            dims, m = [], arr.size
            while m > 1:
                f = rng.choice([f for f in range(2, m + 1) if m % f == 0])
                dims.append(f)
                m //= f
            rng.shuffle(dims)
            dims = dims or [1]
            arr, layout = arr.reshape(dims), layout.reshape(dims)
        elif op == "transpose":
            perm = list(range(arr.ndim))
            rng.shuffle(perm)
            arr, layout = arr.transpose(perm), layout.transpose(perm)
        elif op == "slice":
            k = rng.randrange(arr.ndim)
            a = rng.randint(0, s[k] - 1)
            b, step = rng.randint(a + 1, s[k]), rng.choice([1, 1, 2])
            index = [slice(None)] * arr.ndim
            index[k] = slice(a, b, step)
            arr, layout = arr[tuple(index)], layout.slice(k, a, b, step)
        elif op == "select" and arr.ndim > 1:
            k = rng.randrange(arr.ndim)
            i = rng.randrange(s[k])
            arr, layout = np.take(arr, i, axis=k), layout.select(k, i)
        elif op == "expand":
            target = [rng.choice([2, 3]) if d == 1 else d for d in s]
            arr, layout = np.broadcast_to(arr, target), layout.expand(target)
        elif op == "tile":
            reps = [rng.choice([1, 2]) for _ in s]
            arr, layout = np.tile(arr, reps), layout.tile(reps)
    return arr, layout


def test_random_view_chains_address_what_numpy_views_do():
    rng, checked, refused = random.Random(0), 0, 0
    for _ in range(2000):
        try:
            arr, layout = _random_chain(rng)
        except NotAffine:
            refused += 1
            continue
        assert layout.shape == arr.shape
        np.testing.assert_array_equal(layout.indices(), arr)
        checked += 1
    assert checked > 1500 and refused > 0


def test_flat_pieces_identify_equal_maps():
    """[B,S,H*D] as heads: the merge of [B,H,S,D] back is the inverse permutation."""
    heads = Layout.of_shape((2, 5, 12)).reshape((2, 5, 3, 4)).transpose((0, 2, 1, 3))
    assert heads.axis(2) == ((5, 12),) and heads.axis(3) == ((4, 1),) and heads.axis(1) == ((3, 4),)
    merged = heads.transpose((0, 2, 1, 3)).reshape((2, 5, 12))
    assert merged.flat() == Layout.of_shape((2, 5, 12)).flat()


def test_grouped_query_repeat_is_a_stride_zero_piece():
    kv = Layout.of_shape((1, 2, 5, 4))                      # [B, Hkv, S, D]
    repeated = kv.reshape((1, 2, 1, 5, 4)).expand((1, 2, 3, 5, 4)).reshape((1, 6, 5, 4))
    assert repeated.axis(1) == ((2, 20), (3, 0))
    np.testing.assert_array_equal(repeated.indices(), np.repeat(np.arange(40).reshape(1, 2, 5, 4), 3, axis=1))


@pytest.mark.parametrize("make", [
    lambda: Layout.of_shape((6, 4)).transpose((1, 0)).reshape((3, 8)),    # merges across a transpose unevenly
    lambda: Layout.of_shape((2, 3)).transpose((1, 0)).reshape((6,)).slice(0, 1, 4),
])
def test_what_is_not_a_strided_view_is_refused(make):
    with pytest.raises(NotAffine):
        make()
