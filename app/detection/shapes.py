"""What real performance histories do besides stepping: seasons, noise-level changes, drifts.

The level-shift detector (`app.detection.detector`) assumes piecewise-constant levels with one
noise scale. Real histories break that in three ways this module recognises:

- **Seasonality** (a weekly infrastructure pattern, a periodic batch job): a period is accepted
  when the autocorrelation (statsmodels `acf`) of the series, less a running median that follows
  steps, peaks at a lag p and again near 2p; statsmodels' robust STL then removes the seasonal
  component before segmentation, so a season is never a change.
- **Noise-level changes** (a driver upgrade, a noisier runner pool): the scale of the first
  differences is split where a change of scale explains them best, and accepted when scipy's
  Fligner-Killeen test (robust to heavy tails) gives p < `noise_alpha` and the scale moves by at
  least `noise_ratio`. Each noise regime then gets its own sigma, and the change is reported as
  "noise changed", never as a regression.
- **Drifts** (a trend, a random walk): when the level changes found in a stretch are better
  explained by a level that wanders (statsmodels' local-level state-space model,
  `UnobservedComponents("llevel")`, a random walk plus noise) than by steps between constant
  levels (compared by BIC), they form one drift over their span, with the total change from the
  level before it to the level after it, instead of a staircase of alerts. A change whose side
  follows a straight line that carries on across it (Theil-Sen) is a drift step too.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from scipy import optimize, stats
from scipy.ndimage import median_filter


@dataclass(frozen=True)
class ShapeConfig:
    season_min_period: int = 4
    season_min_acf: float = 0.35       # autocorrelation of the de-stepped series at the period
    noise_alpha: float = 1e-6          # Fligner-Killeen p-value for a change of noise level
    noise_ratio: float = 2.0           # the noise scale must change by at least this factor
    noise_min_side: int = 20           # commits on each side of a noise change
    trend_min_points: int = 8          # commits a side needs before its own slope is trusted
    trend_min_move: float = 2.0        # the side's line must move this many sigmas by itself
    continue_points: int = 3           # commits across the change that the line must reach
    continue_z: float = 2.0            # ... within this many sigmas
    wander_min_changes: int = 2        # level changes in a stretch before a wandering level is considered
    wander_margin: float = 10.0        # BIC(steps) - BIC(random walk) above this ("very strong" evidence
                                       # on Kass & Raftery's scale): the stretch is one drift


DEFAULT_SHAPES = ShapeConfig()


@dataclass(frozen=True)
class NoiseChange:
    """The noise level changed at point `index` (scale of commit-to-commit differences)."""

    index: int
    sigma_before: float
    sigma_after: float
    ratio: float                       # sigma_after / sigma_before
    p_value: float                     # Fligner-Killeen


@dataclass(frozen=True)
class Drift:
    """A level that moved over a span of commits rather than at one: points [start, end]."""

    start: int                         # first point of the span (the first commit that moved)
    end: int                           # last point of the span
    before: float                      # level before the span
    after: float                       # level after the span
    relative_change: float             # (after - before) / |before|
    steps: int                         # level changes the span absorbed


def _steps_bic(values: np.ndarray, changes: list[int]) -> float:
    """BIC of constant levels between `changes` with one Gaussian noise scale: per change a
    location and a level, plus the first level and the variance."""
    n = len(values)
    bounds = [0, *changes, n]
    rss = sum(float(np.sum((values[a:b] - values[a:b].mean()) ** 2)) for a, b in zip(bounds[:-1], bounds[1:]))
    variance = max(rss / n, 1e-12)
    log_likelihood = -0.5 * n * (math.log(2 * math.pi * variance) + 1.0)
    return -2.0 * log_likelihood + (2 * len(changes) + 2) * math.log(n)


def _random_walk_bic(values: np.ndarray) -> float:
    """BIC of statsmodels' local-level model (a random-walk level plus noise; two variances),
    its likelihood maximised over the log-variances from a method-of-moments start (`fit`'s
    numerical gradients cost ten times as much for the same optimum)."""
    # Imported here, as acf and STL below: statsmodels and pandas are 0.7 CPU-s of every process
    # that imports the service (each CLI command, server and test run), which most never use.
    from statsmodels.tsa.statespace.structural import UnobservedComponents

    model = UnobservedComponents(values, "llevel")
    diffs = np.diff(values)
    gamma0 = float(np.var(diffs))
    gamma1 = float(np.mean((diffs[1:] - diffs.mean()) * (diffs[:-1] - diffs.mean())))
    noise = max(-gamma1, 0.05 * gamma0, 1e-8)
    level = max(gamma0 - 2.0 * noise, 0.05 * gamma0, 1e-8)

    def cost(log_variances: np.ndarray) -> float:
        value = float(model.loglike(np.exp(log_variances)))
        return -value if math.isfinite(value) else 1e12

    best = optimize.minimize(cost, np.log([noise, level]), method="Nelder-Mead",
                             options={"xatol": 0.05, "fatol": 0.05, "maxfev": 200})
    return 2.0 * float(best.fun) + 2 * math.log(len(values))


def wander_evidence(levels: np.ndarray, changes: list[int], sigma: np.ndarray) -> float:
    """How much better a wandering level explains `levels` than constant levels between the
    change points `changes` (indices into `levels`): BIC(steps) - BIC(local level), on levels
    divided by the noise scale at each point (`sigma`: a noisy regime must not pass for a
    wandering level). Positive: the changes are a staircase cut into a random walk or a trend."""
    if len(levels) < 4 or float(np.min(sigma)) <= 0.0:
        return -math.inf
    values = (levels - float(np.median(levels))) / sigma
    return _steps_bic(values, changes) - _random_walk_bic(values)


def seasonal_period(levels: np.ndarray, config: ShapeConfig = DEFAULT_SHAPES) -> int | None:
    """A period p when the series, less a running median that follows its steps, repeats with
    autocorrelation >= `season_min_acf` at lag p and stays positive near lag 2p; else None."""
    from statsmodels.tsa.stattools import acf

    n = len(levels)
    if n < 4 * config.season_min_period:
        return None
    max_period = n // 4
    width = min(2 * max_period + 1, 61)
    residual = levels - median_filter(levels, size=width, mode="nearest")
    if float(np.std(residual)) == 0.0:
        return None
    correlations = acf(residual, nlags=min(n - 1, 2 * max_period + 2), fft=True)
    best, best_value = None, config.season_min_acf
    for lag in range(config.season_min_period, max_period + 1):
        value = correlations[lag]
        if value > best_value and value >= correlations[lag - 1] and value >= correlations[lag + 1]:
            best, best_value = lag, value
    if best is None:
        return None
    echo = max(correlations[max(1, 2 * best - 1):2 * best + 2])
    return best if echo > 0.5 * config.season_min_acf else None


def deseasonalise(levels: np.ndarray, period: int) -> np.ndarray:
    """The series less the seasonal component of statsmodels' robust STL."""
    from statsmodels.tsa.seasonal import STL

    seasonal = STL(levels, period=period, robust=True).fit().seasonal
    return levels - np.asarray(seasonal)


