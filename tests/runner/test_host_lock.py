"""The host lock: runners sharing a machine measure a real platform alone, simulated jobs together,
and a job that needs the machine alone is not starved by a stream of simulated ones."""
from __future__ import annotations

import fcntl
import os
import threading
import time
from pathlib import Path

import pytest

from runners.host_lock import HostLock, HostLockError, Interrupted
from tests.support.runner_harness import Harness, wait_for

DEADLINE_S = 60.0


class Holder(threading.Thread):
    """Takes the lock in a thread and keeps it until `release` is set; records what happened."""

    def __init__(self, lock: HostLock, exclusive: bool, name: str, order: list[str]) -> None:
        super().__init__(daemon=True, name=name)
        self.lock, self.exclusive, self.order = lock, exclusive, order
        self.waiting, self.entered, self.release = threading.Event(), threading.Event(), threading.Event()
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            with self.lock.hold(self.exclusive, waiting=self.waiting.set):
                self.order.append(self.name)
                self.entered.set()
                self.release.wait(DEADLINE_S)
        except BaseException as exc:  # reported by the test
            self.error = exc

    def finish(self) -> None:
        self.release.set()
        self.join(DEADLINE_S)
        assert self.error is None, self.error


@pytest.fixture
def lock(tmp_path: Path) -> HostLock:
    return HostLock(tmp_path / "host.lock", poll_s=0.01)


def turnstile_held(lock: HostLock) -> bool:
    """Whether a waiter has queued at the turnstile (an exclusive one, past its `join_s`)."""
    fd = os.open(lock.turnstile, os.O_RDWR | os.O_CREAT, 0o666)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        fcntl.flock(fd, fcntl.LOCK_UN)
        return False
    except BlockingIOError:
        return True
    finally:
        os.close(fd)


def test_shared_holders_run_together(lock: HostLock):
    order: list[str] = []
    first, second = Holder(lock, False, "sim-a", order), Holder(lock, False, "sim-b", order)
    first.start()
    assert first.entered.wait(DEADLINE_S)
    second.start()
    assert second.entered.wait(DEADLINE_S)
    assert not second.waiting.is_set()
    first.finish()
    second.finish()


@pytest.mark.parametrize("first_exclusive", [False, True], ids=["cpu-waits-for-sim", "sim-waits-for-cpu"])
def test_a_job_waits_while_the_other_kind_holds_the_lock(lock: HostLock, first_exclusive: bool):
    order: list[str] = []
    names = {True: "cpu", False: "sim"}
    first = Holder(lock, first_exclusive, names[first_exclusive], order)
    second = Holder(lock, not first_exclusive, names[not first_exclusive], order)
    first.start()
    assert first.entered.wait(DEADLINE_S)
    second.start()
    assert second.waiting.wait(DEADLINE_S)
    assert not second.entered.is_set()
    first.finish()
    assert second.entered.wait(DEADLINE_S)
    second.finish()
    assert order == [first.name, second.name]


def a_cpu_job_waiting_on_a_simulator_job(lock: HostLock, order: list[str]) -> tuple[Holder, Holder, Holder]:
    """sim-1 holds the lock shared and cpu waits for it; sim-2 is made, not started."""
    first_sim, real, second_sim = (Holder(lock, False, "sim-1", order), Holder(lock, True, "cpu", order),
                                   Holder(lock, False, "sim-2", order))
    first_sim.start()
    assert first_sim.entered.wait(DEADLINE_S)
    real.start()
    assert real.waiting.wait(DEADLINE_S)
    return first_sim, real, second_sim


def test_a_waiting_exclusive_holder_goes_before_shared_ones_that_come_later(lock: HostLock):
    """Simulator jobs overlap all the time; without the turnstile a cpu job could wait forever."""
    order: list[str] = []
    first_sim, real, later_sim = a_cpu_job_waiting_on_a_simulator_job(lock, order)
    wait_for(lambda: turnstile_held(lock), DEADLINE_S, "the cpu job queues at the turnstile after its join_s")
    later_sim.start()
    assert later_sim.waiting.wait(DEADLINE_S)  # held at the turnstile, although sim-1 holds the lock shared
    assert not later_sim.entered.is_set()
    first_sim.finish()
    assert real.entered.wait(DEADLINE_S)
    assert not later_sim.entered.is_set()
    real.finish()
    assert later_sim.entered.wait(DEADLINE_S)
    later_sim.finish()
    assert order == ["sim-1", "cpu", "sim-2"]


def test_shared_jobs_arriving_within_the_exclusive_waiters_join_s_run_with_the_running_one(tmp_path: Path):
    """The simulators of one push are claimed milliseconds apart; a real job claimed between them
    waits for both instead of splitting them (the push then takes one simulator run, not two)."""
    lock = HostLock(tmp_path / "host.lock", poll_s=0.01, join_s=DEADLINE_S)
    order: list[str] = []
    first_sim, real, second_sim = a_cpu_job_waiting_on_a_simulator_job(lock, order)
    second_sim.start()
    assert second_sim.entered.wait(DEADLINE_S)  # beside sim-1, before the waiting cpu job
    assert not second_sim.waiting.is_set() and not real.entered.is_set()
    first_sim.finish()
    assert not real.entered.is_set()  # sim-2 still measures
    second_sim.finish()
    assert real.entered.wait(DEADLINE_S)
    real.finish()
    assert order == ["sim-1", "sim-2", "cpu"]


