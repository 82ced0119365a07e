"""Base against head: the verdict per platform x suite x metric, and one scope per metric across
platforms. Pure functions of the measured samples (no database), shared by the service and
`bench/pr_verdict.py`.

A job's level is the median of its samples: run-to-run noise is larger than the spread inside
one run, so pooled samples would over-trust repetitions (see `app.detection.detector`). Base and
head levels are compared on the log scale with Welch's t test; the relative change is the ratio
of geometric means, with its 95 % interval. The thresholds are the detector's: a change is
`worse` or `better` when p <= alpha and it is at least `min_relative` (2 %, per-metric
overrides as in detection, raised to the suite's noise floor on the platform, `min_change`),
where alpha is the detector's 0.01 shared over the looks the adaptive rounds take
(`look_alpha`); `unchanged` when it is not, and the 95 % interval lies inside +-`EQUIVALENCE`
(4 %, so a 5 % change is not called unchanged; the noise floor where it is larger); else
`inconclusive` (more rounds help). `bench/pr_verdict.py` measured these choices.
Accuracy suites compare their per-question vectors, paired round by round (exact McNemar).
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any, Sequence

import numpy as np
from scipy import stats

from app.detection.detector import DEFAULT_CONFIG, compare_accuracy
from app.detection.service import ACCURACY_MIN_DROP, config_for

ALPHA = DEFAULT_CONFIG.alpha
EQUIVALENCE = 0.04
START_ROUNDS = 3          # A/B rounds queued at once; more are added while a verdict is inconclusive
VERDICTS = ("worse", "better", "unchanged", "inconclusive")
SCOPES = ("platform_specific", "common", "inconclusive")


@dataclass(frozen=True)
class MetricVerdict:
    platform: str
    suite: str
    metric: str
    direction: str
    base_median: float
    head_median: float
    change: float                 # relative, head against base
    ci: tuple[float, float]       # 95 % interval of `change`
    p_value: float
    verdict: str                  # worse / better / unchanged / inconclusive
    rounds: int                   # base and head jobs measured (the fewer of the two)

    def as_json(self) -> dict[str, Any]:
        out = asdict(self)
        out["ci"] = [self.ci[0], self.ci[1]]
        return out


@dataclass(frozen=True)
class Scope:
    suite: str
    metric: str
    scope: str                    # platform_specific / common / inconclusive
    platforms: list[str]          # the platforms that changed
    direction: str                # worse / better

    def as_json(self) -> dict[str, Any]:
        return asdict(self)


def look_alpha(max_rounds: int) -> float:
    """The detector's alpha shared over every look the adaptive rounds may take (Bonferroni):
    a verdict is computed after each round, and each look is another chance of a false alarm."""
    return ALPHA / max(1, max_rounds - START_ROUNDS + 1)


def _label(change: float, low: float, high: float, p: float, direction: str, threshold: float,
           alpha: float = ALPHA, equivalence: float = EQUIVALENCE) -> str:
    good_sign = 1.0 if direction == "higher_is_better" else -1.0
    if p <= alpha and abs(change) >= threshold:
        return "better" if math.copysign(1.0, change) == good_sign else "worse"
    if -equivalence < low and high < equivalence:
        return "unchanged"
    return "inconclusive"


def compare_levels(platform: str, suite: str, metric: str, direction: str,
                   base: Sequence[Sequence[float]], head: Sequence[Sequence[float]], alpha: float = ALPHA,
                   floor: float = 0.0) -> MetricVerdict:
    """`base` and `head` hold each job's samples (one list per job). `floor` is the suite's noise
    floor on the platform (`min_change`): a smaller change is neither worse nor better, and the
    interval that reads as unchanged widens to it."""
    base_levels = np.array([float(np.median(s)) for s in base if len(s)])
    head_levels = np.array([float(np.median(s)) for s in head if len(s)])
    rounds = int(min(len(base_levels), len(head_levels)))
    base_median = float(np.median(base_levels)) if len(base_levels) else math.nan
    head_median = float(np.median(head_levels)) if len(head_levels) else math.nan
    if rounds < 2 or (base_levels <= 0).any() or (head_levels <= 0).any():
        return _simple(platform, suite, metric, direction, base_levels, head_levels, rounds)
    log_base, log_head = np.log(base_levels), np.log(head_levels)
    diff = float(log_head.mean() - log_base.mean())
    var_b, var_h = float(log_base.var(ddof=1)), float(log_head.var(ddof=1))
    se2 = var_b / len(log_base) + var_h / len(log_head)
    if se2 <= 0:  # nothing varies: identical levels are the same, different ones differ
        p = 1.0 if diff == 0 else 0.0
        low = high = diff
    else:
        dof = se2 ** 2 / ((var_b / len(log_base)) ** 2 / (len(log_base) - 1)
                          + (var_h / len(log_head)) ** 2 / (len(log_head) - 1))
        se = math.sqrt(se2)
        p = float(2 * stats.t.sf(abs(diff) / se, dof))
        half = float(stats.t.ppf(0.975, dof)) * se
        low, high = diff - half, diff + half
    change, ci = math.expm1(diff), (math.expm1(low), math.expm1(high))
    verdict = _label(change, ci[0], ci[1], p, direction, config_for(metric, floor).min_relative, alpha,
                     max(EQUIVALENCE, floor))
    return MetricVerdict(platform, suite, metric, direction, base_median, head_median, change, ci, p, verdict, rounds)


def _simple(platform: str, suite: str, metric: str, direction: str, base: np.ndarray, head: np.ndarray,
            rounds: int) -> MetricVerdict:
    """One round (or a level at or below zero, e.g. a hazard count): only an exact tie or a
    difference with no spread on either side decides anything."""
    base_median = float(np.median(base)) if len(base) else math.nan
    head_median = float(np.median(head)) if len(head) else math.nan
    if not len(base) or not len(head):
        return MetricVerdict(platform, suite, metric, direction, base_median, head_median, math.nan,
                             (math.nan, math.nan), math.nan, "inconclusive", rounds)
    if base_median == 0:
        change = 0.0 if head_median == 0 else math.copysign(math.inf, head_median)
    else:
        change = head_median / base_median - 1.0
    constant = rounds >= 2 and np.ptp(base) == 0 and np.ptp(head) == 0
    if constant and change == 0:
        return MetricVerdict(platform, suite, metric, direction, base_median, head_median, 0.0, (0.0, 0.0), 1.0,
                         "unchanged", rounds)
    if constant:
        verdict = _label(change, change, change, 0.0, direction, 0.0)
        return MetricVerdict(platform, suite, metric, direction, base_median, head_median, change,
                             (change, change), 0.0, verdict, rounds)
    return MetricVerdict(platform, suite, metric, direction, base_median, head_median, change,
                         (math.nan, math.nan), math.nan, "inconclusive", rounds)


def compare_items(platform: str, suite: str, name: str, base: Sequence[Sequence[int]],
                  head: Sequence[Sequence[int]], alpha: float = ALPHA) -> MetricVerdict:
    """Per-question correctness, paired round by round (the same questions in the same order):
    exact McNemar on the concatenated vectors; the change is relative accuracy."""
    pairs = [(b, h) for b, h in zip(base, head) if len(b) == len(h) and len(b)]
    metric = f"items:{name}"
    if not pairs:
        return MetricVerdict(platform, suite, metric, "higher_is_better", math.nan, math.nan, math.nan,
                             (math.nan, math.nan), math.nan, "inconclusive", 0)
    before = [int(x) for b, _ in pairs for x in b]
    after = [int(x) for _, h in pairs for x in h]
    result = compare_accuracy(before, after)
    scale = result.before or 1.0
    change = (result.after - result.before) / scale
    low, high = result.ci_low / scale, result.ci_high / scale
    if result.p_value <= alpha and abs(result.after - result.before) >= ACCURACY_MIN_DROP:
        verdict = "better" if result.after > result.before else "worse"
    elif -EQUIVALENCE < low and high < EQUIVALENCE:
        verdict = "unchanged"
    else:
        verdict = "inconclusive"
    return MetricVerdict(platform, suite, metric, "higher_is_better", result.before, result.after, change,
                         (low, high), result.p_value, verdict, len(pairs))


def classify(verdicts: Sequence[MetricVerdict]) -> list[Scope]:
    """Per suite and metric that changed somewhere: `platform_specific` when some platforms
    changed and at least one other is `unchanged`, `common` when every platform changed the same
    way, else `inconclusive` (the same words the alerts use)."""
    by_key: dict[tuple[str, str], list[MetricVerdict]] = {}
    for v in verdicts:
        by_key.setdefault((v.suite, v.metric), []).append(v)
    scopes = []
    for (suite, metric), group in sorted(by_key.items()):
        for direction in ("worse", "better"):
            changed = sorted(v.platform for v in group if v.verdict == direction)
            if not changed:
                continue
            unchanged = [v for v in group if v.verdict == "unchanged"]
            if len(changed) == len(group) and len(group) > 1:
                scope = "common"
            elif unchanged:
                scope = "platform_specific"
            else:
                scope = "inconclusive"
            scopes.append(Scope(suite, metric, scope, changed, direction))
    return scopes


def wants_round(verdicts: Sequence[MetricVerdict], rounds: int, max_rounds: int) -> bool:
    """The adaptive rule: one more A/B round while a metric of the pair is inconclusive (or
    nothing was measured), until `max_rounds`."""
    open_metric = not verdicts or any(v.verdict == "inconclusive" for v in verdicts)
    return open_metric and rounds < max_rounds
