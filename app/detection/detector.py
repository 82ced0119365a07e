"""Change points in performance histories, and the tests behind accuracy alerts.

`find_change_points(values)` is the contract (DESIGN.md): one value per commit, default
configuration, 0-based indices where a new level starts. The service uses the richer
`detect(points, positions)`, where each point holds every raw sample measured at one commit and
`positions` are the commits' places on the branch (gaps are commits that were not measured).

The method, in order:
1. each point's level is the median of its finite samples; points without any are dropped;
2. the noise scale sigma comes from first differences, trimmed at 5 MADs (robust to steps
   and spikes);
3. single outliers (a point far from both neighbours, which agree with each other) are spikes:
   they are replaced by their neighbours' median for segmentation and left out of the tests;
4. candidates come from ruptures' binary segmentation on the noise-normalised levels with a
   BIC-style penalty (`penalty * log n`) and an O(1) cumulative-sum L2 cost;
5. each candidate must pass, against its neighbouring segments (at most `max_side` commits each):
   a Mann-Whitney U test, an effect size on the per-commit levels (each side winsorized at
   `winsor` sigmas around its own median; its threshold grows for young series, see
   `effect_threshold`), and a minimum relative
   magnitude. The U test compares per-commit levels when both sides have `min_segment` commits
   and pools the raw samples only when a side is shorter (one commit at each end of a range in
   the platform comparison): run-to-run noise is larger than the spread of samples within one
   run, so pooled samples of many commits would over-trust repetitions (measured: p ~ 1e-10 on
   pure noise). The weakest failing candidate (by the level difference its split explains) is
   removed and the rest re-tested until all pass.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from functools import lru_cache
from typing import Mapping, Sequence

import numpy as np
import ruptures as rpt
from ruptures.base import BaseCost
from scipy import stats

from app.detection.shapes import (
    DEFAULT_SHAPES,
    Drift,
    NoiseChange,
    ShapeConfig,
    deseasonalise,
    drift_groups,
    noise_change,
    seasonal_period,
)

MAD_TO_SIGMA = 1.4826
TRIM_MADS = 5.0   # noise_sigma keeps the first differences within this many MADs of their median


@dataclass(frozen=True)
class DetectorConfig:
    min_points: int = 10         # fewer measured commits than this: nothing is reported
    min_segment: int = 3         # a new level must be seen at this many commits
    penalty: float = 2.6         # binary segmentation penalty, times log(n), in noise variances
    alpha: float = 1e-2          # Mann-Whitney U p-value (commit levels; raw samples if a side is short)
    min_effect: float = 3.7      # |mean difference| / (sigma * sqrt(1/n1 + 1/n2)) on winsorized levels
    min_relative: float = 0.02   # |after - before| / |before|
    spike_z: float = 5.0         # a spike is this many sigmas from its agreeing neighbours
    max_side: int = 60           # commits per side used by the tests (the recent level only)
    window: int = 200            # incremental detection re-examines this many recent commits
    winsor: float = 2.0          # the effect size clips each side's levels this many sigmas from its median
    shapes: ShapeConfig = DEFAULT_SHAPES  # seasons, noise-level changes and drifts (app.detection.shapes)


DEFAULT_CONFIG = DetectorConfig()


@dataclass(frozen=True)
class ChangePoint:
    """A change between point `index - 1` (last at the old level) and point `index`."""

    index: int
    good_position: int           # position of the last commit measured at the old level
    bad_position: int            # position of the first commit measured at the new level
    before: float                # median level of the left segment
    after: float                 # median level of the right segment
    relative_change: float       # (after - before) / |before|
    ci_low: float                # 95 % interval of the relative change
    ci_high: float
    p_value: float               # Mann-Whitney U, two-sided, raw samples
    effect: float                # robust z of the level difference
    n_before: int                # commits used on each side
    n_after: int


@dataclass
class Prepared:
    """A series cleaned for detection: finite levels, noise scale, spikes."""

    levels: np.ndarray                        # per-point median, spikes replaced
    samples: list[np.ndarray]                 # finite raw samples per kept point
    positions: list[int]
    source_index: list[int]                   # index into the caller's points
    spikes: set[int] = field(default_factory=set)  # indices into `levels`
    sigma: float = 0.0
    scale: np.ndarray = field(default_factory=lambda: np.zeros(0))  # noise sigma at each point
    period: int | None = None                 # seasonal period removed before segmentation
    noise: NoiseChange | None = None          # where the noise level changed, if it did


@dataclass(frozen=True)
class Analysis:
    """Everything one scan finds: level shifts (`changes`, the alerts), drifts over spans (each
    reported once), where the noise level changed, and the seasonal period taken out."""

    changes: list[ChangePoint]
    drifts: list[Drift]
    noise: NoiseChange | None
    period: int | None


class _CumsumL2(BaseCost):
    """Squared-error cost in O(1) per segment from cumulative sums. ruptures' own "l2" cost
    recomputes a variance per call (O(n)), which makes binary segmentation quadratic."""

    model = "l2-cumsum"
    min_size = 2

    def fit(self, signal: np.ndarray) -> "_CumsumL2":
        values = np.asarray(signal, dtype=float).reshape(-1)
        self.signal = values.reshape(-1, 1)
        self._s1 = np.concatenate([[0.0], np.cumsum(values)])
        self._s2 = np.concatenate([[0.0], np.cumsum(values * values)])
        return self

    def error(self, start: int, end: int) -> float:
        n = end - start
        total = self._s1[end] - self._s1[start]
        return float(self._s2[end] - self._s2[start] - total * total / n)


def noise_sigma(levels: np.ndarray) -> float:
    """Point-to-point noise from first differences (a step moves one difference, a spike two):
    the standard deviation of the differences within `TRIM_MADS` MADs of their median, over
    sqrt(2). The MAD alone is robust but noisy (37 % efficiency) and reads banding too low;
    trimming keeps the robustness with most of the standard deviation's precision. The trim is
    wide because the MAD of a young series' dozen differences is itself noisy: at 3.5 MADs a
    chance-narrow MAD cut real noise away (a 14-commit series read 0.062 for noise of about
    0.23), and young null series alerted 1.6 times as often (`bench/detection_quality.py --only
    young`: 0.75 against 0.47 false alerts per 1,000 commits)."""
    if len(levels) < 3:
        return 0.0
    diffs = np.diff(levels)
    centre = float(np.median(diffs))
    mad = MAD_TO_SIGMA * float(np.median(np.abs(diffs - centre)))
    if mad == 0.0 or len(diffs) < 3:
        return mad / math.sqrt(2.0)
    kept = diffs[np.abs(diffs - centre) <= TRIM_MADS * mad]
    return float(np.std(kept, ddof=1)) / math.sqrt(2.0)  # a normal cut at 5 sd keeps all but 2e-5 of its sd


def _floor_sigma(sigma: float, levels: np.ndarray) -> float:
    # Quantised or constant series have a MAD of zero; a tiny floor keeps the maths finite
    # while the relative-magnitude rule still refuses sub-threshold changes.
    scale = float(np.median(np.abs(levels))) if len(levels) else 0.0
    return max(sigma, 1e-4 * scale, 1e-12)


def prepare(points: Sequence[Sequence[float]], positions: Sequence[int] | None = None,
            config: DetectorConfig = DEFAULT_CONFIG) -> Prepared:
    if positions is not None and len(positions) != len(points):
        raise ValueError(f"positions: {len(positions)} given for {len(points)} points")
    samples: list[np.ndarray] = []
    kept_positions: list[int] = []
    source: list[int] = []
    medians: list[float] = []
    for i, point in enumerate(points):
        finite = sorted(float(v) for v in point if math.isfinite(float(v)))
        if not finite:
            continue
        middle = len(finite) // 2
        # np.median costs ~50 us a call; a sorted handful of samples is the same number, faster.
        medians.append(finite[middle] if len(finite) % 2 else 0.5 * (finite[middle - 1] + finite[middle]))
        samples.append(np.asarray(finite))
        kept_positions.append(int(positions[i]) if positions is not None else i)
        source.append(i)
    levels = np.array(medians, dtype=float)
    prepared = Prepared(levels=levels, samples=samples, positions=kept_positions, source_index=source)
    if len(levels) >= config.min_points:
        prepared.period = seasonal_period(levels, config.shapes)
        if prepared.period is not None:
            levels = deseasonalise(levels, prepared.period)
        prepared.noise = noise_change(levels, config.shapes)
    sigma = _floor_sigma(noise_sigma(levels), levels)
    prepared.sigma = sigma
    scale = np.full(len(levels), sigma)
    if prepared.noise is not None:
        # Each noise regime has its own sigma: a noisy stretch must not raise alerts of its own,
        # nor hide a change in a quiet one.
        k = prepared.noise.index
        scale[:k] = _floor_sigma(noise_sigma(levels[:k]), levels)
        scale[k:] = _floor_sigma(noise_sigma(levels[k:]), levels)
    prepared.scale = scale
    cleaned = levels.copy()
    if len(levels) >= 3:
        # Cheap screen first: only points far from both direct neighbours can be spikes.
        inner = np.arange(1, len(levels) - 1)
        far = (np.abs(levels[inner] - levels[inner - 1]) > 0.5 * config.spike_z * scale[inner]) & \
              (np.abs(levels[inner] - levels[inner + 1]) > 0.5 * config.spike_z * scale[inner])
        for i in inner[far]:
            neighbours = np.concatenate([levels[max(0, i - 2):i], levels[i + 1:i + 3]])
            centre = float(np.median(neighbours))
            if (abs(levels[i] - centre) > config.spike_z * scale[i]
                    and abs(levels[i - 1] - levels[i + 1]) < 0.5 * config.spike_z * scale[i]):
                prepared.spikes.add(int(i))
                cleaned[i] = centre
    prepared.levels = cleaned
    return prepared


def _segments(prepared: Prepared, config: DetectorConfig) -> list[int]:
    n = len(prepared.levels)
    if n < max(config.min_points, 2 * config.min_segment):
        return []
    if float(np.ptp(prepared.levels)) == 0.0:
        return []
    normalised = (prepared.levels - float(np.median(prepared.levels))) / prepared.scale
    algo = rpt.Binseg(custom_cost=_CumsumL2(), min_size=config.min_segment, jump=1).fit(normalised)
    ends = algo.predict(pen=config.penalty * math.log(n))
    return [int(e) for e in ends[:-1]]


def _test_split(prepared: Prepared, start: int, cp: int, end: int, config: DetectorConfig,
                min_side: int | None = None) -> ChangePoint | None:
    """Compare points [start, cp) with [cp, end), each side limited to `max_side` commits next
    to the change; None when a side has fewer than `min_side` (default `min_segment`) commits
    once spikes are left out."""
    left = [i for i in range(max(start, cp - config.max_side), cp) if i not in prepared.spikes]
    right = [i for i in range(cp, min(end, cp + config.max_side)) if i not in prepared.spikes]
    needed = config.min_segment if min_side is None else min_side
    if len(left) < max(1, needed) or len(right) < max(1, needed):
        return None
    left_levels, right_levels = prepared.levels[left], prepared.levels[right]
    if min(len(left), len(right)) >= config.min_segment:
        # Commits are the independent units: samples of one run share its run-level noise.
        left_values, right_values = left_levels, right_levels
    else:
        left_values = np.concatenate([prepared.samples[i] for i in left])
        right_values = np.concatenate([prepared.samples[i] for i in right])
    if np.ptp(np.concatenate([left_values, right_values])) == 0.0:
        p_value = 1.0
    else:
        p_value = float(stats.mannwhitneyu(left_values, right_values, alternative="two-sided").pvalue)
    before, after = float(np.median(left_levels)), float(np.median(right_levels))
    # The noisier side sets the scale when the noise level changed between the two.
    sigma = max(float(np.median(prepared.scale[left])), float(np.median(prepared.scale[right]))) \
        if len(prepared.scale) == len(prepared.levels) else prepared.sigma
    spread = sigma * math.sqrt(1.0 / len(left) + 1.0 / len(right))
    delta = float(np.mean(right_levels) - np.mean(left_levels))
    effect = abs(delta) / spread
    if config.winsor > 0:
        # One wild commit among the few first ones at a new level must not carry a change alone
        # (the spike rule needs both neighbours, so it cannot see the newest commit yet). Each
        # side is clipped around its own median: a wild minority moves no median, so it is
        # clipped, while a whole new level keeps its full distance. Clipping both sides around
        # the old median capped every large step near the threshold of a young series.
        def winsorized(levels: np.ndarray) -> float:
            middle = float(np.median(levels))
            return float(np.mean(np.clip(levels, middle - config.winsor * sigma, middle + config.winsor * sigma)))
        effect = abs(winsorized(right_levels) - winsorized(left_levels)) / spread
    scale = abs(before)
    if scale > 0:
        relative = (after - before) / scale
        ci_low, ci_high = (delta - 1.96 * spread) / scale, (delta + 1.96 * spread) / scale
    else:
        relative = 0.0 if after == before else math.copysign(math.inf, after - before)
        ci_low, ci_high = -math.inf, math.inf
    return ChangePoint(index=cp, good_position=prepared.positions[cp - 1], bad_position=prepared.positions[cp],
                       before=before, after=after, relative_change=relative, ci_low=ci_low, ci_high=ci_high,
                       p_value=p_value, effect=effect, n_before=len(left), n_after=len(right))


@lru_cache(maxsize=1024)
def effect_threshold(min_effect: float, levels: int) -> float:
    """`min_effect` is a z threshold for a noise scale that is known; a young series estimates
    it from few differences, so the threshold grows to the Student t quantile of the same tail
    probability (degrees of freedom: the differences, less one). The default 3.7 becomes 5.6 at
    12 measured commits, 3.95 at 60 and 3.77 at 200."""
    tail = float(stats.norm.sf(min_effect))
    return float(stats.t.isf(tail, max(1, levels - 2)))


def _passes(change: ChangePoint | None, config: DetectorConfig, levels: int) -> bool:
    return (change is not None and change.p_value < config.alpha
            and change.effect >= effect_threshold(config.min_effect, levels)
            and abs(change.relative_change) >= config.min_relative)


def _strength(prepared: Prepared, start: int, cp: int, end: int, config: DetectorConfig) -> float:
    """How much splitting [start, end) at `cp` explains: the level difference in noise units over
    the same sides the test uses, unclipped and with spikes kept at their cleaned level, so it
    exists for every candidate (the root of the segmentation's own L2 gain). The test's effect
    is no ranking: a candidate whose side spikes leave too short has none, and ranking it
    weakest dropped a real 20 % step while the spurious candidates that had squeezed it stayed
    (`tests/detection/test_detection.py`, the spurious-candidates test)."""
    left = prepared.levels[max(start, cp - config.max_side):cp]
    right = prepared.levels[cp:min(end, cp + config.max_side)]
    scale = prepared.scale[max(start, cp - config.max_side):min(end, cp + config.max_side)]
    sigma = float(np.median(scale)) if len(scale) else prepared.sigma
    return abs(float(np.mean(right) - np.mean(left))) / (sigma * math.sqrt(1.0 / len(left) + 1.0 / len(right)))


def confirm(prepared: Prepared, candidates: list[int], config: DetectorConfig) -> list[ChangePoint]:
    """Drop the weakest failing candidate and re-test its neighbours until every change passes."""
    cps = sorted(candidates)
    while cps:
        bounds = [0, *cps, len(prepared.levels)]
        tested = [_test_split(prepared, bounds[j], bounds[j + 1], bounds[j + 2], config)
                  for j in range(len(cps))]
        failing = [j for j, change in enumerate(tested) if not _passes(change, config, len(prepared.levels))]
        if not failing:
            return [change for change in tested if change is not None]
        weakest = min(failing, key=lambda j: _strength(prepared, bounds[j], bounds[j + 1], bounds[j + 2], config))
        del cps[weakest]
    return []


def detect(points: Sequence[Sequence[float]], positions: Sequence[int] | None = None,
           config: DetectorConfig = DEFAULT_CONFIG) -> list[ChangePoint]:
    """Change points of a series whose points carry every raw sample of one commit.

    `index` in the result refers to the caller's `points` (points without finite samples are
    skipped, never an error); `good_position`/`bad_position` bound the commits that may hold
    the change when commits between two measured ones were not measured."""
    return analyse(points, positions, config).changes


def analyse(points: Sequence[Sequence[float]], positions: Sequence[int] | None = None,
            config: DetectorConfig = DEFAULT_CONFIG) -> Analysis:
    """`detect` with what else the scan saw: level changes that follow each other too closely to
    be stable levels become one drift over their span (`app.detection.shapes.drift_groups`), and
    leave the change list; the noise change and the seasonal period come along. Indices refer
    to the caller's `points`."""
    prepared = prepare(points, positions, config)
    confirmed = confirm(prepared, _segments(prepared, config), config)
    groups = drift_groups(prepared.levels, [c.index for c in confirmed], prepared.scale, config.shapes,
                          config.max_side)
    absorbed = {j for group in groups for j in group}
    drifts = []
    for group in groups:
        first, last = confirmed[group[0]], confirmed[group[-1]]
        before, after = first.before, last.after
        relative = (after - before) / abs(before) if before else 0.0
        drifts.append(Drift(start=prepared.source_index[first.index], end=prepared.source_index[last.index],
                            before=before, after=after, relative_change=relative, steps=len(group)))
    changes = [replace(c, index=prepared.source_index[c.index]) for j, c in enumerate(confirmed) if j not in absorbed]
    noise = prepared.noise
    if noise is not None:
        noise = replace(noise, index=prepared.source_index[noise.index])
    return Analysis(changes=changes, drifts=drifts, noise=noise, period=prepared.period)


