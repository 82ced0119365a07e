"""Issue 26: while a pull request is measured, the in-progress check run and the one comment show
the verdicts decided so far and the pairs still measuring, before the completed check."""
from __future__ import annotations

from tests.github.fake_github import FakeGitHub
from tests.pulls.test_pull_github import unsent
from tests.support.pull_runners import Fleet, NoiseModel

MODEL = NoiseModel(seed=31)


def check_writes(github: FakeGitHub) -> list[dict]:
    return [r.json for r in github.requests if "/check-runs" in r.path and r.method in ("POST", "PATCH")]


def partial(body: dict) -> bool:
    return body["status"] == "in_progress" and "still measuring: rocm/decode-throughput, rocm/gsm8k" in body["output"]["summary"]


def test_the_check_run_shows_the_decided_pairs_while_rocm_is_still_measuring(service, github, branch):
    base, head = branch()
    with Fleet(service.app, MODEL, platforms=("cuda", "cpu")):  # rocm has no runner yet
        service.open_pr("opened", head, base)
        service.until(lambda: any(partial(b) and "| cuda | gsm8k |" in b["output"]["summary"]
                                  and "| cpu | decode-throughput |" in b["output"]["summary"]
                                  for b in check_writes(github)), "a partial table with cuda and cpu decided")
    shown = next(b for b in reversed(check_writes(github)) if partial(b))
    assert shown["output"]["title"] == "measuring: 3 of 5 platform × suite pairs decided"
    assert "| rocm |" not in shown["output"]["summary"]  # a pair still measuring has no verdict yet
    assert "conclusion" not in shown


def test_the_completed_check_follows_the_partial_one_and_the_comment_is_posted_once(service, github, branch):
    base, head = branch()
    with Fleet(service.app, MODEL, platforms=("cuda", "cpu")):
        service.open_pr("opened", head, base)
        service.until(lambda: any(partial(b) for b in check_writes(github)), "a partial check run")
        service.until(lambda: unsent(service.db) == 0, "the partial comment sent")
    with Fleet(service.app, MODEL, platforms=("rocm",)):
        service.settled()
        service.until(lambda: unsent(service.db) == 0, "every write sent")
    writes = check_writes(github)
    statuses = [b["status"] for b in writes]
    assert statuses[-1] == "completed" and "completed" not in statuses[:-1]
    assert any(partial(b) for b in writes[:-1])
    assert "still measuring" not in writes[-1]["output"]["summary"]
    assert len(github.calls("POST", "/issues/2/comments")) == 1
    # The one POST may already carry the partial table (the start comment superseded while unsent).
    bodies = [r.json["body"] for r in github.requests if "/comments" in r.path and r.method in ("POST", "PATCH")]
    assert any("still measuring: rocm/decode-throughput" in body for body in bodies)
    assert "still measuring" not in bodies[-1] and "⏳" not in bodies[-1]
