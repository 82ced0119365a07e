"""The statistics of app.detection: change points, spikes, bad input, accuracy tests, and the
platform classification on generated histories."""
from __future__ import annotations

import math
import random

import numpy as np
import pytest
from scipy import stats

from app.detection import find_change_points
from app.detection.detector import (
    DEFAULT_CONFIG,
    PlatformSeries,
    classify_change,
    compare_accuracy,
    confirm,
    detect,
    detect_recent,
    effect_threshold,
    evidence_at,
    mcnemar_exact,
    noise_sigma,
    prepare,
    two_proportion_z,
)
from tests.detection.histories import EXPECTED, SCENARIOS, make_history


def noisy(rng: np.random.Generator, n: int, cv: float, level: float = 1000.0) -> np.ndarray:
    return level * (1 + cv * rng.standard_normal(n))


# ---------------------------------------------------------------- change points

def test_a_five_percent_step_at_two_percent_cv_is_found_where_it_landed():
    rng = np.random.default_rng(1)
    values = noisy(rng, 100, 0.02)
    values[60:] *= 0.95
    found = find_change_points(list(values))
    assert len(found) == 1 and abs(found[0] - 60) <= 2


def test_indices_are_ascending_segment_starts():
    rng = np.random.default_rng(2)
    values = noisy(rng, 150, 0.01)
    values[40:] *= 1.10
    values[100:] *= 0.85
    found = find_change_points(list(values))
    assert found == sorted(found) and len(found) == 2
    assert abs(found[0] - 40) <= 2 and abs(found[1] - 100) <= 2


def test_regression_then_fix_gives_two_change_points():
    rng = np.random.default_rng(3)
    values = noisy(rng, 120, 0.01)
    values[50:62] *= 0.88
    found = find_change_points(list(values))
    assert len(found) == 2 and abs(found[0] - 50) <= 1 and abs(found[1] - 62) <= 1


@pytest.mark.parametrize("seed", range(5))
def test_pure_noise_has_no_change_points(seed):
    rng = np.random.default_rng(100 + seed)
    assert find_change_points(list(noisy(rng, 1000, 0.03))) == []


def test_a_single_outlier_is_a_spike_not_a_change():
    rng = np.random.default_rng(4)
    values = noisy(rng, 80, 0.01)
    values[40] *= 1.6
    assert find_change_points(list(values)) == []


# A fixed, repeating noise pattern (sigma about 1.6) so that the spike tests below do not hang
# on a random draw: which points are spikes, and where a step lands, are exact.
PATTERN = [2.0, -2.0, 0.8, -0.8, 0.0, 1.2]


def patterned(n: int, level: float = 100.0) -> np.ndarray:
    return np.array([level + PATTERN[i % len(PATTERN)] for i in range(n)])


def test_spikes_are_the_lone_outliers_and_are_replaced_by_their_neighbours_median():
    values = patterned(40)
    values[10], values[25] = 130.0, 70.0           # lone outliers, one up, one down
    values[15] = values[16] = 130.0                # two commits in a row: a short level, not a spike
    values[0], values[39] = 130.0, 70.0            # the ends have one neighbour: never spikes
    prepared = prepare([[v] for v in values])
    assert prepared.spikes == {10, 25}
    assert prepared.levels[10] == np.median(values[[8, 9, 11, 12]])
    assert prepared.levels[25] == np.median(values[[23, 24, 26, 27]])
    assert prepared.levels[15] == 130.0


def test_a_spike_beside_a_step_neither_moves_the_change_nor_counts_as_the_old_level():
    values = patterned(60)
    values[30:] += 3.0                             # the real change starts at index 30
    values[28] = 124.0                             # a spike two commits before it, on the new side
    (change,) = detect([[v] for v in values])
    # Without spike handling the change is reported at the spike (index 28); with the spike
    # kept in the before/after comparison the old level counts 30 commits instead of 29.
    assert (change.index, change.n_before, change.n_after) == (30, 29, 30)


