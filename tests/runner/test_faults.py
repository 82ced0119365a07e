"""Faults the runner must survive: outages, hanging and broken commands, crashes, shutdown,
cancellation. SQLite (the core flow covers PostgreSQL), except NUL output, a PostgreSQL-only fault)."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time

import psutil
import pytest

from runners.agent import RUNNING_FILE, kill_leftover_job
from tests.support.runner_harness import PARALLAX, Harness, pid_alive, wait_for

# Each stages a fault through real processes and waits on real timeouts (4-16 s each).
pytestmark = pytest.mark.slow


def test_server_down_for_10_s_mid_job_the_result_lands_once(make_harness, sqlite_url):
    h: Harness = make_harness(sqlite_url, lease_s=30)  # the lease outlives the outage
    job_id = h.enqueue(h.shas[0])
    proc = h.start_runner("r1", "--once", mode="block")
    h.marker("started")
    h.server.stop()
    (h.control / "release").touch()  # the job finishes while the service is unreachable
    time.sleep(10)
    h.server.start()
    assert h.wait_exit(proc, 90) == 0, h.runner_log(proc)

    job = h.job(job_id)
    assert job["state"] == "succeeded" and job["attempt"] == 1
    assert len(h.runs(job_id)) == 1
    log = h.runner_log(proc)
    assert "failed (ConnectionError" in log and "retry" in log  # it did meet the outage
    assert "results stored" in log


def test_a_hanging_command_is_killed_with_its_children_and_fails_with_timeout(make_harness, sqlite_url):
    h: Harness = make_harness(sqlite_url, timeout_s=2)
    job_id = h.enqueue(h.shas[0])
    proc = h.start_runner("r1", "--once", mode="hang")
    started = h.marker("started")
    job = h.wait_job(job_id, ("failed", "queued"), proc=proc)
    assert job["state"] == "failed"
    assert job["failure_reason"].split(":")[0] == "timeout"
    wait_for(lambda: not pid_alive(started["pid"]) and not pid_alive(started["child"]), 10,
             "the command and its child to be gone")
    assert h.wait_exit(proc) == 0


def test_a_document_with_nan_fails_local_validation_and_nothing_is_stored(harness: Harness):
    job_id = harness.enqueue(harness.shas[0])
    proc = harness.start_runner("r1", "--once", mode="nan")
    job = harness.wait_job(job_id, ("failed",), proc=proc)
    assert job["failure_reason"].startswith("invalid results document:")
    assert "NaN" in job["failure_reason"]
    assert harness.runs(job_id) == []
    assert harness.wait_exit(proc) == 0


def test_a_sample_written_as_1e999_fails_local_validation_and_nothing_is_uploaded(harness: Harness):
    job_id = harness.enqueue(harness.shas[0])
    proc = harness.start_runner("r1", "--once", mode="overflow")
    job = harness.wait_job(job_id, ("failed",), proc=proc)
    assert job["failure_reason"].startswith("invalid results document: metrics[0].samples[0]")
    assert harness.runs(job_id) == []
    assert harness.wait_exit(proc) == 0


def test_a_non_zero_exit_fails_the_job_with_the_tail_of_its_log(harness: Harness):
    job_id = harness.enqueue(harness.shas[0])
    proc = harness.start_runner("r1", "--once", mode="exit3")
    job = harness.wait_job(job_id, ("failed",), proc=proc)
    assert job["failure_reason"].startswith("command exited with status 3")
    assert "something went wrong in the engine" in job["failure_reason"]
    assert "something went wrong in the engine" in job["log"]
    assert harness.wait_exit(proc) == 0


def test_a_command_that_writes_no_document_fails_the_job(harness: Harness):
    job_id = harness.enqueue(harness.shas[0])
    proc = harness.start_runner("r1", "--once", mode="silent")
    job = harness.wait_job(job_id, ("failed",), proc=proc)
    assert "wrote no results document" in job["failure_reason"]
    assert harness.wait_exit(proc) == 0


def test_sigkill_mid_job_the_lease_expires_and_another_runner_completes_it(harness: Harness):
    job_id = harness.enqueue(harness.shas[0])
    first = harness.start_runner("r1", mode="block")
    started = harness.marker("started")
    first.send_signal(signal.SIGKILL)
    first.wait(60)
    # The job's process dies with its runner instead of holding the machine.
    wait_for(lambda: not pid_alive(started["pid"]), 60, "the orphaned job to die")

    second = harness.start_runner("r2", "--once", mode="ok")
    job = harness.wait_job(job_id, ("succeeded", "failed"), proc=second)
    assert job["state"] == "succeeded" and job["attempt"] == 2
    [run] = harness.runs(job_id)
    assert run["attempt"] == 2 and run["runner_id"] == harness.runner_ids()["r2"]
    assert harness.wait_exit(second) == 0


def test_after_a_crash_the_same_work_dir_starts_again_and_cleans_up(harness: Harness):
    job_id = harness.enqueue(harness.shas[0])
    first = harness.start_runner("r1", mode="hang")
    started = harness.marker("started")
    worktrees = harness.tmp_path / "work-r1" / "worktrees"
    assert len(list(worktrees.iterdir())) == 1
    first.send_signal(signal.SIGKILL)
    first.wait(60)
    wait_for(lambda: not pid_alive(started["pid"]), 60, "the job's leader to die with its runner")
    assert pid_alive(started["child"])  # its child outlived the crash...

    again = harness.start_runner("r1", "--once", mode="ok", register=False)
    job = harness.wait_job(job_id, ("succeeded", "failed"), proc=again)
    assert job["state"] == "succeeded" and job["attempt"] == 2
    assert harness.wait_exit(again) == 0
    assert not pid_alive(started["child"])  # ...until the next start ended it
    log = harness.runner_log(again)
    assert "killed 1 leftover process(es) of job" in log and "removed leftover" in log
    assert list(worktrees.iterdir()) == []


def test_a_runner_started_again_after_a_crash_fails_its_attempt_back_without_waiting_for_the_lease(
        make_harness, sqlite_url):
    h: Harness = make_harness(sqlite_url, lease_s=3600)  # no lease runs out within this test
    job_id = h.enqueue(h.shas[0])
    first = h.start_runner("r1", mode="hang")
    h.marker("started")
    first.send_signal(signal.SIGKILL)
    first.wait(60)
    again = h.start_runner("r1", "--once", mode="ok", register=False)
    job = h.wait_job(job_id, ("succeeded", "failed"), timeout_s=120, proc=again)
    assert job["state"] == "succeeded" and job["attempt"] == 2
    assert h.wait_exit(again) == 0
    assert "failed back to the queue" in h.runner_log(again)


def test_a_leftover_attempt_another_runner_took_over_is_left_alone(make_harness, sqlite_url):
    h: Harness = make_harness(sqlite_url)  # a 3 s lease: the job is requeued and finished by r2
    job_id = h.enqueue(h.shas[0])
    first = h.start_runner("r1", mode="hang")
    h.marker("started")
    first.send_signal(signal.SIGKILL)
    first.wait(60)
    second = h.start_runner("r2", "--once", mode="ok")
    assert h.wait_job(job_id, ("succeeded", "failed"), proc=second)["state"] == "succeeded"
    assert h.wait_exit(second) == 0
    again = h.start_runner("r1", "--once", mode="ok", register=False)
    wait_for(lambda: "was not failed back" in h.runner_log(again), 60, "r1 to report the stale attempt")
    again.send_signal(signal.SIGTERM)
    assert h.wait_exit(again) == 0
    job = h.job(job_id)
    assert job["state"] == "succeeded" and job["attempt"] == 2


def test_sigterm_during_a_job_hands_it_back_and_exits_0(harness: Harness):
    job_id = harness.enqueue(harness.shas[0])
    proc = harness.start_runner("r1", "--grace", "1", mode="block")
    started = harness.marker("started")
    proc.send_signal(signal.SIGTERM)
    assert harness.wait_exit(proc, 30) == 0, harness.runner_log(proc)
    job = harness.job(job_id)
    assert job["state"] == "queued" and job["attempt"] == 2  # back in the queue for another runner
    assert job["max_attempts"] == 4  # a hand-back does not use up one of the job's 3 attempts
    assert job["failure_reason"].startswith("handed back: runner shutting down (SIGTERM)")
    assert not pid_alive(started["pid"])  # the command ignores SIGTERM; the runner escalated
    assert harness.runs(job_id) == []


def test_sigterm_lets_a_job_finish_within_the_grace_period(harness: Harness):
    job_id = harness.enqueue(harness.shas[0])
    proc = harness.start_runner("r1", "--grace", "60", mode="block")
    harness.marker("started")
    proc.send_signal(signal.SIGTERM)
    time.sleep(1)
    (harness.control / "release").touch()
    assert harness.wait_exit(proc, 30) == 0, harness.runner_log(proc)
    job = harness.job(job_id)
    assert job["state"] == "succeeded" and job["attempt"] == 1
    assert len(harness.runs(job_id)) == 1


def test_a_job_cancelled_through_the_api_stops_at_the_runners_next_heartbeat(harness: Harness):
    from tests.support.settings import ADMIN_TOKEN
    job_id = harness.enqueue(harness.shas[0])
    proc = harness.start_runner("r1", "--once", mode="block")
    started = harness.marker("started")
    response = harness.client.post(f"/api/v1/jobs/{job_id}/cancel", headers={"Authorization": f"Bearer {ADMIN_TOKEN}"})
    assert response.status_code == 200 and response.get_json()["cancel_requested"] is True
    job = harness.wait_job(job_id, ("cancelled",), timeout_s=60, proc=proc)
    assert job["failure_reason"] == "cancelled by the service"
    assert not pid_alive(started["pid"])
    assert harness.wait_exit(proc) == 0


def test_heartbeats_keep_a_job_longer_than_its_lease_and_logs_stream_while_it_runs(harness: Harness):
    job_id = harness.enqueue(harness.shas[0])
    proc = harness.start_runner("r1", "--once", mode="block")
    harness.marker("started")
    # Output reaches the service while the command is still running, not at the end.
    wait_for(lambda: "fake suite: mode block" in harness.job(job_id)["log"], 60, "the first output line")
    rival = harness.start_runner("r2", mode="ok")  # claims (and reaps expired leases) all the while
    time.sleep(3 * 3)  # three leases
    (harness.control / "release").touch()
    job = harness.wait_job(job_id, ("succeeded", "failed"), proc=proc)
    assert job["state"] == "succeeded" and job["attempt"] == 1
    [run] = harness.runs(job_id)
    assert run["runner_id"] == harness.runner_ids()["r1"]
    rival.send_signal(signal.SIGTERM)
    assert harness.wait_exit(rival) == 0, harness.runner_log(rival)
    assert harness.wait_exit(proc) == 0


@pytest.mark.postgres
def test_a_job_printing_nul_bytes_fails_once_with_its_reason_and_log_on_postgres(make_harness, postgres_url):
    h = make_harness(postgres_url)
    job_id = h.enqueue(h.shas[0])
    proc = h.start_runner("r1", "--once", mode="nul")
    job = h.wait_job(job_id, ("failed",), proc=proc)
    assert job["attempt"] == 1
    assert job["failure_reason"].startswith("command exited with status 3")
    assert "engine crashed\ufffd\ufffd at step 7" in job["failure_reason"]
    assert "engine crashed\ufffd\ufffd at step 7" in job["log"]
    assert h.wait_exit(proc) == 0


def test_sigterm_to_an_idle_runner_says_no_job_is_running_and_exits_0(harness: Harness):
    proc = harness.start_runner("idle")
    wait_for(lambda: "on " + harness.server.url in harness.runner_log(proc), 30, "the runner to start claiming")
    proc.send_signal(signal.SIGTERM)
    assert harness.wait_exit(proc, 30) == 0
    log = harness.runner_log(proc)
    assert "SIGTERM received: no job running; exiting" in log and "finishing" not in log


def test_a_runner_that_cannot_register_stops_at_the_first_signal(harness: Harness):
    from tests.support.runner_harness import free_port
    dead = f"http://127.0.0.1:{free_port()}"   # nothing listens: registration retries
    proc = subprocess.Popen([str(PARALLAX), "runner", "--server", dead, "--registration-token", "pxr_x",
                             "--work-dir", str(harness.tmp_path / "work-unregistered")],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.extend(proc.stdout), daemon=True)  # type: ignore[arg-type]
    reader.start()
    wait_for(lambda: any("failed" in line and "retry 1" in line for line in lines), 60, "a failed registration try")
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(30) == 0   # a stop, at once: not the 80 s of a grace period meant for a running job
    reader.join(5)
    assert any("stopped while starting: registration failed" in line for line in lines), lines


def test_a_job_recorded_before_its_process_group_is_cleaned_up_by_environment_only(tmp_path) -> None:
    """A runner killed between recording a job and recording its process group (a loaded machine
    can take that long) leaves `pgid: null`: the next start still ends the job's processes, found by
    their environment, and no other process."""
    work = tmp_path / "work-r1"
    work.mkdir()
    (work / RUNNING_FILE).write_text(json.dumps({"pgid": None, "job_id": 7, "attempt": 1}))
    sleeper = [sys.executable, "-c", "import time; time.sleep(600)"]
    job = subprocess.Popen(sleeper, env=dict(os.environ, PARALLAX_RESULTS=str(work / "results" / "r.json")),
                           start_new_session=True)
    bystander = subprocess.Popen(sleeper, env=dict(os.environ, PARALLAX_RESULTS=str(tmp_path / "other" / "r.json")),
                                 start_new_session=True)
    try:
        for proc in (job, bystander):  # the environment /proc shows is the child's once it has exec'd
            wait_for(lambda p=proc: "PARALLAX_RESULTS" in psutil.Process(p.pid).environ(), 60, "the process to start")
        assert kill_leftover_job(work) == "killed 1 leftover process(es) of job 7 (found by environment)"
        assert job.wait(60) == -signal.SIGKILL
        assert bystander.poll() is None and not (work / RUNNING_FILE).exists()
    finally:
        for proc in (job, bystander):
            if proc.poll() is None:
                proc.kill()
                proc.wait()