def _robust_scale(values: np.ndarray) -> float:
    return 1.4826 * float(np.median(np.abs(values - np.median(values))))


def noise_change(levels: np.ndarray, config: ShapeConfig = DEFAULT_SHAPES) -> NoiseChange | None:
    """The strongest change of noise level: split the log absolute first differences (a scale
    change is a mean change there, and steps or spikes move only one or two differences) where
    the mean moves most, then test the two sides' differences with Fligner-Killeen."""
    diffs = np.diff(levels)
    m = len(diffs)
    if m < 2 * config.noise_min_side:
        return None
    logs = np.log(np.abs(diffs - np.median(diffs)) + 1e-12 * (1.0 + float(np.median(np.abs(levels)))))
    cumulative = np.concatenate([[0.0], np.cumsum(logs)])
    k = np.arange(config.noise_min_side, m - config.noise_min_side + 1)
    left_mean = cumulative[k] / k
    right_mean = (cumulative[m] - cumulative[k]) / (m - k)
    score = np.abs(left_mean - right_mean) * np.sqrt(k * (m - k) / m)
    split = int(k[int(np.argmax(score))])
    before, after = diffs[:split], diffs[split:]
    sigma_before, sigma_after = _robust_scale(before), _robust_scale(after)
    if sigma_before <= 0.0 or sigma_after <= 0.0:
        return None
    ratio = sigma_after / sigma_before
    if max(ratio, 1.0 / ratio) < config.noise_ratio:
        return None
    p_value = float(stats.fligner(before, after).pvalue)
    if p_value >= config.noise_alpha:
        return None
    # diffs[split] is levels[split + 1] - levels[split]: the new noise shows from point split + 1.
    return NoiseChange(index=split + 1, sigma_before=sigma_before / math.sqrt(2.0),
                       sigma_after=sigma_after / math.sqrt(2.0), ratio=ratio, p_value=p_value)


