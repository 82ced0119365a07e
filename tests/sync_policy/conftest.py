"""Fixtures for the sync-policy tests: a faked torch build (CUDA, ROCm, CPU) and a clean env."""
from __future__ import annotations

from typing import Callable

import pytest
import torch

from scheduler_core.platform import DEVICE_ENV, OVERRIDE_ENV


@pytest.fixture
def fake_torch(monkeypatch: pytest.MonkeyPatch) -> Callable[..., None]:
    """Make torch look like a given build: fake_torch(cuda="12.4", hip=None, gpu=True)."""
    def apply(*, cuda: str | None = None, hip: str | None = None, gpu: bool = False) -> None:
        monkeypatch.setattr(torch.version, "cuda", cuda)
        monkeypatch.setattr(torch.version, "hip", hip, raising=False)
        monkeypatch.setattr(torch.cuda, "is_available", lambda: gpu)
    return apply


@pytest.fixture(autouse=True)
def clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """The process environment must not leak PARALLAX_DEVICE or overrides into these tests."""
    for name in (DEVICE_ENV, *OVERRIDE_ENV):
        monkeypatch.delenv(name, raising=False)