def test_banding_between_two_levels_is_not_a_change():
    rng = np.random.default_rng(5)
    bands = np.where(rng.random(400) < 0.5, 1.0, 1.02)
    values = noisy(rng, 400, 0.005) * bands
    assert find_change_points(list(values)) == []


def test_a_significant_change_below_the_minimum_magnitude_is_not_reported():
    rng = np.random.default_rng(6)
    values = noisy(rng, 200, 0.0005)
    values[100:] *= 1.01          # 20 sigmas, but only 1 %
    assert find_change_points(list(values)) == []


def test_a_new_level_seen_at_two_commits_only_is_not_yet_a_change():
    rng = np.random.default_rng(7)
    values = noisy(rng, 62, 0.005)
    values[60:] *= 0.8
    assert find_change_points(list(values)) == []
    values = np.append(values, 800.0)
    assert find_change_points(list(values)) == [60]


def test_a_young_series_needs_a_larger_effect_than_a_long_one():
    assert effect_threshold(3.5, 12) > 5.0 > effect_threshold(3.5, 60) > effect_threshold(3.5, 200) > 3.5
    assert effect_threshold(3.5, 100_000) == pytest.approx(3.5, abs=0.01)


# Per-commit levels of 14-commit histories (the end-to-end adapter test's shape: a 20 % drop at
# commit 7, 1 % jitter per sample, median of 3) that the detector once missed or placed at 4:
# clipping both sides around the old median capped the step's effect near a young series'
# threshold, and a left side whose mean sat below its median fell under it.
YOUNG_STEPS = [
    [75.23, 75.33, 75.05, 75.09, 74.36, 74.71, 74.72, 59.78, 60.04, 60.09, 60.08, 60.1, 60.13, 59.82],
    [75.35, 75.4, 74.82, 74.58, 75.29, 75.31, 74.64, 60.2, 60.27, 60.17, 60.18, 59.83, 59.82, 59.76],
    [75.3, 74.36, 74.44, 74.73, 75.13, 75.12, 75.21, 59.49, 59.91, 60.05, 60.03, 59.86, 60.04, 59.97],
    [75.21, 75.37, 75.33, 75.37, 74.67, 74.6, 74.57, 59.98, 60.03, 60.25, 60.28, 59.74, 59.99, 59.85],
    [75.46, 75.45, 75.43, 75.55, 74.87, 74.97, 75.01, 60.22, 60.31, 60.13, 59.55, 59.77, 59.83, 59.84],
]


@pytest.mark.parametrize("levels", YOUNG_STEPS)
def test_a_large_step_in_a_young_series_is_found_where_it_landed(levels):
    assert find_change_points(levels) == [7]


def test_a_wild_newest_commit_does_not_carry_a_small_shift_past_the_effect_threshold():
    old = [100 + x for x in (0.5, -0.5, 1.0, -1.0, 0.3, -0.3, 0.8, -0.8, 0.0, 0.6, -0.6, 0.2, -0.2, 0.9, -0.9)]
    shifted = [102.0, 102.0, 102.0]                   # 2 sigma: ranks on top, 2 %, too small an effect
    assert find_change_points(old + shifted) == []
    assert find_change_points(old + shifted[:2] + [132.0]) == []   # the spike rule cannot judge the newest


def test_a_chance_narrow_mad_does_not_cut_a_young_series_noise_away():
    # The first differences of 14 commits (a 20 % step at 7) fall in two groups by chance: the
    # MAD around their median is narrow, and a tight trim kept one group only (0.062).
    jitter = random.Random(730)
    levels = np.array([sorted(75.0 * (0.8 if i >= 7 else 1.0) * jitter.uniform(0.99, 1.01) for _ in range(3))[1]
                       for i in range(14)])
    steady = np.delete(np.diff(levels), 6)        # every difference but the step's
    assert noise_sigma(levels) == pytest.approx(np.std(steady, ddof=1) / math.sqrt(2), rel=0.05)


