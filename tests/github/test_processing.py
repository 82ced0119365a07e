"""Background processing of stored deliveries: the graph comes from a real git repository (the
temp `upstream` stands in for GitHub), and the matrix is queued at the right commits."""
from __future__ import annotations

import threading
import time
from contextlib import contextmanager
from datetime import datetime, timedelta, timezone

import pytest
from sqlalchemy import func, select
from sqlalchemy.exc import DisconnectionError

from app.core.clock import as_utc, utcnow
from app.core.duties import start as start_duties
from app.core.models import Branch, BranchCommit, Commit, Job, JobReason, PullRequest, Suite, WebhookDelivery
from app.github import ingest
from app.github.ingest import process_pending
from app.pulls.comparisons import START_ROUNDS
from tests.support.github import post_webhook, pr_payload, push_payload

MATRIX = 5  # decode-throughput on cuda/rocm/cpu + gsm8k on cuda/rocm (tests/conftest.py SUITES)


def jobs_by_sha(db) -> dict[str, list[tuple[str, str, str]]]:  # type: ignore[no-untyped-def]
    with db.session() as session:
        rows = session.execute(select(Commit.sha, Suite.name, Job.platform, Job.reason)
                               .join(Commit, Commit.id == Job.commit_id).join(Suite, Suite.id == Job.suite_id))
        out: dict[str, list[tuple[str, str, str]]] = {}
        for sha, suite, platform, reason in rows:
            out.setdefault(sha, []).append((suite, platform, reason.value))
        return out


def history(db, branch: str = "master") -> list[str]:  # type: ignore[no-untyped-def]
    """The branch's series order: active rows by position (the detection contract)."""
    with db.session() as session:
        return list(session.scalars(
            select(Commit.sha).join(BranchCommit, BranchCommit.commit_id == Commit.id)
            .join(Branch, Branch.id == BranchCommit.branch_id)
            .where(Branch.name == branch, BranchCommit.active.is_(True)).order_by(BranchCommit.position)))


def push(client, app, db, before: str, after: str, commits: list[str], **kw):  # type: ignore[no-untyped-def]
    response = post_webhook(client, "push", push_payload(before, after, commits, **kw))
    assert response.status_code == 202, response.get_json()
    report = process_pending(db, app.extensions["parallax.settings"])
    assert not report.failed, report.results
    return report


def test_push_with_commits_queues_each_platform_and_suite_at_the_pushed_shas(client, app, db, tracked, upstream):
    base = upstream.commit()
    pushed = upstream.commits(3)
    push(client, app, db, base, pushed[-1], pushed)
    jobs = jobs_by_sha(db)
    assert set(jobs) == {base, *pushed}
    expected = {("decode-throughput", p, "push") for p in ("cuda", "rocm", "cpu")} | \
               {("gsm8k", p, "push") for p in ("cuda", "rocm")}
    for sha in pushed:
        assert set(jobs[sha]) == expected


def test_the_first_push_also_measures_its_before_commit_as_the_baseline(client, app, db, tracked, upstream):
    base = upstream.commit()
    head = upstream.commit()
    push(client, app, db, base, head, [head])
    assert len(jobs_by_sha(db)[base]) == MATRIX
    newer = upstream.commit()
    push(client, app, db, head, newer, [newer])  # later pushes measure only what they add
    assert set(jobs_by_sha(db)) == {base, head, newer} and len(jobs_by_sha(db)[head]) == MATRIX


def test_delivery_is_marked_done_with_a_summary(client, app, db, tracked, upstream):
    base = upstream.commit()
    head = upstream.commit()
    push(client, app, db, base, head, [head])
    with db.session() as session:
        delivery = session.scalar(select(WebhookDelivery))
        assert delivery.state == "done"
        assert delivery.result == (f"push master {base[:12]}..{head[:12]}: 2 commit(s) added, 0 dropped from history; "
                                   f"{2 * MATRIX} job(s) queued, 0 already queued or done")  # base is the baseline


