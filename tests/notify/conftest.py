"""A recording HTTP server (the GitHub stand-in, which records any POST) as the notification
endpoints, and settings whose [[notifications]] point at it."""
from __future__ import annotations

import socket
from pathlib import Path
from typing import Iterator

import pytest
from sqlalchemy import select

from app.core.config import NotificationSpec, use_settings
from app.core.models import NotificationDelivery
from tests.detection.builder import Builder
from tests.explain.histories import barrier_on_rocm
from tests.github.fake_github import FakeGitHub
from tests.support.settings import make_settings

SECRET = "webhook-secret"
EVENTS = ("alert.opened", "alert.fixed", "bisect.done", "pull_request.verdict")


@pytest.fixture
def endpoint() -> Iterator[FakeGitHub]:
    with FakeGitHub() as server:
        yield server


def closed_port_url() -> str:
    """A loopback URL nothing listens on (connection refused)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    return f"http://127.0.0.1:{port}/hook"


@pytest.fixture
def targets(endpoint: FakeGitHub) -> tuple[NotificationSpec, ...]:
    return (NotificationSpec(name="ops-webhook", kind="webhook", url=f"{endpoint.url}/hook", events=EVENTS, secret=SECRET),
            NotificationSpec(name="team-slack", kind="slack", url=f"{endpoint.url}/slack", events=EVENTS))


@pytest.fixture
def settings(database_url: str, tmp_path: Path, targets, endpoint):  # type: ignore[no-untyped-def]
    return make_settings(database_url, data_dir=str(tmp_path / "data"), notifications=targets,
                         public_url="http://parallax.test")


@pytest.fixture
def alert_id(db, settings):  # type: ignore[no-untyped-def]
    """An alert opened by the history where the WAR barrier turns on for rocm only."""
    build = Builder(db)
    with use_settings(settings):
        return barrier_on_rocm(build, db, build.branch(30), 20)


def posts(endpoint, path: str):  # type: ignore[no-untyped-def]
    """What the recording endpoint received at `path`."""
    return [r for r in endpoint.requests if r.path == path]


def delivery_rows(db) -> dict[str, NotificationDelivery]:  # type: ignore[no-untyped-def]
    """The outbox rows by target name, detached from their session."""
    with db.session() as session:
        rows = list(session.scalars(select(NotificationDelivery)))
        for row in rows:
            session.expunge(row)
        return {row.target: row for row in rows}
