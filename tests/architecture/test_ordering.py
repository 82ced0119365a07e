"""The collection order for xdist's worksteal scheduler (tests/support/ordering.py): every
worker's first slice starts with its share of the slow tests, a module's together."""
from __future__ import annotations

from tests.support.ordering import slice_sizes, spread_slow


def test_the_slices_are_worksteal_s_even_split_in_order():
    assert slice_sizes(10, 4) == [2, 2, 3, 3]
    assert slice_sizes(2016, 4) == [504, 504, 504, 504]
    assert sum(slice_sizes(7, 3)) == 7


def module(name: str) -> str:
    return name.split(":")[0]


def slow(name: str) -> bool:
    return name.startswith("slow")


ITEMS = ["slowA:1", "slowA:2", "slowB:1", "slowC:1", "slowD:1", *(f"fast:{i}" for i in range(35))]


def test_each_worker_s_slice_starts_with_slow_tests_and_a_module_stays_together():
    ordered = spread_slow(ITEMS, 4, slow, module)
    assert sorted(ordered) == sorted(ITEMS)
    starts, at = [], 0
    for size in slice_sizes(len(ordered), 4):
        starts.append(ordered[at:at + size])
        at += size
    assert [[name for name in chunk if slow(name)] for chunk in starts] == \
        [["slowA:1", "slowA:2"], ["slowB:1"], ["slowC:1"], ["slowD:1"]]
    assert all(not slow(name) for chunk in starts for name in chunk[len([n for n in chunk if slow(n)]):])
    assert [name for name in ordered if not slow(name)] == [f"fast:{i}" for i in range(35)]


def test_more_slow_tests_than_a_slice_holds_keeps_every_test_once():
    items = [f"slow{i}:1" for i in range(9)] + ["fast:1", "fast:2"]
    ordered = spread_slow(items, 4, slow, module)
    assert sorted(ordered) == sorted(items)


def test_one_process_runs_the_slow_tests_first():
    assert spread_slow(["fast:1", "slowA:1", "fast:2"], 1, slow, module) == ["slowA:1", "fast:1", "fast:2"]
