"""Speculative decoding: a draft proposes tokens, one target forward verifies them, greedy acceptance.

Drafts (``Draft``):

- ``NgramDraft``: upstream's NGRAM algorithm in its simplest form: the longest suffix of the request's
  tokens (``ngram_max`` down to 1 tokens) that occurred earlier in the request; the tokens that
  followed that earlier occurrence are the draft. Free to compute, on the host.
- ``SelfDraft``: the target model's own first ``draft_layers`` layers (then its final norm and head)
  propose tokens one at a time (self-speculation, as LayerSkip's early exit). Their KV for those
  layers is the target's own, so the draft writes into the target's cache slots and the verify
  forward overwrites them with identical values.

Verification (``prepare_verify`` + ``accept``): every request of a decode batch feeds its last token
and its draft (``1 + len(draft)`` tokens at positions ``kv_len ..``) through one extend forward with
logits at every position; draft token ``j`` is accepted while it equals the target's greedy token
at the position before it, and the target's token after the last accepted one comes free (the bonus
token). So greedy output equals the target model's, token for token (up to the batch-invariance
near-ties of docs/engine.md, which equal-shape loops never meet). The device computes the accepted
lengths and the new sequence lengths; the host learns them from the device (upstream spec v2's
seq_lens resolution, see ``OverlapPipeline``), frees the KV slots of rejected draft tokens
(``commit``) and appends the accepted tokens.

Only greedy requests without a grammar speculate; a batch with any other request decodes normally.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Protocol

import torch

from scheduler_core.batch import Req, ScheduleBatch
from scheduler_core.model.llama import ForwardBatch, KVCache
from scheduler_core.model.loader import LoadedModel
from scheduler_core.pools import Pools
from scheduler_core.records import BatchResult, SpecResult

ALGORITHMS = ("ngram", "self-draft")


@dataclass(frozen=True)
class SpecConfig:
    algorithm: str = "ngram"  # one of ALGORITHMS
    num_draft_tokens: int = 4  # at most this many draft tokens per request and step
    ngram_max: int = 3  # ngram: the longest suffix looked up
    draft_layers: int = 8  # self-draft: the target's first layers that make the draft

    def validate(self, num_layers: int) -> None:
        """Raises ValueError naming the bad field."""
        if self.algorithm not in ALGORITHMS:
            raise ValueError(f"speculative algorithm {self.algorithm!r} is not one of {', '.join(ALGORITHMS)}")
        if not isinstance(self.num_draft_tokens, int) or self.num_draft_tokens < 1:
            raise ValueError(f"num_draft_tokens must be a positive integer, got {self.num_draft_tokens!r}")
        if self.ngram_max < 1:
            raise ValueError(f"ngram_max must be at least 1, got {self.ngram_max}")
        if self.algorithm == "self-draft" and not 1 <= self.draft_layers < num_layers:
            raise ValueError(f"draft_layers must be in 1..{num_layers - 1} (the model has {num_layers} layers), "
                             f"got {self.draft_layers}")


HostRead = Callable[[torch.Tensor], list]


class Draft(Protocol):
    def propose(self, reqs: list[Req], pools: Pools, device: torch.device, read: HostRead) -> list[list[int]]:
        """Up to ``num_draft_tokens`` draft tokens per request (possibly none); ``read`` brings a
        device tensor to the host as a list (through the device facade in the overlap loop)."""
        ...


@dataclass
class NgramDraft:
    config: SpecConfig

    def propose(self, reqs: list[Req], pools: Pools, device: torch.device, read: HostRead) -> list[list[int]]:
        return [self.lookup(r.fill_ids, r.remaining_new_tokens() - 1) for r in reqs]

    def lookup(self, tokens: list[int], room: int) -> list[int]:
        """The tokens that followed the latest earlier occurrence of the longest matching suffix."""
        k = min(self.config.num_draft_tokens, room)
        if k <= 0:
            return []
        for n in range(min(self.config.ngram_max, len(tokens) - 1), 0, -1):
            suffix = tokens[-n:]
            for start in range(len(tokens) - n - 1, -1, -1):
                if tokens[start: start + n] == suffix:
                    return tokens[start + n: start + n + k]
        return []


@dataclass
class SelfDraft:
    """The target's first layers as the draft model (their KV is the target's own)."""

    config: SpecConfig
    loaded: LoadedModel
    kv_cache: KVCache

    def propose(self, reqs: list[Req], pools: Pools, device: torch.device, read: HostRead) -> list[list[int]]:
        k = [max(min(self.config.num_draft_tokens, r.remaining_new_tokens() - 1), 0) for r in reqs]
        drafts: list[list[int]] = [[] for _ in reqs]
        if not pools.can_alloc(sum(k)):
            return drafts  # no room for draft KV: decode without a draft this step
        table = pools.req_to_token.req_to_token
        slots_of = [pools.alloc_tokens(n) for n in k]  # the verify forward reuses these slots
        try:
            last = [r.output_ids[-1] for r in reqs]
            for step in range(max(k, default=0)):
                active = [i for i, n in enumerate(k) if n > step]
                if not active:
                    break
                prefix = [reqs[i].kv_len + step for i in active]
                kv = []
                for i, p in zip(active, prefix):
                    own = slots_of[i][: step + 1]
                    kv.append(torch.cat((table[reqs[i].req_pool_idx, : reqs[i].kv_len], own)))
                batch = ForwardBatch.build([last[i] for i in active], prefix, [1] * len(active), kv,
                                           torch.stack([slots_of[i][step] for i in active]), device)
                logits = self.loaded.model(batch, self.kv_cache, num_layers=self.config.draft_layers)
                picked = read(logits.argmax(-1))
                for i, tok in zip(active, picked):
                    drafts[i].append(tok)
                    last[i] = tok
        finally:
            for slots in slots_of:
                pools.allocator.free(slots)
        return drafts


def make_draft(config: SpecConfig, loaded: LoadedModel, kv_cache: KVCache) -> Draft:
    config.validate(loaded.config.num_layers)
    if config.algorithm == "ngram":
        return NgramDraft(config)
    return SelfDraft(config, loaded, kv_cache)


def can_speculate(batch: ScheduleBatch) -> bool:
    """A decode batch whose every request is greedy and unconstrained."""
    return batch.mode == "decode" and bool(batch.reqs) and all(
        r.sampling.greedy and r.grammar is None for r in batch.reqs)


@dataclass
class VerifyPlan:
    """Where each request's verify tokens sit in the flattened forward, and its drafts."""

    drafts: list[list[int]]
    kv_before: list[int]  # each request's KV length before the step
    index: torch.Tensor  # [B, K+1] token row of each request's j-th verify position (-1: padding)
    draft_pad: torch.Tensor  # [B, K] draft tokens, padded with -1 (never a token)
    kv_before_dev: torch.Tensor  # [B] on the device


