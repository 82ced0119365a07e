"""Speculative decoding: a draft proposes tokens, one target forward verifies them, greedy acceptance.

Drafts (``Draft``):

- ``NgramDraft``: upstream's NGRAM algorithm in its simplest form: the longest suffix of the request's
  tokens (``ngram_max`` down to 1 tokens) that occurred earlier in the request; the tokens that
  followed that earlier occurrence are the draft. Free to compute, on the host.
- ``SelfDraft``: the target model's own first ``draft_layers`` layers (then its final norm and head)
  propose ``num_draft_tokens`` tokens one at a time (self-speculation, as LayerSkip's early exit),
  chained on the device: no draft token reaches the host. Their KV for those layers is the target's
  own, so the draft writes into the target's cache slots and the verify forward overwrites them.

Verification (``verify``): every request of a decode batch feeds its last token and its ``K`` drafts
(``K + 1`` tokens at positions ``kv_len ..``) through one forward with logits at every position;
draft token ``j`` is accepted while it equals the target's greedy token at the position before it,
and the target's token after the last accepted one comes free (the bonus token). So greedy output
equals the target model's, token for token (up to the batch-invariance near-ties of docs/engine.md,
which equal-shape loops never meet). The device computes the accepted counts and the new sequence
lengths; nothing in a step needs them on the host, so the overlap loop launches the next verify step
before this one's result is read (see ``OverlapPipeline.launch_verify``).

KV slots belong to positions: ``reserve`` gives a request slots for every position up to an upper
bound on its KV length plus ``K + 1`` (``Req.kv_allocated``), the forward gathers them by position,
and a rejected draft's slot is rewritten by whichever token later takes that position. The excess
goes back when the request decodes normally, is retracted or finishes (``batch.trim_reserved``).

Only greedy requests without a grammar speculate; a batch with any other request, or without room
for the reservation (``has_room``), decodes normally.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import torch

from scheduler_core.batch import Req, ScheduleBatch
from scheduler_core.model.llama import AttnGroup, ForwardBatch, KVCache
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


class Draft(Protocol):
    config: SpecConfig
    # True: the draft runs on the device from the device's last tokens and lengths, so a verify step
    # can be launched before the previous one's result is on the host (overlapped); False: it needs
    # the request's tokens on the host (the overlap loop waits for the previous step first).
    on_device: bool


@dataclass
class NgramDraft:
    config: SpecConfig
    on_device: bool = False

    def propose(self, reqs: list[Req]) -> tuple[torch.Tensor, torch.Tensor]:
        """Host tensors: each request's draft [B, K] (padded with token 0) and its length [B]."""
        k = self.config.num_draft_tokens
        drafts = torch.zeros((len(reqs), k), dtype=torch.int64)
        lens = torch.zeros(len(reqs), dtype=torch.int64)
        for i, r in enumerate(reqs):
            found = self.lookup(r.fill_ids, r.remaining_new_tokens() - 1)
            if found:
                drafts[i, : len(found)] = torch.tensor(found)
                lens[i] = len(found)
        return drafts, lens

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
    on_device: bool = True

    def propose(self, last: torch.Tensor, seq_lens: torch.Tensor, kv_table: torch.Tensor, steps: int) -> torch.Tensor:
        """``steps`` draft tokens per request [B, steps], chained on the device: step ``s`` feeds
        the previous pick at position ``seq_len + s`` and writes its (draft layers') KV into the slot the
        verify forward writes there next; no token leaves the device between steps."""
        batch = last.numel()
        device = last.device
        arange = torch.arange(kv_table.shape[1], device=device)
        every = torch.arange(batch, device=device)
        picks: list[torch.Tensor] = []
        token = last
        for step in range(steps):
            positions = seq_lens + step
            mask = (arange[None, :] <= positions[:, None])[:, None, None, :]
            group = AttnGroup(kv_indices=kv_table, attn_mask=mask, pad_index=every, max_q=1, kv_lens=positions + 1)
            forward = ForwardBatch(input_ids=token, positions=positions,
                                   out_cache_loc=kv_table.gather(1, positions[:, None]).squeeze(1),
                                   logits_index=every, groups=[group])
            token = self.loaded.model(forward, self.kv_cache, num_layers=self.config.draft_layers).argmax(-1)
            picks.append(token)
        return torch.stack(picks, 1) if picks else last.new_empty((batch, 0))


def make_draft(config: SpecConfig, loaded: LoadedModel, kv_cache: KVCache) -> Draft:
    config.validate(loaded.config.num_layers)
    if config.algorithm == "ngram":
        return NgramDraft(config)
    return SelfDraft(config, loaded, kv_cache)


def can_speculate(batch: ScheduleBatch) -> bool:
    """A decode batch whose every request is greedy and unconstrained."""
    return batch.mode == "decode" and bool(batch.reqs) and all(
        r.sampling.greedy and r.grammar is None for r in batch.reqs)


def reserve_span(config: SpecConfig) -> int:
    """Positions one verify step writes per request: its last token and ``num_draft_tokens`` drafts."""
    return config.num_draft_tokens + 1