def test_a_wait_is_given_up_with_the_reason(lock: HostLock):
    order: list[str] = []
    sim = Holder(lock, False, "sim", order)
    sim.start()
    assert sim.entered.wait(DEADLINE_S)
    asked = []

    def interrupted() -> str | None:
        asked.append(1)
        return "cancelled" if len(asked) >= 3 else None

    with pytest.raises(Interrupted) as raised:
        with lock.hold(True, interrupted):
            order.append("cpu")
    assert raised.value.reason == "cancelled" and order == ["sim"]
    sim.finish()


def test_a_lock_that_cannot_be_opened_is_refused_naming_the_path(tmp_path: Path):
    missing = tmp_path / "no-such-dir" / "host.lock"
    with pytest.raises(HostLockError, match=f"host lock {missing}: cannot open it"):
        HostLock(missing).check()


def test_the_runner_refuses_a_host_lock_it_cannot_open_before_claiming(harness: Harness, tmp_path: Path):
    job_id = harness.enqueue(harness.shas[0])
    missing = tmp_path / "no-such-dir" / "host.lock"
    proc = harness.start_runner("r1", "--once", "--host-lock", str(missing))
    assert harness.wait_exit(proc) != 0
    assert f"host lock {missing}: cannot open it" in harness.runner_log(proc)
    assert harness.job(job_id)["state"] == "queued"


def test_a_cpu_job_waits_for_a_simulator_job_on_the_same_host_and_says_so(harness: Harness, tmp_path: Path):
    path = tmp_path / "host.lock"
    order: list[str] = []
    simulator_job = Holder(HostLock(path), False, "sim", order)  # a simulated job measuring on this machine
    simulator_job.start()
    assert simulator_job.entered.wait(DEADLINE_S)
    job_id = harness.enqueue(harness.shas[0])
    proc = harness.start_runner("r1", "--once", "--host-lock", str(path), mode="block")
    wait_for(lambda: "waiting for the host lock" in (harness.job(job_id)["log"] or ""), DEADLINE_S,
             "the job's log to say it waits for the host lock")
    assert harness.job(job_id)["state"] == "running"
    simulator_job.finish()
    released_at = time.time()
    harness.marker("started")  # the suite's command starts once the simulator job is done ...
    assert harness.control.joinpath("started").stat().st_mtime >= released_at - 0.01  # ... not before
    harness.control.joinpath("release").touch()
    job = harness.wait_job(job_id, ("succeeded", "failed"), proc=proc)
    assert job["state"] == "succeeded", job
    assert harness.wait_exit(proc) == 0


def test_a_simulated_job_holds_the_host_until_it_has_reported(harness: Harness, tmp_path: Path,
                                                              monkeypatch: pytest.MonkeyPatch):
    """A simulated job's upload (its timeline artifact, its results) is work on the machine: a cpu
    job waiting for the host starts only once the simulated job has reported, not as soon as its
    command is done."""
    path = tmp_path / "host.lock"
    arrived, report = threading.Event(), threading.Event()
    complete = harness.app.view_functions["runner_api.complete_job"]

    def held_complete(job_id: int):  # type: ignore[no-untyped-def]
        arrived.set()  # the simulated job's command is done; it is reporting
        report.wait(DEADLINE_S)
        return complete(job_id)

    monkeypatch.setitem(harness.app.view_functions, "runner_api.complete_job", held_complete)
    job_id = harness.enqueue(harness.shas[0], platform="rocm-sim")
    proc = harness.start_runner("sim", "--once", "--host-lock", str(path), "--label", "platform=rocm-sim")
    assert arrived.wait(DEADLINE_S), harness.runner_log(proc)
    cpu_job = Holder(HostLock(path), True, "cpu", [])
    cpu_job.start()
    wait_for(lambda: cpu_job.waiting.is_set() or cpu_job.entered.is_set(), DEADLINE_S, "the cpu job to try the lock")
    assert cpu_job.waiting.is_set() and not cpu_job.entered.is_set()  # the reporting job still holds the host
    report.set()
    assert harness.wait_job(job_id, ("succeeded", "failed"), proc=proc)["state"] == "succeeded"
    assert cpu_job.entered.wait(DEADLINE_S)  # and lets go once it has reported
    cpu_job.finish()
    assert harness.wait_exit(proc) == 0


def test_a_simulated_job_checks_out_only_once_a_measuring_cpu_job_is_done(harness: Harness, tmp_path: Path):
    """Its git work is work on the machine too: while a cpu job measures, a simulated job waits
    before it checks out, and says so."""
    path = tmp_path / "host.lock"
    cpu_job = Holder(HostLock(path), True, "cpu", [])  # a real job measuring on this machine
    cpu_job.start()
    assert cpu_job.entered.wait(DEADLINE_S)
    job_id = harness.enqueue(harness.shas[0], platform="rocm-sim")
    proc = harness.start_runner("sim", "--once", "--host-lock", str(path), "--label", "platform=rocm-sim")
    log = wait_for(lambda: (text := harness.job(job_id)["log"] or "") and "waiting for the host lock" in text and text,
                   DEADLINE_S, "the job's log to say it waits for the host lock")
    assert "checked out" not in log
    cpu_job.finish()
    job = harness.wait_job(job_id, ("succeeded", "failed"), proc=proc)
    assert job["state"] == "succeeded" and "checked out" in job["log"], job
    assert harness.wait_exit(proc) == 0
