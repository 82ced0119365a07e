"""Mutation testing of the safety-critical modules with cosmic-ray (`make mutation`).

Each target is a group of modules and the test files that guard them. For each target the script
writes a cosmic-ray config and session under bench/results/mutation/, samples `--per-target`
mutants with a fixed seed (the others are marked skipped: a full run takes hours on two cores),
runs them, and prints a table of killed / survived / timed-out mutants with every survivor's
diff. The summary goes to bench/results/mutation/summary-<targets>[-before].json.

`--before` scores the same sample against the tests as they were before issue 19 (its tests
deselected). The "before" tests are a subset of today's, so a mutant that survives today's tests
survives them too: the before pass copies those results and runs only the mutants today's tests
kill (or time out on).

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
from cosmic_ray.work_item import TestOutcome, WorkerOutcome, WorkItem, WorkResult

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "bench/results/mutation"
COSMIC_RAY = str(Path(sys.executable).parent / "cosmic-ray")


# A port nothing listens on: the PostgreSQL cases skip (the fixtures' "not reachable" path).
NO_POSTGRES = "postgresql+psycopg://postgres@127.0.0.1:9/none"


@dataclass(frozen=True)
class Target:
    name: str
    modules: tuple[str, ...]
    tests: tuple[str, ...]
    postgres: bool = True  # the module has a PostgreSQL-only branch: run (some of) the tests there too
    keyword: str = ""  # pytest -k: which tests run, e.g. the PostgreSQL cases of the concurrency tests only
    conftest: bool = True  # False: the tests need no fixture, so skip importing the service


TARGETS = (
    Target("queue", ("app/jobs/queue.py",),
           ("tests/service/test_lease_state_machine.py", "tests/service/test_runner_protocol.py",
            "tests/service/test_claim_concurrency.py", "tests/service/test_background.py",
            "tests/service/test_enqueue.py"),
           keyword="claim_concurrency or not postgresql"),
    Target("results", ("runners/results.py",),
           ("tests/service/test_results_document.py",
            "tests/service/test_hardening.py::test_2_the_runner_side_limits_are_the_services_defaults"),
           postgres=False),
    Target("webhooks", ("app/github/ingest.py", "app/web/webhooks.py"),
           ("tests/github/test_webhook_requests.py", "tests/github/test_processing.py"),
           keyword="simultaneous or not postgresql"),
    Target("auth", ("app/auth/tokens.py", "app/web/auth.py"),
           ("tests/service/test_users.py", "tests/service/test_runner_protocol.py"), postgres=False),
    Target("execute", ("runners/execute.py",), ("tests/runner/test_execute.py",)),
    Target("checkout", ("runners/checkout.py",), ("tests/runner/test_checkout.py",)),
    Target("detector", ("app/detection/detector.py",), ("tests/detection/test_detection.py",)),
    Target("race", ("scheduler_core/sim/race.py",),
           ("tests/sim/test_race_detector.py", "tests/sim/test_fuzz.py"), postgres=False, conftest=False),
)

# The tests issue 19 added (commits 3a04e62..b37aa9e); `--before` deselects them.
ISSUE_19_TESTS = (
    "tests/service/test_results_document.py::test_a_sample_that_overflows_a_float_is_refused_naming_the_sample",
    "tests/service/test_results_document.py::test_service_refuses_an_overflowing_sample_with_422_and_stores_nothing",
    "tests/service/test_results_document.py::test_exactly_the_sample_limit_is_accepted_and_one_more_is_refused",
    "tests/service/test_results_document.py::test_an_environment_without_a_platform_is_valid",
    "tests/service/test_results_document.py::test_a_platform_that_is_not_a_string_is_refused",
    "tests/runner/test_faults.py::test_a_sample_written_as_1e999_fails_local_validation_and_nothing_is_uploaded",
    "tests/service/test_lease_state_machine.py",
    "tests/github/test_webhook_requests.py::test_two_simultaneous_deliveries_with_one_id_store_one_row",
    "tests/detection/test_detection.py::test_spikes_are_the_lone_outliers_and_are_replaced_by_their_neighbours_median",
    "tests/detection/test_detection.py::test_a_spike_beside_a_step_neither_moves_the_change_nor_counts_as_the_old_level",
    "tests/runner/test_execute.py::test_a_timeout_kills_the_group_without_psutil",
    "tests/runner/test_execute.py::test_a_process_started_while_the_command_is_being_stopped_is_killed_too",
    "tests/service/test_enqueue.py::test_a_more_urgent_request_raises_the_priority_of_the_queued_job",
    "tests/service/test_enqueue.py::test_a_running_job_keeps_its_priority_when_the_cell_is_requested_again",
    "tests/service/test_users.py::test_a_wrong_token_is_401_whichever_side_of_a_users_hash_it_falls",
    "tests/service/test_users.py::test_a_name_that_sorts_before_an_existing_one_is_a_new_user",
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
    kills: list[dict[str, object]]

    @property
    def score(self) -> float:
        tested = self.killed + self.survived + self.timed_out
        return (self.killed + self.timed_out) / tested if tested else float("nan")


def test_command(target: Target, pytest_extra: list[str]) -> list[str]:
    """pytest on the target's tests, stopping at the first failure. Plugins are not auto-loaded
    (hypothesis and schemathesis cost seconds of start-up per mutant and none of these tests use them)."""
    env = ["env", "-u", "CI", "PYTEST_DISABLE_PLUGIN_AUTOLOAD=1"]
    if not target.postgres:
        env.append(f"PARALLAX_TEST_DATABASE_URL={NO_POSTGRES}")
    pytest = [sys.executable, "-m", "pytest", "-x", "-q", "-p", "no:cacheprovider", "-p", "pytest_timeout",
              "-o", "timeout=120"]
    if target.keyword:
        pytest += ["-k", target.keyword]
    if not target.conftest:
        pytest.append("--noconftest")
    return [*env, *pytest, *target.tests, *pytest_extra]


def config_text(target: Target, pytest_extra: list[str], timeout_s: float) -> str:
    command = test_command(target, pytest_extra)
    modules = ", ".join(json.dumps(m) for m in target.modules)
    return (f'[cosmic-ray]\nmodule-path = [{modules}]\ntimeout = {timeout_s}\nexcluded-modules = []\n'
            f'test-command = {json.dumps(shlex.join(command))}\n\n'
            '[cosmic-ray.distributor]\nname = "local"\n')


def mutant_key(item: WorkItem) -> tuple[str, str, int]:
    """What a mutant is, independent of the session (job ids are random per `cosmic-ray init`)."""
    mutation = item.mutations[0]
    return str(mutation.module_path), mutation.operator_name, mutation.occurrence


def sample(session: Path, per_target: int, seed: int) -> tuple[int, int]:
    """Keep `per_target` pending mutants chosen with `seed`; mark the rest skipped."""
    with use_db(str(session), WorkDB.Mode.open) as db:
        items = sorted(db.pending_work_items, key=mutant_key)
        rng = random.Random(seed)
        keep = set(item.job_id for item in rng.sample(items, min(per_target, len(items))))
        skipped = [item.job_id for item in items if item.job_id not in keep]
        if skipped:
            db.set_multiple_results(skipped, WorkResult(output="not sampled", worker_outcome=WorkerOutcome.SKIPPED))
        return len(items), len(keep)


def first_failure(output: str | None) -> str:
    """The first test pytest reported as failed or in error: what killed the mutant."""
    for line in (output or "").splitlines():
        if line.startswith(("FAILED ", "ERROR ")):
            return line.split(" - ")[0]
    return "(no failing test named: a crash or a timeout)"


def describe(item: WorkItem, result: WorkResult) -> dict[str, object]:
    mutation = item.mutations[0]
    return {"job": item.job_id, "module": str(mutation.module_path), "line": mutation.start_pos[0],
            "operator": mutation.operator_name, "occurrence": mutation.occurrence, "diff": result.diff}


def collect(target: Target, session: Path, mutants: int, sampled: int, seconds: float) -> Score:
    score = Score(target.name, mutants, sampled, 0, 0, 0, seconds, [], [])
    with use_db(str(session), WorkDB.Mode.open) as db:
        for item, result in db.completed_work_items:
            if result.worker_outcome == WorkerOutcome.SKIPPED:
                continue
            if result.test_outcome == TestOutcome.KILLED:
                score.killed += 1
                score.kills.append({**describe(item, result), "by": first_failure(result.output)})
            elif result.worker_outcome == WorkerOutcome.ABNORMAL:  # cosmic-ray's timeout
                score.timed_out += 1
            elif result.test_outcome == TestOutcome.SURVIVED:
                score.survived += 1
                score.survivors.append(describe(item, result))
    return score


def init_session(config: Path, session: Path, seed: int, per_target: int) -> tuple[int, int]:
    session.unlink(missing_ok=True)
    subprocess.run([COSMIC_RAY, "init", str(config), str(session)], cwd=ROOT, check=True)
    return sample(session, per_target, seed)


def carry_survivors(after: Path, before: Path) -> int:
    """Copy today's survivors into the before session: a subset of the tests cannot kill them."""
    with use_db(str(after), WorkDB.Mode.open) as db:
        survived = {mutant_key(item): result for item, result in db.completed_work_items
                    if result.worker_outcome == WorkerOutcome.NORMAL and result.test_outcome == TestOutcome.SURVIVED}
    with use_db(str(before), WorkDB.Mode.open) as db:
        carried = 0
        for item in db.pending_work_items:
            result = survived.get(mutant_key(item))
            if result is not None:
                db.set_result(item.job_id, WorkResult(
                    worker_outcome=WorkerOutcome.NORMAL, test_outcome=TestOutcome.SURVIVED, diff=result.diff,
                    output="survived today's tests; the before tests are a subset of them (not run)"))
                carried += 1
        return carried


