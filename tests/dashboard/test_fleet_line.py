"""The home page's fleet line and the runners page, on both backends, by one rule: a runner is online
when it is enabled and was seen within one lease; disabled and silent runners are still registered."""
import re
from datetime import timedelta

import pytest

from app.core.clock import utcnow
from app.core.models import Runner
from app.web import create_app
from tests.support.settings import make_settings


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def fleet_app(request, sqlite_url):
    url = sqlite_url if request.param == "sqlite" else request.getfixturevalue("postgres_url")
    flask_app = create_app(make_settings(url))
    yield flask_app
    flask_app.extensions["parallax.db"].engine.dispose()


def add_runner(session, name: str, platform: str, seen_s_ago: float | None, disabled: bool = False) -> None:
    seen = None if seen_s_ago is None else utcnow() - timedelta(seconds=seen_s_ago)
    session.add(Runner(name=name, platform=platform, labels={}, token_hash=f"hash-{name}", last_seen_at=seen,
                       disabled=disabled))


def fleet_line(client) -> str:
    body = client.get("/").get_data(as_text=True)
    return " ".join(re.search(r'<p id="fleet" class="fleet">(.*?)</p>', body, re.S).group(1).split())


def test_fleet_line_counts_enabled_runners_seen_within_a_lease(fleet_app):
    lease_s = fleet_app.extensions["parallax.settings"].lease_s
    with fleet_app.extensions["parallax.db"].session() as session:
        add_runner(session, "rocm-1", "rocm", seen_s_ago=1)
        add_runner(session, "rocm-2", "rocm", seen_s_ago=lease_s + 60)       # silent for over a lease
        add_runner(session, "rocm-3", "rocm", seen_s_ago=1, disabled=True)
        add_runner(session, "cuda-1", "cuda", seen_s_ago=None)               # registered, never seen
        for i in range(3):
            add_runner(session, f"cpu-{i}", "cpu", seen_s_ago=2)
    assert "cpu 3/3 online, cuda 0/1 online, rocm 1/3 online" in fleet_line(fleet_app.test_client())


def test_fleet_line_without_runners_says_so(fleet_app):
    assert "no runners registered" in fleet_line(fleet_app.test_client())


def test_runners_page_marks_each_runner_by_the_same_rule(fleet_app):
    lease_s = fleet_app.extensions["parallax.settings"].lease_s
    with fleet_app.extensions["parallax.db"].session() as session:
        add_runner(session, "fresh", "rocm", seen_s_ago=1)
        add_runner(session, "silent", "rocm", seen_s_ago=lease_s + 60)
        add_runner(session, "disabled", "rocm", seen_s_ago=1, disabled=True)
        add_runner(session, "never-seen", "cuda", seen_s_ago=None)
    body = fleet_app.test_client().get("/runners").get_data(as_text=True)
    marked = {name: state for state, name in re.findall(r'<tr class="(online|offline)" data-runner="([\w-]+)"', body)}
    assert marked == {"fresh": "online", "silent": "offline", "disabled": "offline", "never-seen": "offline"}
