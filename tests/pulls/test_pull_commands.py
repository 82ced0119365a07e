"""`/parallax` commands in pull-request comments, through the real webhook endpoint."""
from __future__ import annotations

from sqlalchemy import func, select

from app.core.models import Job
from app.pulls.commands import parse
from tests.support.github import REPO_NAME, post_webhook
from tests.support.pull_runners import Fleet, NoiseModel


def comment(body: str, association: str = "MEMBER", login: str = "octo", number: int = 2) -> dict:
    return {"action": "created", "issue": {"number": number, "pull_request": {"url": "x"}},
            "comment": {"body": body, "author_association": association, "user": {"login": login}},
            "repository": {"full_name": REPO_NAME}}


def replies(github) -> list[str]:  # type: ignore[no-untyped-def]
    return [r.json["body"] for r in github.calls("POST", "/issues/2/comments") if "parallax:" not in r.json["body"]]


def job_count(db) -> int:  # type: ignore[no-untyped-def]
    with db.session() as session:
        return session.scalar(select(func.count()).select_from(Job))


def test_parse_reads_the_first_command_line():
    assert parse("thanks!\n/parallax rerun rocm\n").verb == "rerun"
    assert parse("/parallax rerun rocm").argument == "rocm"
    assert parse("/parallax accept").verb == "accept"
    assert parse("/parallax please go").verb == "unknown"
    assert parse("no command here") is None


def test_accept_turns_a_regression_into_success_naming_who(service, github, branch):
    base, head = branch()
    with Fleet(service.app, NoiseModel(seed=3, effects={(head, "rocm"): -0.08})):
        service.open_pr("opened", head, base)
        assert service.settled()["conclusion"] == "failure"
    service.webhook("issue_comment", comment("/parallax accept", login="maintainer"))
    pull = service.pull()
    assert pull["conclusion"] == "success" and pull["accepted_by"] == "maintainer"
    assert pull["title_line"].startswith("accepted by @maintainer: rocm output_throughput −")
    service.until(lambda: any(r.json.get("conclusion") == "success" and "accepted by @maintainer" in r.json["output"]["title"]
                              for r in github.calls("PATCH", "/check-runs/")), "the accepted check")


def test_command_from_a_non_member_changes_nothing_and_gets_a_reply(service, github, branch):
    base, head = branch()
    with Fleet(service.app, NoiseModel(seed=3, effects={(head, "rocm"): -0.08})):
        service.open_pr("opened", head, base)
        before = service.settled()
    jobs = job_count(service.db)
    service.webhook("issue_comment", comment("/parallax accept", association="CONTRIBUTOR", login="drive-by"))
    service.webhook("issue_comment", comment("/parallax rerun", association="NONE", login="drive-by"))
    after = service.pull()
    assert after["conclusion"] == before["conclusion"] == "failure" and after["accepted_by"] is None
    assert after["comparisons"] == before["comparisons"]
    assert job_count(service.db) == jobs
    service.until(lambda: len(replies(github)) == 2, "two replies")
    assert all("only the repository's owners, members and collaborators" in r for r in replies(github))


def test_unknown_command_gets_a_reply_listing_the_commands(service, github, branch):
    base, head = branch()
    service.open_pr("opened", head, base)
    jobs = job_count(service.db)
    service.webhook("issue_comment", comment("/parallax make it faster"))
    service.until(lambda: replies(github), "the reply")
    assert "`/parallax rerun`" in replies(github)[0] and "`/parallax accept`" in replies(github)[0]
    assert job_count(service.db) == jobs


def test_rerun_on_one_platform_measures_it_again_and_keeps_the_others(service, branch):
    base, head = branch()
    with Fleet(service.app, NoiseModel(seed=17)):
        service.open_pr("opened", head, base)
        first = service.settled()
        service.webhook("issue_comment", comment("/parallax rerun rocm"))
        second = service.settled()
    assert len(second["comparisons"]) == 2
    old_jobs = {j["id"] for j in first["jobs"]}
    for job in second["jobs"]:
        assert (job["id"] in old_jobs) == (job["platform"] != "rocm"), job


def test_rerun_of_an_unknown_platform_is_answered_and_queues_nothing(service, github, branch):
    base, head = branch()
    service.open_pr("opened", head, base)
    jobs = job_count(service.db)
    service.webhook("issue_comment", comment("/parallax rerun tpu"))
    service.until(lambda: replies(github), "the reply")
    assert "unknown platform `tpu`" in replies(github)[0]
    assert job_count(service.db) == jobs


def test_comment_without_a_command_is_ignored_on_arrival(service):
    answer = post_webhook(service.client, "issue_comment", comment("looks good to me"))
    assert answer.status_code == 202 and answer.get_json()["status"] == "ignored"
    assert "no /parallax command" in answer.get_json()["reason"]
