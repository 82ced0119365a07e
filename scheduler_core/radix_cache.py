"""Radix prefix cache over token ids: match, insert, lock/unlock and LRU eviction of unlocked leaves.

Each node owns the KV slots of its edge's tokens. A locked node (lock_ref > 0) and all its
ancestors are in use by a running request and cannot be evicted.
"""
from __future__ import annotations

import heapq
import itertools
from dataclasses import dataclass, field

import torch

from scheduler_core.mem import KVAllocator

_clock = itertools.count()


@dataclass(eq=False)
class TreeNode:
    key: list[int] = field(default_factory=list)
    value: torch.Tensor = field(default_factory=lambda: torch.empty(0, dtype=torch.int64))
    parent: "TreeNode | None" = None
    children: dict[int, "TreeNode"] = field(default_factory=dict)
    lock_ref: int = 0
    last_access: int = field(default_factory=lambda: next(_clock))

    def __lt__(self, other: "TreeNode") -> bool:
        return self.last_access < other.last_access


def _common_prefix(a: list[int], b: list[int]) -> int:
    n = min(len(a), len(b))
    for i in range(n):
        if a[i] != b[i]:
            return i
    return n


class RadixCache:
    def __init__(self, allocator: KVAllocator, disabled: bool = False) -> None:
        self.allocator = allocator
        self.disabled = disabled
        self.root = TreeNode()
        self.root.lock_ref = 1  # the root is never evicted
        self.evictable_size = 0
        self.protected_size = 0

    def match_prefix(self, key: list[int]) -> tuple[torch.Tensor, TreeNode]:
        """KV slots of the longest cached prefix of `key`, and the node where it ends."""
        if self.disabled or not key:
            return torch.empty(0, dtype=torch.int64), self.root
        node = self.root
        values: list[torch.Tensor] = []
        while key and key[0] in node.children:
            child = node.children[key[0]]
            child.last_access = next(_clock)
            n = _common_prefix(child.key, key)
            if n < len(child.key):
                child = self._split(child, n)
            values.append(child.value)
            node = child
            key = key[n:]
        slots = torch.cat(values) if values else torch.empty(0, dtype=torch.int64)
        return slots, node

    def insert(self, key: list[int], value: torch.Tensor) -> int:
        """Insert key→slots; returns how many leading tokens were already cached (their slots in
        `value` are duplicates the caller frees)."""
        if self.disabled:
            return 0
        node, matched = self.root, 0
        while key:
            first = key[0]
            if first not in node.children:
                child = TreeNode(key=list(key), value=value.clone(), parent=node)
                node.children[first] = child
                self.evictable_size += len(key)
                return matched
            child = node.children[first]
            child.last_access = next(_clock)
            n = _common_prefix(child.key, key)
            if n < len(child.key):
                child = self._split(child, n)
            matched += n
            node, key, value = child, key[n:], value[n:]
        return matched

    def _split(self, child: TreeNode, n: int) -> TreeNode:
        """Split child's edge after n tokens; returns the new upper node."""
        upper = TreeNode(key=child.key[:n], value=child.value[:n], parent=child.parent,
                         lock_ref=child.lock_ref, last_access=child.last_access)
        upper.children[child.key[n]] = child
        upper.parent.children[child.key[0]] = upper
        child.key, child.value, child.parent = child.key[n:], child.value[n:], upper
        return upper

    def inc_lock_ref(self, node: TreeNode) -> None:
        while node is not self.root:
            if node.lock_ref == 0:
                self.evictable_size -= len(node.key)
                self.protected_size += len(node.key)
            node.lock_ref += 1
            node = node.parent

    def dec_lock_ref(self, node: TreeNode) -> None:
        while node is not self.root:
            if node.lock_ref == 1:
                self.evictable_size += len(node.key)
                self.protected_size -= len(node.key)
            node.lock_ref -= 1
            node = node.parent

    def evict(self, num_tokens: int) -> int:
        """Free at least num_tokens slots from least recently used unlocked leaves (fewer if
        not enough are evictable). Returns how many were freed."""
        heap = [n for n in self._leaves() if n.lock_ref == 0]
        heapq.heapify(heap)
        freed = 0
        while freed < num_tokens and heap:
            leaf = heapq.heappop(heap)
            self.allocator.free(leaf.value)
            freed += len(leaf.key)
            self.evictable_size -= len(leaf.key)
            parent = leaf.parent
            del parent.children[leaf.key[0]]
            if parent is not self.root and not parent.children and parent.lock_ref == 0:
                heapq.heappush(heap, parent)
        return freed

    def _leaves(self) -> list[TreeNode]:
        out, stack = [], [self.root]
        while stack:
            node = stack.pop()
            if not node.children and node is not self.root:
                out.append(node)
            stack.extend(node.children.values())
        return out

    def total_size(self) -> int:
        total, stack = 0, [self.root]
        while stack:
            node = stack.pop()
            total += len(node.key)
            stack.extend(node.children.values())
        return total