def test_first_push_of_a_new_branch_measures_its_head_only(client, app, db, tracked, upstream):
    shas = upstream.commits(4)
    push(client, app, db, "0" * 40, shas[-1], shas)
    assert set(jobs_by_sha(db)) == {shas[-1]}
    assert history(db) == [shas[-1]]


def test_same_commit_arriving_twice_is_deduplicated(client, app, db, tracked, upstream):
    base = upstream.commit()
    head = upstream.commit()
    push(client, app, db, base, head, [head])
    push(client, app, db, base, head, [head])  # a second delivery id with the same push
    with db.session() as session:
        assert session.scalar(select(func.count()).select_from(Job)) == 2 * MATRIX  # head and its baseline


def test_push_of_fifty_then_force_push_dropping_three(client, app, db, tracked, upstream):
    root = upstream.commit()
    push(client, app, db, "0" * 40, root, [root])
    fifty = upstream.commits(50)
    push(client, app, db, root, fifty[-1], fifty)
    assert history(db) == [root, *fifty]
    upstream("reset", "-q", "--hard", fifty[-4])
    replacement = upstream.commits(2)
    push(client, app, db, fifty[-1], replacement[-1], replacement, forced=True)

    assert history(db) == [root, *fifty[:-3], *replacement]
    with db.session() as session:
        dropped = session.execute(select(Commit.sha, BranchCommit.active, BranchCommit.position)
                                  .join(BranchCommit, BranchCommit.commit_id == Commit.id)
                                  .where(Commit.sha.in_(fifty[-3:]))).all()
        assert sorted((sha, active) for sha, active, _ in dropped) == sorted((sha, False) for sha in fifty[-3:])
        # The dropped commits keep their stored graph; a replacement takes over the position.
        positions = dict(session.execute(select(Commit.sha, BranchCommit.position)
                                         .join(BranchCommit, BranchCommit.commit_id == Commit.id)).all())
        assert positions[replacement[0]] == positions[fifty[-3]] == 48
        branch = session.scalar(select(Branch))
        assert session.get(Commit, branch.head_commit_id).sha == replacement[-1]


def test_dag_has_each_commit_with_its_parents(client, app, db, tracked, upstream):
    from app.core.models import CommitParent
    root = upstream.commit()
    push(client, app, db, "0" * 40, root, [root])
    shas = upstream.commits(5)
    push(client, app, db, root, shas[-1], shas)
    with db.session() as session:
        ids = dict(session.execute(select(Commit.sha, Commit.id)).all())
        edges = set(session.execute(select(CommitParent.commit_id, CommitParent.position, CommitParent.parent_id)))
        chain = [root, *shas]
        for child, parent in zip(chain[1:], chain):
            assert (ids[child], 0, ids[parent]) in edges
        assert all(c.graph_loaded for c in session.scalars(select(Commit).where(Commit.sha.in_(shas))))


def test_merge_commit_keeps_both_parents_and_first_parent_history(client, app, db, tracked, upstream):
    from app.core.models import CommitParent
    root = upstream.commit()
    push(client, app, db, "0" * 40, root, [root])
    upstream("checkout", "-q", "-b", "topic")
    (upstream.path / "topic.txt").write_text("topic\n")
    upstream("add", "topic.txt")
    upstream("commit", "-q", "-m", "topic work")
    topic = upstream.head()
    upstream("checkout", "-q", "master")
    main_work = upstream.commit()
    upstream("merge", "-q", "--no-ff", "-m", "merge topic", "topic")
    merge = upstream.head()
    push(client, app, db, root, merge, [topic, main_work, merge])

    assert history(db) == [root, main_work, merge]  # the topic commit is in the DAG, not the series
    jobs = jobs_by_sha(db)
    assert set(jobs) == {root, main_work, merge}  # root: measured by the first push
    with db.session() as session:
        ids = dict(session.execute(select(Commit.sha, Commit.id)).all())
        parents = list(session.execute(select(CommitParent.position, CommitParent.parent_id)
                                       .where(CommitParent.commit_id == ids[merge]).order_by(CommitParent.position)))
        assert parents == [(0, ids[main_work]), (1, ids[topic])]


