"""Mutation testing of the safety-critical modules with cosmic-ray (`make mutation`).

Each target is a group of modules and the test files that guard them. For each target the script
writes a cosmic-ray config and session under bench/results/mutation/, samples `--per-target`
mutants with a fixed seed (the others are marked skipped: a full run takes hours on two cores),
runs them, and prints a table of killed / survived / timed-out mutants with every survivor's
diff. The summary goes to bench/results/mutation/summary.json.

cosmic-ray mutates the files in place and restores them after each mutant: do not edit the
scoped modules while it runs.
"""
from __future__ import annotations

import argparse
import json
import random
import shlex
import subprocess
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from cosmic_ray.work_db import WorkDB, use_db
from cosmic_ray.work_item import TestOutcome, WorkerOutcome, WorkResult

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "bench/results/mutation"
COSMIC_RAY = str(Path(sys.executable).parent / "cosmic-ray")


@dataclass(frozen=True)
class Target:
    name: str
    modules: tuple[str, ...]
    tests: tuple[str, ...]


TARGETS = (
    Target("queue", ("app/jobs/queue.py",),
           ("tests/service/test_runner_protocol.py", "tests/service/test_lease_state_machine.py",
            "tests/service/test_claim_concurrency.py", "tests/service/test_background.py",
            "tests/service/test_enqueue.py")),
    Target("results", ("runners/results.py",), ("tests/service/test_results_document.py",)),
    Target("webhooks", ("app/github/ingest.py", "app/web/webhooks.py"),
           ("tests/github/test_webhook_requests.py", "tests/github/test_processing.py")),
    Target("auth", ("app/auth/tokens.py", "app/web/auth.py"),
           ("tests/service/test_users.py", "tests/service/test_runner_protocol.py")),
    Target("execute", ("runners/execute.py",), ("tests/runner/test_execute.py",)),
    Target("checkout", ("runners/checkout.py",), ("tests/runner/test_checkout.py",)),
    Target("detector", ("app/detection/detector.py",), ("tests/detection/test_detection.py",)),
)


@dataclass
class Score:
    target: str
    mutants: int
    sampled: int
    killed: int
    survived: int
    timed_out: int
    seconds: float
    survivors: list[dict[str, object]]

    @property
    def score(self) -> float:
        tested = self.killed + self.survived + self.timed_out
        return (self.killed + self.timed_out) / tested if tested else float("nan")


def config_text(target: Target, pytest_extra: list[str], timeout_s: float) -> str:
    command = [sys.executable, "-m", "pytest", "-x", "-q", "-p", "no:cacheprovider", "-o", "timeout=120",
               *target.tests, *pytest_extra]
    modules = ", ".join(json.dumps(m) for m in target.modules)
    return (f'[cosmic-ray]\nmodule-path = [{modules}]\ntimeout = {timeout_s}\nexcluded-modules = []\n'
            f'test-command = {json.dumps(shlex.join(command))}\n\n'
            '[cosmic-ray.distributor]\nname = "local"\n')


def sample(session: Path, per_target: int, seed: int) -> tuple[int, int]:
    """Keep `per_target` pending mutants chosen with `seed`; mark the rest skipped."""
    with use_db(str(session), WorkDB.Mode.open) as db:
        items = sorted(db.pending_work_items, key=lambda item: item.job_id)
        rng = random.Random(seed)
        keep = set(item.job_id for item in rng.sample(items, min(per_target, len(items))))
        skipped = [item.job_id for item in items if item.job_id not in keep]
        if skipped:
            db.set_multiple_results(skipped, WorkResult(output="not sampled", worker_outcome=WorkerOutcome.SKIPPED))
        return len(items), len(keep)


def collect(target: Target, session: Path, mutants: int, sampled: int, seconds: float) -> Score:
    score = Score(target.name, mutants, sampled, 0, 0, 0, seconds, [])
    with use_db(str(session), WorkDB.Mode.open) as db:
        for item, result in db.completed_work_items:
            if result.worker_outcome == WorkerOutcome.SKIPPED:
                continue
            if result.test_outcome == TestOutcome.KILLED:
                score.killed += 1
            elif result.worker_outcome == WorkerOutcome.ABNORMAL:  # cosmic-ray's timeout
                score.timed_out += 1
            elif result.test_outcome == TestOutcome.SURVIVED:
                score.survived += 1
                mutation = item.mutations[0]
                score.survivors.append({"job": item.job_id, "module": str(mutation.module_path),
                                        "line": mutation.start_pos[0], "operator": mutation.operator_name,
                                        "occurrence": mutation.occurrence, "diff": result.diff})
    return score


def run_target(target: Target, args: argparse.Namespace) -> Score:
    OUT.mkdir(parents=True, exist_ok=True)
    label = f"{target.name}{args.label}"
    config = OUT / f"{label}.toml"
    session = OUT / f"{label}.sqlite"
    config.write_text(config_text(target, shlex.split(args.pytest_extra), args.timeout_s))
    session.unlink(missing_ok=True)
    subprocess.run([COSMIC_RAY, "init", str(config), str(session)], cwd=ROOT, check=True)
    mutants, sampled = sample(session, args.per_target, args.seed)
    print(f"[{target.name}] {mutants} mutants, running {sampled} (seed {args.seed})", flush=True)
    started = time.monotonic()
    subprocess.run([COSMIC_RAY, "exec", str(config), str(session)], cwd=ROOT, check=True)
    return collect(target, session, mutants, sampled, time.monotonic() - started)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--per-target", type=int, default=12, help="mutants sampled per target")
    parser.add_argument("--seed", type=int, default=19)
    parser.add_argument("--only", action="append", default=[], help="target name (repeatable)")
    parser.add_argument("--timeout-s", type=float, default=300.0, help="per mutant")
    parser.add_argument("--pytest-extra", default="", help="extra pytest arguments, e.g. --deselect")
    parser.add_argument("--label", default="", help="suffix of the session files and summary")
    args = parser.parse_args()
    targets = [t for t in TARGETS if not args.only or t.name in args.only]
    scores = [run_target(target, args) for target in targets]
    print(f"\n{'target':<10} {'mutants':>7} {'sampled':>7} {'killed':>6} {'survived':>8} {'timeout':>7} "
          f"{'score':>6} {'time':>6}")
    for s in scores:
        print(f"{s.target:<10} {s.mutants:>7} {s.sampled:>7} {s.killed:>6} {s.survived:>8} {s.timed_out:>7} "
              f"{s.score:>6.0%} {s.seconds:>5.0f}s")
    for s in scores:
        for survivor in s.survivors:
            print(f"\nSURVIVED {s.target} {survivor['module']}:{survivor['line']} {survivor['operator']}"
                  f"\n{survivor['diff']}")
    summary = OUT / f"summary{args.label}.json"
    summary.write_text(json.dumps({"seed": args.seed, "per_target": args.per_target, "pytest_extra": args.pytest_extra,
                                   "targets": [{**asdict(s), "score": s.score} for s in scores]}, indent=2))
    print(f"\nwrote {summary.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
