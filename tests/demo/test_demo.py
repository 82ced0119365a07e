"""`parallax demo` as a maintainer runs it (`make demo`), with the reduced story (`--quick`: the
WAR-barrier regression inside a three-commit push, its fix, and the dropped stream wait): the
classification and the culprits are read back through the service's API while it serves."""
from __future__ import annotations

import fcntl
import os
import re
import signal
import socket
import subprocess
import time
from pathlib import Path

import pytest
import requests

from app.demo.story import default_story
from scheduler_core.native_build import CACHE_ENV, cache_dir

ROOT = Path(__file__).resolve().parents[2]
PARALLAX = str(ROOT / ".venv/bin/parallax")
SERVING = re.compile(r"Serving the dashboard at (http://127\.0\.0\.1:\d+)/")


def blamed(alert: dict) -> set[str]:
    """The commits an alert points at: every change's suspects and its bisects' culprits."""
    return ({sha for change in alert["changes"] for sha in change["suspected_commits"]}
            | {link["culprit"] for link in alert["bisects"] if link.get("culprit")})


def _env(tmp_path: Path) -> dict[str, str]:
    # A fresh home, but the machine's kernel cache: the simulator's C++ core (about 20 s to build) is
    # built once per machine, not once per demo.
    return {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "PYTHONUNBUFFERED": "1",
            CACHE_ENV: str(cache_dir())}


@pytest.mark.slow
@pytest.mark.solo  # its cpu runner's timings are real: a test beside it would be measured too
@pytest.mark.timeout(1500)  # the deadline below (1200 s) comes first
def test_the_demo_flags_the_rocm_only_regression_bisects_it_and_sees_the_fixes_despite_a_dead_runner(
        tmp_path: Path) -> None:
    work = tmp_path / "demo"
    process = subprocess.Popen([PARALLAX, "demo", "--quick", "--workdir", str(work)], env=_env(tmp_path),
                               stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, start_new_session=True)
    output = []
    try:
        deadline = time.monotonic() + 1200
        base = None
        assert process.stdout is not None
        killed = False
        for line in process.stdout:
            output.append(line)
            if not killed and line.startswith("push 4/"):
                # A runner dies mid-demo: the demo starts it again and its job is retried.
                # Only this demo's runner (its work directory), not another demo's on the machine.
                subprocess.run(["pkill", "-KILL", "-f", "--", f"--work-dir {work}/runner-rocm-sim"], check=True)
                killed = True
            if (found := SERVING.search(line)) is not None:
                base = found.group(1)
                break
            assert time.monotonic() < deadline, "".join(output)
        assert base is not None, "".join(output)
        summary = "".join(output)
        assert "expected, not found" not in summary, summary
        assert "the rocm-sim runner exited with status -9; starting it again" in summary, summary
        # The pull request's comment links to this demo's own dashboard (and so does the page line).
        assert summary.count(f"{base}/pulls/") >= 2, summary

        log = subprocess.run(["git", "log", "--format=%H %s"], cwd=work / "engine-repo", capture_output=True,
                             text=True, check=True).stdout.splitlines()
        sha_of = {subject: sha for sha, subject in (line.split(" ", 1) for line in log)}
        story = {c.role: c for c in default_story(quick=True).changes() if c.role != "neutral"}
        barrier, dropped_wait = sha_of[story["regression"].message], sha_of[story["hazard"].message]

        alerts = requests.get(f"{base}/api/v1/alerts", timeout=30).json()["alerts"]
        performance = [a for a in alerts if a["kind"] == "performance" and a["is_regression"]
                       and a["state"] != "invalid"]
        (regression,) = [a for a in performance if any(c["platform"] == "rocm-sim" for c in a["changes"])]
        throughput = next(c for c in regression["changes"] if c["metric"] == "decode_throughput")
        assert throughput["classification"] == "platform_specific" and throughput["platforms"] == ["rocm-sim"]
        assert -0.30 < throughput["relative_change"] < -0.15
        assert regression["state"] == "fixed"
        (bisect_link,) = regression["bisects"]
        assert bisect_link["culprit"] == barrier
        bisect = requests.get(f"{base}{bisect_link['url']}", timeout=30).json()
        assert bisect["state"] == "done" and bisect["culprit"]["sha"] == barrier
        # cuda-sim's numbers are virtual time: no alert at all. The cpu runner's are real timings on
        # a shared machine, whose level can move on its own: a CI run saw the cpu decode throughput
        # fall 8.6 % after the fourth commit (every commit's engine code the same there) and alert,
        # and another 26 % at the dropped wait's push on a slow VM (8 December). The product answers
        # such a level shift by measuring the alert's two commits again, A/B on one runner
        # (app.reproduce): not reproduced withdraws the alert; inconclusive, on a machine this noisy,
        # leaves it standing, as it should. What the story needs is that no cpu alert blaming one of
        # its commits is confirmed by that A/B measurement.
        assert not [a for a in performance if any(c["platform"] == "cuda-sim" for c in a["changes"])]
        story_shas = {sha_of[change.message] for change in default_story(quick=True).changes() if change.role != "neutral"}
        cpu_alerts = [a for a in performance if any(c["platform"] == "cpu" for c in a["changes"])]
        subject_of = {sha: subject for subject, sha in sha_of.items()}

        def reproduced_on_cpu(alert: dict) -> bool:
            return any(r["platform"] == "cpu" and r["state"] == "reproduced" for r in alert.get("reproductions", []))

        assert not [a for a in cpu_alerts if blamed(a) & story_shas and reproduced_on_cpu(a)], [
            ([(c["metric"], c["platform"], c.get("relative_change"), c.get("before"), c.get("after"),
               [subject_of.get(sha, sha) for sha in c["suspected_commits"]]) for c in a["changes"]],
             [(r["platform"], r["state"], r["reason"]) for r in a.get("reproductions", [])]) for a in cpu_alerts]

        hazards = [a for a in alerts if a["kind"] == "correctness"
                   and a["changes"][0]["platform"] == "cuda-sim"]
        (hazard,) = hazards
        assert hazard["changes"][0]["suspected_commits"] == [dropped_wait] and hazard["state"] == "fixed"
    finally:
        os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(60)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
    assert process.returncode == 0, "".join(output)


def test_a_port_in_use_is_refused_with_the_reason(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = subprocess.run([PARALLAX, "demo", "--workdir", str(tmp_path / "demo"), "--port", str(port),
                                 "--exit-when-done"], env=_env(tmp_path), capture_output=True, text=True, timeout=120)
    assert result.returncode == 1
    assert f"port {port} on 127.0.0.1 is already in use" in result.stderr


def test_a_second_demo_in_the_same_work_directory_is_refused(tmp_path: Path) -> None:
    work = tmp_path / "demo"
    work.mkdir()
    with open(work / ".lock", "a+") as held:
        fcntl.flock(held, fcntl.LOCK_EX | fcntl.LOCK_NB)
        held.write("pid 4242")
        held.flush()
        result = subprocess.run([PARALLAX, "demo", "--workdir", str(work), "--exit-when-done"], env=_env(tmp_path),
                                capture_output=True, text=True, timeout=120)
    assert result.returncode == 1
    assert "is in use by another parallax demo (pid 4242)" in result.stderr
