"""Shared fixtures for the scheduler_core tests: engines on the seeded tiny random model, data paths."""
from __future__ import annotations

from pathlib import Path

import pytest

from scheduler_core.engine import Engine, GenerateOutput

REPO = Path(__file__).resolve().parents[2]
GSM8K_DIR = REPO.parent / "shared" / "data" / "gsm8k"
# Near-tie rule: greedy outputs from different batch compositions may diverge only at a step where
# the reference's top-1/top-2 logit margin is below this (fp32 CPU matmuls are not batch-invariant).
NEAR_TIE_EPS = 1e-2


def tiny_engine(**kwargs) -> Engine:
    settings = dict(model="tiny-random", max_running_requests=8, kv_tokens=4096, chunked_prefill_size=None)
    settings.update(kwargs)
    return Engine(**settings)


@pytest.fixture
def tiny() -> Engine:
    return tiny_engine()


def same_or_near_tie(ref: GenerateOutput, other: GenerateOutput, eps: float = NEAR_TIE_EPS) -> str:
    """'same', 'near_tie' (diverged where the reference margin < eps), or raise AssertionError."""
    if ref.output_ids == other.output_ids:
        return "same"
    n = min(len(ref.output_ids), len(other.output_ids))
    step = next((i for i in range(n) if ref.output_ids[i] != other.output_ids[i]), n)
    assert step < n, f"one output is a prefix of the other: {ref.output_ids} vs {other.output_ids}"
    margin = min(ref.margins[step], other.margins[step])
    assert margin < eps, (f"outputs diverge at step {step} with a top-2 margin of {margin:.2e} >= {eps}: "
                          f"{ref.output_ids} vs {other.output_ids}")
    return "near_tie"