def detect_recent(points: Sequence[Sequence[float]], positions: Sequence[int] | None = None,
                  config: DetectorConfig = DEFAULT_CONFIG) -> list[ChangePoint]:
    """Incremental detection: only the last `config.window` points are re-examined (changes
    further back were settled by earlier scans). Indices refer to the whole series."""
    return analyse_recent(points, positions, config).changes


def analyse_recent(points: Sequence[Sequence[float]], positions: Sequence[int] | None = None,
                   config: DetectorConfig = DEFAULT_CONFIG) -> Analysis:
    """`analyse` on the last `config.window` points; indices refer to the whole series."""
    offset = max(0, len(points) - config.window)
    recent_positions = None if positions is None else list(positions)[offset:]
    if recent_positions is None:
        recent_positions = list(range(offset, len(points)))
    found = analyse(list(points)[offset:], recent_positions, config)
    # A change close to the window's start is judged on a truncated left side; it was (or was
    # not) found by the scans that saw it with its full context.
    margin = 0 if offset == 0 else config.max_side // 2
    return Analysis(changes=[replace(c, index=c.index + offset) for c in found.changes if c.index >= margin],
                    drifts=[replace(d, start=d.start + offset, end=d.end + offset) for d in found.drifts],
                    noise=None if found.noise is None else replace(found.noise, index=found.noise.index + offset),
                    period=found.period)


