"""Shared fixtures for the simulator tests: the tiny model, a small one-batch workload, a runner."""
from __future__ import annotations

import pytest
import torch

from scheduler_core.model.loader import LoadedModel, tiny_random
from scheduler_core.sim.measure import Workload

SMALL = Workload(batch_size=4, input_len=24, output_len=8)


@pytest.fixture(scope="session")
def tiny() -> LoadedModel:
    torch.set_num_threads(1)
    return tiny_random(0)