def test_a_real_step_beside_spurious_candidates_is_kept_when_spikes_leave_its_side_short():
    # The state a low noise estimate once left (sigma 0.062 for noise of about 0.23): two commits
    # of the new level taken for spikes, and candidates on both sides of the step. Tested between
    # them the step has too few commits on its right, so it has no effect of its own: ranking by
    # it dropped the step first, and then the rest failed.
    jitter = random.Random(730)
    points = [[75.0 * (0.8 if i >= 7 else 1.0) * jitter.uniform(0.99, 1.01) for _ in range(3)] for i in range(14)]
    prepared = prepare(points)
    prepared.sigma, prepared.scale, prepared.spikes = 0.062, np.full(14, 0.062), {9, 11}
    assert [c.index for c in confirm(prepared, [3, 7, 10], DEFAULT_CONFIG)] == [7]


def test_evidence_after_a_lasting_step_stays_while_a_three_commit_dip_loses_it():
    rng = np.random.default_rng(3)
    step = noisy(rng, 80, 0.01)
    step[40:] *= 0.9
    dip = noisy(rng, 80, 0.01)
    dip[40:43] *= 0.9
    points = lambda values: [[v] for v in values]  # noqa: E731
    assert evidence_at(points(step), None, 40, [], skip=3).effect > 10
    assert evidence_at(points(dip), None, 40, [], skip=3).effect < DEFAULT_CONFIG.min_effect / 2
    assert evidence_at(points(dip), None, 40, []).effect > evidence_at(points(dip), None, 40, [], skip=3).effect
    assert evidence_at(points(dip), None, 78, [], skip=3) is None    # nothing left after the skipped commits


@pytest.mark.parametrize("values", [
    [],
    [1.0],
    [1.0, 2.0, 3.0],
    [5.0] * 200,
    [math.nan] * 50,
    [math.inf, -math.inf, math.nan, 1.0, 1.0],
])
def test_bad_input_gives_no_change_and_no_crash(values):
    assert find_change_points(values) == []


def test_non_finite_points_are_skipped_and_indices_refer_to_the_input():
    rng = np.random.default_rng(8)
    values = list(noisy(rng, 100, 0.01))
    for i in range(60, 100):
        values[i] *= 1.1
    values[30] = math.nan
    values[70] = math.inf
    assert find_change_points(values) == [60]


def test_detect_reports_the_commit_range_across_unmeasured_commits():
    rng = np.random.default_rng(9)
    levels = noisy(rng, 60, 0.01)
    levels[30:] *= 0.8
    points = [[v * (1 + 0.002 * e) for e in rng.standard_normal(5)] for v in levels]
    positions = [10 * i for i in range(60)]          # nine commits between measured ones
    (change,) = detect(points, positions)
    assert (change.index, change.good_position, change.bad_position) == (30, 290, 300)
    assert change.relative_change == pytest.approx(-0.2, abs=0.01)
    assert change.ci_low < change.relative_change < change.ci_high
    assert change.p_value < 1e-3


def test_incremental_detection_reexamines_only_the_recent_window():
    rng = np.random.default_rng(10)
    values = noisy(rng, 1000, 0.01)
    values[100:] *= 1.2           # old change, far outside the window
    values[950:] *= 0.9
    recent = [c.index for c in detect_recent([[v] for v in values])]
    assert recent == [950]
    assert find_change_points(list(values)) == [100, 950]


# ---------------------------------------------------------------- accuracy

BEFORE = [1, 1, 1, 0, 1, 1, 0, 1, 1, 1, 1, 0, 1, 1, 1, 1, 1, 0, 1, 1, 1, 1, 1, 1, 0, 1, 1, 1, 1, 1]
AFTER = [1, 0, 1, 0, 0, 1, 0, 0, 1, 1, 0, 0, 1, 1, 0, 1, 1, 1, 1, 0, 1, 1, 0, 1, 0, 1, 1, 1, 0, 1]


def test_exact_mcnemar_matches_scipy_binomtest_on_the_discordant_pairs():
    b, c, p = mcnemar_exact(BEFORE, AFTER)
    assert (b, c) == (8, 1)
    assert p == pytest.approx(stats.binomtest(c, b + c, 0.5).pvalue, rel=1e-12)


