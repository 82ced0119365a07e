"""Sampling parameters and token selection: greedy, temperature, top-k, top-p; seeded per request."""
from __future__ import annotations

from dataclasses import dataclass, field

import torch


@dataclass
class SamplingParams:
    max_new_tokens: int = 128
    temperature: float = 0.0  # 0 means greedy
    top_k: int = -1  # -1: whole vocabulary
    top_p: float = 1.0
    seed: int | None = None
    stop: list[str] = field(default_factory=list)
    stop_token_ids: list[int] = field(default_factory=list)
    ignore_eos: bool = False

    @property
    def greedy(self) -> bool:
        return self.temperature <= 0.0 or self.top_k == 1

    def validate(self) -> None:
        """Raises ValueError naming the bad parameter."""
        if not isinstance(self.max_new_tokens, int) or self.max_new_tokens <= 0:
            raise ValueError(f"max_new_tokens must be a positive integer, got {self.max_new_tokens!r}")
        if self.temperature < 0:
            raise ValueError(f"temperature must be >= 0, got {self.temperature}")
        if not 0.0 < self.top_p <= 1.0:
            raise ValueError(f"top_p must be in (0, 1], got {self.top_p}")
        if self.top_k == 0 or self.top_k < -1:
            raise ValueError(f"top_k must be -1 or a positive integer, got {self.top_k}")
        if any(not s for s in self.stop):
            raise ValueError("stop strings must not be empty")


def sample_row(logits: torch.Tensor, params: SamplingParams, generator: torch.Generator | None) -> int:
    """Sample one token from one row of fp32 logits [vocab]."""
    logits = logits / params.temperature
    if params.top_k > 0:
        kth = torch.topk(logits, min(params.top_k, logits.numel())).values[-1]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    probs = torch.softmax(logits, dim=-1)
    if params.top_p < 1.0:
        sorted_probs, order = probs.sort(descending=True)
        # Keep the smallest prefix whose mass reaches top_p (the first token always stays).
        drop = sorted_probs.cumsum(0) - sorted_probs >= params.top_p
        sorted_probs = sorted_probs.masked_fill(drop, 0.0)
        probs = torch.zeros_like(probs).scatter_(0, order, sorted_probs)
    return int(torch.multinomial(probs, 1, generator=generator).item())


def sample(logits: torch.Tensor, params: list[SamplingParams],
           generators: list[torch.Generator | None]) -> tuple[list[int], list[float]]:
    """Next token per row, and the top-1 minus top-2 logit margin (used by the near-tie rule)."""
    top = torch.topk(logits, 2, dim=-1)
    greedy_ids = top.indices[:, 0].tolist()
    margins = (top.values[:, 0] - top.values[:, 1]).tolist()
    out = [tok if p.greedy else sample_row(logits[i], p, generators[i])
           for i, (tok, p) in enumerate(zip(greedy_ids, params))]
    return out, margins
