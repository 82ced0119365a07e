"""Calibration targets of issue 12 on the reference workload (docs/sim.md): the WAR barrier with the
pre-fix forward-prepare path, and the dedicated copy stream, cost MI300X a lot and H100 little; the
overlap loop keeps H100's device busy between decode steps."""
from __future__ import annotations

import pytest

from scheduler_core.platform import DEFAULT_POLICIES, SyncPolicy
from scheduler_core.sim.measure import reference_model, run_reference


@pytest.fixture(scope="module")
def model():
    return reference_model()


def cost(model, profile: str, with_it: SyncPolicy, without: SyncPolicy) -> float:
    slow = run_reference(model, profile, with_it).tokens_per_s
    fast = run_reference(model, profile, without).tokens_per_s
    return 100.0 * (1.0 - slow / fast)


BARRIER = SyncPolicy(war_barrier=True, copy_stream=False, fwd_prepare_d2h=True)  # pre-fix prepare path
NO_BARRIER = SyncPolicy(war_barrier=False, copy_stream=False, fwd_prepare_d2h=True)
COPY_STREAM = SyncPolicy(war_barrier=False, copy_stream=True, fwd_prepare_d2h=False)
FORWARD_COPY = SyncPolicy(war_barrier=False, copy_stream=False, fwd_prepare_d2h=False)


def test_war_barrier_costs_mi300x_15_to_25_percent(model) -> None:
    assert 15.0 <= cost(model, "rocm-mi300x", BARRIER, NO_BARRIER) <= 25.0


def test_war_barrier_costs_h100_under_3_percent(model) -> None:
    assert cost(model, "cuda-h100", BARRIER, NO_BARRIER) < 3.0


def test_copy_stream_costs_mi300x_10_to_20_percent(model) -> None:
    assert 10.0 <= cost(model, "rocm-mi300x", COPY_STREAM, FORWARD_COPY) <= 20.0


def test_copy_stream_costs_h100_under_3_percent(model) -> None:
    assert cost(model, "cuda-h100", COPY_STREAM, FORWARD_COPY) < 3.0


def test_overlap_keeps_h100_idle_between_decode_steps_under_2_percent(model) -> None:
    run = run_reference(model, "cuda-h100", DEFAULT_POLICIES["cuda"])
    assert run.idle_pct < 2.0 and run.hazards == []
