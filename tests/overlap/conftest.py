"""Shared pieces of the overlap tests: one tiny model for the session, a seeded mixed workload, engines."""
from __future__ import annotations

import random
from dataclasses import dataclass

import pytest
import torch

from scheduler_core.engine import Engine
from scheduler_core.model.loader import LoadedModel, load_model
from scheduler_core.sampling import SamplingParams

CHUNK = 64


@pytest.fixture(scope="session")
def tiny_model() -> LoadedModel:
    return load_model("tiny-random", torch.device("cpu"), torch.float32, 0)


@dataclass
class Workload:
    prompts: list[list[int]]
    params: list[SamplingParams]


def mixed_workload(n: int = 100, seed: int = 0) -> Workload:
    """Mixed prompt lengths (some longer than a prefill chunk), a shared 40-token prefix on every
    third prompt (radix hits), mixed output lengths (1 token up to 60), EOS on or off."""
    rng = random.Random(seed)
    shared = [rng.randrange(1, 250) for _ in range(40)]
    prompts, params = [], []
    for i in range(n):
        length = rng.choice([3, 10, 30, 80, 150])
        prompts.append((shared if i % 3 == 0 else []) + [rng.randrange(1, 250) for _ in range(length)])
        params.append(SamplingParams(max_new_tokens=rng.choice([1, 2, 5, 17, 60]), ignore_eos=i % 2 == 0))
    return Workload(prompts, params)


def tight_engine(model: LoadedModel, **kwargs) -> Engine:
    """Chunked prefill, 16 running requests and a 350-slot pool with a low decode reservation, so the
    100-request workload retracts."""
    settings = dict(max_running_requests=16, kv_tokens=350, chunked_prefill_size=CHUNK)
    settings.update(kwargs)
    engine = Engine(model=model, **settings)
    engine.config.init_new_token_ratio = 0.05  # read by schedulers built later (the distributed ranks)
    for sched in (engine.scheduler, engine.decode_scheduler):
        if sched is not None:
            sched.new_token_ratio = 0.05
    return engine
