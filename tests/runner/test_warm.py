"""The warm interpreter (runners/warm.py): a job it forks sees what a cold `python -m` start would
show it, with the named libraries already imported; each job is a fresh fork; anything that could
make the two differ starts cold."""
from __future__ import annotations

import json
import logging
import os
import signal
import sys
import threading
from pathlib import Path

import pytest

from runners.execute import run
from runners.host_lock import HostLock
from runners.warm import WarmInterpreter
from tests.support.runner_harness import pid_alive, wait_for

# What a job reports about its own start: where it runs, with what, and what was imported before it.
PROBE = """
import json, os, sys
preloaded = "heavy_lib" in sys.modules
import heavy_lib
json.dump({"cwd": os.getcwd(), "argv": sys.argv[1:], "argv0": os.path.basename(sys.argv[0]),
           "path0": sys.path[0], "name": __name__, "stdin": sys.stdin.read(), "preloaded": preloaded,
           "imports_of_heavy_lib": heavy_lib.IMPORTS, "job": os.environ.get("PARALLAX_JOB_ID"),
           "child_sees_job": os.popen("echo $PARALLAX_JOB_ID").read().strip()},
          open(os.environ["PARALLAX_RESULTS"], "w"))
"""


@pytest.fixture
def layout(tmp_path: Path) -> dict[str, Path]:
    """A library on PYTHONPATH (counts its imports) and a worktree holding the job's package."""
    lib = tmp_path / "lib"
    lib.mkdir()
    (lib / "heavy_lib.py").write_text("IMPORTS = 1\n")
    worktree = tmp_path / "worktree"
    (worktree / "suite").mkdir(parents=True)
    (worktree / "suite" / "__init__.py").write_text("")
    (worktree / "suite" / "probe.py").write_text(PROBE)
    return {"lib": lib, "worktree": worktree, "warm": tmp_path / "warm", "results": tmp_path / "results.json"}


def base_env(layout: dict[str, Path]) -> dict[str, str]:
    return {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "PYTHONPATH": str(layout["lib"])}


def job_env(layout: dict[str, Path], **extra: str) -> dict[str, str]:
    return {**base_env(layout), "PARALLAX_RESULTS": str(layout["results"]), "PARALLAX_JOB_ID": "7", **extra}


ARGV = [sys.executable, "-m", "suite.probe", "--repeats", "3"]


def run_job(layout: dict[str, Path], env: dict[str, str], warm: WarmInterpreter | None) -> dict[str, object]:
    output: list[bytes] = []
    outcome = run(ARGV, cwd=layout["worktree"], env=env, timeout_s=120, output=output.append,
                  interrupt=lambda: None, warm=warm)
    assert outcome.exit_code == 0, b"".join(output).decode()
    return json.loads(layout["results"].read_text())


def started(layout: dict[str, Path], modules: tuple[str, ...] = ("heavy_lib",)) -> WarmInterpreter:
    warm = WarmInterpreter.start(sys.executable, base_env(layout), modules, layout["warm"])
    assert warm.wait_ready(120)
    return warm


def test_a_job_in_the_warm_interpreter_sees_what_a_cold_start_shows_it(layout):
    cold = run_job(layout, job_env(layout), None)
    warm = run_job(layout, job_env(layout), started(layout))
    assert cold["preloaded"] is False and warm["preloaded"] is True
    for report in (cold, warm):
        del report["preloaded"]
    assert warm == cold
    assert cold["cwd"] == str(layout["worktree"]) and cold["path0"] == str(layout["worktree"])
    assert cold["argv"] == ["--repeats", "3"] and cold["argv0"] == "probe.py" and cold["name"] == "__main__"
    assert cold["job"] == cold["child_sees_job"] == "7" and cold["stdin"] == ""
    assert cold["imports_of_heavy_lib"] == 1