def evidence_at(points: Sequence[Sequence[float]], positions: Sequence[int] | None, index: int,
                boundaries: Sequence[int], config: DetectorConfig = DEFAULT_CONFIG, skip: int = 0) -> ChangePoint | None:
    """Re-test a change at `index` (into `points`) between its neighbouring change points
    `boundaries` (indices into `points`) with the test a detected change passes, leaving out the
    first `skip` commits of the new level: does the level that followed them still differ from
    the one before? None when a side has too few measured commits."""
    keep = [i for i in range(len(points)) if not index <= i < index + skip]
    if index + skip >= len(points):
        return None
    where = {old: new for new, old in enumerate(keep)}
    prepared = prepare([points[i] for i in keep], None if positions is None else [positions[i] for i in keep], config)
    kept = {source: i for i, source in enumerate(prepared.source_index)}
    split = kept.get(where[index + skip])
    if split is None or split == 0:
        return None
    bounds = [0, *(kept[where[b]] for b in boundaries if b in where and where[b] in kept), len(prepared.levels)]
    change = _test_split(prepared, max(b for b in bounds if b < split), split,
                         min(b for b in bounds if b > split), config)
    return None if change is None else replace(change, index=index)


def find_change_points(values: Sequence[float]) -> list[int]:
    """The contract: one value per commit, default configuration, ascending 0-based indices
    where a new segment starts. Too few points, constant or non-finite values give []."""
    return [c.index for c in detect([[v] for v in values])]


