"""Admission: waiting-queue order (FCFS or longest prefix match) and the prefill adder, which fills one
extend batch under a token budget, chunks long prompts and reserves room for future decode tokens."""
from __future__ import annotations

from dataclasses import dataclass, field

from scheduler_core.batch import Req
from scheduler_core.pools import Pools

# Future decode tokens reserved per request are clipped so one huge max_new_tokens cannot block admission.
CLIP_MAX_NEW_TOKENS = 4096
POLICIES = ("fcfs", "lpm", "priority")


def order_waiting(queue: list[Req], policy: str, pools: Pools) -> list[Req]:
    """Return the queue in admission order. LPM puts the longest cached prefix first (FCFS on ties);
    priority puts the highest ``Req.priority`` first (FCFS on ties, as upstream's default order)."""
    if policy == "priority":
        return sorted(queue, key=lambda r: -r.priority)
    if policy == "fcfs" or pools.tree.disabled:
        return list(queue)
    if policy != "lpm":
        raise ValueError(f"unknown schedule policy {policy!r}; expected one of {', '.join(POLICIES)}")
    lengths = {id(r): pools.tree.match_prefix(r.fill_ids[:-1])[0].numel() for r in queue}
    return sorted(queue, key=lambda r: -lengths[id(r)])


@dataclass
class PrefillAdder:
    pools: Pools
    running: list[Req]
    new_token_ratio: float
    max_prefill_tokens: int
    chunk_size: int | None  # None: no chunking
    max_new_reqs: int
    decode_reserve: int = 0  # KV slots the running requests' decode tokens take in this same step
    can_run: list[Req] = field(default_factory=list)
    chunked: Req | None = None
    used_tokens: int = 0  # extend tokens in this batch
    reserved: int = 0  # KV slots promised to admitted requests

    def __post_init__(self) -> None:
        self.reserved = sum(self._future(r) for r in self.running) + self.decode_reserve

    def _future(self, req: Req) -> int:
        return int(min(req.remaining_new_tokens(), CLIP_MAX_NEW_TOKENS) * self.new_token_ratio)

    def _room(self) -> int:
        return self.pools.allocator.available() + self.pools.tree.evictable_size - self.reserved

    def add(self, req: Req) -> bool:
        """Try to admit req into this extend batch; False means stop adding (budget exhausted)."""
        if len(self.can_run) >= self.max_new_reqs:
            return False
        pools = self.pools
        if req.req_pool_idx is None:
            if pools.req_to_token.available() == 0:  # rows still held by an in-flight batch (overlap)
                return False
            slots, node = pools.tree.match_prefix(req.fill_ids[:-1])
            pools.tree.inc_lock_ref(node)
            needed = req.seq_len - slots.numel()
            if needed + self._future(req) > self._room() and (self.can_run or self.running):
                pools.tree.dec_lock_ref(node)
                return False
            if needed > self._room():  # nothing else runs: a lone request must fit the pool itself
                pools.tree.dec_lock_ref(node)
                return False
            req.req_pool_idx = pools.req_to_token.alloc()
            pools.req_to_token.write(req.req_pool_idx, 0, slots)
            req.kv_len = req.tree_len = slots.numel()
            req.cached_tokens += slots.numel()
            req.last_node = node
        elif not pools.can_alloc(min(req.seq_len - req.kv_len, self.chunk_size or req.seq_len) + self.decode_reserve):
            return False  # a chunked request resuming: wait until its next chunk fits
        remaining = req.seq_len - req.kv_len
        budget = self.max_prefill_tokens - self.used_tokens
        if self.chunk_size is not None:
            budget = min(budget, self.chunk_size - self.used_tokens)
        if budget <= 0:
            return False
        req.extend_len = min(remaining, budget)
        if req.extend_len < remaining:
            self.chunked = req
        self.used_tokens += req.extend_len
        self.reserved += req.extend_len + (0 if self.chunked is req else self._future(req))
        self.can_run.append(req)
        return self.chunked is None
