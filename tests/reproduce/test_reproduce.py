"""A new regression's good and bad commits are measured again, A/B on one runner, before the alert
stands: reproduced, it stays; not reproduced, it is withdrawn; inconclusive, it gets more rounds.
Runs on SQLite and PostgreSQL; runners claim and complete over the real runner protocol."""
from __future__ import annotations

import json
import re
from dataclasses import replace

import pytest
from sqlalchemy import select

from app.core.config import ConfigError, NotificationSpec, load_settings, use_settings
from app.core.models import (
    Alert,
    AlertState,
    Bisect,
    BisectState,
    Commit,
    CommitStatusUpdate,
    Job,
    JobReason,
    JobState,
    Reproduction,
)
from app.detection.documents import alert_json
from app.detection.service import scan_dirty
from app.jobs.queue import deliver_stored_runs
from app.notify.sender import send_due
from app.reproduce import service as reproduce
from tests.detection.builder import Builder, step
from tests.github.fake_github import FakeGitHub
from tests.support.service_api import claim, document, raw, register

LEVEL = 1000.0


@pytest.fixture
def build(db):  # type: ignore[no-untyped-def]
    return Builder(db)


def regression(build: Builder, db, platform: str = "rocm", drop: float = -0.2) -> tuple[str, str]:  # type: ignore[no-untyped-def]
    """A 40-commit history whose level drops by `drop` at commit 30; detection opens the alert.
    Returns (good, bad)."""
    shas = build.branch(40)
    build.history(shas, platform, step(40, 30, LEVEL, drop), seed=7)
    scan_dirty(db)
    with db.session() as session:
        (alert,) = session.scalars(select(Alert))
        good, bad = session.get(Commit, alert.good_commit_id), session.get(Commit, alert.bad_commit_id)
        assert good is not None and bad is not None
        return good.sha, bad.sha


def start(db, settings) -> list[int]:  # type: ignore[no-untyped-def]
    with use_settings(settings), db.session() as session:
        started = reproduce.start_for_alerts(session, settings)
        session.commit()
    return started


def jobs(db) -> list[tuple[str, str, JobState, int | None]]:  # type: ignore[no-untyped-def]
    """The reproduction jobs in queue order: (sha, platform, state, pinned runner)."""
    with db.session() as session:
        rows = session.scalars(select(Job).where(Job.reason == JobReason.reproduce).order_by(Job.id))
        return [(session.get(Commit, j.commit_id).sha, j.platform, j.state, j.pinned_runner_id) for j in rows]


def measure(client, headers, good: str, bad: str, level_of: dict[str, float], db) -> int:  # type: ignore[no-untyped-def]
    """The runner claims and completes every job it can take; each result's samples sit at the
    level given for its commit (a little noise, different per job). Returns the jobs it measured."""
    done = 0
    while (response := claim(client, headers)).status_code == 200:
        job = response.get_json()["job"]
        level = level_of[job["commit"]] * (1 + 0.002 * ((done * 7) % 5 - 2))
        doc = document(metrics=[{"name": "output_throughput", "unit": "tok/s", "direction": "higher_is_better",
                                 "samples": [level * 0.999, level, level * 1.001]}],
                       environment={"platform": "rocm", "device": "test", "torch": "2.13.0", "hip": "6.2",
                                    "cuda": None, "simulated": False})
        doc.pop("items")
        answer = client.post(f"/api/v1/jobs/{job['id']}/complete", data=raw(doc), headers=headers)
        assert answer.status_code == 201, answer.get_json()
        done += 1
    deliver_stored_runs(db)
    return done


def settle(client, headers, good: str, bad: str, level_of: dict[str, float], db, settings) -> Reproduction:  # type: ignore[no-untyped-def]
    """Measure and let the duty look until the reproduction is decided."""
    for _ in range(10):
        measure(client, headers, good, bad, level_of, db)
        with use_settings(settings):
            reproduce.run_duty(db)
        with db.session() as session:
            (row,) = session.scalars(select(Reproduction))
            if row.state != "measuring":
                session.expunge(row)
                return row
    raise AssertionError("the reproduction never decided")


