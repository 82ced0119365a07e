"""Radix prefix cache and KV allocator: match, insert, split, lock/unlock, LRU eviction, accounting."""
from __future__ import annotations

import pytest
import torch

from scheduler_core.mem import KVAllocator, OutOfSlotsError, ReqToTokenPool
from scheduler_core.radix_cache import RadixCache


def test_allocator_alloc_free_and_exhaustion() -> None:
    alloc = KVAllocator(10)
    a = alloc.alloc(4)
    assert alloc.available() == 6 and 0 not in a.tolist()
    with pytest.raises(OutOfSlotsError):
        alloc.alloc(7)
    alloc.free(a)
    assert alloc.available() == 10


def test_req_to_token_pool_rows() -> None:
    pool = ReqToTokenPool(2, 16)
    rows = [pool.alloc(), pool.alloc()]
    with pytest.raises(OutOfSlotsError):
        pool.alloc()
    pool.free(rows[0])
    assert pool.available() == 1


def test_match_insert_split() -> None:
    alloc = KVAllocator(100)
    tree = RadixCache(alloc)
    assert tree.insert([1, 2, 3, 4], alloc.alloc(4)) == 0
    slots, node = tree.match_prefix([1, 2, 9])
    assert slots.tolist() == [1, 2] and node.key == [1, 2]  # the edge was split
    dup = alloc.alloc(5)
    assert tree.insert([1, 2, 3, 7, 8], dup) == 3
    alloc.free(dup[:3])  # the caller frees the duplicates of the cached prefix
    assert tree.evictable_size == 6 == tree.total_size()
    assert alloc.available() + tree.evictable_size == 100


def test_lock_protects_from_eviction_and_lru_order() -> None:
    alloc = KVAllocator(100)
    tree = RadixCache(alloc)
    tree.insert([1, 2, 3], alloc.alloc(3))
    tree.insert([5, 6], alloc.alloc(2))
    _, node = tree.match_prefix([1, 2, 3])
    tree.inc_lock_ref(node)
    assert tree.protected_size == 3 and tree.evictable_size == 2
    assert tree.evict(10) == 2  # only the unlocked leaf goes
    assert tree.total_size() == 3
    tree.dec_lock_ref(node)
    assert tree.evictable_size == 3 and tree.protected_size == 0
    tree.insert([7], alloc.alloc(1))
    tree.match_prefix([1, 2, 3])  # touch: [7] is now the least recently used
    assert tree.evict(1) == 1
    assert tree.match_prefix([1, 2, 3])[0].numel() == 3
    assert alloc.available() + tree.evictable_size == 100


def test_evicting_a_leaf_makes_its_parent_evictable() -> None:
    alloc = KVAllocator(100)
    tree = RadixCache(alloc)
    tree.insert([1, 2, 3, 4], alloc.alloc(4))
    tree.insert([1, 2, 5, 6], alloc.alloc(4))  # splits into [1,2] -> {[3,4], [5,6]}
    alloc.free(torch.tensor([5, 6]))  # duplicates of [1, 2]
    assert tree.evict(100) == 6
    assert tree.total_size() == 0 and alloc.available() == 100


def test_disabled_cache_matches_nothing() -> None:
    alloc = KVAllocator(10)
    tree = RadixCache(alloc, disabled=True)
    assert tree.insert([1, 2], alloc.alloc(2)) == 0
    assert tree.match_prefix([1, 2])[0].numel() == 0