def test_the_job_s_output_and_exit_status_come_back_as_from_a_cold_start(layout):
    (layout["worktree"] / "suite" / "fails.py").write_text("import sys\nprint('to stdout')\n"
                                                           "print('to stderr', file=sys.stderr)\nsys.exit(3)\n")
    warm = started(layout)
    assert warm.mismatch([sys.executable, "-m", "suite.fails"], job_env(layout)) is None
    output: list[bytes] = []
    outcome = run([sys.executable, "-m", "suite.fails"], cwd=layout["worktree"], env=job_env(layout), timeout_s=120,
                  output=output.append, interrupt=lambda: None, warm=warm)
    assert outcome.exit_code == 3
    assert b"to stdout" in b"".join(output) and b"to stderr" in b"".join(output)


def test_a_job_whose_environment_differs_beyond_the_job_variables_starts_cold(layout):
    warm = started(layout)
    env = job_env(layout, OMP_NUM_THREADS="1")
    assert warm.mismatch(ARGV, env) == "the job's environment differs in OMP_NUM_THREADS"
    assert run_job(layout, env, warm)["preloaded"] is False  # run() starts it cold
    assert warm.proc.poll() is None  # still waiting for a job that fits
    assert run_job(layout, job_env(layout), warm)["preloaded"] is True


def test_only_python_dash_m_commands_are_handed_over(layout):
    warm = started(layout)
    assert warm.mismatch([sys.executable, "suite/probe.py"], job_env(layout)) is not None
    assert warm.mismatch(["/usr/bin/python3.9", "-m", "suite.probe"], job_env(layout)) is not None
    assert warm.mismatch([sys.executable, "-u", "-m", "suite.probe"], job_env(layout)) is not None
    warm.close()


def test_a_library_that_cannot_be_imported_is_reported_and_leaves_cold_starts(layout, caplog):
    with caplog.at_level(logging.WARNING, logger="parallax.runner"):
        warm = WarmInterpreter.start(sys.executable, base_env(layout), ("no_such_library",), layout["warm"])
        assert warm.wait_ready(120) is False
    assert "could not import no_such_library" in caplog.text and "ModuleNotFoundError" in caplog.text
    assert warm.mismatch(ARGV, job_env(layout)) is not None
    assert run_job(layout, job_env(layout), warm)["preloaded"] is False


def test_a_cancel_kills_a_forked_job_and_its_children_and_the_interpreter_forks_the_next(layout):
    pids = layout["worktree"] / "pids"
    (layout["worktree"] / "suite" / "hangs.py").write_text(
        "import os, subprocess, sys, time\n"
        "child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(600)'])\n"
        f"open({str(pids)!r}, 'w').write(f'{{os.getpid()}} {{child.pid}}')\n"
        "time.sleep(600)\n")
    warm = started(layout)
    jobs: list[object] = []

    def interrupt() -> str | None:
        return "cancelled" if pids.exists() and pids.read_text().count(" ") == 1 else None
    outcome = run([sys.executable, "-m", "suite.hangs"], cwd=layout["worktree"], env=job_env(layout), timeout_s=600,
                  output=lambda data: None, interrupt=interrupt, kill_grace_s=1, warm=warm, on_start=jobs.append)
    assert outcome.stopped_by == "cancelled"
    leader, child = (int(p) for p in pids.read_text().split())
    assert [job.pid for job in jobs] == [leader] and leader != warm.proc.pid  # type: ignore[attr-defined]
    wait_for(lambda: not pid_alive(leader) and not pid_alive(child), 30, "the job's processes to be gone")
    assert warm.proc.poll() is None
    assert run_job(layout, job_env(layout), warm)["preloaded"] is True


def test_each_job_is_a_fresh_fork_that_sees_nothing_an_earlier_job_changed(layout):
    (layout["worktree"] / "suite" / "taint.py").write_text(
        "import json, os, heavy_lib\n"
        "seen = heavy_lib.IMPORTS\n"
        "heavy_lib.IMPORTS = 99\n"
        "json.dump({'seen': seen, 'pid': os.getpid()}, open(os.environ['PARALLAX_RESULTS'], 'w'))\n")
    warm = started(layout)
    reports = []
    for _ in range(2):
        outcome = run([sys.executable, "-m", "suite.taint"], cwd=layout["worktree"], env=job_env(layout),
                      timeout_s=120, output=lambda data: None, interrupt=lambda: None, warm=warm)
        assert outcome.exit_code == 0
        reports.append(json.loads(layout["results"].read_text()))
    assert [r["seen"] for r in reports] == [1, 1]
    assert len({r["pid"] for r in reports} | {warm.proc.pid}) == 3


