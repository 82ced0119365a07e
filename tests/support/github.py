"""GitHub stand-ins: the real webhook payload examples pointed at a temporary repository, their
signature, and a real git repository standing in for the repository on GitHub."""
from __future__ import annotations

import hashlib
import hmac
import json
import os
import subprocess
import threading
import uuid
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import func, select

from app.core.models import Base
from app.git.mirror import Mirror
from app.git.workdir import IDENTITY, git

SECRET = "webhook-test-secret"
# Commits are dated from this instant, one second apart, so a test's SHAs are the same in every run:
# the noise models seeded by SHA (tests/support/pull_runners.py) then draw the same samples.
COMMIT_EPOCH = 1_767_225_600  # 2026-01-01T00:00:00Z
# ../shared next to the checkout; PARALLAX_SHARED_DIR points elsewhere (e.g. a worktree one level deeper).
PAYLOADS = Path(os.environ.get("PARALLAX_SHARED_DIR") or Path(__file__).resolve().parents[2].parent / "shared") \
    / "data/github-webhooks"
REPO_NAME = "Codertocat/Hello-World"  # the repository the payload examples come from


def load_payload(name: str) -> dict[str, Any]:
    return json.loads((PAYLOADS / name).read_text())


def sign(body: bytes, secret: str = SECRET) -> str:
    return "sha256=" + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()


def webhook_headers(event: str, body: bytes, delivery: str | None = None, secret: str = SECRET) -> dict[str, str]:
    return {"X-GitHub-Event": event, "X-GitHub-Delivery": delivery or str(uuid.uuid4()),
            "X-Hub-Signature-256": sign(body, secret), "Content-Type": "application/json"}


def post_webhook(client, event: str, payload: dict[str, Any] | bytes, delivery: str | None = None):  # type: ignore[no-untyped-def]
    body = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
    return client.post("/webhooks/github", data=body, headers=webhook_headers(event, body, delivery))


class Upstream:
    """A real repository on disk that plays GitHub's copy; its path is the repository URL."""

    def __init__(self, path: Path, branch: str = "master") -> None:
        self.path = path
        self.branch = branch
        path.mkdir(parents=True)
        git(path, "init", "-q", "-b", branch)
        self.counter = 0

    def commit(self, message: str | None = None) -> str:
        self.counter += 1
        (self.path / "file.txt").write_text(f"change {self.counter}\n")
        git(self.path, "add", "file.txt")
        stamp = f"{COMMIT_EPOCH + self.counter} +0000"
        subprocess.run(["git", "commit", "-q", "-m", message or f"commit {self.counter}"], cwd=self.path, check=True,
                       capture_output=True, env={**os.environ, **IDENTITY, "GIT_AUTHOR_DATE": stamp,
                                                 "GIT_COMMITTER_DATE": stamp})
        return self.head()

    def commits(self, n: int) -> list[str]:
        return [self.commit() for _ in range(n)]

    def head(self) -> str:
        return git(self.path, "rev-parse", "HEAD")

    def __call__(self, *args: str) -> str:
        return git(self.path, *args)


def push_payload(before: str, after: str, commits: list[str], *, forced: bool = False,
                 branch: str = "master") -> dict[str, Any]:
    """The real push example, pointed at the temp repository's SHAs."""
    payload = load_payload("push-with-new-branch.payload.json")
    template = payload["commits"][0]
    payload.update(ref=f"refs/heads/{branch}", before=before, after=after, forced=forced,
                   created=before == "0" * 40, deleted=False,
                   commits=[dict(template, id=sha, tree_id=sha) for sha in commits])
    payload["head_commit"] = dict(template, id=after)
    return payload


def pr_payload(action: str, head: str, base: str, number: int = 2, base_ref: str = "master") -> dict[str, Any]:
    name = "pull_request-opened.payload.json" if action != "synchronize" else "pull_request-synchronize.payload.json"
    payload = load_payload(name)
    payload["action"] = action
    payload["number"] = number
    payload["pull_request"]["number"] = number
    payload["pull_request"]["head"]["sha"] = head
    payload["pull_request"]["base"]["sha"] = base
    payload["pull_request"]["base"]["ref"] = base_ref
    if "after" in payload:
        payload["after"] = head
    return payload


def count_rows(db) -> dict[str, int]:  # type: ignore[no-untyped-def]
    with db.session() as session:
        return {t.name: session.scalar(select(func.count()).select_from(t)) for t in Base.metadata.sorted_tables}


def hold_mirror_fetches(monkeypatch: pytest.MonkeyPatch) -> tuple[threading.Event, threading.Event]:
    """Every git mirror fetch waits until the test sets `release` (the second event); `fetching`
    (the first) is set when one has started. A fetch can take minutes in production: the tests
    check that requests answer meanwhile."""
    fetching, release = threading.Event(), threading.Event()
    real_fetch = Mirror.fetch

    def held_fetch(self: Mirror, extra: Any = ()) -> None:
        fetching.set()
        assert release.wait(600), "the test never released the fetch"
        real_fetch(self, extra)

    monkeypatch.setattr(Mirror, "fetch", held_fetch)
    return fetching, release
