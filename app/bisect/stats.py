"""The three-way verdict between two commits' raw samples: different, same, or need more data.

Two rank tests look at the raw samples (never at a mean): Mann-Whitney U (a shift of the
middle) and Kolmogorov-Smirnov (any change of shape, e.g. a new slow mode); `p` is the smaller
of their two-sided p-values.

- **different** when `p <= alpha` (0.01).
- **same** when `p` is above a threshold that depends on the effect sought and on the sample
  counts: the p-value that a real change of that size would stay under with probability
  `power`. With few samples even a real change gives a large p, so the threshold is high and
  "same" needs a very unsurprising pair; with many samples it drops towards alpha. The threshold
  comes from a seeded simulation of the same two tests (exact for the small counts where a
  normal approximation of U is poor), cached per (effect, counts).
- **unknown** otherwise: the caller adds repeats.

The effect sought is relative (the alert's magnitude, e.g. 0.08); it is turned into a
standardised effect with a cautious noise estimate (an upper 95 % bound on the pooled
within-commit standard deviation over every measured commit of the search), so that a noise
estimate from few samples cannot make "same" too easy.
"""
from __future__ import annotations

import math
import warnings
from dataclasses import dataclass
from enum import Enum
from functools import lru_cache
from typing import Sequence

import numpy as np
from scipy import stats

ALPHA = 0.01
POWER = 0.95
SIMULATIONS = 2000
EFFECT_GRID = 1.05  # effects are rounded down to a power of this (threshold cache key)
MAX_STANDARDISED_EFFECT = 50.0


class Verdict(str, Enum):
    different = "different"
    same = "same"
    unknown = "unknown"


@dataclass(frozen=True)
class Comparison:
    verdict: Verdict
    p_value: float          # min(p_mwu, p_ks)
    p_mwu: float
    p_ks: float
    same_above: float       # "same" when p_value is above this
    relative_change: float  # median(right) / median(left) - 1
    n_left: int
    n_right: int


@dataclass(frozen=True)
class Effect:
    """A change between two groups of samples: relative change of medians with a bootstrap
    95 % interval."""

    relative_change: float
    ci_low: float
    ci_high: float
    before: float
    after: float


def _scipy_p_values(left: np.ndarray, right: np.ndarray) -> tuple[float, float]:
    """Two-sided Mann-Whitney U and KS p-values of one pair of samples."""
    with warnings.catch_warnings():
        # KS falls back from exact to asymptotic for some sizes and says so; both are fine.
        warnings.simplefilter("ignore", RuntimeWarning)
        p_mwu = stats.mannwhitneyu(left, right, alternative="two-sided").pvalue
        p_ks = stats.ks_2samp(left, right, alternative="two-sided").pvalue
    return float(p_mwu), float(p_ks)


