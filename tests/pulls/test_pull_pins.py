"""A pull request's A/B jobs stay on the runner that took the first of a pair, until it is gone."""
from __future__ import annotations

from datetime import datetime, timedelta, timezone

from sqlalchemy import update

from app.core.models import Runner
from app.pulls.comparisons import release_pins
from tests.support.service_api import claim, register


def test_a_pair_waits_for_its_runner_and_moves_on_when_that_runner_is_gone(service, branch):
    base, head = branch()
    service.open_pr("opened", head, base)
    first = register(service.client, service.app, "cpu", name="cpu-a")
    second = register(service.client, service.app, "cpu", name="cpu-b")
    taken = claim(service.client, first).get_json()["job"]
    assert taken["commit"] == base
    assert claim(service.client, second).status_code == 204  # the rest of the cpu pair waits for cpu-a
    with service.db.session() as session:
        assert release_pins(session, service.settings) == 0  # cpu-a was seen a moment ago
        session.execute(update(Runner).where(Runner.name == "cpu-a")
                        .values(last_seen_at=datetime.now(timezone.utc) - timedelta(hours=1)))
        assert release_pins(session, service.settings) == 5  # head r1, base/head r2 and r3
    moved = claim(service.client, second).get_json()["job"]
    assert moved["commit"] == head
