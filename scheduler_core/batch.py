"""Requests and schedule batches: prepare extend / decode, filter finished, merge, retract, finish checks."""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

import torch

from scheduler_core.model.llama import AttnGroup, DecodeGather, ForwardBatch
from scheduler_core.model.tokenizer import TextTokenizer
from scheduler_core.pools import Pools
from scheduler_core.radix_cache import TreeNode
from scheduler_core.sampling import SamplingParams


@dataclass(frozen=True)
class FinishReason:
    kind: str  # "abort" | "stop_str" | "stop_token" | "length"
    matched: str | int | None = None
    message: str | None = None


@dataclass(eq=False)
class Req:
    rid: int
    input_ids: list[int]
    sampling: SamplingParams
    prompt: str | None = None
    output_ids: list[int] = field(default_factory=list)
    margins: list[float] = field(default_factory=list)  # top-1 minus top-2 logit, per output token
    finish_reason: FinishReason | None = None
    to_abort: str | None = None  # set from outside; honoured at the next finish check
    generator: torch.Generator | None = None
    # Memory state: the row in ReqToTokenPool, how many positions have KV, how many of those
    # belong to the prefix cache (locked through last_node).
    req_pool_idx: int | None = None
    kv_len: int = 0
    # Speculative decoding reserves KV slots ahead of ``kv_len`` (positions own their slots: a rejected
    # draft's slot is reused by whatever token later takes its position); the row's slots then run to
    # here. Only meaningful when greater than ``kv_len``; ``trim_reserved`` gives the excess back.
    kv_allocated: int = 0
    tree_len: int = 0
    last_node: TreeNode | None = None
    extend_len: int = 0  # new tokens in the current extend step
    cached_tokens: int = 0  # prefix-cache hits over the request's life
    retractions: int = 0
    text: str = ""
    arrival: float = field(default_factory=time.perf_counter)
    token_times: list[float] = field(default_factory=list)
    # A constraint on the output (scheduler_core.grammar.Grammar): tokens are sampled under its mask,
    # which needs the previous token on the host (the overlap loop does not overlap such a batch).
    grammar: Any = None
    priority: int = 0  # schedule_policy "priority": higher runs first and may preempt lower

    def __post_init__(self) -> None:
        if self.sampling.seed is not None:
            self.generator = torch.Generator().manual_seed(self.sampling.seed)

    @property
    def fill_ids(self) -> list[int]:
        return self.input_ids + self.output_ids

    @property
    def seq_len(self) -> int:
        return len(self.input_ids) + len(self.output_ids)

    @property
    def finished(self) -> bool:
        return self.finish_reason is not None

    @property
    def prefill_done(self) -> bool:
        """All tokens but the last fed one have KV: the request decodes from here."""
        return self.kv_len >= self.seq_len

    def remaining_new_tokens(self) -> int:
        return max(self.sampling.max_new_tokens - len(self.output_ids), 0)

    def check_finished(self, tokenizer: TextTokenizer, max_context: int) -> None:
        """Priority: abort, stop string, stop token / EOS, max new tokens (then the context limit)."""
        if self.finished:
            return
        if self.to_abort is not None:
            self.finish_reason = FinishReason("abort", message=self.to_abort)
            return
        if not self.output_ids:
            return
        if self.sampling.stop:
            text = tokenizer.decode(self.output_ids)
            hits = [(text.find(s), s) for s in self.sampling.stop if s in text]
            if hits:
                pos, matched = min(hits)
                self.text = text[:pos]
                self.finish_reason = FinishReason("stop_str", matched=matched)
                return
        last = self.output_ids[-1]
        if last in self.sampling.stop_token_ids or (
                not self.sampling.ignore_eos and last == tokenizer.eos_token_id):
            self.finish_reason = FinishReason("stop_token", matched=last)
        elif len(self.output_ids) >= self.sampling.max_new_tokens:
            self.finish_reason = FinishReason("length", matched=self.sampling.max_new_tokens)
        elif self.seq_len >= max_context:
            self.finish_reason = FinishReason("length", message=f"reached the model context of {max_context}")


def shared_prefix_len(kv_indices: torch.Tensor, kv_lens: torch.Tensor) -> int:
    """Leading KV slots identical in every row, short of each row's last (newly written) slot."""
    if kv_indices.shape[0] < 2:
        return 0
    same = (kv_indices == kv_indices[:1]).all(0).to(torch.int32)
    return min(int(same.cumprod(0).sum()), int(kv_lens.min()) - 1)


def release(req: Req, pools: Pools, cache: bool) -> None:
    """Give back the request's row and KV slots. With cache=True its computed KV goes into the prefix
    cache (duplicates of already-cached tokens are freed); otherwise all its own slots are freed."""
    if req.req_pool_idx is None:
        return
    trim_reserved(req, pools)
    slots = pools.req_to_token.req_to_token[req.req_pool_idx, : req.kv_len].clone()
    if cache and not pools.tree.disabled:
        cached = pools.tree.insert(req.fill_ids[: req.kv_len], slots)
        pools.allocator.free(slots[req.tree_len: cached])
    else:
        pools.allocator.free(slots[req.tree_len:])
    if req.last_node is not None:
        pools.tree.dec_lock_ref(req.last_node)
    pools.req_to_token.free(req.req_pool_idx)
    req.req_pool_idx, req.kv_len, req.tree_len, req.last_node = None, 0, 0, None


