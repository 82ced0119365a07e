"""The memory a scheduler owns, bundled: request rows, KV slots, the KV cache and the prefix cache."""
from __future__ import annotations

from dataclasses import dataclass

import torch

from scheduler_core.mem import KVAllocator, OutOfSlotsError, ReqToTokenPool
from scheduler_core.model.llama import KVCache
from scheduler_core.radix_cache import RadixCache


class InvariantError(AssertionError):
    """The KV slot accounting does not add up."""


@dataclass
class Pools:
    req_to_token: ReqToTokenPool
    allocator: KVAllocator
    kv_cache: KVCache
    tree: RadixCache

    def alloc_tokens(self, n: int) -> torch.Tensor:
        """n KV slots, evicting unlocked prefix-cache leaves first if needed."""
        short = n - self.allocator.available()
        if short > 0:
            self.tree.evict(short)
        if n > self.allocator.available():
            raise OutOfSlotsError(f"need {n} KV slots, {self.allocator.available()} free after eviction")
        return self.allocator.alloc(n)

    def can_alloc(self, n: int) -> bool:
        return n <= self.allocator.available() + self.tree.evictable_size

    def check_idle_invariant(self) -> None:
        """With no request in flight: available + evictable + in use (locked) = total, nothing locked,
        every request row free, and the tree's own count agrees."""
        available = self.allocator.available()
        evictable = self.tree.evictable_size
        in_use = self.tree.protected_size
        total = self.allocator.size
        if available + evictable + in_use != total:
            raise InvariantError(f"KV slots leaked: available {available} + evictable {evictable} "
                                 f"+ in use {in_use} != total {total}")
        if in_use != 0:
            raise InvariantError(f"{in_use} KV slots still locked while idle")
        if self.tree.total_size() != evictable:
            raise InvariantError(f"tree holds {self.tree.total_size()} tokens, accounted {evictable}")
        if self.req_to_token.available() != self.req_to_token.size:
            raise InvariantError(f"{self.req_to_token.size - self.req_to_token.available()} request rows not freed")
        free = self.allocator._free
        if free.numel() != torch.unique(free).numel():
            raise InvariantError("a KV slot was freed twice")