# ---------------------------------------------------------------- accuracy

@dataclass(frozen=True)
class ProportionComparison:
    method: str                  # "mcnemar_exact" (paired vectors) or "two_proportion_z"
    before: float                # accuracy before
    after: float
    p_value: float
    ci_low: float                # 95 % interval of after - before (Wald)
    ci_high: float
    discordant: tuple[int, int] | None = None  # (right->wrong, wrong->right) when paired


def mcnemar_exact(before: Sequence[int], after: Sequence[int]) -> tuple[int, int, float]:
    """Exact McNemar test on paired 0/1 vectors: returns (b, c, two-sided p) where b counts items
    right before and wrong after, c the reverse; p is the exact binomial on the discordant pairs."""
    if len(before) != len(after):
        raise ValueError(f"paired vectors differ in length: {len(before)} and {len(after)}")
    b = sum(1 for x, y in zip(before, after) if x and not y)
    c = sum(1 for x, y in zip(before, after) if not x and y)
    n = b + c
    if n == 0:
        return b, c, 1.0
    return b, c, float(min(1.0, 2.0 * stats.binom.cdf(min(b, c), n, 0.5)))


def two_proportion_z(k1: int, n1: int, k2: int, n2: int) -> float:
    """Two-sided pooled z test of k1/n1 against k2/n2."""
    if n1 <= 0 or n2 <= 0:
        raise ValueError(f"two_proportion_z needs positive sizes, got n1={n1}, n2={n2}")
    pooled = (k1 + k2) / (n1 + n2)
    se = math.sqrt(pooled * (1 - pooled) * (1 / n1 + 1 / n2))
    if se == 0:
        return 1.0
    z = (k2 / n2 - k1 / n1) / se
    return float(2 * stats.norm.sf(abs(z)))


