"""Mutants that must stay killed (issue 19, docs/testing.md): each removes a safety mechanism from
a copy of the source tree, and the tests that guard the mechanism must fail on that copy.

The mutations are the hand-made removals behind issue 19's holes and mutants the cosmic-ray run
found surviving until a test was written for them. A mutation whose text no longer occurs
exactly once fails here: update it with the code it guards. Each copy runs its tests on SQLite
only and without auto-loaded pytest plugins, in a child forked from an interpreter that imported
pytest, torch, Flask and the other third-party modules once (tests/support/pytest_zygote.py): the
file took 35 CPU-seconds instead of 70 (docs/testing.md).
"""
from __future__ import annotations

import json
import os
import re
import select
import shutil
import signal
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator

import pytest

from tests.support.settings import REPO_ROOT

# What the guarding tests import (tests/support uses bench.ports for its servers' ports).
TREE = ("app", "runners", "scheduler_core", "tests", "bench", "migrations", "pyproject.toml")
NO_POSTGRES = "postgresql+psycopg://postgres@127.0.0.1:9/none"  # nothing listens: PostgreSQL cases skip
ZYGOTE = REPO_ROOT / "tests/support/pytest_zygote.py"
START_TIMEOUT_S = 300.0  # its imports, on a loaded machine


@dataclass(frozen=True)
class Mutant:
    name: str
    module: str
    old: str
    new: str
    tests: tuple[str, ...]
    fixtures: bool = True  # False: the tests need no conftest fixture (the copy starts faster)


MUTANTS = (
    Mutant("results: non-finite samples accepted", "runners/results.py",
           "            if not math.isfinite(value):\n", "            if False:\n",
           ("tests/service/test_results_document.py::test_a_sample_that_overflows_a_float_is_refused_naming_the_sample",),
           fixtures=False),
    Mutant("lease: a finished job's runner still holds it", "app/jobs/queue.py",
           "holds = (job.state == JobState.running and job.runner_id == runner.id",
           "holds = (job.runner_id == runner.id",
           ("tests/service/test_lease_state_machine.py::test_fail_after_complete_over_http_is_409_and_the_job_stays_succeeded[sqlite]",)),
    Mutant("auth: a token whose hash sorts below a user's authenticates", "app/auth/tokens.py",
           "select(User).where(User.token_hash == hash_token(token))",
           "select(User).where(User.token_hash >= hash_token(token))",
           ("tests/service/test_users.py::test_a_wrong_token_is_401_whichever_side_of_a_users_hash_it_falls[sqlite]",)),
    Mutant("detection: no spike handling", "app/detection/detector.py",
           "    if len(levels) >= 3:\n", "    if False:\n",
           ("tests/detection/test_detection.py::test_spikes_are_the_lone_outliers_and_are_replaced_by_their_neighbours_median",),
           fixtures=False),
    Mutant("race detector: a free after the host synced the user is reported", "scheduler_core/sim/race.py",
           "host_clock[use.actor] >= use.epoch", "host_clock[use.actor] > use.epoch",
           ("tests/sim/test_race_detector.py::test_a_free_after_the_host_synced_the_user_is_safe",),
           fixtures=False),
    # Issue 27: the overlap scheduler's newer synchronisations (docs/testing.md).
    Mutant("overlap: read-done event recorded before the forward's last shared read", "scheduler_core/overlap.py",
           "            forward_batch.materialize()\n            shared_read_done = None\n"
           "            if self.policy.war_barrier and self.policy.war_barrier_read_gated:\n"
           "                shared_read_done = fwd.record_event()\n"
           "                device.declare_reads_done(shared_read_done, self._shared_buffers())\n            seq_lens",
           "            shared_read_done = None\n"
           "            if self.policy.war_barrier and self.policy.war_barrier_read_gated:\n"
           "                shared_read_done = fwd.record_event()\n"
           "                device.declare_reads_done(shared_read_done, self._shared_buffers())\n"
           "            forward_batch.materialize()\n            seq_lens",
           ("tests/sim/test_sync_bugs.py::test_the_read_gated_barrier_waits_only_until_the_shared_reads_and_is_race_free",)),
    Mutant("speculative: draft state resolved without waiting for publish_ready", "scheduler_core/overlap.py",
           "            self.prepare_d2h.wait_event(publish_ready)\n", "            pass\n",
           ("tests/sim/test_spec_grammar_sync.py::test_the_cuda_policy_is_race_free_on_the_new_paths[speculative-cuda-h100]",)),
    Mutant("speculative: the next step resolves the draft state without waiting on publish_ready",
           "scheduler_core/overlap.py",
           "                self.schedule.wait_event(event)\n", "                pass\n",
           ("tests/sim/test_spec_grammar_sync.py::test_the_cuda_policy_is_race_free_on_the_new_paths[speculative-cuda-h100]",)),
    Mutant("speculative: HIP copies the lengths without the publish_ready synchronisation", "scheduler_core/overlap.py",
           "            publish_ready.synchronize()  # HIP", "            pass  # HIP",
           ("tests/sim/test_spec_grammar_sync.py::test_hip_default_adds_no_finding_on_the_new_paths[speculative]",)),
    Mutant("grammar: the result copy without its event", "scheduler_core/overlap.py",
           "                copy_done = copy.record_event()", "                copy_done = fwd.record_event()",
           ("tests/sim/test_spec_grammar_sync.py::test_hip_default_adds_no_finding_on_the_new_paths[grammar]",)),
    Mutant("overlap: the record buffer shortened to one slot", "scheduler_core/overlap.py",
           "RECORD_SLOTS = 2", "RECORD_SLOTS = 1",
           ("tests/sim/test_sync_bugs.py::test_the_cuda_default_policy_is_race_free[cuda-h100]",)),
    Mutant("pulls: anyone may use /parallax commands", "app/pulls/commands.py",
           'if comment.get("author_association") not in ALLOWED:', "if False:",
           ("tests/pulls/test_pull_commands.py::test_command_from_a_non_member_changes_nothing_and_gets_a_reply[sqlite]",)),
    Mutant("pulls: a pair's jobs are not pinned to one runner", "app/pulls/comparisons.py",
           "if job.pull_request_id is None or job.runner_id is None:", "if True:",
           ("tests/pulls/test_pull_verdicts.py::test_a_pairs_later_jobs_wait_for_the_runner_that_took_its_first[sqlite]",)),
    Mutant("notify: webhooks go out unsigned", "app/notify/sender.py",
           'headers["X-Parallax-Signature-256"] = signature(spec.secret, raw)', "pass",
           ("tests/notify/test_delivery.py::test_an_opened_alert_sends_exactly_one_signed_webhook[sqlite]",)),
    Mutant("notify: a failing endpoint is retried forever", "app/notify/sender.py",
           'elif outcome.state == "retry" and row.attempts < MAX_ATTEMPTS:', 'elif outcome.state == "retry":',
           ("tests/notify/test_dead_letter.py::test_an_unreachable_endpoint_is_retried_then_dead_lettered_without_blocking_others[sqlite]",)),
    Mutant("artifacts: no size cap before the body is read", "app/web/artifacts_api.py",
           "if request.content_length is not None and request.content_length > limit:", "if False:",
           ("tests/artifacts/test_protocol.py::test_an_artifact_over_the_cap_is_413_and_the_results_still_complete[sqlite]",)),
)