def alert_state(db) -> tuple[AlertState, str | None, str | None]:  # type: ignore[no-untyped-def]
    with db.session() as session:
        (alert,) = session.scalars(select(Alert))
        return alert.state, alert.updated_by, alert.note


def test_a_new_regression_queues_interleaved_good_and_bad_jobs_above_bisects(build, db, settings):
    good, bad = regression(build, db)
    assert len(start(db, settings)) == 1
    assert [(sha, platform) for sha, platform, _, _ in jobs(db)] == [(good, "rocm"), (bad, "rocm")] * 3
    with db.session() as session:
        priorities = {j.priority for j in session.scalars(select(Job).where(Job.reason == JobReason.reproduce))}
    assert priorities == {reproduce.REPRODUCE_PRIORITY}
    assert start(db, settings) == []  # once per alert, platform and suite


def test_the_first_claim_pins_the_rest_of_the_rounds_to_that_runner(build, db, settings, client, app):
    regression(build, db)
    start(db, settings)
    first = register(client, app, "rocm", name="rocm-a")
    second = register(client, app, "rocm", name="rocm-b")
    taken = claim(client, first).get_json()["job"]
    assert claim(client, second).status_code == 204  # the other five wait for rocm-a
    pinned = {pin for _, _, state, pin in jobs(db) if state == JobState.queued}
    with db.session() as session:
        runner = session.get(Job, taken["id"]).runner_id
    assert pinned == {runner}


def test_a_regression_that_reproduces_stands_with_the_numbers(build, db, settings, client, app):
    good, bad = regression(build, db)
    start(db, settings)
    headers = register(client, app, "rocm")
    row = settle(client, headers, good, bad, {good: LEVEL, bad: LEVEL * 0.8}, db, settings)
    assert row.state == "reproduced" and row.rounds == 3
    (verdict,) = row.verdicts
    assert verdict["verdict"] == "worse" and -0.21 < verdict["change"] < -0.19
    assert re.fullmatch(r"reproduced: output_throughput -20\.\d % \(95 % interval -2\d\.\d % to -19\.\d %\) "
                        r"over 3 A/B rounds on runner runner-1", row.reason), row.reason
    assert alert_state(db)[0] == AlertState.new
    with db.session() as session:
        (alert,) = session.scalars(select(Alert))
        document_ = alert_json(session, alert)
    assert document_["reproductions"][0]["state"] == "reproduced"
    assert document_["changes"][0]["reproduced"]["verdict"] == "worse"


def test_a_regression_that_does_not_reproduce_is_withdrawn_with_the_reason(build, db, settings, client, app):
    good, bad = regression(build, db)
    with use_settings(replace(settings, github_token="t")):
        start(db, settings)
        headers = register(client, app, "rocm")
        row = settle(client, headers, good, bad, {good: LEVEL, bad: LEVEL}, db, settings)
    assert row.state == "not_reproduced"
    state, by, note = alert_state(db)
    assert (state, by) == (AlertState.invalid, "reproduce")
    assert note is not None and "not reproduced when measured again: output_throughput" in note
    assert "over 3 A/B rounds" in note


def test_withdrawing_clears_the_bad_commits_failing_status(build, db, settings, client, app):
    gh = replace(settings, github_token="t")
    with use_settings(gh):
        good, bad = regression(build, db)
        start(db, gh)
        headers = register(client, app, "rocm")
        settle(client, headers, good, bad, {good: LEVEL, bad: LEVEL}, db, gh)
    with db.session() as session:
        updates = [(u.state, u.description) for u in session.scalars(
            select(CommitStatusUpdate).where(CommitStatusUpdate.sha == bad).order_by(CommitStatusUpdate.id))]
    assert updates[0][0] == "failure"
    assert updates[-1] == ("success", "output_throughput regression not reproduced when measured again")


