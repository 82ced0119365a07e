"""A finished bisect explains its culprit against the commit before it, in its JSON and on its page."""
from __future__ import annotations

import pytest
from sqlalchemy import select

from app.core.models import Bisect, BisectState, Commit
from tests.detection.builder import SUITE, Builder
from tests.explain.histories import engine_context, environment


@pytest.fixture
def bisect_id(db):  # type: ignore[no-untyped-def]
    build = Builder(db)
    shas = build.branch(4)
    build.history(shas, "rocm", [1000.0, 1000.0, 800.0, 800.0],
                  contexts=[engine_context(i >= 2, "rocm") for i in range(4)],
                  environments=[environment("rocm") for _ in range(4)])
    with db.session() as session:
        ids = {c.sha: c.id for c in session.scalars(select(Commit).where(Commit.sha.in_(shas)))}
        bisect = Bisect(repository_id=build.repository_id, suite=SUITE, metric="output_throughput", platform="rocm",
                        good_commit_id=ids[shas[0]], bad_commit_id=ids[shas[3]], state=BisectState.done,
                        culprit_commit_id=ids[shas[2]], stages=[{"kind": "first_parent", "commits": shas}],
                        reason="culprit found")
        session.add(bisect)
        session.commit()
        return bisect.id, shas


def test_the_bisect_json_explains_the_culprit_against_its_parent(client, bisect_id):
    bisect, shas = bisect_id
    explanation = client.get(f"/api/v1/bisects/{bisect}").get_json()["explanation"]
    assert (explanation["good"], explanation["culprit"], explanation["culprit_is_range"]) == (shas[1], shas[2], False)
    assert explanation["summary"] == "sync_policy.war_barrier false → true on rocm"


def test_the_bisect_page_shows_what_changed(client, bisect_id):
    bisect, _ = bisect_id
    page = client.get(f"/bisects/{bisect}").get_data(as_text=True)
    assert 'id="explanation-summary"' in page and "sync_policy.war_barrier false → true on rocm" in page


def test_a_running_bisect_has_no_explanation_yet(client, db, bisect_id):
    bisect, _ = bisect_id
    with db.session() as session:
        session.get(Bisect, bisect).state = BisectState.running
        session.commit()
    assert client.get(f"/api/v1/bisects/{bisect}").get_json()["explanation"] is None
