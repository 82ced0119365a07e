"""The home page's content is a per-process snapshot (PARALLAX_HOME_MAX_AGE_S): served stale
while one background render makes the next, never per user, and 0 turns it off."""
import threading
import time

import pytest
from flask import Flask

from app.auth.tokens import create_user
from app.core.config import ConfigError, load_settings
from app.core.models import Runner
from app.web import create_app
from app.web import snapshot as snapshot_module
from app.web.snapshot import Snapshot
from tests.dashboard.test_pages import sign_in
from tests.support.runner_harness import wait_for
from tests.support.settings import make_settings

MAX_AGE_S = 0.5


@pytest.fixture
def snapshot_app(sqlite_url):
    flask_app = create_app(make_settings(sqlite_url, home_max_age_s=MAX_AGE_S))
    yield flask_app
    flask_app.extensions["parallax.db"].engine.dispose()


def add_runner(flask_app: Flask, name: str) -> None:
    with flask_app.extensions["parallax.db"].session() as session:
        session.add(Runner(name=name, platform="rocm", labels={}, token_hash=f"hash-{name}"))


def home(client) -> str:
    return client.get("/").get_data(as_text=True)


class Clock:
    """The snapshot's clock, moved by the test: on a loaded machine two requests can be further
    apart than the max age, and a CI run saw the snapshot refreshed "within" it."""

    def __init__(self) -> None:
        self.now = 1_800_000_000.0

    def time(self) -> float:
        return self.now


def test_a_change_shows_after_the_max_age_without_any_request_rendering_it(snapshot_app, monkeypatch):
    clock = Clock()
    monkeypatch.setattr(snapshot_module, "time", clock)
    client = snapshot_app.test_client()
    assert "no runners registered" in home(client)
    add_runner(snapshot_app, "rocm-1")
    assert "no runners registered" in home(client)            # within the age: the snapshot
    clock.now += MAX_AGE_S + 0.1
    assert "no runners registered" in home(client)            # past it: still the old one, refreshing
    wait_for(lambda: "rocm 0/1 online" in home(client), 60, "the refreshed home page")


def test_a_forgotten_snapshot_is_rendered_anew_by_the_next_request(snapshot_app, monkeypatch):
    monkeypatch.setattr(snapshot_module, "time", Clock())  # never past the max age
    client = snapshot_app.test_client()
    assert "no runners registered" in home(client)
    add_runner(snapshot_app, "rocm-1")
    snapshot_app.extensions["parallax.home_snapshot"].forget()
    assert "rocm 0/1 online" in home(client)


def test_the_page_says_how_old_its_content_may_be(snapshot_app):
    body = home(snapshot_app.test_client())
    assert 'id="as-of"' in body and f"at most every {MAX_AGE_S:g} s" in body


def test_max_age_zero_renders_every_request_and_says_nothing(sqlite_url):
    flask_app = create_app(make_settings(sqlite_url, home_max_age_s=0.0))
    client = flask_app.test_client()
    assert "no runners registered" in home(client)
    add_runner(flask_app, "rocm-1")
    body = home(client)
    assert "rocm 0/1 online" in body and 'id="as-of"' not in body
    flask_app.extensions["parallax.db"].engine.dispose()


def test_who_is_signed_in_is_not_part_of_the_shared_snapshot(snapshot_app):
    with snapshot_app.extensions["parallax.db"].session() as session:
        token = create_user(session, "ada")
    ada = snapshot_app.test_client()
    sign_in(ada, token, "ada")
    assert 'id="signed-in-as">ada<' in home(ada)               # ada's request made the snapshot
    assert "signed-in-as" not in home(snapshot_app.test_client())


def test_first_requests_at_once_share_one_render(snapshot_app):
    renders = []

    def render() -> str:
        renders.append(1)
        time.sleep(0.2)
        return "content"

    snapshot = Snapshot()
    results = []
    with snapshot_app.test_request_context("/"):
        threads = [threading.Thread(target=lambda: results.append(snapshot.get(render, 60).html)) for _ in range(8)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    assert results == ["content"] * 8 and len(renders) == 1


def test_a_failed_refresh_keeps_the_old_content_and_the_next_stale_request_retries(snapshot_app, monkeypatch):
    clock = Clock()
    monkeypatch.setattr(snapshot_module, "time", clock)
    outcomes = iter(["first", RuntimeError("database went away"), "third"])
    errors = []

    def render() -> str:
        outcome = next(outcomes)
        if isinstance(outcome, Exception):
            raise outcome
        return outcome

    snapshot = Snapshot(on_error=errors.append)
    with snapshot_app.test_request_context("/"):
        assert snapshot.get(render, MAX_AGE_S).html == "first"
        clock.now += MAX_AGE_S + 0.1
        assert snapshot.get(render, MAX_AGE_S).html == "first"        # starts the refresh that fails
        wait_for(lambda: len(errors) == 1, 60, "the failed refresh")
        wait_for(lambda: snapshot.get(render, MAX_AGE_S).html == "third", 60, "the retried refresh")
    assert str(errors[0]) == "database went away"


@pytest.mark.parametrize("raw", ["-1", "nan", "inf", "soon"])
def test_a_bad_max_age_names_the_variable(raw):
    with pytest.raises(ConfigError, match="PARALLAX_HOME_MAX_AGE_S"):
        load_settings({"PARALLAX_HOME_MAX_AGE_S": raw})


def test_max_age_zero_is_accepted_from_the_environment():
    assert load_settings({"PARALLAX_HOME_MAX_AGE_S": "0"}).home_max_age_s == 0.0