def test_head_policy_measures_only_the_head_but_keeps_the_range(client, app, db, tracked, upstream):
    with db.session() as session:
        for suite in session.scalars(select(Suite)):
            suite.commit_policy = "head"
    root = upstream.commit()
    push(client, app, db, "0" * 40, root, [root])
    shas = upstream.commits(4)
    push(client, app, db, root, shas[-1], shas)
    assert set(jobs_by_sha(db)) == {root, shas[-1]}
    assert history(db) == [root, *shas]


def test_default_branch_outranks_pull_requests_and_newer_commits_come_first(client, app, db, tracked, upstream):
    root = upstream.commit()
    push(client, app, db, "0" * 40, root, [root])
    shas = upstream.commits(3)
    push(client, app, db, root, shas[-1], shas)
    upstream("checkout", "-q", "-b", "feature")
    feature = upstream.commit()
    post_webhook(client, "pull_request", pr_payload("opened", feature, shas[-1]))
    process_pending(db, app.extensions["parallax.settings"])
    with db.session() as session:
        # The merge-base also gets the pull request's A/B jobs: compare each commit's most urgent job.
        priority = {sha: p for sha, p in session.execute(
            select(Commit.sha, func.max(Job.priority)).join(Commit, Commit.id == Job.commit_id).group_by(Commit.sha))}
    assert priority[shas[2]] > priority[shas[1]] > priority[shas[0]] > priority[feature]


def test_pull_request_opened_queues_the_head_linked_to_the_merge_base(client, app, db, tracked, upstream):
    root = upstream.commit()
    base = upstream.commit()
    upstream("checkout", "-q", "-b", "changes")
    head = upstream.commits(2)[-1]
    upstream("checkout", "-q", "master")
    moved_on = upstream.commit()  # the base branch moved after the pull request branched off
    response = post_webhook(client, "pull_request", pr_payload("opened", head, moved_on))
    assert response.status_code == 202
    report = process_pending(db, app.extensions["parallax.settings"])
    assert not report.failed, report.results
    with db.session() as session:
        pull = session.scalar(select(PullRequest))
        assert pull.number == 2 and pull.base_branch == "master"
        assert session.get(Commit, pull.head_commit_id).sha == head
        assert session.get(Commit, pull.merge_base_commit_id).sha == base
        head_jobs = list(session.scalars(select(Job).join(Commit, Commit.id == Job.commit_id)
                                         .where(Commit.sha == head)))
        assert len(head_jobs) == MATRIX * START_ROUNDS  # A/B rounds against the merge-base
        assert all(j.reason == JobReason.pull_request and j.pull_request_id == pull.id for j in head_jobs)
        queued = session.scalar(select(func.count()).select_from(Job))
        assert session.scalar(select(WebhookDelivery.result)) == (
            f"pull request #2 (opened) head {head[:12]}, merge-base {base[:12]}: {queued} job(s) queued")
    assert root not in jobs_by_sha(db)


def test_pull_request_synchronize_moves_the_head(client, app, db, tracked, upstream):
    upstream.commit()
    base = upstream.commit()
    upstream("checkout", "-q", "-b", "changes")
    first = upstream.commit()
    post_webhook(client, "pull_request", pr_payload("opened", first, base))
    process_pending(db, app.extensions["parallax.settings"])
    second = upstream.commit()
    response = post_webhook(client, "pull_request", pr_payload("synchronize", second, base))
    assert response.status_code == 202
    report = process_pending(db, app.extensions["parallax.settings"])
    assert not report.failed, report.results
    with db.session() as session:
        pull = session.scalar(select(PullRequest))
        assert session.get(Commit, pull.head_commit_id).sha == second
        assert session.get(Commit, pull.merge_base_commit_id).sha == base
    jobs = jobs_by_sha(db)
    assert len(jobs[first]) == MATRIX * START_ROUNDS and len(jobs[second]) == MATRIX * START_ROUNDS


def skip_backoff(db) -> None:  # type: ignore[no-untyped-def]
    with db.session() as session:
        session.query(WebhookDelivery).update({"claimed_until": datetime(2000, 1, 1, tzinfo=timezone.utc)})


