"""Checkout: commit SHAs are validated before git ever runs; missing commits and damaged
mirrors fail one job without poisoning the next. The agent runs in-process here (with fixed
facts) so that the test can watch every subprocess it would start."""
from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from app.git.workdir import git
from runners.agent import Agent, Config
from runners.checkout import CheckoutError, Workspace, validate_sha
from runners.client import RetryPolicy
from runners.facts import Facts
from tests.support.runner_harness import Harness

CPU = Facts(platform="cpu", python="3.11", os="Linux", cpu_model="test cpu", cpu_count=2)
BAD_SHAS = ["a1b2c3", "A" * 40, "g" * 40, "a" * 41, "a" * 39 + ";", "$(touch pwned)", "`id`", "", None, 123,
            "a" * 40 + "\n", "-" + "a" * 39]


@pytest.mark.parametrize("sha", BAD_SHAS)
def test_validate_sha_refuses_anything_but_40_lowercase_hex(sha):
    with pytest.raises(CheckoutError, match="40 lowercase hex"):
        validate_sha(sha)


class NoSubprocess:
    """Stands in for subprocess.Popen and records every attempt to start a process."""
    calls: list[object] = []

    def __init__(self, args: object, *a: object, **kw: object) -> None:
        NoSubprocess.calls.append(args)
        raise AssertionError(f"a subprocess was started: {args!r}")


@pytest.mark.parametrize("sha", ["$(touch pwned); echo", "abc123", "a" * 39])
def test_a_bad_sha_is_refused_before_any_subprocess_starts(tmp_path, monkeypatch, git_repo, sha):
    NoSubprocess.calls = []
    monkeypatch.setattr(subprocess, "Popen", NoSubprocess)
    workspace = Workspace(tmp_path / "work")
    with pytest.raises(CheckoutError, match="refusing commit"):
        workspace.prepare(1, 1, "demo/engine", str(git_repo), sha)
    assert NoSubprocess.calls == []
    assert not (tmp_path / "work" / "mirrors").exists()


def agent_for(h: Harness, name: str = "inproc") -> Agent:
    config = Config(server=h.server.url, work_dir=h.tmp_path / f"work-{name}", name=name,
                    registration_token=h.registration_token(), once=True, claim_wait_s=1.0,
                    retry=RetryPolicy(base_delay_s=0.1, max_delay_s=0.5, budget_s=10.0))
    return Agent(config, facts=CPU)


def enqueue_raw(h: Harness, sha: str) -> int:
    """Queue a job for a commit the API would refuse (as a corrupted database row might hold)."""
    from sqlalchemy import select

    from app.core.models import Repository, Suite
    from app.jobs import queue
    with h.db.session() as session:
        repo = session.scalar(select(Repository).where(Repository.name == "demo/engine"))
        suite = session.scalar(select(Suite).where(Suite.name == "fake"))
        commit = queue.get_or_create_commit(session, repo, sha)
        job, _ = queue.enqueue(session, repo, commit, suite, "cpu")
        session.commit()
        return job.id


@pytest.mark.parametrize("sha", ["$(touch pwned)", "abc123"])
def test_the_agent_fails_a_job_with_a_bad_sha_without_starting_any_process(harness, monkeypatch, sha):
    job_id = enqueue_raw(harness, sha)
    agent = agent_for(harness)
    NoSubprocess.calls = []
    monkeypatch.setattr(subprocess, "Popen", NoSubprocess)
    monkeypatch.chdir(harness.tmp_path)
    assert agent.run() == 0
    monkeypatch.undo()
    job = harness.job(job_id)
    assert job["state"] == "failed"
    assert job["failure_reason"].startswith("refusing commit") and "40 lowercase hex" in job["failure_reason"]
    assert NoSubprocess.calls == []
    assert not (harness.tmp_path / "pwned").exists()
    assert list((harness.tmp_path / "work-inproc" / "mirrors").iterdir()) == []


