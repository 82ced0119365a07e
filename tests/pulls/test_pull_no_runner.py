"""Issue 29: a pull request compared on a platform with no Parallax runner says so plainly, per
platform, in the API, on the page, and in the check run and comment, instead of waiting silently."""
from __future__ import annotations

from tests.support.github import REPO_NAME
from tests.support.service_api import register

NOTE_START = "no Parallax runner is registered for platform "


def test_the_api_names_every_platform_without_a_runner_while_measuring(service, branch):
    base, head = branch()
    service.open_pr("opened", head, base)
    notes = service.pull()["notes"]
    assert [n["platform"] for n in notes] == ["cpu", "cuda", "rocm"]
    rocm = notes[2]["note"]
    assert rocm.startswith(NOTE_START + "'rocm': this pull request's A/B jobs wait in the queue")
    assert "POST /api/v1/runs" in rocm


def test_a_platform_with_a_registered_runner_has_no_note(service, branch):
    register(service.client, service.app, platform="cuda", name="cuda-1")
    register(service.client, service.app, platform="cpu", name="cpu-1")
    base, head = branch()
    service.open_pr("opened", head, base)
    assert [n["platform"] for n in service.pull()["notes"]] == ["rocm"]


def test_the_check_run_and_the_comment_carry_the_note(service, github, branch):
    register(service.client, service.app, platform="cuda", name="cuda-1")
    register(service.client, service.app, platform="cpu", name="cpu-1")
    base, head = branch()
    service.open_pr("opened", head, base)
    service.until(lambda: github.calls("POST", "/check-runs") and github.calls("POST", "/issues/2/comments"),
                  "the in-progress check run and the comment")
    check = github.calls("POST", "/check-runs")[-1].json
    comment = github.calls("POST", "/issues/2/comments")[-1].json["body"]
    assert check["status"] == "in_progress"
    for text in (check["output"]["summary"], comment):
        assert NOTE_START + "'rocm'" in text
        assert NOTE_START + "'cuda'" not in text


def test_the_pull_request_page_shows_the_note(service, branch):
    register(service.client, service.app, platform="cuda", name="cuda-1")
    base, head = branch()
    service.open_pr("opened", head, base)
    html = service.client.get(f"/pulls/2?repository={REPO_NAME}").get_data(as_text=True)
    assert 'id="notes"' in html
    assert 'data-platform="rocm"' in html and 'data-platform="cpu"' in html and 'data-platform="cuda"' not in html
