"""Fixtures for pull-request verdicts: GitHub played by the local recording server in App mode
(a real RSA key, so the app's JWT can be checked), the payloads' repository tracked with a real
git repository as its URL, and a helper that runs the service's duties until a condition holds."""
from __future__ import annotations

from pathlib import Path
from typing import Any, Callable, Iterator

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

from app.core.config import use_settings
from app.github import status as github_status
from app.github.ingest import process_pending
from app.jobs.queue import deliver_stored_runs
from app.pulls import comparisons, outbox
from tests.github.fake_github import FakeGitHub
from tests.support.github import REPO_NAME, SECRET, Upstream, post_webhook, pr_payload
from tests.support.runner_harness import wait_for
from tests.support.settings import make_settings

APP_ID = "4242"
INSTALLATION = 77


@pytest.fixture(scope="session")
def app_key(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Any]:
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    path = tmp_path_factory.mktemp("github-app") / "app.pem"
    path.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                       serialization.NoEncryption()))
    return path, key.public_key()


@pytest.fixture
def github() -> Iterator[FakeGitHub]:
    with FakeGitHub() as server:
        yield server


@pytest.fixture
def settings(database_url: str, tmp_path: Path, github: FakeGitHub, app_key: tuple[Path, Any]):  # type: ignore[no-untyped-def]
    return make_settings(database_url, github_webhook_secret=SECRET, data_dir=str(tmp_path / "data"),
                         github_api_url=github.url, github_app_id=APP_ID,
                         github_app_private_key_file=str(app_key[0]), public_url="https://parallax.example")


@pytest.fixture
def upstream(tmp_path: Path) -> Upstream:
    return Upstream(tmp_path / "upstream")


@pytest.fixture
def tracked(app, db, upstream: Upstream) -> int:  # type: ignore[no-untyped-def]
    from app.core.models import Repository
    with db.session() as session:
        repo = Repository(name=REPO_NAME, url=str(upstream.path), default_branch="master")
        session.add(repo)
        session.flush()
        return repo.id


class Service:
    """The service's background duties, run by the test in its own thread."""

    def __init__(self, app: Any) -> None:
        self.app = app
        self.db = app.extensions["parallax.db"]
        self.settings = app.extensions["parallax.settings"]
        self.client = app.test_client()

    def webhook(self, event: str, payload: dict[str, Any]) -> Any:
        payload["installation"] = {"id": INSTALLATION}
        response = post_webhook(self.client, event, payload)
        report = process_pending(self.db, self.settings)
        assert not report.failed, report.results
        return response

    def open_pr(self, action: str, head: str, base: str, number: int = 2) -> Any:
        return self.webhook("pull_request", pr_payload(action, head, base, number=number))

    def tick(self) -> None:
        with use_settings(self.settings):
            deliver_stored_runs(self.db)
            comparisons.evaluate_dirty(self.db, self.settings)
            outbox.send_due(self.db, self.settings)
            github_status.send_due(self.db, self.settings)

    def until(self, predicate: Callable[[], Any], what: str, timeout_s: float = 300.0) -> Any:
        def step() -> Any:
            self.tick()
            return predicate()
        return wait_for(step, timeout_s, what, interval_s=0.2)

    def pull(self, number: int = 2) -> dict[str, Any]:
        response = self.client.get(f"/api/v1/pulls/{REPO_NAME}/{number}")
        assert response.status_code == 200, response.get_json()
        return response.get_json()

    def settled(self, number: int = 2) -> dict[str, Any]:
        return self.until(lambda: (p := self.pull(number))["state"] == "done" and p, f"pull request #{number} verdict")


@pytest.fixture
def service(app, tracked) -> Service:  # type: ignore[no-untyped-def]
    return Service(app)


@pytest.fixture
def branch(upstream: Upstream) -> Callable[[], tuple[str, str]]:
    """A merge-base on master and a pull request branch with one commit: (base, head)."""
    def make() -> tuple[str, str]:
        upstream.commit()
        base = upstream.commit()
        upstream("checkout", "-q", "-b", "change")
        return base, upstream.commit()
    return make