def compare_accuracy(before: Sequence[int], after: Sequence[int]) -> ProportionComparison:
    """Paired exact McNemar when both vectors cover the same items, else a two-proportion test."""
    if not before or not after:
        raise ValueError("compare_accuracy needs two non-empty correctness vectors")
    k1, n1, k2, n2 = sum(1 for x in before if x), len(before), sum(1 for x in after if x), len(after)
    p1, p2 = k1 / n1, k2 / n2
    half = 1.96 * math.sqrt(p1 * (1 - p1) / n1 + p2 * (1 - p2) / n2)
    if n1 == n2:
        b, c, p = mcnemar_exact(before, after)
        half = 1.96 * math.sqrt(max(b + c - (c - b) ** 2 / n1, 0.0)) / n1
        return ProportionComparison("mcnemar_exact", p1, p2, p, p2 - p1 - half, p2 - p1 + half, (b, c))
    return ProportionComparison("two_proportion_z", p1, p2, two_proportion_z(k1, n1, k2, n2),
                                p2 - p1 - half, p2 - p1 + half)


# ---------------------------------------------------------------- platform classification

@dataclass(frozen=True)
class PlatformSeries:
    """One platform's series: every raw sample per measured commit, and the commits' positions."""

    points: Sequence[Sequence[float]]
    positions: Sequence[int]


