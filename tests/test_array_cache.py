"""ge/ops/array_cache.py: a value derived from an array lives exactly as long as the array,
and a new array that happens to get a dead one's id() never sees the dead one's value."""
import gc

import numpy as np

from ge.ops.array_cache import ArrayCache


def test_a_value_is_kept_per_array_and_tag():
    cache, a, b = ArrayCache(), np.zeros(3), np.zeros(3)
    assert cache.put(a, 1, "a1") == "a1" and cache.put(a, 2, "a2") == "a2"
    assert cache.get(a, 1) == "a1" and cache.get(a, 2) == "a2"
    assert cache.get(b, 1) is None and cache.get(a, 3) is None


def test_the_entry_goes_with_the_array_and_a_reused_id_misses():
    cache = ArrayCache()
    a = np.zeros(3)
    key = id(a)
    cache.put(a, 0, "old")
    del a
    gc.collect()
    assert cache.keys() == set()
    for _ in range(1000):            # new arrays until one reuses the dead array's id
        b = np.zeros(3)
        if id(b) == key:
            break
    assert cache.get(b, 0) is None


def test_a_stale_key_whose_array_is_replaced_is_not_returned():
    cache, a = ArrayCache(), np.zeros(3)
    cache.put(a, 0, "a")
    other = np.ones(3)
    cache._entries[(id(other), 0)] = cache._entries[(id(a), 0)]     # as if `other` took a's id
    assert cache.get(other, 0) is None


def test_an_object_without_weak_references_is_not_kept():
    cache = ArrayCache()
    assert cache.put(7, 0, "v") == "v" and cache.keys() == set()