def test_a_job_dies_with_the_interpreter_and_the_next_starts_cold(layout):
    marker = layout["worktree"] / "started"
    (layout["worktree"] / "suite" / "waits.py").write_text(
        f"import os, time\nopen({str(marker)!r}, 'w').write(str(os.getpid()))\ntime.sleep(600)\n")
    warm = started(layout)
    job = warm.take([sys.executable, "-m", "suite.waits"], layout["worktree"], job_env(layout))
    assert job is not None
    wait_for(marker.exists, 60, "the job to start")
    os.killpg(warm.proc.pid, signal.SIGKILL)  # the interpreter's group only: the job leads its own
    wait_for(lambda: not pid_alive(job.pid), 30, "the job to die with its interpreter")
    assert job.wait(60) == -signal.SIGKILL
    job.stdout.close()
    assert warm.mismatch(ARGV, job_env(layout)) is not None
    assert run_job(layout, job_env(layout), warm)["preloaded"] is False


def test_closing_an_unused_interpreter_ends_it(layout):
    warm = started(layout)
    warm.close()
    assert warm.proc.poll() is not None
    warm.close()  # twice is harmless


def test_a_runner_with_warm_import_forks_each_job_at_its_commit_from_one_warm_interpreter(make_harness, sqlite_url):
    root = Path(__file__).resolve().parents[2]
    h = make_harness(sqlite_url, command=(sys.executable, "-m", "tests.runner.fake_suite"))
    proc = h.start_runner("r1", "--warm-import", "decimal", env={"PYTHONPATH": str(root)})
    # Queued once the runner's first claim has come back: it goes out before the interpreter has
    # started (a job it finds then starts cold: the next test). The service records the claim's
    # session before it looks at the queue, so a job queued as soon as the session shows could
    # still be that claim's on a loaded machine (a run on 6 December); the warm interpreter's
    # directory appears only after the claim returned.
    _wait_first_claim_back(h)
    job_ids = [h.enqueue(sha) for sha in h.shas]
    jobs = [h.wait_job(job_id, ("succeeded", "failed"), proc=proc) for job_id in job_ids]
    proc.send_signal(signal.SIGTERM)
    assert h.wait_exit(proc) == 0
    pids = set()
    for i, (sha, job) in enumerate(zip(h.shas, jobs)):
        assert job["state"] == "succeeded", job
        assert "the command runs in the warm interpreter (decimal imported ahead)" in job["log"]
        [run] = h.runs(job["id"])
        context = run["context"]
        assert context["preloaded"] == ["decimal"] and context["main"] == "__main__"
        assert context["head"] == context["commit_env"] == sha and context["file"] == f"version {i}"
        assert context["job_id"] == str(job["id"]) and context["repeats"] == "3"
        pids.add(context["pid"])
    assert len(pids) == 3  # a fresh fork per job
    assert not any(pid_alive(pid) for pid in pids)


def _warm_dir(h) -> Path:  # type: ignore[no-untyped-def]
    """Runner r1's warm interpreter directory: made when the runner starts the interpreter."""
    return h.tmp_path / "work-r1" / "warm"


def _wait_first_claim_back(h) -> None:  # type: ignore[no-untyped-def]
    """Until runner r1's first claim has come back: the runner starts its warm interpreter (and
    makes its directory) only after that claim."""
    wait_for(_warm_dir(h).exists, 60, "the runner's first claim to come back")


def _claimed_once(h) -> bool:  # type: ignore[no-untyped-def]
    from sqlalchemy import select

    from app.core.models import Runner
    with h.db.session() as session:
        return session.scalar(select(Runner.claim_session).where(Runner.name == "r1")) is not None