# A cache entry being written: Python and pytest write `X.pyc.<number>`, then rename it to `X.pyc`.
# Another worker's import can write one while the tree is copied: listed, then gone before its copy
# (a CI run failed so, "No such file or directory" on `bisect.cpython-311.pyc.140348747836960`).
CACHE_ENTRY_IN_FLIGHT = "*.pyc.*"


def copy_tree(root: Path, source_root: Path = REPO_ROOT) -> Path:
    """The tree with the bytecode caches the run has written so far: `copytree` keeps each file's
    modification time, so a cache entry still matches its unchanged source and the child does not
    compile or assert-rewrite those modules again (about 0.4 CPU-s a run). Entries still being
    written are left out."""
    for name in TREE:
        source = source_root / name
        if source.is_dir():
            shutil.copytree(source, root / name, ignore=shutil.ignore_patterns(CACHE_ENTRY_IN_FLIGHT))
        else:
            shutil.copy(source, root / name)
    return root


def mutated_copy(mutant: Mutant, root: Path) -> Path:
    path = copy_tree(root) / mutant.module
    text = path.read_text()
    count = text.count(mutant.old)
    assert count == 1, f"{mutant.module}: the mutation's text occurs {count} times, not once: {mutant.old!r}"
    path.write_text(text.replace(mutant.old, mutant.new))
    # The mutant's own cache entries go: the source is compiled from the mutated text, whatever the
    # clock (an entry is checked against the source's modification time in whole seconds and size).
    for cached in (path.parent / "__pycache__").glob(f"{path.stem}.*.pyc"):
        cached.unlink()
    return root


