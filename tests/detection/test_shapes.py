"""Generated series of each shape real histories take: how many alerts, and of which kind.

Each history is 300 commits at 1 % noise around 1,000, seeded; `analyse` returns level changes
(the alerts), drifts over spans, the noise change and the seasonal period."""
from __future__ import annotations

import math

import numpy as np
import pytest

from app.detection.detector import analyse, find_change_points

N = 300
SEEDS = range(5)


def history(kind: str, seed: int) -> list[float]:
    rng = np.random.default_rng(seed)
    t = np.arange(N)
    noise = 0.01 * rng.standard_normal(N)
    if kind == "trend":
        level = 1 + 0.25 * t / N + noise
    elif kind == "random_walk":
        level = 1 + np.cumsum(0.01 * rng.standard_normal(N)) + 0.005 * rng.standard_normal(N)
    elif kind == "seasonal":
        level = 1 + 0.05 * np.sin(2 * np.pi * t / 7) + noise
    elif kind == "bimodal":
        level = 1 + 0.08 * (rng.random(N) < 0.4) + noise
    elif kind == "heavy_tails":
        level = 1 + 0.01 * rng.standard_t(2, N)
    elif kind == "variance_change":
        level = 1 + np.where(t < 150, 0.005, 0.03) * rng.standard_normal(N)
    elif kind == "step":
        level = 1 + 0.05 * (t >= 150) + noise
    else:
        raise ValueError(kind)
    return (1000 * level).tolist()


def run(kind: str, seed: int):
    return analyse([[v] for v in history(kind, seed)])


@pytest.mark.parametrize("seed", SEEDS)
def test_a_step_is_one_level_change_and_no_drift(seed):
    result = run("step", seed)
    assert [abs(c.index - 150) <= 2 for c in result.changes] == [True]
    assert result.drifts == [] and result.noise is None


@pytest.mark.parametrize("seed", SEEDS)
def test_a_trend_is_reported_once_as_a_drift_not_as_a_staircase_of_changes(seed):
    result = run("trend", seed)
    assert result.changes == [] and len(result.drifts) == 1
    drift = result.drifts[0]
    assert drift.end - drift.start > 100 and 0.15 < drift.relative_change < 0.3   # the line rises 25 %


@pytest.mark.parametrize("seed", SEEDS)
def test_a_random_walk_is_reported_once_as_a_drift(seed):
    values = history("random_walk", seed)
    result = run("random_walk", seed)
    assert result.changes == [] and len(result.drifts) == 1
    drift = result.drifts[0]
    assert drift.steps >= 2 and drift.end > drift.start
    assert drift.relative_change == pytest.approx((drift.after - drift.before) / drift.before)
    assert drift.before == pytest.approx(float(np.median(values[max(0, drift.start - 30):drift.start])), rel=0.05)


def test_without_the_random_walk_model_a_walk_is_a_staircase():
    # The safety mechanism: with the local-level comparison switched off, the walk is cut into steps.
    from dataclasses import replace

    from app.detection.detector import DEFAULT_CONFIG

    blind = replace(DEFAULT_CONFIG, shapes=replace(DEFAULT_CONFIG.shapes, wander_margin=math.inf))
    assert sum(len(analyse([[v] for v in history("random_walk", seed)], None, blind).changes) for seed in SEEDS) > 10


@pytest.mark.parametrize("seed", SEEDS)
def test_weekly_seasonality_is_not_a_change(seed):
    result = run("seasonal", seed)
    assert result.period == 7
    assert result.changes == [] and result.drifts == []


@pytest.mark.parametrize("seed", SEEDS)
def test_seasonality_removed_leaves_a_real_step_visible(seed):
    values = np.array(history("seasonal", seed))
    values[200:] *= 1.06
    result = analyse([[v] for v in values])
    assert result.period == 7
    assert [abs(c.index - 200) <= 2 for c in result.changes] == [True]


@pytest.mark.parametrize("seed", SEEDS)
def test_bimodal_noise_from_two_machine_kinds_gives_no_alert(seed):
    assert find_change_points(history("bimodal", seed)) == []


@pytest.mark.parametrize("seed", SEEDS)
def test_heavy_tailed_outliers_give_no_alert(seed):
    result = run("heavy_tails", seed)
    assert result.changes == [] and result.drifts == []


@pytest.mark.parametrize("seed", SEEDS)
def test_a_change_of_noise_level_is_noise_changed_not_a_regression(seed):
    result = run("variance_change", seed)
    assert result.changes == [] and result.drifts == []
    assert result.noise is not None and abs(result.noise.index - 150) <= 10
    assert result.noise.ratio > 3


def late_noise(seed: int) -> list[list[float]]:
    """A long quiet history (0.5 % noise) whose last quarter is six times noisier: a runner that
    moved to a shared machine."""
    rng = np.random.default_rng(seed)
    return [[v] for v in 1000 * (1 + np.where(np.arange(N) < 3 * N // 4, 0.005, 0.03) * rng.standard_normal(N))]


def test_a_late_noisy_stretch_raises_no_change():
    assert sum(len(analyse(late_noise(seed)).changes) for seed in SEEDS) == 0


def test_without_the_noise_regimes_a_late_noisy_stretch_raises_changes():
    # The safety mechanism: one sigma for the whole series, set by its long quiet part, reads the
    # noisy stretch as level changes. (With the halves equal, as in `variance_change`, the
    # first-difference sigma trimmed at 5 MADs keeps enough of the noisy half to stay quiet.)
    from dataclasses import replace

    from app.detection.detector import DEFAULT_CONFIG

    blind = replace(DEFAULT_CONFIG, shapes=replace(DEFAULT_CONFIG.shapes, noise_ratio=1e9))
    assert sum(len(analyse(late_noise(seed), None, blind).changes) for seed in SEEDS) > 0