@dataclass(frozen=True)
class Classification:
    kind: str                    # "platform_specific", "common" or "inconclusive"
    changed: list[str]           # platforms that changed the same way (the changed one first)
    unchanged: list[str]         # platforms with evidence that they did not follow
    missing: list[str]           # platforms without a measured commit on one side of the range
    ambiguous: list[str]         # measured on both sides, but the evidence decides nothing
    details: dict[str, dict[str, float | int | str | None]]


def _side_points(series: PlatformSeries, low: int, high: int) -> list[int]:
    return [i for i, pos in enumerate(series.positions)
            if low <= pos <= high and any(math.isfinite(float(v)) for v in series.points[i])]


def _relative_se(change: ChangePoint) -> float:
    if not (math.isfinite(change.ci_low) and math.isfinite(change.ci_high)):
        return math.inf
    return (change.ci_high - change.ci_low) / (2 * 1.96)


def _overlapping(points: Sequence[Sequence[float]], positions: Sequence[int], change: ChangePoint,
                 config: DetectorConfig) -> ChangePoint | None:
    """A change point of another series whose commit range intersects `change`'s."""
    for other in detect(points, positions, config):
        if other.good_position < change.bad_position and change.good_position < other.bad_position:
            return other
    return None


def _log_ratio_test(own: PlatformSeries, other: PlatformSeries, change: ChangePoint, low: int, high: int,
                    config: DetectorConfig) -> tuple[ChangePoint | None, ChangePoint | None]:
    """The change of log(P/Q) across the range, on the commits both platforms measured: the
    test at the range, and a change point of the log-ratio series that overlaps it."""
    own_at = {pos: i for i, pos in enumerate(own.positions)}
    ratio_points: list[list[float]] = []
    ratio_positions: list[int] = []
    for j, pos in enumerate(other.positions):
        i = own_at.get(pos)
        if i is None or not (low <= pos <= high) or change.good_position < pos < change.bad_position:
            continue
        p_level = _finite_median(own.points[i])
        q_level = _finite_median(other.points[j])
        if p_level is None or q_level is None or p_level <= 0 or q_level <= 0:
            continue
        ratio_points.append([math.log(p_level / q_level)])
        ratio_positions.append(pos)
    split = next((k for k, pos in enumerate(ratio_positions) if pos >= change.bad_position), None)
    if split is None or split < config.min_segment or len(ratio_points) - split < config.min_segment:
        return None, None
    prepared = prepare(ratio_points, ratio_positions, config)
    if len(prepared.levels) != len(ratio_points):
        return None, None
    return (_test_split(prepared, 0, split, len(ratio_points), config, min_side=1),
            _overlapping(ratio_points, ratio_positions, change, config))