def trim_reserved(req: Req, pools: Pools) -> None:
    """Free the slots a speculative step reserved beyond the request's KV length (no step that could
    still write them may be in flight: a non-speculative batch never overlaps a verify step)."""
    if req.req_pool_idx is not None and req.kv_allocated > req.kv_len:
        pools.allocator.free(pools.req_to_token.req_to_token[req.req_pool_idx, req.kv_len: req.kv_allocated].clone())
    req.kv_allocated = 0


@dataclass
class ScheduleBatch:
    reqs: list[Req]
    mode: str = "decode"  # "extend" | "decode"
    mixed: bool = False  # extend batch that also carries running requests' decode tokens

    def is_empty(self) -> bool:
        return not self.reqs

    def __len__(self) -> int:
        return len(self.reqs)

    def prepare_for_extend(self, pools: Pools, device: torch.device) -> ForwardBatch:
        self.mode = "extend"
        for r in self.reqs:
            trim_reserved(r, pools)
        table = pools.req_to_token.req_to_token
        out_loc = pools.alloc_tokens(sum(r.extend_len for r in self.reqs))
        input_ids: list[int] = []
        kv_slots: list[torch.Tensor] = []
        offset = 0
        pool = pools.req_to_token
        for r in self.reqs:
            n = r.extend_len
            pool.write(r.req_pool_idx, r.kv_len, out_loc[offset: offset + n])
            offset += n
            input_ids += r.fill_ids[r.kv_len: r.kv_len + n]
            kv_slots.append(table[r.req_pool_idx, : r.kv_len + n])
        batch = ForwardBatch.build(input_ids, [r.kv_len for r in self.reqs], [r.extend_len for r in self.reqs],
                                   kv_slots, out_loc, device)
        for r in self.reqs:
            r.kv_len += r.extend_len
        return batch

    def prepare_for_decode(self, pools: Pools, device: torch.device, cascade_min: int = 0) -> ForwardBatch:
        """Write each request's new KV slot and length into the device tables (schedule stream); the
        forward gathers its KV indices and mask from them (``DecodeGather``, forward stream).

        cascade_min > 0: when all requests share at least that many leading KV slots, attend to
        them once for the whole batch (see Attention._cascade_decode)."""
        self.mode = "decode"
        for r in self.reqs:
            trim_reserved(r, pools)
        pool = pools.req_to_token
        out_loc = pools.alloc_tokens(len(self.reqs))
        rows = torch.tensor([r.req_pool_idx for r in self.reqs])
        positions = torch.tensor([r.kv_len for r in self.reqs])
        pool.write_decode(rows, positions, out_loc)
        max_kv = max(r.kv_len for r in self.reqs) + 1
        shared = 0
        if cascade_min > 0:
            shared = shared_prefix_len(pool.req_to_token[rows, :max_kv], positions + 1)
        prefix_slots = None
        if cascade_min > 0 and shared >= cascade_min:
            prefix_slots = pool.req_to_token[rows[0], :shared].to(device)
        else:
            shared = 0
        rows_dev = rows.to(device)
        group = AttnGroup(kv_indices=rows_dev, attn_mask=rows_dev,  # both replaced by the gather
                          pad_index=torch.arange(len(self.reqs), device=device), max_q=1, prefix_slots=prefix_slots)
        batch = ForwardBatch(
            input_ids=torch.tensor([r.output_ids[-1] for r in self.reqs], device=device),
            positions=positions.to(device, copy=True), out_cache_loc=out_loc.to(device, copy=True),
            logits_index=torch.arange(len(self.reqs), device=device), groups=[group],
            gather=DecodeGather(pool.table, pool.seq_lens, rows_dev, shared, max_kv))
        for r in self.reqs:
            r.kv_len += 1
        return batch

    def needs_host_tokens(self) -> bool:
        """True when sampling this batch needs every request's previous token on the host (a grammar's
        mask follows the tokens so far): upstream's grammar sync, which disables overlap for the batch."""
        return any(r.grammar is not None for r in self.reqs)

    def filter_finished(self) -> None:
        self.reqs = [r for r in self.reqs if not r.finished]

    def merge(self, other: "ScheduleBatch") -> None:
        self.reqs.extend(other.reqs)

    def retract_decode(self, pools: Pools) -> list[Req]:
        """Retract requests until the rest can decode one step; returns the retracted ones, whose
        KV is freed and who keep their output so far (recomputed on re-admission). The last one is
        retracted too when slots outside the batch are held (a retracted request being prefilled
        again in chunks), unless it no longer fits the whole pool: that one stays, for the caller
        to abort."""
        # Retract the requests that made the least progress first (they lose the least work).
        order = sorted(self.reqs, key=lambda r: (len(r.output_ids), -len(r.input_ids)), reverse=True)
        retracted: list[Req] = []
        while order and not pools.can_alloc(len(order)):
            if len(order) == 1 and order[0].seq_len + 1 > pools.allocator.size:
                break
            req = order.pop()
            release(req, pools, cache=False)
            req.retractions += 1
            retracted.append(req)
        keep = set(map(id, order))
        self.reqs = [r for r in self.reqs if id(r) in keep]
        return retracted