def _continues(fit_on: np.ndarray, other: np.ndarray, sigma: float, forward: bool,
               config: ShapeConfig) -> bool:
    """Does the line through `fit_on` (scipy's Theil-Sen slope, robust to outliers) move by itself
    and carry on into the first commits of `other`, within `continue_z` sigmas? Then the change
    between them is a step of a drift, not a shift of level."""
    if len(fit_on) < config.trend_min_points or len(other) < 1:
        return False
    t = np.arange(len(fit_on), dtype=float)
    slope, intercept, _, _ = stats.theilslopes(fit_on, t)
    if abs(slope) * len(fit_on) < config.trend_min_move * sigma:
        return False
    ahead = other[:config.continue_points] if forward else other[-config.continue_points:]
    where = (len(fit_on) + (len(ahead) - 1) / 2.0) if forward else (-1.0 - (len(ahead) - 1) / 2.0)
    return abs(float(np.median(ahead)) - (intercept + slope * where)) < config.continue_z * sigma


def wandering(levels: np.ndarray, indices: list[int], sigma: np.ndarray,
              config: ShapeConfig = DEFAULT_SHAPES, max_side: int = 60) -> set[int]:
    """Which change points (positions in ascending `indices`) are a staircase cut into a
    wandering level: all of them when the local-level model beats the steps on the whole series
    (`wander_evidence`), else those of each run of changes closer than `max_side` to each other
    whose stretch (with up to `max_side` commits each side) it beats."""
    if len(indices) < config.wander_min_changes:
        return set()
    if wander_evidence(levels, indices, sigma) > config.wander_margin:
        return set(range(len(indices)))
    runs: list[list[int]] = [[0]]
    for j in range(1, len(indices)):
        if indices[j] - indices[j - 1] < max_side:
            runs[-1].append(j)
        else:
            runs.append([j])
    found: set[int] = set()
    for run in runs:
        if len(run) < config.wander_min_changes or len(run) == len(indices):
            continue
        low = max(indices[run[0] - 1] if run[0] > 0 else 0, indices[run[0]] - max_side)
        high = min(indices[run[-1] + 1] if run[-1] + 1 < len(indices) else len(levels), indices[run[-1]] + max_side)
        inner = [indices[j] - low for j in run]
        if wander_evidence(levels[low:high], inner, sigma[low:high]) > config.wander_margin:
            found.update(run)
    return found


def drift_groups(levels: np.ndarray, indices: list[int], sigma: np.ndarray,
                 config: ShapeConfig = DEFAULT_SHAPES, max_side: int = 60) -> list[list[int]]:
    """Which change points (ascending `indices` into `levels`, the cleaned series; `sigma` the
    noise scale at each point) are steps of a drift rather than shifts of level: those of a
    wandering stretch (`wandering`), and a change where the level on one side moves by itself
    and its line carries on across the change (`_continues`). Neighbouring drift steps form one
    drift; a lone one is a drift too (a trend cut once). Returns the drifts, as lists of
    positions in `indices`."""
    wander = wandering(levels, indices, sigma, config, max_side)
    bounds = [0, *indices, len(levels)]
    steps = []
    for j, index in enumerate(indices):
        left = levels[max(bounds[j], index - max_side):index]
        right = levels[index:min(bounds[j + 2], index + max_side)]
        scale = float(sigma[index])
        steps.append(j in wander or _continues(left, right, scale, True, config)
                     or _continues(right[::-1], left[::-1], scale, True, config))
    groups: list[list[int]] = []
    current: list[int] = []
    for j, step in enumerate(steps):
        if step and current and current[-1] == j - 1:
            current.append(j)
        elif step:
            if current:
                groups.append(current)
            current = [j]
    if current:
        groups.append(current)
    return groups
