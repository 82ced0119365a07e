"""Bisect cost: rounds and runner jobs to the right culprit, Parallax's search next to a
sequential one-measurement-per-commit bisect like `asv find`, on the same seeded histories.

Model: a range of N commits after a measured good commit; one culprit (uniform in 1..N) drops
the metric by `--effect` (8 %); every job returns `--samples` raw samples (5, a suite's
`repeats`) with normal noise of `--noise` (3 %) of the level. Good and bad count as measured
before the search starts (an alert's range ends at measured commits), for both methods.

- Parallax: `app.bisect.search.run` with R runners (k-ary rounds, adaptive repeats, three-way
  verdicts); a round is one batch of at most R jobs. "named by round": the round after which
  the culprit was first named; "rounds": until the search ended (the other neighbouring pairs
  confirmed the same, so the range is known to hold one change).
- asv-find style: one job per commit, its median as the commit's one number, then binary
  search that moves towards the end the midpoint differs from more; one job per round.

    python -m bench.bisect_cost                       # the table in docs/bisect.md
    python -m bench.bisect_cost --sizes 64 --runners 3 --trials 100 --check 95
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time
from dataclasses import dataclass
from typing import Callable

import numpy as np

from app.bisect.search import run
from bench.backends import print_table, write_results


@dataclass(frozen=True)
class History:
    size: int
    culprit: int
    effect: float
    noise: float
    samples: int
    seed: int

    def measurer(self, stream: int) -> Callable[[int], list[float]]:
        rng = np.random.default_rng([self.seed, stream])

        def measure(index: int) -> list[float]:
            level = 100.0 * (1.0 - self.effect) if index >= self.culprit else 100.0
            return list(rng.normal(level, self.noise * 100.0, self.samples))

        return measure


def history(size: int, trial: int, effect: float, noise: float, samples: int) -> History:
    rng = np.random.default_rng([7, size, trial])
    return History(size, int(rng.integers(1, size + 1)), effect, noise, samples, seed=trial)


def asv_find(h: History) -> tuple[int, int]:
    """(culprit found, jobs): bisect on one number per commit, always towards the end that the
    midpoint differs from more (what `asv find` does), so it never stops to ask for more data."""
    measure = h.measurer(stream=1)
    value = {0: float(np.median(measure(0))), h.size: float(np.median(measure(h.size)))}
    low, high, jobs = 0, h.size, 0
    while high - low > 1:
        mid = (low + high) // 2
        value[mid] = float(np.median(measure(mid)))
        jobs += 1
        if abs(value[mid] - value[low]) > abs(value[mid] - value[high]):
            high = mid
        else:
            low = mid
    return high, jobs


def parallax(h: History, runners: int) -> tuple[int | None, int, int, int, str]:
    """(culprit found, rounds to the end, rounds until it was first named, jobs, outcome)"""
    trace = run(h.size, h.measurer(stream=2), h.effect, runners)
    decision = trace.decision
    found = decision.changes[0].culprit if decision.outcome == "culprit" else None
    return found, trace.rounds, trace.named_after if trace.named_after is not None else trace.rounds, \
        trace.jobs, decision.outcome


def cell(size: int, runners: int, trials: int, args: argparse.Namespace) -> dict[str, object]:
    right = asv_right = 0
    rounds, named, jobs, asv_jobs, outcomes = [], [], [], [], {}
    for trial in range(trials):
        h = history(size, trial, args.effect, args.noise, args.samples)
        found, n_rounds, n_named, n_jobs, outcome = parallax(h, runners)
        outcomes[outcome] = outcomes.get(outcome, 0) + 1
        right += found == h.culprit
        rounds.append(n_rounds)
        named.append(n_named)
        jobs.append(n_jobs)
        asv_found, n_asv = asv_find(h)
        asv_right += asv_found == h.culprit
        asv_jobs.append(n_asv)
    return {"range": size, "runners": runners, "trials": trials,
            "right": right, "rounds_mean": round(statistics.fmean(rounds), 2), "rounds_max": max(rounds),
            "named_mean": round(statistics.fmean(named), 2),
            "jobs_mean": round(statistics.fmean(jobs), 1),
            "asv_right": asv_right, "asv_rounds_jobs": round(statistics.fmean(asv_jobs), 1),
            "outcomes": outcomes}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[8, 16, 32, 64, 128, 256])
    parser.add_argument("--runners", type=int, nargs="+", default=[1, 2, 4, 8])
    parser.add_argument("--trials", type=int, default=100)
    parser.add_argument("--effect", type=float, default=0.08)
    parser.add_argument("--noise", type=float, default=0.03)
    parser.add_argument("--samples", type=int, default=5, help="samples per job")
    parser.add_argument("--check", type=int, default=None,
                        help="exit 1 unless Parallax finds the right culprit in at least this many trials per cell")
    args = parser.parse_args(argv)
    rows = []
    started = time.monotonic()
    total = len(args.sizes) * len(args.runners)
    for size in args.sizes:
        for runners in args.runners:
            rows.append(cell(size, runners, args.trials, args))
            print(f"[{len(rows)}/{total}] range {size}, {runners} runners: {rows[-1]['right']}/{args.trials} right, "
                  f"{time.monotonic() - started:.0f} s", file=sys.stderr, flush=True)
    print(f"noise {args.noise:.0%}, effect {args.effect:.0%}, {args.samples} samples per job, {args.trials} seeded "
          f"trials per row")
    print_table(rows, [("range", "range"), ("runners", "runners"), ("right", "right"),
                       ("named by round", "named_mean"), ("rounds", "rounds_mean"), ("max rounds", "rounds_max"),
                       ("jobs", "jobs_mean"),
                       ("asv right", "asv_right"), ("asv rounds = jobs", "asv_rounds_jobs")])
    write_results("bisect_cost", {"settings": vars(args), "rows": rows})
    if args.check is not None:
        failing = [r for r in rows if int(r["right"]) < args.check]  # type: ignore[call-overload]
        for row in failing:
            print(f"FAIL: range {row['range']}, {row['runners']} runners: {row['right']}/{row['trials']} right "
                  f"(needs {args.check})")
        return 1 if failing else 0
    return 0


if __name__ == "__main__":
    sys.exit(main())
