"""Shared fixtures for the simulator tests: the tiny model, a small one-batch workload, both hot paths."""
from __future__ import annotations

import os
import shutil
from typing import Iterator

import pytest
import torch

from scheduler_core.model.loader import LoadedModel, tiny_random
from scheduler_core.sim import native
from scheduler_core.sim.measure import Workload
from scheduler_core.sim.native import NATIVE_ENV

SMALL = Workload(batch_size=4, input_len=24, output_len=8)


@pytest.fixture(scope="session")
def tiny() -> LoadedModel:
    torch.set_num_threads(1)
    return tiny_random(0)


def cpp_compiler() -> bool:
    return shutil.which(os.environ.get("CXX") or "c++") is not None


@pytest.fixture(params=["cpp", "python"])
def hot_path(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """Run the test on the simulator's C++ core and on its Python hot path. Where a C++ compiler is
    on the machine the core must be in use (a build that fails there fails the test)."""
    if request.param == "cpp":
        if not cpp_compiler():
            pytest.skip("no C++ compiler: the simulator runs its Python hot path here")
        monkeypatch.setenv(NATIVE_ENV, "1")
        assert native.core() is not None, "the simulator's C++ core did not build (see the warning above)"
    else:
        monkeypatch.setenv(NATIVE_ENV, "0")
    yield request.param