@pytest.mark.parametrize("b,c", [(0, 0), (3, 3), (0, 7), (12, 4), (40, 25)])
def test_exact_mcnemar_matches_scipy_for_many_tables(b, c):
    before = [1] * b + [0] * c + [1] * 10 + [0] * 5
    after = [0] * b + [1] * c + [1] * 10 + [0] * 5
    expected = 1.0 if b + c == 0 else stats.binomtest(b, b + c, 0.5).pvalue
    assert mcnemar_exact(before, after)[2] == pytest.approx(expected, rel=1e-12)


def test_mcnemar_refuses_vectors_of_different_lengths():
    with pytest.raises(ValueError, match="differ in length"):
        mcnemar_exact([1, 0], [1])


@pytest.mark.parametrize("k1,n1,k2,n2", [(80, 100, 65, 100), (400, 1319, 380, 1200), (5, 10, 5, 10), (3, 40, 12, 35)])
def test_two_proportion_test_matches_scipy_chi_square_without_correction(k1, n1, k2, n2):
    table = [[k1, n1 - k1], [k2, n2 - k2]]
    expected = stats.chi2_contingency(table, correction=False).pvalue
    assert two_proportion_z(k1, n1, k2, n2) == pytest.approx(expected, rel=1e-9)


def test_paired_vectors_use_mcnemar_and_unpaired_use_two_proportions():
    paired = compare_accuracy(BEFORE, AFTER)
    assert paired.method == "mcnemar_exact" and paired.discordant == (8, 1)
    assert paired.after - paired.before == pytest.approx(-7 / 30)
    unpaired = compare_accuracy(BEFORE, AFTER[:25])
    assert unpaired.method == "two_proportion_z" and unpaired.discordant is None
    assert unpaired.ci_low < unpaired.after - unpaired.before < unpaired.ci_high


# ---------------------------------------------------------------- platform classification

def _classify_trial(history) -> bool:  # type: ignore[no-untyped-def]
    names = list(history.series)
    own = history.series[names[0]]
    changes = detect(own.points, own.positions)
    if history.scenario == "none":
        return not changes
    near = [c for c in changes if abs(c.index - history.change_at) <= 3]
    if not near:
        return False
    verdict = classify_change(names[0], near[0], own, {n: history.series[n] for n in names[1:]})
    return verdict.kind == EXPECTED[history.scenario]


@pytest.mark.parametrize("platforms", [2, 3])
def test_classification_is_at_least_95_percent_correct_on_generated_histories(platforms):
    rng = np.random.default_rng(20 + platforms)
    trials = [_classify_trial(make_history(rng, scenario, platforms)) for scenario in SCENARIOS for _ in range(40)]
    assert sum(trials) / len(trials) >= 0.95, f"{sum(trials)}/{len(trials)} correct"


def test_a_platform_without_data_after_the_change_is_reported_missing():
    rng = np.random.default_rng(30)
    history = make_history(rng, "missing", 3)
    own = history.series["rocm"]
    (change,) = detect(own.points, own.positions)
    verdict = classify_change("rocm", change, own, {"cuda": history.series["cuda"], "cpu": history.series["cpu"]})
    assert verdict.kind == "inconclusive" and verdict.missing == ["cpu"] and verdict.unchanged == ["cuda"]


def test_one_measured_commit_on_each_side_is_enough_evidence_with_raw_samples():
    rng = np.random.default_rng(31)
    history = make_history(rng, "one", 2)
    own = history.series["rocm"]
    (change,) = detect(own.points, own.positions)
    cuda = history.series["cuda"]
    ends = [change.good_position, change.bad_position]
    sparse = PlatformSeries(points=[list(cuda.points[p]) + [cuda.points[p][0] * 1.001, cuda.points[p][1] * 0.999]
                                    for p in ends], positions=ends)
    verdict = classify_change("rocm", change, own, {"cuda": sparse})
    assert verdict.kind == "platform_specific", verdict.details
