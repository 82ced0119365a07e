"""The verdict and scope rules on their own: what each word means."""
from __future__ import annotations

import random

from app.pulls.verdicts import START_ROUNDS, classify, compare_items, compare_levels, look_alpha, wants_round


def jobs(level: float, n: int, noise: float, seed: int) -> list[list[float]]:
    rng = random.Random(seed)
    return [[level * (1 + rng.gauss(0, noise))] * 3 for _ in range(n)]


def verdict(platform: str, base: list[list[float]], head: list[list[float]], direction: str = "higher_is_better"):  # type: ignore[no-untyped-def]
    return compare_levels(platform, "decode", "output_throughput", direction, base, head, look_alpha(12))


def test_a_clear_drop_is_worse_with_its_interval():
    v = verdict("rocm", jobs(100, 6, 0.01, 1), jobs(80, 6, 0.01, 2))
    assert v.verdict == "worse" and v.ci[0] < v.change < v.ci[1] and -0.23 < v.change < -0.17


def test_lower_is_better_metrics_turn_the_direction_around():
    assert verdict("rocm", jobs(10, 6, 0.01, 1), jobs(12, 6, 0.01, 2), "lower_is_better").verdict == "worse"
    assert verdict("rocm", jobs(10, 6, 0.01, 1), jobs(8, 6, 0.01, 2), "lower_is_better").verdict == "better"


def test_same_levels_are_unchanged_once_the_interval_is_narrow():
    assert verdict("cuda", jobs(100, 6, 0.01, 1), jobs(100, 6, 0.01, 2)).verdict == "unchanged"


def test_a_significant_change_below_the_detectors_minimum_is_not_worse():
    v = verdict("cuda", jobs(100, 12, 0.001, 1), jobs(99, 12, 0.001, 2))
    assert v.p_value < 1e-6 and v.verdict == "unchanged"


def test_noise_too_large_for_the_rounds_is_inconclusive_and_asks_for_a_round():
    v = verdict("cpu", jobs(100, 3, 0.05, 1), jobs(96, 3, 0.05, 2))
    assert v.verdict == "inconclusive"
    assert wants_round([v], START_ROUNDS, 12) and not wants_round([v], 12, 12)


def test_constant_hazard_counts_decide_without_spread():
    zero = [[0.0]] * 3
    assert compare_levels("rocm-sim", "decode", "hazards", "lower_is_better", zero, zero).verdict == "unchanged"
    assert compare_levels("rocm-sim", "decode", "hazards", "lower_is_better", zero, [[2.0]] * 3).verdict == "worse"


def test_accuracy_vectors_are_paired_with_mcnemar():
    base = [[1] * 150 + [0] * 50] * 3
    head = [[1] * 110 + [0] * 90] * 3
    v = compare_items("cuda", "gsm8k", "gsm8k", base, head)
    assert v.metric == "items:gsm8k" and v.verdict == "worse" and v.p_value < 1e-9
    assert compare_items("cuda", "gsm8k", "gsm8k", base, base).verdict == "unchanged"


def test_scope_words_follow_the_alerts():
    rocm = verdict("rocm", jobs(100, 6, 0.01, 1), jobs(80, 6, 0.01, 2))
    cuda = verdict("cuda", jobs(100, 6, 0.01, 3), jobs(100, 6, 0.01, 4))
    cuda_drop = verdict("cuda", jobs(100, 6, 0.01, 3), jobs(80, 6, 0.01, 4))
    [specific] = classify([rocm, cuda])
    assert (specific.scope, specific.platforms) == ("platform_specific", ["rocm"])
    [common] = classify([rocm, cuda_drop])
    assert (common.scope, common.platforms) == ("common", ["cuda", "rocm"])
    assert classify([cuda]) == []


def test_app_mode_needs_both_settings_and_says_which_is_missing():
    import pytest

    from app.core.config import ConfigError, load_settings
    with pytest.raises(ConfigError, match="PARALLAX_GITHUB_APP_PRIVATE_KEY_FILE is not set"):
        load_settings({"PARALLAX_GITHUB_APP_ID": "12"})


def test_suite_keys_for_pull_requests_are_checked():
    import pytest

    from app.core.config import ConfigError, parse_catalogue
    suite = {"name": "d", "command": ["true"], "platforms": ["cpu"]}
    assert parse_catalogue({"suites": [suite]})["suites"][0].pr_max_rounds == 12
    assert parse_catalogue({"suites": [dict(suite, pull_requests=False)]})["suites"][0].pull_requests is False
    with pytest.raises(ConfigError, match="pr_max_rounds must be a positive integer"):
        parse_catalogue({"suites": [dict(suite, pr_max_rounds=0)]})
    with pytest.raises(ConfigError, match="pull_requests must be true or false"):
        parse_catalogue({"suites": [dict(suite, pull_requests="yes")]})
