"""Pull-request verdicts: Parallax's adaptive A/B rounds next to a naive one-run-each threshold
comparison (what github-action-benchmark does), on the same seeded pull requests.

    .venv/bin/python bench/pr_verdict.py [--prs 200] [--seed 1]

Each pull request is measured on three platforms: cuda and rocm with 2 % run-to-run noise, cpu
with 5 %. A job draws one run level (true level x (1 + N(0, noise))) and five samples around it
(noise / 4). Scenarios: a 5 % drop on one platform (cuda or rocm, alternating) and no change.
Parallax runs the service's own code (`app.pulls.verdicts`: the adaptive rule, the verdicts
and the classification; `app.pulls.comparisons.conclude`: the check's conclusion) with the
default `pr_max_rounds` (12). The naive comparison runs one base and one head job per platform
and flags a platform whose head median is worse by the threshold (2 % and 5 % shown).

Counted: a drop "found with the right scope" when the check fails and the classification is
platform-specific naming exactly the dropped platform; an unchanged pull request "failed" when
the check fails; jobs are runner jobs (one suite run each) per pull request.
Results: a table on stdout and JSON in bench/results/pr_verdict.json.
"""
from __future__ import annotations

import argparse
import random
import statistics
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from app.pulls.comparisons import Evaluation, conclude, verdict_json  # noqa: E402
from app.pulls.verdicts import START_ROUNDS, classify, compare_levels, look_alpha, wants_round  # noqa: E402
from bench.backends import print_table, write_results  # noqa: E402

NOISE = {"cuda": 0.02, "rocm": 0.02, "cpu": 0.05}
LEVEL = {"cuda": 1200.0, "rocm": 950.0, "cpu": 80.0}
MAX_ROUNDS = 12
SAMPLES = 5
EFFECT = -0.05
NAIVE_THRESHOLDS = (0.02, 0.05)


@dataclass
class Outcome:
    conclusion: str
    scope: list[dict[str, Any]]
    jobs: int


def job(rng: random.Random, platform: str, effect: float) -> list[float]:
    level = LEVEL[platform] * (1.0 + effect) * (1.0 + rng.gauss(0.0, NOISE[platform]))
    return [level * (1.0 + rng.gauss(0.0, NOISE[platform] / 4)) for _ in range(SAMPLES)]


def parallax(rng: random.Random, effects: dict[str, float]) -> Outcome:
    verdicts, jobs = [], 0
    for platform in NOISE:
        base: list[list[float]] = []
        head: list[list[float]] = []
        found: list[Any] = []
        rounds = 0
        while rounds < START_ROUNDS or wants_round(found, rounds, MAX_ROUNDS):
            base.append(job(rng, platform, 0.0))          # base, head, base, head … on one runner
            head.append(job(rng, platform, effects.get(platform, 0.0)))
            rounds += 1
            jobs += 2
            if rounds >= START_ROUNDS:
                found = [compare_levels(platform, "decode-throughput", "output_throughput", "higher_is_better",
                                        base, head, look_alpha(MAX_ROUNDS))]
        verdicts += found
    scopes = [s.as_json() for s in classify(verdicts)]
    evaluation = Evaluation([verdict_json(v) for v in verdicts], scopes, {}, [], [], False)
    conclusion, _ = conclude(evaluation, None)
    return Outcome(conclusion, scopes, jobs)


def naive(rng: random.Random, effects: dict[str, float], threshold: float) -> Outcome:
    worse = []
    for platform in NOISE:
        before = statistics.median(job(rng, platform, 0.0))
        after = statistics.median(job(rng, platform, effects.get(platform, 0.0)))
        if after / before - 1.0 <= -threshold:
            worse.append(platform)
    scope = [{"scope": "platform_specific" if len(worse) < len(NOISE) else "common", "platforms": worse,
              "direction": "worse"}] if worse else []
    return Outcome("failure" if worse else "success", scope, 2 * len(NOISE))


def right_scope(outcome: Outcome, dropped: str) -> bool:
    worse = [s for s in outcome.scope if s["direction"] == "worse"]
    return (outcome.conclusion == "failure" and len(worse) == 1 and worse[0]["scope"] == "platform_specific"
            and worse[0]["platforms"] == [dropped])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--prs", type=int, default=200)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args(argv)
    methods: dict[str, Any] = {"parallax (adaptive A/B)": lambda rng, e: parallax(rng, e)}
    for threshold in NAIVE_THRESHOLDS:
        methods[f"naive one run each, {threshold:.0%} threshold"] = \
            lambda rng, e, t=threshold: naive(rng, e, t)
    rows = []
    started = time.monotonic()
    for name, method in methods.items():
        found = failed = neutral = 0
        jobs_drop: list[int] = []
        jobs_same: list[int] = []
        for i in range(args.prs):
            dropped = ("cuda", "rocm")[i % 2]
            outcome = method(random.Random(f"{args.seed}/drop/{i}"), {dropped: EFFECT})
            found += right_scope(outcome, dropped)
            jobs_drop.append(outcome.jobs)
            outcome = method(random.Random(f"{args.seed}/same/{i}"), {})
            failed += outcome.conclusion == "failure"
            neutral += outcome.conclusion == "neutral"
            jobs_same.append(outcome.jobs)
        rows.append({"method": name, "prs": args.prs,
                     "drop_found_right_scope": f"{100 * found / args.prs:.1f} %",
                     "unchanged_failed": f"{100 * failed / args.prs:.1f} %",
                     "unchanged_neutral": f"{100 * neutral / args.prs:.1f} %",
                     "jobs_per_pr_drop": f"{statistics.mean(jobs_drop):.1f}",
                     "jobs_per_pr_unchanged": f"{statistics.mean(jobs_same):.1f}",
                     "max_jobs_per_pr": max(jobs_drop + jobs_same)})
        print(f"{name}: done ({time.monotonic() - started:.1f} s)", file=sys.stderr)
    print_table(rows, [("method", "method"), ("PRs", "prs"), ("5 % drop, right scope", "drop_found_right_scope"),
                       ("unchanged PR failed", "unchanged_failed"), ("unchanged PR neutral", "unchanged_neutral"),
                       ("jobs/PR (drop)", "jobs_per_pr_drop"),
                       ("jobs/PR (unchanged)", "jobs_per_pr_unchanged"), ("max jobs/PR", "max_jobs_per_pr")])
    write_results("pr_verdict", {"seed": args.seed, "noise": NOISE, "effect": EFFECT, "max_rounds": MAX_ROUNDS,
                                 "start_rounds": START_ROUNDS, "rows": rows})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
