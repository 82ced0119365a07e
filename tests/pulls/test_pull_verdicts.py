"""A pull request end to end: the real webhook endpoint, the queue and the runner protocol
(runners as threads drawing from a seeded noise model), GitHub played by the recording server."""
from __future__ import annotations

from sqlalchemy import func, select

from app.core.models import Job, JobState, PullRequestWrite
from tests.support.github import REPO_NAME
from tests.support.pull_runners import Fleet, NoiseModel
from tests.support.service_api import claim, register

CHECKS = "/check-runs"


def checks(github, **expected: str) -> list[dict]:  # type: ignore[no-untyped-def]
    """The check-run bodies sent (created or updated), those with the `expected` fields only."""
    return [r.json for r in list(github.requests) if CHECKS in r.path and r.method in ("POST", "PATCH")
            and all(r.json.get(k) == v for k, v in expected.items())]


def final_check(github) -> dict:  # type: ignore[no-untyped-def]
    completed = checks(github, status="completed")
    assert completed, [r.path for r in github.requests]
    return completed[-1]


def scopes(pull: dict) -> dict[tuple[str, str], dict]:
    return {(c["suite"], c["metric"]): c for c in pull["classification"]}


def by_platform(pull: dict, metric: str = "output_throughput") -> dict[str, dict]:
    return {v["platform"]: v for v in pull["verdicts"] if v["metric"] == metric}


def test_rocm_only_slowdown_fails_the_check_naming_rocm(service, github, branch):
    base, head = branch()
    model = NoiseModel(seed=3, effects={(head, "rocm"): -0.08})
    with Fleet(service.app, model):
        service.open_pr("opened", head, base)
        pull = service.settled()
    service.until(lambda: checks(github, status="completed"), "the completed check run")
    verdicts = by_platform(pull)
    assert verdicts["rocm"]["verdict"] == "worse"
    assert verdicts["cuda"]["verdict"] == "unchanged" and verdicts["cpu"]["verdict"] == "unchanged"
    assert -0.11 < verdicts["rocm"]["change"] < -0.05
    scope = scopes(pull)[("decode-throughput", "output_throughput")]
    assert scope["scope"] == "platform_specific" and scope["platforms"] == ["rocm"]
    check = final_check(github)
    assert check["conclusion"] == "failure"
    assert check["output"]["title"].startswith("rocm output_throughput −")
    assert check["output"]["title"].endswith("rocm only")
    assert "| rocm | decode-throughput | output_throughput |" in check["output"]["summary"]


def test_pull_request_without_change_gets_a_success(service, github, branch):
    base, head = branch()
    with Fleet(service.app, NoiseModel(seed=5)):
        service.open_pr("opened", head, base)
        pull = service.settled()
    assert pull["conclusion"] == "success"
    assert {v["verdict"] for v in pull["verdicts"]} == {"unchanged"}
    assert pull["classification"] == []
    service.until(lambda: checks(github, conclusion="success"), "the success check")


def test_slowdown_on_every_platform_is_common(service, github, branch):
    base, head = branch()
    model = NoiseModel(seed=7, effects={(head, p): -0.06 for p in ("cuda", "rocm", "cpu")})
    with Fleet(service.app, model):
        service.open_pr("opened", head, base)
        pull = service.settled()
    scope = scopes(pull)[("decode-throughput", "output_throughput")]
    assert scope["scope"] == "common" and scope["platforms"] == ["cpu", "cuda", "rocm"]
    assert pull["conclusion"] == "failure"
    assert pull["title_line"].endswith("every platform")


def test_head_that_fails_to_build_fails_the_check_saying_so(service, github, branch):
    base, head = branch()
    with Fleet(service.app, NoiseModel(seed=9, broken={head})):
        service.open_pr("opened", head, base)
        pull = service.settled()
    assert pull["conclusion"] == "failure"
    assert pull["title_line"].startswith("head fails to build on ")
    service.until(lambda: checks(github, conclusion="failure"), "the failing check")
    assert "fails to build" in final_check(github)["output"]["title"]


