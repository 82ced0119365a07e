"""The order tests are collected in, for pytest-xdist's `worksteal` scheduler.

worksteal first hands each of the W workers one contiguous slice of the collection (the first
N // W tests to the first worker, and so on); an idle worker then steals the tail of the longest
queue. Putting every slow test first therefore gave them all to the first worker, which ran them
one after another while the others shared out the short tests: the run ended with that worker
alone. Here the slow tests are dealt out instead, whole modules at a time (a module's fixtures are
built once per worker), each to the slice with the fewest slow tests so far, at that slice's
start; the short tests keep their order and fill the slices. Written by hand: neither pytest nor
xdist offers an order for this scheduler.
"""
from __future__ import annotations

from itertools import islice
from typing import Callable, Sequence, TypeVar

T = TypeVar("T")


def slice_sizes(count: int, workers: int) -> list[int]:
    """The sizes of worksteal's first slices (xdist's `check_schedule`: the pending tests split
    evenly among the idle workers, in order)."""
    sizes, remaining = [], count
    for i in range(workers):
        size = remaining // (workers - i)
        sizes.append(size)
        remaining -= size
    return sizes


def spread_slow(items: Sequence[T], workers: int, is_slow: Callable[[T], bool],
                module_of: Callable[[T], str]) -> list[T]:
    """`items` reordered so that each worker's first slice starts with its share of slow tests."""
    if workers < 2:
        return sorted(items, key=lambda item: not is_slow(item))  # one process: slow ones first
    modules: dict[str, list[T]] = {}
    for item in items:
        if is_slow(item):
            modules.setdefault(module_of(item), []).append(item)
    slow_per_slice: list[list[T]] = [[] for _ in range(workers)]
    for group in sorted(modules.values(), key=len, reverse=True):
        min(slow_per_slice, key=len).extend(group)
    fast = iter([item for item in items if not is_slow(item)])
    ordered: list[T] = []
    for size, slow in zip(slice_sizes(len(items), workers), slow_per_slice):
        ordered.extend(slow)
        ordered.extend(islice(fast, max(0, size - len(slow))))
    ordered.extend(fast)  # what is left when the slow tests outnumber a slice
    return ordered
