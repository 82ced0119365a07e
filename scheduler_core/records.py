"""Records shared by the scheduler and the overlap loops: a batch's sampled result and one step's record.

A leaf module (it imports nothing from scheduler_core), so ``scheduler.py`` can import ``overlap.py``
at the top and both can name these types without a cycle.
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass
class SpecResult:
    """A speculative verify step, per request: the tokens it produced (accepted drafts and the bonus
    token, at most ``num_draft_tokens + 1``), their margins, and the new KV length the device computed
    (the request's KV length before the step plus one plus the accepted drafts)."""
    tokens: list[list[int]]
    margins: list[list[float]]
    new_kv_lens: list[int]


@dataclass
class BatchResult:
    """Sampled tokens for the requests of a batch that produced one (None: still chunking)."""
    next_token_ids: list[int | None]
    margins: list[float | None]
    forward_s: float
    spec: SpecResult | None = None  # set by a speculative verify step (next_token_ids: the first token)


@dataclass
class StepRecord:
    mode: str
    batch_size: int
    tokens: int
    seconds: float
    shared_prefix: int = 0  # KV slots attended once for the whole decode batch (cascade)
    mixed: bool = False  # a prefill batch that also carries the running requests' decode tokens
    started: float = 0.0  # when the step began on the device facade's clock (Device.now(): wall or virtual)