def test_a_triaged_alert_is_not_withdrawn(build, db, settings, client, app):
    good, bad = regression(build, db)
    start(db, settings)
    with db.session() as session:
        (alert,) = session.scalars(select(Alert))
        alert.state, alert.updated_by = AlertState.acknowledged, "maintainer"
        session.commit()
    headers = register(client, app, "rocm")
    row = settle(client, headers, good, bad, {good: LEVEL, bad: LEVEL}, db, settings)
    assert row.state == "not_reproduced"
    assert alert_state(db)[:2] == (AlertState.acknowledged, "maintainer")


def test_a_withdrawn_alert_cancels_its_running_bisect(build, db, settings, client, app):
    good, bad = regression(build, db)
    start(db, settings)
    with db.session() as session:
        (alert,) = session.scalars(select(Alert))
        session.add(Bisect(repository_id=alert.repository_id, suite="decode-throughput", metric="output_throughput",
                           platform="rocm", good_commit_id=alert.good_commit_id, bad_commit_id=alert.bad_commit_id,
                           state=BisectState.running, alert_id=alert.id))
        session.commit()
    headers = register(client, app, "rocm")
    settle(client, headers, good, bad, {good: LEVEL, bad: LEVEL}, db, settings)
    with db.session() as session:
        (bisect,) = session.scalars(select(Bisect))
        assert bisect.state == BisectState.cancelled


def test_an_unclear_difference_gets_more_rounds_up_to_the_limit_then_stands(build, db, settings, client, app):
    good, bad = regression(build, db)
    limited = replace(settings, reproduce_max_rounds=4)
    start(db, limited)
    headers = register(client, app, "rocm")
    # Round by round the bad commit is 3 % slower, 3 % faster, 1 % slower, 2 % faster: neither a
    # change (p above the alpha) nor within the 4 % equivalence margin.
    levels = iter([LEVEL, LEVEL * 0.97, LEVEL, LEVEL * 1.03, LEVEL, LEVEL * 0.99, LEVEL, LEVEL * 1.02])

    class InTurn(dict):  # each claim's level is the next of the sequence, whatever its commit
        def __getitem__(self, key: str) -> float:
            return next(levels)
    row = settle(client, headers, good, bad, InTurn(), db, limited)
    assert row.rounds == 4
    assert row.state == "inconclusive" and "inconclusive after 4 A/B rounds" in row.reason
    assert alert_state(db)[0] == AlertState.new


def test_a_platform_no_runner_measures_is_skipped_with_the_reason(build, db, settings):
    regression(build, db, platform="tpu")
    assert start(db, settings) == []
    with db.session() as session:
        (row,) = session.scalars(select(Reproduction))
    assert row.state == "skipped" and "no runner measures decode-throughput on tpu" in row.reason
    assert jobs(db) == []


def test_zero_rounds_turns_reproduction_off(build, db, settings):
    regression(build, db)
    assert start(db, replace(settings, reproduce_max_rounds=0)) == []
    assert jobs(db) == []


@pytest.mark.parametrize("value, problem", [("abc", "must be an integer, got 'abc'"),
                                            ("2", "must be 0 (alerts are not measured again) or at least 3"),
                                            ("-1", "must be 0 (alerts are not measured again) or at least 3")])
