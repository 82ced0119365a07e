"""Helpers for service tests: register runners, queue jobs, build results documents."""
from __future__ import annotations

import json
from typing import Any

from tests.support.settings import ADMIN_TOKEN, make_settings

SHA_A = "a" * 40
SHA_B = "b" * 40


def admin_headers() -> dict[str, str]:
    return {"Authorization": f"Bearer {ADMIN_TOKEN}"}


def open_alert(db) -> int:  # type: ignore[no-untyped-def]
    """An untriaged alert on a new commit of the catalogue's repository; returns its id."""
    from sqlalchemy import select

    from app.core.models import Alert, Commit, Repository
    with db.session() as session:
        repo = session.scalar(select(Repository))
        commit = Commit(repository_id=repo.id, sha=SHA_A)
        session.add(commit)
        session.flush()
        alert = Alert(repository_id=repo.id, branch="main", bad_commit_id=commit.id)
        session.add(alert)
        session.commit()
        return alert.id


def registration_token(app) -> str:  # type: ignore[no-untyped-def]
    from app.auth.tokens import create_registration_token
    with app.extensions["parallax.db"].session() as session:
        return create_registration_token(session, "test")


def registration_token_at(url: str) -> str:
    """A registration token in the database at ``url``, for a service running in another process."""
    from app.auth.tokens import create_registration_token
    from app.web import create_app
    database = create_app(make_settings(url)).extensions["parallax.db"]
    with database.session() as session:
        token = create_registration_token(session)
    database.engine.dispose()
    return token


def register(client, app, platform: str = "cpu", name: str = "runner-1", **labels: str) -> dict[str, str]:  # type: ignore[no-untyped-def]
    token = registration_token(app)
    response = client.post("/api/v1/runners", json={"name": name, "labels": {"platform": platform, **labels}},
                           headers={"Authorization": f"Bearer {token}"})
    assert response.status_code == 201, response.get_json()
    return {"Authorization": f"Bearer {response.get_json()['token']}"}


def queue_jobs(client, sha: str = SHA_A, **cell: str) -> list[dict[str, Any]]:  # type: ignore[no-untyped-def]
    response = client.post("/api/v1/jobs", json={"repository": "demo/engine", "commit": sha, **cell},
                           headers=admin_headers())
    assert response.status_code == 201, response.get_json()
    return response.get_json()["jobs"]


def document(suite: str = "decode-throughput", **overrides: Any) -> dict[str, Any]:
    doc: dict[str, Any] = {
        "schema": "parallax.results/1",
        "suite": suite,
        "metrics": [
            {"name": "output_throughput", "unit": "tok/s", "direction": "higher_is_better",
             "samples": [1210.4, 1198.7, 1215.0]},
            {"name": "itl_p50", "unit": "ms", "direction": "lower_is_better", "samples": [7.9, 8.1, 8.0]},
        ],
        "items": {"name": "gsm8k", "correct": [1, 0, 1]},
        "context": {"model": "SmolLM2-135M-Instruct", "batch_size": 32},
        "environment": {"platform": "cpu", "device": "test cpu", "torch": "2.13.0", "hip": None,
                        "cuda": None, "simulated": False},
    }
    doc.update(overrides)
    return doc


def raw(doc: dict[str, Any]) -> bytes:
    return json.dumps(doc).encode()


def claim(client, headers, wait_s: float = 0):  # type: ignore[no-untyped-def]
    return client.post("/api/v1/jobs/claim", json={"wait_s": wait_s}, headers=headers)
