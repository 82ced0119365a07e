"""Which events reach which targets: a fixed alert, a finished bisect, the daily digest, and a
target's platform filter."""
from __future__ import annotations

import json

import pytest
from sqlalchemy import select

from app.bisect.service import _finish
from app.core import signals
from app.core.config import NotificationSpec, use_settings
from app.core.models import Bisect, BisectState, Commit, NotificationDelivery, PullRequest
from app.detection.service import scan_dirty
from app.notify.outbox import queue_digests
from app.notify.sender import send_due
from tests.detection.builder import SUITE, Builder
from tests.notify.conftest import EVENTS, SECRET


@pytest.fixture
def targets(endpoint):  # type: ignore[no-untyped-def]
    return (NotificationSpec(name="ops-webhook", kind="webhook", url=f"{endpoint.url}/hook", events=EVENTS, secret=SECRET),
            NotificationSpec(name="cuda-only", kind="webhook", url=f"{endpoint.url}/cuda", events=EVENTS,
                             platforms=("cuda",)))


def _events(endpoint, path: str = "/hook") -> list[str]:  # type: ignore[no-untyped-def]
    return [json.loads(r.raw)["event"] for r in endpoint.requests if r.path == path]


def test_a_regression_that_is_restored_sends_opened_then_fixed(db, settings, endpoint):
    build = Builder(db)
    shas = build.branch(40)
    levels = [1000.0 if i < 15 or i >= 27 else 800.0 for i in range(40)]
    with use_settings(settings):
        build.history(shas, "rocm", levels, seed=3)
        scan_dirty(db)
    send_due(db, settings)
    assert sorted(_events(endpoint)) == ["alert.fixed", "alert.opened"]


def test_a_target_for_other_platforms_is_not_told(db, settings, endpoint):
    build = Builder(db)
    shas = build.branch(30)
    with use_settings(settings):
        build.history(shas, "rocm", [1000.0 if i < 20 else 800.0 for i in range(30)], seed=1)
        scan_dirty(db)
    send_due(db, settings)
    assert _events(endpoint) == ["alert.opened"] and _events(endpoint, "/cuda") == []


def test_a_finished_bisect_sends_bisect_done_with_its_explanation(db, settings, endpoint):
    build = Builder(db)
    shas = build.branch(4)
    build.history(shas, "rocm", [1000.0, 1000.0, 800.0, 800.0])
    with use_settings(settings), db.session() as session:
        good, bad = (session.scalar(select(Commit.id).where(Commit.sha == s)) for s in (shas[1], shas[2]))
        bisect = Bisect(repository_id=build.repository_id, suite=SUITE, metric="output_throughput", platform="rocm",
                        good_commit_id=good, bad_commit_id=bad, state=BisectState.running)
        session.add(bisect)
        session.flush()
        _finish(bisect, BisectState.done, "culprit found")
        session.commit()
    send_due(db, settings)
    (hook,) = [r for r in endpoint.requests if r.path == "/hook"]
    body = json.loads(hook.raw)
    assert body["event"] == "bisect.done" and body["bisect"]["platform"] == "rocm"
    assert body["bisect"]["explanation"]["good"] == shas[1] and body["url"].endswith(f"/bisects/{body['bisect']['id']}")


def test_the_daily_digest_is_one_message_per_repository_and_day(db, settings, endpoint):
    build = Builder(db)
    shas = build.branch(30)
    with use_settings(settings):
        build.history(shas, "rocm", [1000.0 if i < 20 else 800.0 for i in range(30)], seed=1)
        scan_dirty(db)
    assert queue_digests(db, settings) == 1  # ops-webhook; the cuda-only target filters by platform of alerts
    assert queue_digests(db, settings) == 0
    send_due(db, settings)
    digest = next(json.loads(r.raw) for r in endpoint.requests if json.loads(r.raw)["event"] == "digest")
    assert digest["repository"] == "demo/engine" and [a["changes"][0]["platform"] for a in digest["alerts"]] == ["rocm"]
    with db.session() as session:
        assert session.scalar(select(NotificationDelivery.state).where(NotificationDelivery.event == "digest")) == "sent"


def test_a_pull_request_verdict_is_sent_to_targets_that_asked(db, settings, endpoint):
    build = Builder(db)
    with use_settings(settings), db.session() as session:
        pull = PullRequest(repository_id=build.repository_id, number=42, title="Barrier on ROCm", base_branch="main")
        session.add(pull)
        session.flush()
        signals.pull_request_verdict.send(session, pull=pull)
        session.commit()
    send_due(db, settings)
    (hook,) = [json.loads(r.raw) for r in endpoint.requests if r.path == "/hook"]
    assert hook["event"] == "pull_request.verdict"
    assert hook["pull_request"] == {"repository": "demo/engine", "number": 42, "title": "Barrier on ROCm", "state": "open"}
    assert hook["url"] == "http://parallax.test/api/v1/pulls/demo/engine/42"