def test_commit_missing_from_the_repository_gets_quick_retries_then_fails_for_good(client, app, db, tracked, upstream):
    base = upstream.commit()
    ghost = "f" * 40
    post_webhook(client, "push", push_payload(base, ghost, [ghost]))
    settings = app.extensions["parallax.settings"]
    for _ in range(len(ingest.MISSING_RETRY_DELAYS_S) + 1):
        with db.session() as session:
            assert session.scalar(select(WebhookDelivery.state)) == "pending"
        assert process_pending(db, settings).failed
        skip_backoff(db)
    with db.session() as session:
        delivery = session.scalar(select(WebhookDelivery))
        assert delivery.state == "error" and ghost in delivery.result and "after a fresh fetch" in delivery.result
        assert "parallax deliveries retry" in delivery.result
        assert session.scalar(select(func.count()).select_from(Job)) == 0
    assert process_pending(db, settings).failed == []


def test_a_missing_commit_does_not_hold_back_a_later_good_push(client, app, db, tracked, upstream):
    base = upstream.commit()
    post_webhook(client, "push", push_payload(base, "e" * 40, ["e" * 40]))
    head = upstream.commit()
    post_webhook(client, "push", push_payload(base, head, [head]))
    report = process_pending(db, app.extensions["parallax.settings"])
    assert len(report.failed) == 1 and len(report.processed) == 1
    assert set(jobs_by_sha(db)) == {base, head}
    newer = upstream.commit()
    post_webhook(client, "push", push_payload(head, newer, [newer]))
    report = process_pending(db, app.extensions["parallax.settings"])  # the bad one still waits for its retry
    assert report.failed == [] and len(report.processed) == 1
    with db.session() as session:
        bad = session.scalar(select(WebhookDelivery).order_by(WebhookDelivery.id).limit(1))
        assert bad.state == "pending" and bad.failure_kind == ingest.MISSING_COMMIT
    assert set(jobs_by_sha(db)) == {base, head, newer}


def test_a_failing_fetch_holds_back_later_deliveries_of_its_repository(client, app, db, tracked, upstream, tmp_path):
    from app.core.models import Repository
    base = upstream.commit()
    head = upstream.commit()
    with db.session() as session:
        session.get(Repository, tracked).url = str(tmp_path / "gone")  # the remote is unreachable
    post_webhook(client, "push", push_payload(base, head, [head]))
    post_webhook(client, "push", push_payload(head, head, [head]))
    settings = app.extensions["parallax.settings"]
    report = process_pending(db, settings)
    assert len(report.failed) == 1 and report.processed == []
    assert process_pending(db, settings).failed == []  # the first waits for its retry; the second waits behind it
    with db.session() as session:
        assert [d.attempts for d in session.scalars(select(WebhookDelivery).order_by(WebhookDelivery.id))] == [1, 0]


def test_a_failure_the_database_was_down_to_record_waits_its_retry_delay_not_its_claim(
        client, app, db, tracked, upstream, monkeypatch):  # type: ignore[no-untyped-def]
    """PostgreSQL restarts mid-processing: neither the delivery's work nor its failure can be
    stored. The next pass records the failure, so the delivery (and every later one of its
    repository) waits the first retry delay, not the rest of its 10-minute claim."""
    base = upstream.commit()
    post_webhook(client, "push", push_payload(base, base, [base]))
    settings = app.extensions["parallax.settings"]

    def unavailable(*args, **kwargs):  # type: ignore[no-untyped-def]
        raise DisconnectionError("the database system is shutting down")
    with monkeypatch.context() as outage:
        outage.setattr(ingest, "handle", unavailable)
        outage.setattr(ingest, "_record_failure", unavailable)
        with pytest.raises(DisconnectionError):
            process_pending(db, settings)
    back = utcnow()
    report = process_pending(db, settings)
    assert report.processed == [] and report.failed == []  # it waits for its retry
    with db.session() as session:
        delivery = session.scalar(select(WebhookDelivery))
        assert delivery.state == "pending" and delivery.attempts == 1 and "DisconnectionError" in delivery.result
        assert as_utc(delivery.claimed_until) <= back + timedelta(seconds=ingest.RETRY_DELAYS_S[0] + 5)
    skip_backoff(db)
    assert len(process_pending(db, settings).processed) == 1