def test_a_job_queued_before_the_runner_starts_runs_cold_and_the_next_ones_warm(make_harness, sqlite_url):
    root = Path(__file__).resolve().parents[2]
    h = make_harness(sqlite_url, command=(sys.executable, "-m", "tests.runner.fake_suite"))
    first = h.enqueue(h.shas[0])
    proc = h.start_runner("r1", "--warm-import", "decimal", env={"PYTHONPATH": str(root)})
    cold = h.wait_job(first, ("succeeded", "failed"), proc=proc)
    warm = h.wait_job(h.enqueue(h.shas[1]), ("succeeded", "failed"), proc=proc)
    proc.send_signal(signal.SIGTERM)
    assert h.wait_exit(proc) == 0
    assert cold["state"] == warm["state"] == "succeeded"
    assert "warm interpreter" not in cold["log"] and "runs in the warm interpreter" in warm["log"]


def test_a_runner_without_warm_import_starts_each_job_cold(make_harness, sqlite_url):
    root = Path(__file__).resolve().parents[2]
    h = make_harness(sqlite_url, command=(sys.executable, "-m", "tests.runner.fake_suite"))
    job_id = h.enqueue(h.shas[0])
    proc = h.start_runner("r1", "--once", env={"PYTHONPATH": str(root)})
    assert h.wait_exit(proc) == 0, h.runner_log(proc)
    job = h.job(job_id)
    assert job["state"] == "succeeded" and "warm interpreter" not in job["log"]
    [run] = h.runs(job_id)
    assert run["context"]["preloaded"] == []


def test_the_warm_interpreter_starts_only_when_no_job_on_the_machine_measures(make_harness, sqlite_url):
    root = Path(__file__).resolve().parents[2]
    h = make_harness(sqlite_url, command=(sys.executable, "-m", "tests.runner.fake_suite"))
    lock = HostLock(h.tmp_path / "host.lock")
    measuring, release = threading.Event(), threading.Event()

    def measure() -> None:  # a real-platform job of another runner, holding the host alone
        with lock.hold(True):
            measuring.set()
            release.wait(120)
    holder = threading.Thread(target=measure, daemon=True)
    holder.start()
    assert measuring.wait(60)
    proc = h.start_runner("r1", "--warm-import", "decimal", "--host-lock", str(lock.path),
                          env={"PYTHONPATH": str(root)})
    try:
        wait_for(lambda: "to start the warm interpreter" in h.runner_log(proc), 60,
                 "the runner to wait for the host lock")
        assert not _warm_dir(h).exists()  # not started beside the measurement
    finally:
        release.set()
        holder.join(60)
    job_id = h.enqueue(h.shas[0])
    job = h.wait_job(job_id, ("succeeded", "failed"), proc=proc)
    proc.send_signal(signal.SIGTERM)
    assert h.wait_exit(proc) == 0
    assert "runs in the warm interpreter" in job["log"]



def test_a_runner_names_its_session_before_its_warm_interpreter_has_imported(make_harness, sqlite_url, tmp_path):
    """A restarted runner's first claim goes out before the imports: until the service knows the
    new process's session, a long-poll its dead predecessor left waiting could take a job."""
    root = Path(__file__).resolve().parents[2]
    lib, release = tmp_path / "slowlib", tmp_path / "release"
    lib.mkdir()
    (lib / "slow_import.py").write_text(
        "import os, time\n"
        f"while not os.path.exists({str(release)!r}):\n"
        "    time.sleep(0.05)\n")
    h = make_harness(sqlite_url, command=(sys.executable, "-m", "tests.runner.fake_suite"))
    proc = h.start_runner("r1", "--warm-import", "slow_import",
                          env={"PYTHONPATH": f"{root}{os.pathsep}{lib}"})
    try:
        wait_for(lambda: _claimed_once(h), 60, "the runner's first claim")
        assert not release.exists()  # named while the warm interpreter was still importing
        # The first claim has come back (it could still take the job below on a loaded machine).
        _wait_first_claim_back(h)
    finally:
        release.write_text("")
    job = h.wait_job(h.enqueue(h.shas[0]), ("succeeded", "failed"), proc=proc)
    proc.send_signal(signal.SIGTERM)
    assert h.wait_exit(proc) == 0
    assert job["state"] == "succeeded" and "runs in the warm interpreter" in job["log"]
