"""The search over one first-parent range: which commits to measure next, and when it is over.

Pure logic, no database: `decide` looks at everything measured so far in a range
(index 0 = good, last = bad) and returns the next round's jobs or the outcome. It keeps no
state of its own, so the service can call it again after a restart and get the same answer.

One round:

1. Good and bad are measured first when they have no samples.
2. The measured commits, in range order, are compared pairwise with their neighbours
   (`stats.compare`: different / same / unknown).
3. A **different** pair with unmeasured commits between it is split: with R free slots, R
   commits cut it into R+1 nearly equal parts (k-ary search; several different pairs share the
   slots in proportion to their size). A different pair with nothing left between is a found
   change: its right commit is the culprit, or, when the commits between could not be built or
   run (skipped), any of those and the right one.
4. Slots left go to any further different pair (one change is the expected case: a second one
   counts only once it holds up with `confirm_jobs` jobs on each side), then to **unknown**
   pairs: one more job on the side with fewer, up to `max_jobs` per commit (repeats start at one
   job and grow only where the verdict is unclear).
5. If good and bad differ but no neighbouring pair does (a false "same" somewhere), the most
   suspicious pairs get more repeats.

Over when no job is left to queue: one change (the culprit), several (the range is not
monotonic, every change reported), none (good and bad are the same), or no clear answer.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Callable, Sequence

import numpy as np

from app.bisect.stats import ALPHA, POWER, Comparison, Effect, Verdict, compare, effect, noise_scale, standardised


@dataclass
class Point:
    """What is known about one commit of the range."""

    samples: list[float] = field(default_factory=list)
    jobs: int = 0          # jobs that delivered samples
    failed: bool = False   # could not be built or run: skipped
    pending: int = 0       # jobs queued or running


@dataclass(frozen=True)
class SearchConfig:
    alpha: float = ALPHA
    power: float = POWER
    max_jobs: int = 6      # per commit
    confirm_jobs: int = 3  # per side before a second change counts


@dataclass(frozen=True)
class Pair:
    left: int
    right: int
    comparison: Comparison


@dataclass(frozen=True)
class Change:
    """A change between two neighbouring measured commits."""

    left: int
    right: int
    culprit: int | None          # None when skipped commits lie between: any of `candidates`
    candidates: list[int]
    comparison: Comparison
    effect: Effect | None = None  # pooled over the neighbouring commits at each level


@dataclass(frozen=True)
class Decision:
    measure: list[int]           # one index per job to queue now
    finished: bool
    outcome: str                 # waiting/searching/culprit/not_monotonic/no_change/skipped/unresolved/failed
    reason: str = ""
    changes: list[Change] = field(default_factory=list)
    pairs: list[Pair] = field(default_factory=list)
    skipped: list[int] = field(default_factory=list)
    unresolved: list[tuple[int, int]] = field(default_factory=list)
    noise: float = 0.0           # robust noise scale, absolute units
    standardised_effect: float = 0.0


def split_points(low: int, high: int, candidates: Sequence[int], count: int) -> list[int]:
    """`count` of `candidates` (indices strictly between low and high) that cut [low, high]
    into count+1 nearly equal parts; each target takes the nearest candidate not yet taken."""
    pool = sorted(candidates)
    if count >= len(pool):
        return pool
    chosen: list[int] = []
    for part in range(1, count + 1):
        target = low + (high - low) * part / (count + 1)
        free = [c for c in pool if c not in chosen]
        chosen.append(min(free, key=lambda c: (abs(c - target), c)))
    return sorted(chosen)


def _share(slots: int, sizes: Sequence[int]) -> list[int]:
    """Split slots over intervals in proportion to their size (largest remainders), each
    getting at most its size and at least one while slots last."""
    if not sizes:
        return []
    total = sum(sizes)
    exact = [slots * s / total for s in sizes]
    shares = [min(s, math.floor(e)) for s, e in zip(sizes, exact)]
    order = sorted(range(len(sizes)), key=lambda i: (shares[i] > 0, -(exact[i] - shares[i])))
    left = slots - sum(shares)
    for i in order * max(1, slots):
        if left <= 0:
            break
        if shares[i] < sizes[i]:
            shares[i] += 1
            left -= 1
    return shares


def _segment(tested: list[int], pairs: dict[tuple[int, int], Pair], start: int, step: int) -> list[int]:
    """`start` and its measured neighbours in one direction joined to it by "same" verdicts."""
    members = [start]
    position = tested.index(start)
    while 0 <= position + step < len(tested):
        a, b = sorted((tested[position], tested[position + step]))
        if pairs[(a, b)].comparison.verdict != Verdict.same:
            break
        position += step
        members.append(tested[position])
    return members


def decide(points: Sequence[Point], relative_effect: float, slots: int,
           config: SearchConfig = SearchConfig()) -> Decision:
    """The next round's jobs, or the outcome. `relative_effect` is the change sought (e.g. 0.08
    for the alert's 8 %), `slots` the runners free for this search (at least one job is planned)."""
    if len(points) < 2:
        raise ValueError("a range needs a good and a bad commit")
    slots = max(1, slots)
    last = len(points) - 1
    if any(p.pending for p in points):
        return Decision(measure=[], finished=False, outcome="waiting")
    skipped = [i for i, p in enumerate(points) if p.failed and not p.samples]
    for end, name in ((0, "good"), (last, "bad")):
        if end in skipped:
            return Decision(measure=[], finished=True, outcome="failed", skipped=skipped,
                            reason=f"the {name} commit could not be built or run, so nothing can be compared")
    missing = [end for end in (0, last) if not points[end].samples]
    if missing:
        return Decision(measure=missing[:slots], finished=False, outcome="searching", skipped=skipped)

    tested = [i for i, p in enumerate(points) if p.samples]
    sigma = noise_scale([points[i].samples for i in tested])
    level = float(np.median(points[0].samples))
    d = standardised(relative_effect, level, sigma)

    def verdict(a: int, b: int) -> Comparison:
        return compare(points[a].samples, points[b].samples, d, config.alpha, config.power)

    pairs = [Pair(a, b, verdict(a, b)) for a, b in zip(tested, tested[1:])]
    by_ends = {(p.left, p.right): p for p in pairs}
    overall = by_ends.get((0, last)) or Pair(0, last, verdict(0, last))

    def untested(a: int, b: int) -> list[int]:
        return [i for i in range(a + 1, b) if not points[i].samples and not points[i].failed]

    def has_room(i: int) -> bool:
        return points[i].jobs < config.max_jobs

    # One change is the expected case. The strongest different pair is searched at once; any
    # other must first hold up with `confirm_jobs` jobs on each side (with many neighbouring
    # pairs, one p <= 0.01 by chance is common; with more samples a chance one fades).
    different = sorted((p for p in pairs if p.comparison.verdict == Verdict.different),
                       key=lambda p: (p.comparison.p_value, -abs(p.comparison.relative_change)))
    trusted = different[:1] + [p for p in different[1:]
                               if min(points[p.left].jobs, points[p.right].jobs) >= config.confirm_jobs]
    to_confirm = [p for p in different if p not in trusted]
    split_targets: list[Pair] = []
    changes: list[Change] = []
    for pair in sorted(trusted, key=lambda p: p.left):
        if untested(pair.left, pair.right):
            split_targets.append(pair)
        else:
            between = list(range(pair.left + 1, pair.right))
            culprit = pair.right if not between else None
            changes.append(Change(pair.left, pair.right, culprit, [*between, pair.right], pair.comparison))

    repeat_pairs = to_confirm + sorted((p for p in pairs if p.comparison.verdict == Verdict.unknown),
                                       key=lambda p: p.comparison.p_value)
    if not split_targets and not changes and not repeat_pairs and overall.comparison.verdict != Verdict.same:
        # Good and bad differ (or may) while every neighbouring pair looks the same: one of those
        # "same" verdicts is wrong. Look again where the evidence is closest to a change.
        repeat_pairs = sorted(pairs, key=lambda p: p.comparison.p_value)
    measure: list[int] = []
    shares = _share(slots, [len(untested(p.left, p.right)) for p in split_targets])
    for pair, share in zip(split_targets, shares):
        if share:
            measure += split_points(pair.left, pair.right, untested(pair.left, pair.right), share)
    unresolved: list[tuple[int, int]] = []
    for pair in repeat_pairs:
        limit = config.confirm_jobs if pair in to_confirm else config.max_jobs
        sides = sorted((i for i in (pair.left, pair.right) if points[i].jobs < limit and i not in measure),
                       key=lambda i: (points[i].jobs, i))
        if not sides:
            if not any(has_room(i) for i in (pair.left, pair.right)):
                unresolved.append((pair.left, pair.right))
            continue
        if len(measure) < slots:
            measure.append(sides[0])
    common = dict(pairs=pairs, skipped=skipped, noise=sigma, standardised_effect=d)
    if measure:
        return Decision(measure=sorted(measure), finished=False, outcome="searching", changes=changes,
                        unresolved=unresolved, **common)

    changes = [_with_effect(points, tested, by_ends, c) for c in changes]
    if len(changes) > 1:
        where = ", ".join(f"{c.left}->{c.right} ({c.comparison.relative_change:+.1%})" for c in changes)
        return Decision(measure=[], finished=True, outcome="not_monotonic", changes=changes, unresolved=unresolved,
                        reason=f"the range is not monotonic: {len(changes)} changes ({where})", **common)
    if len(changes) == 1:
        change = changes[0]
        if change.culprit is None:
            interior = range(1, last)
            if all(i in skipped for i in interior):
                reason = (f"every one of the {last - 1} commits between good and bad failed to build or run; "
                          f"the change is in one of them or in bad itself")
            else:
                reason = (f"the change lies between {change.left} and {change.right}, and the "
                          f"{len(change.candidates) - 1} commits between them failed to build or run")
            return Decision(measure=[], finished=True, outcome="skipped", changes=changes, reason=reason,
                            unresolved=unresolved, **common)
        return Decision(measure=[], finished=True, outcome="culprit", changes=changes, unresolved=unresolved,
                        reason=f"culprit at {change.culprit} ({change.comparison.relative_change:+.1%}, "
                               f"p = {change.comparison.p_value:.2g})", **common)
    if overall.comparison.verdict == Verdict.same and not unresolved:
        return Decision(measure=[], finished=True, outcome="no_change", reason=(
            f"good and bad are the same (p = {overall.comparison.p_value:.2g} > {overall.comparison.same_above:.2g}, "
            f"the bar for a {relative_effect:.1%} change with these samples)"), **common)
    return Decision(measure=[], finished=True, outcome="unresolved", unresolved=unresolved, reason=(
        f"no clear verdict after {config.max_jobs} jobs per commit: the noise ({sigma:.3g}) is too large "
        f"for a {relative_effect:.1%} change"), **common)