@contextmanager
def _unavailable_session():  # type: ignore[no-untyped-def]
    raise DisconnectionError("the database system is shutting down")
    yield  # a generator: contextmanager needs one


def a_pass_the_database_left_after_the_claim(client, db, settings, upstream, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """A push is stored, and the next pass claims it; then PostgreSQL goes away before the pass
    could read the delivery."""
    base = upstream.commit()
    post_webhook(client, "push", push_payload(base, base, [base]))
    claim = ingest._claim
    with monkeypatch.context() as outage:
        def claim_then_outage(db_, row_id):  # type: ignore[no-untyped-def]
            taken = claim(db_, row_id)
            outage.setattr(db, "session", _unavailable_session)
            return taken
        outage.setattr(ingest, "_claim", claim_then_outage)
        with pytest.raises(DisconnectionError):
            process_pending(db, settings)


def test_a_delivery_whose_first_read_met_the_outage_is_processed_on_the_next_pass_not_after_its_claim(
        client, app, db, tracked, upstream, monkeypatch):  # type: ignore[no-untyped-def]
    """PostgreSQL goes away right after a worker claimed a delivery, before it could read it: no
    work ran and no failure could be recorded. The next pass releases that claim, and the
    delivery is processed then (with one attempt, the one that ran), not 10 minutes later."""
    settings = app.extensions["parallax.settings"]
    a_pass_the_database_left_after_the_claim(client, db, settings, upstream, monkeypatch)
    with db.session() as session:
        assert session.scalar(select(WebhookDelivery.claimed_until)) is not None  # claimed for CLAIM_S
    report = process_pending(db, settings)
    assert len(report.processed) == 1, report.results
    with db.session() as session:
        delivery = session.scalar(select(WebhookDelivery))
        assert delivery.state == "done" and delivery.attempts == 1 and delivery.claimed_until is None


def test_a_claim_whose_reply_was_lost_is_released_on_the_next_pass(
        client, app, db, tracked, upstream, monkeypatch):  # type: ignore[no-untyped-def]
    """The claim's UPDATE commits, then the connection drops before the reply: the worker cannot
    know it holds the claim. The next pass releases it and processes the delivery."""
    base = upstream.commit()
    post_webhook(client, "push", push_payload(base, base, [base]))
    settings = app.extensions["parallax.settings"]
    session_of = db.session

    @contextmanager
    def committed_then_lost():  # type: ignore[no-untyped-def]
        with session_of() as session:
            yield session
        raise DisconnectionError("server closed the connection unexpectedly")

    with monkeypatch.context() as outage:
        outage.setattr(ingest, "_process_one", lambda *args: pytest.fail("processed a delivery it had no claim on"))
        claim = ingest._claim
        def lost_claim(db_, row_id):  # type: ignore[no-untyped-def]
            outage.setattr(db, "session", committed_then_lost)
            return claim(db_, row_id)
        outage.setattr(ingest, "_claim", lost_claim)
        with pytest.raises(DisconnectionError):
            process_pending(db, settings)
    with db.session() as session:
        assert session.scalar(select(WebhookDelivery.attempts)) == 1  # the claim did land
    report = process_pending(db, settings)
    assert len(report.processed) == 1, report.results
    with db.session() as session:
        assert session.scalar(select(WebhookDelivery.attempts)) == 1


def test_a_claim_in_doubt_is_not_released_once_another_worker_holds_the_delivery(
        client, app, db, tracked, upstream, monkeypatch):  # type: ignore[no-untyped-def]
    """The release names the very claim it left in doubt: a claim taken since (the first expired
    and another worker took the delivery) is that worker's, and stays."""
    settings = app.extensions["parallax.settings"]
    a_pass_the_database_left_after_the_claim(client, db, settings, upstream, monkeypatch)
    theirs = utcnow() + timedelta(seconds=300)
    with db.session() as session:
        delivery = session.scalar(select(WebhookDelivery))
        delivery.claimed_until, delivery.attempts = theirs, 2
    assert process_pending(db, settings).processed == []
    with db.session() as session:
        delivery = session.scalar(select(WebhookDelivery))
        assert as_utc(delivery.claimed_until) == theirs and delivery.attempts == 2


def test_concurrent_workers_process_each_delivery_once(client, app, db, tracked, upstream):
    base = upstream.commit()
    post_webhook(client, "push", push_payload(base, base, [base]))
    settings = app.extensions["parallax.settings"]
    reports = []

    def work() -> None:
        reports.append(process_pending(db, settings))

    threads = [threading.Thread(target=work) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sum(len(r.processed) for r in reports) == 1
    with db.session() as session:
        assert session.scalar(select(WebhookDelivery.attempts)) == 1


def test_delivery_for_a_repository_untracked_meanwhile_is_ignored(client, app, db, tracked, upstream):
    from app.core.models import Repository
    base = upstream.commit()
    head = upstream.commit()
    post_webhook(client, "push", push_payload(base, head, [head]))
    with db.session() as session:
        session.get(Repository, tracked).default_branch = "main"  # master is no longer tracked
    process_pending(db, app.extensions["parallax.settings"])
    with db.session() as session:
        delivery = session.scalar(select(WebhookDelivery))
        assert delivery.state == "ignored" and "not tracked" in delivery.result
    assert jobs_by_sha(db) == {}


def test_force_push_back_to_an_older_commit_drops_the_rest_and_queues_nothing(client, app, db, tracked, upstream):
    root = upstream.commit()
    push(client, app, db, "0" * 40, root, [root])
    shas = upstream.commits(4)
    push(client, app, db, root, shas[-1], shas)
    upstream("reset", "-q", "--hard", shas[1])
    with db.session() as session:
        jobs_before = session.scalar(select(func.count()).select_from(Job))
    push(client, app, db, shas[-1], shas[1], [], forced=True)
    assert history(db) == [root, shas[0], shas[1]]
    with db.session() as session:
        assert session.scalar(select(func.count()).select_from(Job)) == jobs_before


def test_pull_request_from_a_fork_is_fetched_from_its_pull_ref(client, app, db, tracked, upstream):
    base = upstream.commit()
    upstream("checkout", "-q", "-b", "fork-work")
    head = upstream.commit()
    upstream("checkout", "-q", "master")
    # GitHub keeps a fork's head only under refs/pull/<n>/head of the base repository.
    upstream("update-ref", "refs/pull/7/head", head)
    upstream("branch", "-q", "-D", "fork-work")
    post_webhook(client, "pull_request", pr_payload("opened", head, base, number=7))
    report = process_pending(db, app.extensions["parallax.settings"])
    assert not report.failed, report.results
    assert len(jobs_by_sha(db)[head]) == MATRIX * START_ROUNDS


def test_form_encoded_push_is_processed_like_json(client, app, db, tracked, upstream):
    import json
    from urllib.parse import urlencode

    from tests.support.github import webhook_headers
    base = upstream.commit()
    head = upstream.commit()
    body = urlencode({"payload": json.dumps(push_payload(base, head, [head]))}).encode()
    headers = webhook_headers("push", body)
    headers["Content-Type"] = "application/x-www-form-urlencoded"
    assert client.post("/webhooks/github", data=body, headers=headers).status_code == 202
    assert not process_pending(db, app.extensions["parallax.settings"]).failed
    assert len(jobs_by_sha(db)[head]) == MATRIX


def test_a_stored_push_is_processed_without_waiting_for_the_duty_interval(client, app, db, tracked, upstream):
    base = upstream.commit()
    head = upstream.commit()
    stop = threading.Event()
    # A tick far beyond the wait below: only the duty's `due` check can start the pass.
    start_duties(db, ingest.DUTIES, app.extensions["parallax.settings"], stop, tick_s=600, poll_s=0.05)
    try:
        assert post_webhook(client, "push", push_payload(base, head, [head])).status_code == 202
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and head not in jobs_by_sha(db):
            time.sleep(0.05)
    finally:
        stop.set()
    assert len(jobs_by_sha(db)[head]) == MATRIX