def prepare_verify(batch: ScheduleBatch, pools: Pools, device: torch.device,
                   drafts: list[list[int]]) -> tuple[ForwardBatch, VerifyPlan]:
    """Write KV slots for each request's last token and drafts (schedule stream) and build the verify
    forward: an extend batch with logits at every token."""
    pool = pools.req_to_token
    # The decode reservation guarantees one slot per request; draft tokens get what else is free.
    room = pools.allocator.available() + pools.tree.evictable_size - len(drafts)
    drafts = [d[: max(min(len(d), room - sum(len(e) for e in drafts[:i])), 0)] for i, d in enumerate(drafts)]
    lens = [1 + len(d) for d in drafts]
    out_loc = pools.alloc_tokens(sum(lens))
    input_ids: list[int] = []
    kv_slots: list[torch.Tensor] = []
    kv_before = [r.kv_len for r in batch.reqs]
    offset = 0
    for r, d, n in zip(batch.reqs, drafts, lens):
        pool.write(r.req_pool_idx, r.kv_len, out_loc[offset: offset + n])
        offset += n
        input_ids += [r.output_ids[-1], *d]
        kv_slots.append(pool.req_to_token[r.req_pool_idx, : r.kv_len + n])
    forward = ForwardBatch.build(input_ids, kv_before, lens, kv_slots, out_loc, device, all_logits=True)
    width = max(lens)
    index = torch.full((len(lens), width), -1, dtype=torch.int64)
    draft_pad = torch.full((len(lens), width - 1), -1, dtype=torch.int64)
    start = 0
    for i, (d, n) in enumerate(zip(drafts, lens)):
        index[i, :n] = torch.arange(start, start + n)
        if d:
            draft_pad[i, : len(d)] = torch.tensor(d)
        start += n
    for r, n in zip(batch.reqs, lens):
        r.kv_len += n
    return forward, VerifyPlan(drafts, kv_before, index.to(device), draft_pad.to(device),
                               torch.tensor(kv_before, device=device))


def accept(logits: torch.Tensor, plan: VerifyPlan) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """On the device: the target's greedy token at every verify position [B, K+1] and its top-1/top-2
    margin, the accepted draft count [B] and each request's new KV length [B] (its last token and
    accepted drafts)."""
    top = torch.topk(logits, 2, dim=-1)
    index = plan.index.clamp(min=0)
    tokens = torch.where(plan.index >= 0, top.indices[:, 0][index], -1)
    margins = (top.values[:, 0] - top.values[:, 1])[index]
    match = (tokens[:, :-1] == plan.draft_pad).to(torch.int64).cumprod(1)
    accepted = match.sum(1)
    return tokens, margins, accepted, plan.kv_before_dev + 1 + accepted


def commit(req: Req, kv_before: int, verified: int, new_kv_len: int, pools: Pools) -> None:
    """Host side after the step: free the KV slots of rejected draft tokens (``verified`` positions
    were written from ``kv_before``) and set the request's KV length to ``new_kv_len``."""
    if req.req_pool_idx is None:  # released meanwhile (aborted)
        return
    row = pools.req_to_token.req_to_token[req.req_pool_idx]
    rejected = row[new_kv_len: kv_before + verified].clone()
    pools.allocator.free(rejected)
    req.kv_len = new_kv_len


def spec_result(plan: VerifyPlan, tokens: list[list[int]], margins: list[list[float]], new_kv_lens: list[int],
                seconds: float) -> BatchResult:
    """The host's view of a verify step: each request's tokens up to its new KV length."""
    produced = [row[: new - before] for row, new, before in zip(tokens, new_kv_lens, plan.kv_before)]
    gaps = [row[: new - before] for row, new, before in zip(margins, new_kv_lens, plan.kv_before)]
    verified = [1 + len(d) for d in plan.drafts]
    return BatchResult([p[0] for p in produced], [g[0] for g in gaps], seconds,
                       SpecResult(produced, gaps, plan.kv_before, verified, new_kv_lens))


@dataclass
class SpecStats:
    """Draft tokens proposed and accepted, and verify steps, over a scheduler's life."""

    steps: int = 0  # request-steps that verified (one per request per verify batch)
    tokens: int = 0  # tokens those steps produced (accepted drafts + bonus tokens)
    drafted: int = 0  # draft tokens accepted by the target (before any finish cut them)

    def record(self, accepted: int, produced: int) -> None:
        self.steps += 1
        self.tokens += produced
        self.drafted += accepted

    @property
    def accept_length(self) -> float:
        """Mean tokens per request-step (1.0: no draft token ever accepted)."""
        return self.tokens / self.steps if self.steps else 0.0