def test_a_missing_commit_fails_its_job_and_the_next_job_runs(harness, monkeypatch):
    monkeypatch.setenv("FAKE_SUITE_DIR", str(harness.control))
    missing = harness.enqueue("f" * 40)
    good = harness.enqueue(harness.shas[1])
    agent = agent_for(harness)
    assert agent.run() == 0
    job = harness.job(missing)
    assert job["state"] == "failed"
    assert f"commit {'f' * 40} not found in {harness.repo}" in job["failure_reason"]

    assert agent.run() == 0  # the same work dir and mirror, the next job
    assert harness.job(good)["state"] == "succeeded"
    assert harness.runs(good)[0]["context"]["head"] == harness.shas[1]


def loose_object(mirror: Path, oid: str) -> Path:
    return mirror / "objects" / oid[:2] / oid[2:]


def test_a_damaged_mirror_fails_the_job_is_discarded_and_the_retry_succeeds(harness, monkeypatch):
    monkeypatch.setenv("FAKE_SUITE_DIR", str(harness.control))
    warm = harness.enqueue(harness.shas[2])  # fetches all three commits into the mirror
    agent = agent_for(harness)
    assert agent.run() == 0
    assert harness.job(warm)["state"] == "succeeded"

    [mirror] = (harness.tmp_path / "work-inproc" / "mirrors").iterdir()
    blob = git(harness.repo, "rev-parse", f"{harness.shas[0]}:file.txt")
    path = loose_object(mirror, blob)
    assert path.is_file(), "small fetches unpack to loose objects"
    os.chmod(path, 0o644)
    path.write_bytes(b"this is not a zlib stream")

    job_id = harness.enqueue(harness.shas[0])
    assert agent.run() == 0
    job = harness.job(job_id)
    assert job["state"] == "queued" and job["attempt"] == 2  # retryable: the mirror was the problem
    assert "looks damaged and was discarded" in job["failure_reason"]

    assert agent.run() == 0
    job = harness.job(job_id)
    assert job["state"] == "succeeded"
    [run] = harness.runs(job_id)
    assert run["attempt"] == 2 and run["context"]["head"] == harness.shas[0]


def dated_repo(path: Path, count: int) -> list[str]:
    path.mkdir()
    git(path, "init", "-q", "-b", "main")
    for i in range(count):
        (path / "file.txt").write_text(f"version {i}\n")
        git(path, "add", "file.txt")
        date = f"2026-01-0{i + 1}T12:00:00Z"
        subprocess.run(["git", "commit", "-q", "-m", f"c{i}"], cwd=path, check=True, capture_output=True,
                       env=dict(os.environ, GIT_AUTHOR_NAME="t", GIT_AUTHOR_EMAIL="t@x", GIT_COMMITTER_NAME="t",
                                GIT_COMMITTER_EMAIL="t@x", GIT_AUTHOR_DATE=date, GIT_COMMITTER_DATE=date))
    return git(path, "rev-list", "--reverse", "HEAD").split()


def test_fetched_commits_are_kept_under_refs_and_trimmed_to_the_newest(tmp_path, monkeypatch):
    from runners import checkout
    monkeypatch.setattr(checkout, "KEEP_REFS", 2)
    repo = tmp_path / "dated"
    shas = dated_repo(repo, 3)
    workspace = Workspace(tmp_path / "work")
    mirror = workspace.mirror_path("demo/engine", str(repo))
    for i, sha in enumerate(shas):
        path = workspace.prepare(i, 1, "demo/engine", str(repo), sha)
        assert git(path, "rev-parse", "HEAD") == sha
        workspace.release(mirror, path)
        assert not path.exists()
    refs = git(mirror, "for-each-ref", "--format=%(refname)", "refs/parallax").split()
    assert sorted(refs) == sorted(f"refs/parallax/{sha}" for sha in shas[1:])