def run_target(target: Target, args: argparse.Namespace) -> Score:
    OUT.mkdir(parents=True, exist_ok=True)
    label = f"{target.name}{args.label}"
    extra = shlex.split(args.pytest_extra)
    after = OUT / f"{label}.sqlite"
    if args.before:
        if not after.exists():
            raise SystemExit(f"{after.relative_to(ROOT)} is missing: run without --before first (same --label)")
        extra += [arg for test in ISSUE_19_TESTS for arg in ("--deselect", test)]
        label += "-before"
    config = OUT / f"{label}.toml"
    session = OUT / f"{label}.sqlite"
    config.write_text(config_text(target, extra, args.timeout_s))
    mutants, sampled = init_session(config, session, args.seed, args.per_target)
    carried = carry_survivors(after, session) if args.before else 0
    print(f"[{target.name}] {mutants} mutants, sampled {sampled} (seed {args.seed}), "
          f"running {sampled - carried}", flush=True)
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
    parser.add_argument("--before", action="store_true",
                        help="score the same sample against the tests from before issue 19 (run without it first)")
    args = parser.parse_args()
    unknown = set(args.only) - {t.name for t in TARGETS}
    if unknown:
        parser.error(f"unknown target(s) {sorted(unknown)}; the targets are {[t.name for t in TARGETS]}")
    targets = [t for t in TARGETS if not args.only or t.name in args.only]
    scores = [run_target(target, args) for target in targets]
    print(f"\n{'target':<10} {'mutants':>7} {'sampled':>7} {'killed':>6} {'survived':>8} {'timeout':>7} "
          f"{'score':>6} {'time':>6}")
    for s in scores:
        print(f"{s.target:<10} {s.mutants:>7} {s.sampled:>7} {s.killed:>6} {s.survived:>8} {s.timed_out:>7} "
              f"{s.score:>6.0%} {s.seconds:>5.0f}s")
    for s in scores:
        for kill in s.kills:
            print(f"killed {s.target} {kill['module']}:{kill['line']} {kill['operator']} by {kill['by']}")
        for survivor in s.survivors:
            print(f"\nSURVIVED {s.target} {survivor['module']}:{survivor['line']} {survivor['operator']}"
                  f"\n{survivor['diff']}")
    scope = "-".join(t.name for t in targets) if args.only else "all"
    summary = OUT / f"summary-{scope}{args.label}{'-before' if args.before else ''}.json"
    summary.write_text(json.dumps({"seed": args.seed, "per_target": args.per_target, "pytest_extra": args.pytest_extra,
                                   "before": args.before,
                                   "targets": [{**asdict(s), "score": s.score} for s in scores]}, indent=2))
    print(f"\nwrote {summary.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
