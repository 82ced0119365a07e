"""What GitHub is told about a pull request, and how: App authentication, the personal-token
mode, per-platform statuses, an outage, and bad webhook input."""
from __future__ import annotations

from datetime import datetime, timedelta, timezone

import jwt
import pytest
from sqlalchemy import func, select

from app.core.models import CommitStatusUpdate, Job, PullRequestWrite
from tests.github.fake_github import Reply
from tests.pulls.conftest import APP_ID, INSTALLATION
from tests.support.github import post_webhook, pr_payload
from tests.support.pull_runners import Fleet, NoiseModel
from tests.support.settings import make_settings


def make_due(db) -> None:  # type: ignore[no-untyped-def]
    """Let time pass: every waiting write and status is due now."""
    past = datetime.now(timezone.utc) - timedelta(seconds=1)
    with db.session() as session:
        session.query(PullRequestWrite).filter(PullRequestWrite.sent_at.is_(None)).update({"next_attempt_at": past})
        session.query(CommitStatusUpdate).filter(CommitStatusUpdate.sent_at.is_(None)).update({"next_attempt_at": past})


def unsent(db) -> int:  # type: ignore[no-untyped-def]
    with db.session() as session:
        return session.scalar(select(func.count()).select_from(PullRequestWrite).where(PullRequestWrite.sent_at.is_(None)))


def test_app_mode_signs_a_jwt_and_reuses_the_installation_token(service, github, branch, app_key):
    base, head = branch()
    with Fleet(service.app, NoiseModel(seed=21)):
        service.open_pr("opened", head, base)
        service.settled()
        service.until(lambda: unsent(service.db) == 0, "every write sent")
    token_calls = github.calls("POST", "/access_tokens")
    assert [r.path for r in token_calls] == [f"/app/installations/{INSTALLATION}/access_tokens"]
    claims = jwt.decode(token_calls[0].headers["Authorization"].removeprefix("Bearer "), app_key[1], algorithms=["RS256"])
    assert claims["iss"] == APP_ID and claims["exp"] - claims["iat"] <= 600
    writes = [r for r in github.requests if "/repos/" in r.path]
    assert len(writes) >= 3  # the check run, the comment and the statuses
    assert {r.headers["Authorization"] for r in writes} == {"Bearer ghs-installation-1001"}


def test_per_platform_statuses_on_the_head_say_the_comparison(service, github, branch):
    base, head = branch()
    with Fleet(service.app, NoiseModel(seed=3, effects={(head, "rocm"): -0.08})):
        service.open_pr("opened", head, base)
        service.settled()
        service.until(lambda: len(final_statuses(github, head)) == 5, "five verdict statuses")
    sent = final_statuses(github, head)
    rocm = sent["parallax/rocm/decode-throughput"]
    assert rocm["state"] == "failure"
    assert rocm["description"].startswith("output_throughput −") and rocm["description"].endswith(f"vs base {base[:8]}")
    assert sent["parallax/cuda/decode-throughput"]["state"] == "success"
    assert not github.calls("POST", f"/statuses/{base}")  # the A/B jobs on the merge-base post nothing


def final_statuses(github, sha: str) -> dict[str, dict]:  # type: ignore[no-untyped-def]
    """The latest status per context, once it is no longer pending."""
    latest = {r.json["context"]: r.json for r in github.calls("POST", f"/statuses/{sha}")}
    return {context: body for context, body in latest.items() if body["state"] != "pending"}


def test_statuses_say_measuring_against_the_base_while_the_rounds_run(service, github, branch):
    base, head = branch()
    service.open_pr("opened", head, base)
    service.until(lambda: len(github.calls("POST", f"/statuses/{head}")) == 5, "five pending statuses")
    bodies = [r.json for r in github.calls("POST", f"/statuses/{head}")]
    assert {b["state"] for b in bodies} == {"pending"}
    assert {b["description"] for b in bodies} == {f"measuring against base {base[:8]} (A/B rounds)"}


@pytest.fixture
def token_settings(database_url, tmp_path, github):  # type: ignore[no-untyped-def]
    from tests.support.github import SECRET
    return make_settings(database_url, github_webhook_secret=SECRET, data_dir=str(tmp_path / "data"),
                         github_api_url=github.url, github_token="ghp-personal", public_url="https://parallax.example")


def test_personal_token_mode_sends_statuses_and_the_comment_but_no_check_run(token_settings, tracked, branch, github,
                                                                             request):
    from app.web import create_app
    from tests.pulls.conftest import Service
    request.getfixturevalue("app")  # the tracked repository lives in the same database
    service = Service(create_app(token_settings))
    base, head = branch()
    with Fleet(service.app, NoiseModel(seed=23)):
        service.open_pr("opened", head, base)
        service.settled()
        service.until(lambda: len(final_statuses(github, head)) == 5 and unsent(service.db) == 0,
                      "statuses and the comment")
    assert not github.calls("POST", "/check-runs") and not github.calls("POST", "/access_tokens")
    assert len(github.calls("POST", "/issues/2/comments")) == 1
    assert {r.headers["Authorization"] for r in github.requests} == {"Bearer ghp-personal"}


def test_github_down_for_ten_minutes_then_every_check_and_comment_arrives_once(service, github, branch):
    base, head = branch()
    github.script = [Reply(503, body={"message": "unavailable"}) for _ in range(10_000)]  # down from the start
    with Fleet(service.app, NoiseModel(seed=25, effects={(head, "rocm"): -0.08})):
        service.open_pr("opened", head, base)
        pull = service.settled()
    assert unsent(service.db) > 0  # the outage kept them all
    github.script.clear()  # GitHub is back
    back = len(github.requests)
    for _ in range(20):  # ten minutes of backoff, made due at once
        if unsent(service.db) == 0:
            break
        make_due(service.db)
        service.tick()
    assert unsent(service.db) == 0
    after = github.requests[back:]
    check_writes = [r.json for r in after if "/check-runs" in r.path]
    comment_writes = [r.json for r in after if "/comments" in r.path and r.method != "GET"]
    assert pull["conclusion"] == "failure"
    assert len(check_writes) == 1 and check_writes[0]["conclusion"] == "failure"  # the latest state, once
    assert len(comment_writes) == 1 and "❌ Parallax: rocm output_throughput −" in comment_writes[0]["body"]


@pytest.mark.parametrize("mutate, field", [
    (lambda p: p.pop("pull_request"), "pull_request"),
    (lambda p: p.__setitem__("pull_request", "oops"), "pull_request"),
    (lambda p: p["pull_request"].__setitem__("number", "two"), "pull_request.number"),
    (lambda p: p["pull_request"]["head"].__setitem__("sha", "not-a-sha"), "pull_request.head.sha"),
])
def test_malformed_pull_request_webhook_is_400_naming_the_field_and_queues_nothing(service, branch, mutate, field):
    base, head = branch()
    payload = pr_payload("opened", head, base)
    mutate(payload)
    response = post_webhook(service.client, "pull_request", payload)
    assert response.status_code == 400
    assert response.get_json()["detail"].startswith(f"{field}:")
    with service.db.session() as session:
        assert session.scalar(select(func.count()).select_from(Job)) == 0