def _with_effect(points: Sequence[Point], tested: list[int], pairs: dict[tuple[int, int], Pair],
                 change: Change) -> Change:
    before = [x for i in _segment(tested, pairs, change.left, -1) for x in points[i].samples]
    after = [x for i in _segment(tested, pairs, change.right, +1) for x in points[i].samples]
    return Change(change.left, change.right, change.culprit, change.candidates, change.comparison,
                  effect(before, after, seed=change.right))


@dataclass
class Trace:
    """An in-memory search run to its end (bench and tests; the service drives the same
    `decide` through the job queue)."""

    decision: Decision
    rounds: int
    jobs: int
    round_sizes: list[int]
    named_after: int | None  # rounds after which the final culprit was first named (then only confirmed)


def run(size: int, measure: Callable[[int], list[float] | None], relative_effect: float, slots: int,
        config: SearchConfig = SearchConfig(), max_rounds: int = 200) -> Trace:
    """Search a range of `size` + 1 commits (0 good, `size` bad); `measure(i)` returns one job's
    samples at commit i, or None when the commit cannot be built or run. Good and bad count as
    measured once before the first round (as after an alert)."""
    points = [Point() for _ in range(size + 1)]
    jobs, sizes = 0, []

    def take(i: int) -> None:
        samples = measure(i)
        if samples is None:
            points[i].failed = True
        else:
            points[i].samples += samples
            points[i].jobs += 1

    take(0)
    take(size)
    named: dict[int, int] = {}
    for _ in range(max_rounds):
        decision = decide(points, relative_effect, slots, config)
        for change in decision.changes:
            if change.culprit is not None:
                named.setdefault(change.culprit, len(sizes))
        if decision.finished:
            culprits = [c.culprit for c in decision.changes if c.culprit is not None]
            after = max((named[c] for c in culprits), default=None)
            return Trace(decision, len(sizes), jobs, sizes, after)
        for i in decision.measure:
            take(i)
        jobs += len(decision.measure)
        sizes.append(len(decision.measure))
    raise RuntimeError(f"search did not finish in {max_rounds} rounds")