def _rank_statistics(left: np.ndarray, right: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per row of untied samples: Mann-Whitney U of `left`, and the KS statistic in units of
    1 / (n_left * n_right) (an integer), from the order of the merged row."""
    n_left, n_right = left.shape[1], right.shape[1]
    from_left = np.argsort(np.concatenate([left, right], axis=1), axis=1, kind="stable") < n_left
    u = (from_left * np.arange(1, n_left + n_right + 1)).sum(axis=1) - n_left * (n_left + 1) // 2
    # The gap between the two empirical CDFs after each sorted value.
    gaps = np.cumsum(np.where(from_left, n_right, -n_left), axis=1)
    return u, np.abs(gaps).max(axis=1)


# Without ties, scipy's p-values depend only on the statistic and the two sizes (exact or
# asymptotic, chosen by the sizes). scipy costs milliseconds per call, mostly its argument
# handling, and a search compares dozens of pairs per round (inside the duty's database
# transaction), so each p-value is computed once per (test, statistic, sizes).
_P_BY_STATISTIC: dict[tuple[str, int, int, int], float] = {}
P_CACHE_LIMIT = 200_000


def _memoised_p_values(left: np.ndarray, right: np.ndarray, u: int, d: int) -> tuple[float, float]:
    """scipy's p-values of an untied pair whose statistics are `u` and `d` (`_rank_statistics`)."""
    mwu_key, ks_key = ("mwu", u, len(left), len(right)), ("ks", d, len(left), len(right))
    p_mwu, p_ks = _P_BY_STATISTIC.get(mwu_key), _P_BY_STATISTIC.get(ks_key)
    if p_mwu is None or p_ks is None:
        if len(_P_BY_STATISTIC) >= P_CACHE_LIMIT:
            _P_BY_STATISTIC.clear()
        p_mwu, p_ks = _scipy_p_values(left, right)
        _P_BY_STATISTIC[mwu_key], _P_BY_STATISTIC[ks_key] = p_mwu, p_ks
    return p_mwu, p_ks


def p_values(left: Sequence[float], right: Sequence[float]) -> tuple[float, float]:
    """Two-sided Mann-Whitney U and KS p-values (what scipy gives; memoised when untied)."""
    a, b = np.asarray(left, dtype=float), np.asarray(right, dtype=float)
    merged = np.concatenate([a, b])
    if not np.isfinite(merged).all() or np.unique(merged).size < merged.size:
        return _scipy_p_values(a, b)  # ties change both p-values beyond the statistic
    u, d = _rank_statistics(a[None, :], b[None, :])
    return _memoised_p_values(a, b, int(u[0]), int(d[0]))


@lru_cache(maxsize=4096)
def _simulated_threshold(step: int, n_left: int, n_right: int, power: float) -> float:
    rng = np.random.default_rng([20260, step + 1000, n_left, n_right])
    left = rng.standard_normal((SIMULATIONS, n_left))
    right = rng.standard_normal((SIMULATIONS, n_right)) + EFFECT_GRID ** step
    p_mwu = np.asarray(stats.mannwhitneyu(left, right, alternative="two-sided", axis=-1).pvalue, dtype=float)
    # scipy's KS loops over rows in Python (about 1 s for 2000 rows); continuous draws have no
    # ties, so each row's KS p-value follows from its statistic, of which there are few.
    u, d = _rank_statistics(left, right)
    p_ks = np.empty(SIMULATIONS)
    for value in np.unique(d):
        rows = np.flatnonzero(d == value)
        p_ks[rows] = _memoised_p_values(left[rows[0]], right[rows[0]], int(u[rows[0]]), int(value))[1]
    p = np.minimum(p_mwu, p_ks)
    return float(np.quantile(p, power))


def same_threshold(standardised_effect: float, n_left: int, n_right: int, power: float = POWER) -> float:
    """The p-value above which two groups count as the same: a real shift of
    `standardised_effect` noise units would give a p-value at or below it with probability
    `power` (normal noise; rank tests, so only the shape's tails matter, not its scale)."""
    if n_left < 1 or n_right < 1:
        return 1.0
    effect = min(abs(standardised_effect), MAX_STANDARDISED_EFFECT)
    if effect < 0.1:
        return 1.0  # no change this small can be told from noise: never "same"
    # Rounding the effect down makes the threshold higher (stricter about "same").
    step = math.floor(math.log(effect) / math.log(EFFECT_GRID))
    return _simulated_threshold(step, n_left, n_right, power)


def noise_scale(groups: Sequence[Sequence[float]], confidence: float = 0.95) -> float:
    """An upper confidence bound on the noise: the pooled standard deviation of every sample
    around its own group's mean, scaled up by the chi-square bound for its degrees of freedom.
    With few samples the plain estimate is often far too small, which would make "same" too
    easy; an outlier only makes it larger (more repeats, never a wrong "same"). 0 when nothing
    varies or no group has two samples."""
    sized = [np.asarray(g, dtype=float) for g in groups if len(g) >= 2]
    dof = sum(len(g) - 1 for g in sized)
    if dof == 0:
        return 0.0
    squares = sum(float(((g - g.mean()) ** 2).sum()) for g in sized)
    return math.sqrt(squares / float(stats.chi2.ppf(1.0 - confidence, dof)))


def standardised(relative_effect: float, level: float, sigma: float) -> float:
    if sigma <= 0:
        return MAX_STANDARDISED_EFFECT
    return abs(relative_effect * level) / sigma


def compare(left: Sequence[float], right: Sequence[float], standardised_effect: float,
            alpha: float = ALPHA, power: float = POWER) -> Comparison:
    """The three-way verdict between two commits' samples."""
    if not left or not right:
        raise ValueError("compare needs samples on both sides")
    p_mwu, p_ks = p_values(left, right)
    p = min(p_mwu, p_ks)
    if math.isnan(p):  # every sample equal on both sides: nothing separates them
        p = p_mwu = p_ks = 1.0
    above = same_threshold(standardised_effect, len(left), len(right), power)
    if p <= alpha:
        verdict = Verdict.different
    elif p > above:
        verdict = Verdict.same
    else:
        verdict = Verdict.unknown
    return Comparison(verdict=verdict, p_value=p, p_mwu=p_mwu, p_ks=p_ks, same_above=above,
                      relative_change=relative_change(left, right), n_left=len(left), n_right=len(right))


def relative_change(left: Sequence[float], right: Sequence[float]) -> float:
    before, after = float(np.median(left)), float(np.median(right))
    if before == 0:
        return 0.0 if after == 0 else math.copysign(math.inf, after)
    return after / before - 1.0


def effect(left: Sequence[float], right: Sequence[float], seed: int = 0) -> Effect:
    """Relative change of medians with a percentile-bootstrap 95 % interval."""
    a, b = np.asarray(left, dtype=float), np.asarray(right, dtype=float)
    change = relative_change(a, b)
    low = high = change
    if len(a) >= 2 and len(b) >= 2 and np.median(a) != 0:
        def statistic(x: np.ndarray, y: np.ndarray, axis: int = -1) -> np.ndarray:
            return np.median(y, axis=axis) / np.median(x, axis=axis) - 1.0

        result = stats.bootstrap((a, b), statistic, vectorized=True, paired=False, n_resamples=2000,
                                 confidence_level=0.95, method="percentile", rng=np.random.default_rng(seed))
        low, high = float(result.confidence_interval.low), float(result.confidence_interval.high)
    return Effect(relative_change=change, ci_low=low, ci_high=high, before=float(np.median(a)),
                  after=float(np.median(b)))
