"""The three-way verdict between two commits' samples."""
from __future__ import annotations

import numpy as np

from app.bisect.stats import Verdict, compare, effect, noise_scale, p_values, same_threshold


def normal(mean: float, n: int, seed: int, sd: float = 1.0) -> list[float]:
    return list(np.random.default_rng(seed).normal(mean, sd, n))


def test_clearly_separated_samples_are_different() -> None:
    result = compare(normal(100, 10, 1), normal(90, 10, 2), standardised_effect=8)
    assert result.verdict == Verdict.different and result.p_value <= 0.01
    assert -0.12 < result.relative_change < -0.08


def test_many_samples_from_one_distribution_are_the_same() -> None:
    result = compare(normal(100, 30, 3), normal(100, 30, 4), standardised_effect=2)
    assert result.verdict == Verdict.same


def test_few_overlapping_samples_ask_for_more_data() -> None:
    # 0.5 noise units apart with 4 samples a side: neither a change nor evidence against one.
    result = compare([10.0, 11.0, 12.0, 13.0], [10.5, 11.5, 12.5, 13.5], standardised_effect=1)
    assert result.verdict == Verdict.unknown
    assert result.p_value > 0.01 and result.p_value <= result.same_above


def test_the_verdict_uses_the_smaller_of_the_two_rank_tests() -> None:
    # Same middle, new slow mode: U barely moves, Kolmogorov-Smirnov sees the shape change.
    left = [100.0 + 0.1 * i for i in range(30)]
    right = [90.0 + 0.1 * i for i in range(15)] + [110.0 + 0.1 * i for i in range(15)]
    p_mwu, p_ks = p_values(left, right)
    result = compare(left, right, standardised_effect=2)
    assert p_ks < 0.01 < p_mwu
    assert result.p_value == p_ks and result.verdict == Verdict.different


def test_same_needs_less_evidence_with_more_samples_and_a_larger_effect_sought() -> None:
    assert same_threshold(2, 5, 5) > same_threshold(2, 10, 10) > same_threshold(2, 20, 20)
    assert same_threshold(1, 10, 10) > same_threshold(2, 10, 10) > same_threshold(4, 10, 10)


def test_the_same_threshold_has_the_stated_power() -> None:
    # A real change of the effect sought gives p <= threshold in about 95 % of fresh draws.
    rng = np.random.default_rng(99)
    threshold = same_threshold(2.0, 8, 8)
    below = 0
    for _ in range(1000):
        p_mwu, p_ks = p_values(rng.normal(0, 1, 8), rng.normal(2.0, 1, 8))
        below += min(p_mwu, p_ks) <= threshold
    assert 930 <= below <= 985


def test_the_noise_estimate_is_an_upper_bound_most_of_the_time() -> None:
    rng = np.random.default_rng(5)
    above = sum(noise_scale([list(rng.normal(0, 2.0, 5)) for _ in range(2)]) >= 2.0 for _ in range(1000))
    assert 900 <= above <= 990


def test_identical_constant_samples_are_the_same_not_an_error() -> None:
    result = compare([5.0] * 6, [5.0] * 6, standardised_effect=50)
    assert result.verdict == Verdict.same and result.p_value == 1.0


def test_the_effect_interval_holds_the_true_change_about_95_times_in_100() -> None:
    held = 0
    for seed in range(100):
        found = effect(normal(100, 20, 2 * seed, sd=2), normal(92, 20, 2 * seed + 1, sd=2))
        held += found.ci_low <= -0.08 <= found.ci_high
        assert found.ci_high - found.ci_low < 0.06
    assert held >= 88


def test_memoised_p_values_are_scipys_for_any_sizes_with_and_without_ties() -> None:
    from scipy import stats
    rng = np.random.default_rng(5)
    for trial in range(400):
        n_left, n_right = (int(n) for n in rng.integers(1, 31, 2))
        left, right = rng.normal(100, 3, n_left), rng.normal(100 + rng.normal(0, 4), 3, n_right)
        if trial % 4 == 0:
            left, right = np.round(left), np.round(right)  # ties
        expected = (stats.mannwhitneyu(left, right, alternative="two-sided").pvalue,
                    stats.ks_2samp(left, right, alternative="two-sided").pvalue)
        assert p_values(list(left), list(right)) == expected, (n_left, n_right, trial)


def test_the_simulated_threshold_is_the_one_scipy_gives_row_by_row() -> None:
    from scipy import stats

    from app.bisect.stats import EFFECT_GRID, POWER, SIMULATIONS, _simulated_threshold
    step, n_left, n_right = 20, 5, 7
    rng = np.random.default_rng([20260, step + 1000, n_left, n_right])
    left = rng.standard_normal((SIMULATIONS, n_left))
    right = rng.standard_normal((SIMULATIONS, n_right)) + EFFECT_GRID ** step
    p = [min(stats.mannwhitneyu(a, b, alternative="two-sided").pvalue, stats.ks_2samp(a, b).pvalue)
         for a, b in zip(left, right)]
    assert _simulated_threshold(step, n_left, n_right, POWER) == float(np.quantile(p, POWER))