def test_a_bad_round_limit_is_refused_by_name(value: str, problem: str, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setenv("PARALLAX_REPRODUCE_MAX_ROUNDS", value)
    with pytest.raises(ConfigError, match="PARALLAX_REPRODUCE_MAX_ROUNDS " + problem.replace("(", r"\(").replace(")", r"\)")):
        load_settings()



def test_the_alert_page_says_what_measuring_again_found(build, db, settings, client, app):
    good, bad = regression(build, db)
    start(db, settings)
    with db.session() as session:
        (alert,) = session.scalars(select(Alert))
    page = " ".join(client.get(f"/alerts/{alert.id}").get_data(as_text=True).split())
    assert "Measured again" in page and "3 A/B rounds of good and bad queued, on one runner" in page
    headers = register(client, app, "rocm")
    settle(client, headers, good, bad, {good: LEVEL, bad: LEVEL}, db, settings)
    page = " ".join(client.get(f"/alerts/{alert.id}").get_data(as_text=True).split())
    assert "<strong>not reproduced</strong> · rocm · not reproduced: output_throughput" in page
    assert "not reproduced when measured again: output_throughput" in page and "(reproduce)" in page


def test_a_commit_that_no_longer_builds_fails_the_reproduction_and_the_alert_stands(build, db, settings, client, app):
    good, bad = regression(build, db)
    start(db, settings)
    headers = register(client, app, "rocm")
    while (response := claim(client, headers)).status_code == 200:
        job = response.get_json()["job"]
        if job["commit"] == bad:
            answer = client.post(f"/api/v1/jobs/{job['id']}/fail", json={"reason": "build failed", "retryable": False},
                                 headers=headers)
        else:
            doc = document(metrics=[{"name": "output_throughput", "unit": "tok/s", "direction": "higher_is_better",
                                     "samples": [LEVEL, LEVEL, LEVEL]}])
            doc.pop("items")
            answer = client.post(f"/api/v1/jobs/{job['id']}/complete", data=raw(doc), headers=headers)
        assert answer.status_code in (200, 201), answer.get_json()
    deliver_stored_runs(db)
    with use_settings(settings):
        reproduce.run_duty(db)
    with db.session() as session:
        (row,) = session.scalars(select(Reproduction))
    assert row.state == "failed" and row.reason == "every job on the bad commit failed (3); the alert stands as detected"
    assert alert_state(db)[0] == AlertState.new


def test_the_people_told_of_the_alert_are_told_it_was_withdrawn_and_why(build, db, settings, client, app):
    with FakeGitHub() as endpoint:
        told = replace(settings, notifications=(NotificationSpec(
            name="team-slack", kind="slack", url=f"{endpoint.url}/slack", events=("alert.opened", "alert.withdrawn")),))
        with use_settings(told):
            good, bad = regression(build, db)
            start(db, told)
            headers = register(client, app, "rocm")
            settle(client, headers, good, bad, {good: LEVEL, bad: LEVEL}, db, told)
        send_due(db, told)
        texts = [json.loads(r.raw)["text"] for r in endpoint.requests if r.path == "/slack"]
    assert len(texts) == 2 and texts[0].startswith("Parallax regression in demo/engine")
    assert re.fullmatch(r"Parallax withdrew alert #\d+ in demo/engine: decode-throughput output_throughput -\d+\.\d % "
                        r"on rocm \(.*\): not reproduced when measured again: output_throughput .* over 3 A/B rounds "
                        r"on runner runner-1", texts[1]), texts[1]


def test_the_alerts_list_tags_a_change_that_did_not_reproduce(build, db, settings, client, app):
    good, bad = regression(build, db)
    start(db, settings)
    headers = register(client, app, "rocm")
    settle(client, headers, good, bad, {good: LEVEL, bad: LEVEL}, db, settings)
    page = client.get("/alerts?state=all").get_data(as_text=True)
    assert '<span class="tag withdrawn">not reproduced</span>' in page


def test_an_alert_a_person_closes_stops_its_measuring_at_once(build, db, settings, client, app):
    regression(build, db)
    start(db, settings)
    with db.session() as session:
        (alert,) = session.scalars(select(Alert))
        alert.state, alert.updated_by = AlertState.wont_fix, "maintainer"
        session.commit()
    with use_settings(settings):
        reproduce.run_duty(db)
    with db.session() as session:
        (row,) = session.scalars(select(Reproduction))
        assert row.state == "cancelled" and row.reason == "the alert was marked wont_fix while it was measured again"
    assert {state for _, _, state, _ in jobs(db)} == {JobState.cancelled}