def _finite_median(values: Sequence[float]) -> float | None:
    finite = [float(v) for v in values if math.isfinite(float(v))]
    return float(np.median(finite)) if finite else None


def classify_change(platform: str, change: ChangePoint, own: PlatformSeries,
                    others: dict[str, PlatformSeries], config: DetectorConfig = DEFAULT_CONFIG,
                    alpha: float = 0.01, min_effect: float = 3.0,
                    min_relative_of: Mapping[str, float] | None = None) -> Classification:
    """Is a change seen on `platform` specific to it? Each other platform Q is compared across
    the same commits (the change's two test segments, by position): Q *changed* when its own
    before/after test is significant in the same direction, or Q's own change points include
    one whose range overlaps; Q is *unchanged with evidence* when it did not change that way and
    P moved relative to Q (the log-ratio series P/Q changes at the range by the same test or
    by its own change points, or, with too few shared commits, the two relative changes differ
    by `min_effect` standard errors). Q's change counts only from `min_relative_of[Q]` on (a
    platform's noise floor; default `config.min_relative`)."""
    left_low = own.positions[max(0, change.index - change.n_before)]
    right_high = own.positions[min(len(own.positions) - 1, change.index + change.n_after - 1)]
    own_level = abs(change.before) or 1.0
    own_prepared = prepare(own.points, own.positions, config)
    own_relative_sigma = own_prepared.sigma / own_level
    changed, unchanged, missing, ambiguous = [platform], [], [], []
    details: dict[str, dict[str, float | int | str | None]] = {}
    for name, series in sorted(others.items()):
        left = _side_points(series, left_low, change.good_position)
        right = _side_points(series, change.bad_position, right_high)
        if not left or not right:
            missing.append(name)
            details[name] = {"verdict": "missing", "before_points": len(left), "after_points": len(right)}
            continue
        whole = prepare(series.points, series.positions, config)
        local = prepare([series.points[i] for i in left + right], [series.positions[i] for i in left + right],
                        config)
        q_level = abs(float(np.median(local.levels))) or 1.0
        within = max((float(np.std(s)) for s in local.samples), default=0.0)
        whole_sigma = noise_sigma(whole.levels) if len(whole.levels) >= config.min_points else 0.0
        # Too few points of Q to know its run-to-run noise: assume it is no quieter than P's.
        local.sigma = max(whole_sigma, own_relative_sigma * q_level, within, 1e-12)
        local.spikes = set()
        q_change = _test_split(local, 0, len(left), len(left) + len(right), config, min_side=1)
        assert q_change is not None
        ratio, ratio_point = _log_ratio_test(own, series, change, left_low, right_high, config)
        window = left + right
        q_config = replace(config, min_relative=(min_relative_of or {}).get(name, config.min_relative))
        own_point = _overlapping([series.points[i] for i in window], [series.positions[i] for i in window],
                                 change, q_config)
        se = math.hypot(_relative_se(change), _relative_se(q_change))
        difference_z = abs(change.relative_change - q_change.relative_change) / se if se > 0 else math.inf
        sign = math.copysign(1, change.relative_change)
        same_way = ((q_change.p_value < alpha and q_change.effect >= min_effect
                     and abs(q_change.relative_change) >= q_config.min_relative
                     and math.copysign(1, q_change.relative_change) == sign)
                    or (own_point is not None and math.copysign(1, own_point.relative_change) == sign))
        ratio_moved = ((ratio is not None and ratio.p_value < alpha and ratio.effect >= min_effect)
                       or ratio_point is not None)
        if same_way and not (ratio_moved and abs(q_change.relative_change) < 0.5 * abs(change.relative_change)):
            verdict = "changed"
            changed.append(name)
        elif ratio_moved or (ratio is None and difference_z >= min_effect):
            verdict = "unchanged"
            unchanged.append(name)
        else:
            verdict = "ambiguous"
            ambiguous.append(name)
        details[name] = {"verdict": verdict, "relative_change": q_change.relative_change,
                         "p_value": q_change.p_value, "effect": q_change.effect,
                         "difference_z": difference_z if math.isfinite(difference_z) else None,
                         "log_ratio_change": None if ratio is None else ratio.relative_change,
                         "log_ratio_p_value": None if ratio is None else ratio.p_value,
                         "own_change_point": None if own_point is None else own_point.bad_position,
                         "log_ratio_change_point": None if ratio_point is None else ratio_point.bad_position,
                         "before_points": len(left), "after_points": len(right)}
    # Specific as soon as one measured platform did not change with evidence: the change is then
    # not common, whatever a noisy platform could not tell (listed as ambiguous). A platform not
    # measured at the range keeps it inconclusive: confirmation jobs measure it.
    if missing or not others:
        kind = "inconclusive"
    elif unchanged:
        kind = "platform_specific"
    elif ambiguous:
        kind = "inconclusive"
    else:
        kind = "common"
    return Classification(kind, changed, unchanged, missing, ambiguous, details)