def draft_steps(reqs: list[Req], config: SpecConfig) -> int:
    """Draft tokens per request this step: ``num_draft_tokens``, fewer when no request of the batch
    can use them (each needs at most its remaining new tokens minus the bonus one). The host's output
    may lag one step behind the device's, which only over-counts what remains: never too few."""
    return max(min(config.num_draft_tokens, max(r.remaining_new_tokens() for r in reqs) - 1), 0)


def has_room(reqs: list[Req], pools: Pools, config: SpecConfig, max_context: int) -> bool:
    """Room for a verify step that may follow one still in flight: every request's reservation can
    reach two spans past its host KV length (the in-flight step's bound plus this one's), within the
    model's context. Without room the batch decodes normally (one slot per request)."""
    reach = 2 * reserve_span(config)
    if any(r.kv_len + reach > max_context for r in reqs):
        return False
    return pools.can_alloc(sum(max(r.kv_len + reach - max(r.kv_len, r.kv_allocated), 0) for r in reqs))


def reserve(reqs: list[Req], pools: Pools, bounds: list[int], span: int) -> None:
    """Host side (schedule stream): give each request KV slots for every position below its bound
    (the most its KV length can be when this step runs) plus ``span``, writing the new positions'
    slots into the request table; a slot stays with its position until the request is trimmed or
    released, whatever the acceptance."""
    pool = pools.req_to_token
    wanted = [(r, max(r.kv_len, r.kv_allocated), bound + span) for r, bound in zip(reqs, bounds)]
    total = sum(max(target - end, 0) for _, end, target in wanted)
    slots = pools.alloc_tokens(total)
    offset = 0
    for r, end, target in wanted:
        if target > end:
            pool.write(r.req_pool_idx, end, slots[offset: offset + target - end])
            offset += target - end
            r.kv_allocated = target


@dataclass
class Verified:
    """A verify step's outcome, on the device."""

    tokens: torch.Tensor  # [B, K+1] the target's greedy token at every verify position
    margins: torch.Tensor  # [B, K+1] its top-1 minus top-2 logit
    accepted: torch.Tensor  # [B] drafts accepted
    new_seq_lens: torch.Tensor  # [B] KV length after the step: before + 1 + accepted
    bonus: torch.Tensor  # [B] the last produced token (the next step's input)


def verify(loaded: LoadedModel, kv_cache: KVCache, draft: Draft, kv_table: torch.Tensor, last: torch.Tensor,
           seq_lens: torch.Tensor, steps: int, drafts: torch.Tensor | None = None,
           draft_lens: torch.Tensor | None = None) -> Verified:
    """Draft (on the device for a ``SelfDraft``; ``drafts``/``draft_lens`` given for the n-gram draft),
    verify and accept, with no host read: ``kv_table`` [B, max_kv] holds each request's KV slots by
    position (``max_kv`` an upper bound on ``seq_lens + steps + 1``), ``last`` [B] each request's last
    token, ``seq_lens`` [B] its KV length before the step and ``steps`` the draft tokens per request
    (``draft_steps``)."""
    span = steps + 1
    if drafts is None:
        assert isinstance(draft, SelfDraft)
        drafts = draft.propose(last, seq_lens, kv_table, steps)
    else:
        drafts = drafts[:, :steps]
    batch = last.numel()
    device = last.device
    positions = seq_lens[:, None] + torch.arange(span, device=device)[None, :]  # [B, K+1]
    mask = torch.arange(kv_table.shape[1], device=device)[None, None, :] <= positions[:, :, None]
    group = AttnGroup(kv_indices=kv_table, attn_mask=mask[:, None], max_q=span,
                      pad_index=torch.arange(batch * span, device=device))
    forward = ForwardBatch(input_ids=torch.cat((last[:, None], drafts), 1).reshape(-1),
                           positions=positions.reshape(-1), out_cache_loc=kv_table.gather(1, positions).reshape(-1),
                           logits_index=torch.arange(batch * span, device=device), groups=[group])
    top = torch.topk(loaded.model(forward, kv_cache), 2, dim=-1)
    tokens = top.indices[:, 0].view(batch, span)
    margins = (top.values[:, 0] - top.values[:, 1]).view(batch, span)
    match = tokens[:, :-1] == drafts
    if draft_lens is not None:
        match &= torch.arange(span - 1, device=device)[None, :] < draft_lens[:, None]
    accepted = match.to(torch.int64).cumprod(1).sum(1)
    return Verified(tokens, margins, accepted, seq_lens + 1 + accepted, tokens.gather(1, accepted[:, None]).squeeze(1))


def spec_result(tokens: list[list[int]], margins: list[list[float]], accepted: list[int], new_kv_lens: list[int],
                seconds: float) -> BatchResult:
    """The host's view of a verify step: each request's accepted drafts and bonus token."""
    produced = [row[: n + 1] for row, n in zip(tokens, accepted)]
    gaps = [row[: n + 1] for row, n in zip(margins, accepted)]
    return BatchResult([p[0] for p in produced], [g[0] for g in gaps], seconds, SpecResult(produced, gaps, new_kv_lens))


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
