"""Fixtures for uploads: the catalogue's repository backed by a real git repository (so unseen
commits are fetched into a real mirror, by the `uploads` duty running in a thread), CI tokens,
and helpers that post an upload and follow a 202 to its outcome."""
from __future__ import annotations

import json
import shutil
import threading
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any, Callable, Iterator

import pytest
import requests

from app.core.config import RepositorySpec, parse_catalogue
from app.core.duties import start as start_duties
from app.core.models import WorkerLease
from app.uploads import queued
from tests.support.github import Upstream
from tests.support.runner_harness import wait_for
from tests.support.settings import SUITES, make_settings

REPOSITORY = "demo/engine"
UPLOAD_SUITES = [*SUITES, {"name": "sglang-one-batch", "command": ["true"], "platforms": ["cuda", "rocm"],
                           "adapter": "sglang-bench-one-batch", "outputs": ["one_batch.jsonl"]}]


@pytest.fixture(scope="session")
def _worker_upstream(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("uploads-upstream") / "upstream"


@pytest.fixture
def upstream(_worker_upstream: Path) -> Upstream:
    """The repository's own copy (its URL is this path), with five commits on main. Made again for
    each test at one path per worker, so that the settings naming it stay the same and the app is
    kept (`kept_apps` in tests/conftest.py)."""
    shutil.rmtree(_worker_upstream, ignore_errors=True)
    repo = Upstream(_worker_upstream, branch="main")
    repo.commits(5)
    return repo


@pytest.fixture
def settings(database_url: str, data_dir: str, upstream: Upstream):  # type: ignore[no-untyped-def]
    catalogue = parse_catalogue({"suites": UPLOAD_SUITES})
    return make_settings(database_url, repositories=(RepositorySpec(name=REPOSITORY, url=str(upstream.path)),
                                                     RepositorySpec(name="other/repo", url=str(upstream.path))),
                         suites=catalogue["suites"], data_dir=data_dir, github_token="test-token")


def ci_token(app, repository: str = REPOSITORY, platform: str | None = None,  # type: ignore[no-untyped-def]
             expires_in: timedelta | None = None) -> str:
    from app.auth.ci_tokens import create_ci_token
    with app.extensions["parallax.db"].session() as session:
        return create_ci_token(session, repository, platform, expires_in=expires_in)[1]


@pytest.fixture
def token(app) -> str:  # type: ignore[no-untyped-def]
    return ci_token(app)


def upload_body(sha: str, document: dict[str, Any], *, platform: str = "cpu", suite: str = "decode-throughput",
                **extra: Any) -> dict[str, Any]:
    return {"repository": REPOSITORY, "sha": sha, "platform": platform, "suite": suite, "document": document, **extra}


def bearer(token: str, **headers: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}", **headers}


@pytest.fixture(autouse=True)
def uploads_duty(request: pytest.FixtureRequest) -> Iterator[None]:
    """The `uploads` duty in a background thread, as `parallax serve` runs it, for every test
    with an app: uploads of commits the service has not seen finish there (202, then poll)."""
    if "app" not in request.fixturenames:
        yield
        return
    app = request.getfixturevalue("app")
    stop = threading.Event()
    db = app.extensions["parallax.db"]
    thread = start_duties(db, queued.DUTIES, app.extensions["parallax.settings"], stop, tick_s=0.05)

    def leased() -> bool:  # its lease row exists before the test counts rows
        with db.session() as session:
            return session.get(WorkerLease, "uploads") is not None
    wait_for(leased, 60, "the uploads duty's first tick")
    yield
    stop.set()
    thread.join(60)


@dataclass
class Outcome:
    """An upload's answer as a client ends up with it: `first` is the POST's status (202 when the
    commit was queued for git), `status` the outcome's (201 stored, 200 a retry that stored
    nothing new, else the refusal), `body` the stored upload or the error."""
    first: int
    status: int
    body: dict[str, Any]

    @property
    def status_code(self) -> int:
        return self.status

    def json(self) -> dict[str, Any]:
        return self.body

    @property
    def text(self) -> str:
        return json.dumps(self.body)


POLL_DEADLINE_S = 120.0


def settle(status: int, body: dict[str, Any], get: Callable[[str], dict[str, Any]]) -> Outcome:
    """Follow a 202 to its end through `GET /api/v1/uploads/<id>` (`get` fetches a path's JSON)."""
    if status != 202:
        return Outcome(status, status, body)
    assert body["state"] in ("pending", "stored", "failed"), body
    assert body["poll_url"] == f"/api/v1/uploads/{body['upload_id']}", body
    # The 202 shows the upload as it is when answered: on a loaded machine the uploads duty may have
    # finished it between the request's commit and its answer.
    final = body if body["state"] != "pending" else wait_for(
        lambda: (reply := get(body["poll_url"]))["state"] != "pending" and reply, POLL_DEADLINE_S,
        f"queued upload {body['upload_id']} to be finished by the uploads duty", interval_s=0.05)
    if final["state"] == "stored":
        return Outcome(202, 201 if final["created"] and not body["retry"] else 200, final)
    assert final["state"] == "failed", final
    return Outcome(202, final["status"], final["error"])


def post_upload(server: Any, token: str, body: Any, **headers: str) -> Outcome:
    """POST /api/v1/runs over HTTP, and its outcome (polled when queued)."""
    reply = requests.post(f"{server.url}/api/v1/runs", json=body, headers=bearer(token, **headers), timeout=60)
    return settle(reply.status_code, reply.json(), lambda path: requests.get(f"{server.url}{path}",
                                                                             headers=bearer(token), timeout=60).json())


def post_upload_client(client: Any, token: str, body: Any, **headers: str) -> Outcome:
    """The same through Flask's test client."""
    reply = client.post("/api/v1/runs", json=body, headers=bearer(token, **headers))
    return settle(reply.status_code, reply.get_json(),
                  lambda path: client.get(path, headers=bearer(token)).get_json())