class Zygote:
    """`tests/support/pytest_zygote.py` in a process of its own: each run forks it, so the
    third-party imports (about 2.6 CPU-seconds of each run's 3-4.7) happen once per test worker."""

    def __init__(self) -> None:
        self.process = subprocess.Popen([sys.executable, "-P", str(ZYGOTE)], stdin=subprocess.PIPE,
                                        stdout=subprocess.PIPE, text=True, cwd="/")
        assert self._answer(START_TIMEOUT_S) == {"ready": True}

    def _answer(self, timeout_s: float) -> dict[str, Any]:
        assert self.process.stdout is not None
        ready, _, _ = select.select([self.process.stdout], [], [], timeout_s)
        line = self.process.stdout.readline() if ready else ""
        if not line:
            raise AssertionError(f"the pytest zygote gave no answer in {timeout_s:g} s (exit {self.process.poll()})")
        return dict(json.loads(line))

    def run(self, root: Path, args: list[str], env: dict[str, str], timeout_s: float) -> tuple[int, str]:
        assert self.process.stdin is not None
        log = root.parent / "pytest.log"
        self.process.stdin.write(json.dumps({"root": str(root), "args": args, "env": env, "log": str(log)}) + "\n")
        self.process.stdin.flush()
        pid = self._answer(START_TIMEOUT_S)["pid"]
        try:
            code = self._answer(timeout_s)["exit"]
        except AssertionError:
            os.kill(pid, signal.SIGKILL)
            self._answer(START_TIMEOUT_S)  # its exit, so the next run reads its own answers
            raise
        return code, log.read_text(errors="replace")

    def close(self) -> None:
        assert self.process.stdin is not None
        self.process.stdin.close()
        self.process.wait(60)


@pytest.fixture(scope="session")  # one per test worker: pytest-xdist interleaves modules
def zygote() -> Iterator[Zygote]:
    started = Zygote()
    yield started
    started.close()


def run_tests(zygote: Zygote, root: Path, mutant: Mutant) -> tuple[int, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("CI", "PYTHONPATH", "PYTEST_XDIST_WORKER",
                                                             "PYTEST_XDIST_TESTRUNUID", "PYTEST_CURRENT_TEST")}
    env |= {"PYTHONPATH": str(root), "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1", "PYTHONDONTWRITEBYTECODE": "1",
            "PARALLAX_TEST_DATABASE_URL": NO_POSTGRES,
            "PARALLAX_SHARED_DIR": os.environ.get("PARALLAX_SHARED_DIR") or str(REPO_ROOT.parent / "shared")}
    args = ["-q", "-p", "no:cacheprovider", "-p", "pytest_timeout", "-o", "timeout=60",
            *([] if mutant.fixtures else ["--noconftest"]), *mutant.tests]
    return zygote.run(root, args, env, timeout_s=300)


@pytest.mark.parametrize("mutant", MUTANTS, ids=[m.name for m in MUTANTS])
def test_the_guarding_tests_fail_on_the_mutant(mutant: Mutant, tmp_path: Path, zygote: Zygote) -> None:
    code, output = run_tests(zygote, mutated_copy(mutant, tmp_path / "tree"), mutant)
    # Exit status 1 is "tests ran and some failed"; 2-5 (interrupted, internal error, usage, no
    # tests collected) would mean the mutant was never tried.
    assert code == 1, f"the mutant survived or was never tested (exit {code}):\n{output}"
    failed = [line.split(" ")[1] for line in output.splitlines() if line.startswith("FAILED ")]
    assert failed and all(node.split("[")[0] in mutant.tests or node in mutant.tests for node in failed), output


def test_the_guarding_tests_pass_on_an_unmutated_copy(tmp_path: Path, zygote: Zygote) -> None:
    """The control: on a copy without a mutation the same runs pass, so a failure above is the mutant's."""
    root = copy_tree(tmp_path / "tree")
    everything = Mutant("none", "", "", "", tuple(test for m in MUTANTS for test in m.tests))
    code, output = run_tests(zygote, root, everything)
    assert code == 0, output
    summary = output.strip().splitlines()[-1]
    assert re.fullmatch(r"\d+ passed in .*", summary), output  # nothing skipped, deselected or failed


def test_the_copy_leaves_out_cache_entries_still_being_written(tmp_path: Path) -> None:
    """A worker's import may be writing `X.pyc.<number>` while the tree is copied; it can vanish
    between the listing and its copy, so the copy never takes one (finished entries it keeps)."""
    source = tmp_path / "source"
    directories = [name for name in TREE if not name.endswith(".toml")]
    for name in directories:
        cache = source / name / "__pycache__"
        cache.mkdir(parents=True)
        (cache / "module.cpython-311.pyc").write_bytes(b"finished")
        (cache / "module.cpython-311.pyc.140348747836960").write_bytes(b"being written")
    (source / "pyproject.toml").write_text("")
    copied = copy_tree(tmp_path / "copy", source_root=source)
    assert sorted(p.name for p in copied.rglob("*.pyc*")) == ["module.cpython-311.pyc"] * len(directories)