def test_base_and_head_of_a_platform_run_interleaved_on_one_runner(service, branch):
    base, head = branch()
    model = NoiseModel(seed=11)
    with Fleet(service.app, model, platforms=("cuda", "rocm", "cpu", "rocm")):
        service.open_pr("opened", head, base)
        pull = service.settled()
    for suite in ("decode-throughput", "gsm8k"):
        rocm = [j for j in pull["jobs"] if j["platform"] == "rocm" and j["suite"] == suite]
        assert len({j["runner_id"] for j in rocm}) == 1, rocm
        ordered = sorted(rocm, key=lambda j: j["id"])
        assert [j["side"] for j in ordered] == ["base", "head"] * (len(ordered) // 2)


def test_a_pairs_later_jobs_wait_for_the_runner_that_took_its_first(service, branch):
    """Claims in a fixed order, no threads: a second runner of the platform takes everything it
    may, and none of it is the first runner's pair (the Fleet test above only sees a split when
    both of its threads happen to claim)."""
    base, head = branch()
    first = register(service.client, service.app, "rocm", name="rocm-first")
    second = register(service.client, service.app, "rocm", name="rocm-second")
    service.open_pr("opened", head, base)
    taken = claim(service.client, first)
    assert taken.status_code == 200, taken.get_data(as_text=True)
    job = taken.get_json()["job"]
    drained = []
    while (response := claim(service.client, second)).status_code == 200:
        drained.append(response.get_json()["job"])
    assert drained, "the second runner found no other pair to measure"
    assert not [j for j in drained if j["suite"] == job["suite"]], (job, drained)
    follow = claim(service.client, first)
    assert follow.status_code == 200 and follow.get_json()["job"]["suite"] == job["suite"]


def test_three_synchronize_events_keep_one_comment_edited_in_place(service, github, branch, upstream):
    base, head = branch()
    heads = [head, upstream.commit(), upstream.commit()]
    with Fleet(service.app, NoiseModel(seed=13)):
        service.open_pr("opened", heads[0], base)
        for sha in heads[1:]:
            service.open_pr("synchronize", sha, base)
        pull = service.settled()
        service.until(lambda: not _unsent(service.db), "every write sent")
    assert pull["head"] == heads[-1]
    created = github.calls("POST", "/issues/2/comments")
    assert len(created) == 1
    edits = github.calls("PATCH", "/issues/comments/")
    assert edits and all(r.path == edits[0].path for r in edits)
    assert heads[-1][:8] in edits[-1].json["body"]


def test_new_push_supersedes_the_older_head_cancelling_its_queued_jobs(service, branch, upstream):
    base, head = branch()
    service.open_pr("opened", head, base)
    newer = upstream.commit()
    service.open_pr("synchronize", newer, base)
    pull = service.pull()
    assert pull["head"] == newer and pull["state"] == "measuring"
    assert [c["state"] for c in pull["comparisons"]] == ["measuring", "superseded"]
    older = {j["id"] for j in service.client.get(f"/api/v1/pulls/{REPO_NAME}/2").get_json()["jobs"]}
    with service.db.session() as session:
        cancelled = session.scalar(select(func.count()).select_from(Job).where(Job.state == JobState.cancelled))
        queued = set(session.scalars(select(Job.id).where(Job.state == JobState.queued)))
    assert cancelled == 30  # three A/B rounds of five platform x suite pairs, queued for the older head
    assert queued == older  # only the newer head's jobs are left to run


def test_closing_the_pull_request_cancels_what_is_queued(service, branch):
    base, head = branch()
    service.open_pr("opened", head, base)
    service.open_pr("closed", head, base)
    pull = service.pull()
    assert pull["pull_state"] == "closed" and pull["state"] == "closed"
    with service.db.session() as session:
        assert session.scalar(select(func.count()).select_from(Job).where(Job.state == JobState.queued)) == 0


def _unsent(db) -> int:  # type: ignore[no-untyped-def]
    with db.session() as session:
        return session.scalar(select(func.count()).select_from(PullRequestWrite).where(PullRequestWrite.sent_at.is_(None)))
