"""The runner end to end: the real service on loopback, a real three-commit repository, and
`parallax runner` as a separate process."""
from __future__ import annotations

import signal
import stat

from tests.support.runner_harness import Harness


def test_three_jobs_run_at_their_commits_and_results_are_stored(make_harness, database_url):
    h: Harness = make_harness(database_url)
    job_ids = [h.enqueue(sha) for sha in h.shas]
    proc = h.start_runner("r1")
    jobs = [h.wait_job(job_id, ("succeeded", "failed"), proc=proc) for job_id in job_ids]
    proc.send_signal(signal.SIGTERM)
    assert h.wait_exit(proc) == 0

    for i, (sha, job) in enumerate(zip(h.shas, jobs)):
        assert job["state"] == "succeeded", job
        [run] = h.runs(job["id"])
        assert run["context"]["head"] == sha  # what `git rev-parse HEAD` said inside the worktree
        assert run["context"]["file"] == f"version {i}"
        assert run["context"]["commit_env"] == sha and run["context"]["job_id"] == str(job["id"])
        assert run["samples"] == {"output_throughput": [100.0, 101.0, 102.0]}  # PARALLAX_REPEATS=3
        assert f"measured at {sha}" in job["log"]
        assert "fake suite: mode ok" in job["log"]
    assert list((h.tmp_path / "work-r1" / "worktrees").iterdir()) == []


def test_registration_is_kept_in_the_work_dir_with_mode_0600_and_reused(harness: Harness):
    first = harness.enqueue(harness.shas[0])
    proc = harness.start_runner("r1", "--once")
    assert harness.wait_exit(proc) == 0, harness.runner_log(proc)
    identity = harness.tmp_path / "work-r1" / "runner.json"
    assert stat.S_IMODE(identity.stat().st_mode) == 0o600

    second = harness.enqueue(harness.shas[1])
    proc = harness.start_runner("r1", "--once", register=False)  # no registration token this time
    assert harness.wait_exit(proc) == 0, harness.runner_log(proc)
    assert list(harness.runner_ids()) == ["r1"]  # one registration, reused
    assert harness.job(first)["state"] == harness.job(second)["state"] == "succeeded"


def test_an_unregistered_runner_without_a_registration_token_says_what_is_missing(harness: Harness):
    proc = harness.start_runner("r1", "--once", register=False)
    assert harness.wait_exit(proc) == 1
    assert "--registration-token" in harness.runner_log(proc)


def test_a_token_from_the_environment_is_not_passed_to_the_job(harness: Harness):
    job_id = harness.enqueue(harness.shas[0])
    proc = harness.start_runner("r1", "--once", register=False,
                                env={"PARALLAX_REGISTRATION_TOKEN": harness.registration_token()})
    assert harness.wait_exit(proc) == 0, harness.runner_log(proc)
    [run] = harness.runs(job_id)
    assert run["context"]["secret_seen"] is False
