"""A regression whose culprit came from a merged pull request gets one comment on that pull
request (GitHub's "pull requests of a commit" API, then an issue comment), once per alert."""
from __future__ import annotations

from pathlib import Path

import pytest
from sqlalchemy import select

from app.core.config import use_settings
from app.core.models import Alert, NotificationDelivery
from app.notify.outbox import queue_pull_request_comment
from app.notify.sender import send_due
from tests.detection.builder import Builder
from tests.explain.histories import barrier_on_rocm
from tests.github.fake_github import Reply
from tests.support.settings import make_settings

MERGED = {"number": 7, "merged_at": "2026-12-01T09:00:00Z", "state": "closed"}
OPEN = {"number": 9, "merged_at": None, "state": "open"}


@pytest.fixture
def settings(database_url: str, tmp_path: Path, endpoint):  # type: ignore[no-untyped-def]
    return make_settings(database_url, data_dir=str(tmp_path / "data"), github_token="gh-token",
                         github_api_url=endpoint.url, public_url="http://parallax.test")


@pytest.fixture
def regression(db, settings):  # type: ignore[no-untyped-def]
    build = Builder(db)
    shas = build.branch(30)
    with use_settings(settings):
        return barrier_on_rocm(build, db, shas, 20), shas[20]


def test_the_culprits_merged_pull_request_gets_one_comment(db, settings, endpoint, regression):
    alert_id, culprit = regression
    endpoint.script = [Reply(status=200, body=[OPEN, MERGED]), Reply(status=201)]
    send_due(db, settings)
    send_due(db, settings)
    lookup, posted = endpoint.requests
    assert (lookup.method, lookup.path) == ("GET", f"/repos/demo/engine/commits/{culprit}/pulls")
    assert lookup.headers["Authorization"] == "Bearer gh-token"
    assert (posted.method, posted.path) == ("POST", "/repos/demo/engine/issues/7/comments")
    text = posted.json["body"]
    assert f"regression at {culprit[:10]}" in text and "platforms: rocm" in text
    assert "what changed: sync_policy.war_barrier false → true on rocm" in text
    assert f"http://parallax.test/alerts/{alert_id}" in text


def test_a_second_culprit_report_for_the_same_alert_queues_no_second_comment(db, settings, regression):
    alert_id, culprit = regression
    with use_settings(settings), db.session() as session:
        alert = session.get(Alert, alert_id)
        assert queue_pull_request_comment(session, alert, culprit) is False


def test_a_culprit_no_merged_pull_request_contains_is_skipped_with_the_reason(db, settings, endpoint, regression):
    _, culprit = regression
    endpoint.script = [Reply(status=200, body=[OPEN])]
    send_due(db, settings)
    assert [r.method for r in endpoint.requests] == ["GET"]
    with db.session() as session:
        row = session.scalar(select(NotificationDelivery).where(NotificationDelivery.kind == "github_comment"))
        assert (row.state, row.last_error) == ("skipped", f"no merged pull request contains {culprit[:12]}")
