"""The demo summary's explanation lines, from a real alert's `explanation` (the full demo takes
ten minutes; this checks the same code on a history written straight into the database)."""
from __future__ import annotations

import hashlib

import pytest
from sqlalchemy import select

from app.core.config import use_settings
from app.core.models import Commit, JobArtifact, Run
from app.demo.run import explanation_lines
from tests.detection.builder import Builder
from tests.explain.histories import barrier_on_rocm
from tests.explain.traces import trace


@pytest.fixture
def alert_id(app, db):  # type: ignore[no-untyped-def]
    build = Builder(db)
    shas = build.branch(30)
    with use_settings(app.extensions["parallax.settings"]):
        alert = barrier_on_rocm(build, db, shas, 20)
    with db.session() as session:
        for sha, busy_us in ((shas[19], 99.0), (shas[20], 89.0)):
            run = session.scalar(select(Run).join(Commit, Commit.id == Run.commit_id)
                                 .where(Commit.sha == sha, Run.platform == "rocm"))
            data = trace(busy_us)
            session.add(JobArtifact(job_id=run.job_id, attempt=run.attempt, name="timeline.json",
                                    content_type="application/json", size_bytes=len(data),
                                    sha256=hashlib.sha256(data).hexdigest(), data=data))
        session.commit()
    return alert


def test_the_summary_prints_the_explanation_line_and_both_timelines(client, alert_id):
    explanation = client.get(f"/api/v1/alerts/{alert_id}").get_json()["explanation"]
    what, where = explanation_lines(explanation, "http://127.0.0.1:8000")
    assert what == "    what changed: sync_policy.war_barrier false → true on rocm; idle per decode step 1 % → 11 %"
    good, culprit = explanation["timelines"]["good"], explanation["timelines"]["culprit"]
    assert where == (f"    timelines (rocm): good http://127.0.0.1:8000/api/v1/jobs/{good['job_id']}/artifacts/timeline.json"
                     f"?attempt=1 · culprit http://127.0.0.1:8000/api/v1/jobs/{culprit['job_id']}/artifacts/"
                     "timeline.json?attempt=1")


def test_an_alert_without_an_explanation_adds_no_lines():
    assert explanation_lines(None, "http://127.0.0.1:8000") == []
