"""`POST /api/v1/runs` through the real HTTP API (a loopback server): uploads land in the same
series as runner-made runs, feed detection and commit statuses, are idempotent, and are refused
whole when anything is wrong."""
from __future__ import annotations

import json
from datetime import timedelta

import requests
from sqlalchemy import select

from app.core.config import use_settings
from app.core.models import CiUpload, CommitStatusUpdate, DetectionState, Job, JobReason, JobState, Repository, Run
from app.jobs.queue import deliver_stored_runs
from tests.support.github import Upstream, count_rows, hold_mirror_fetches
from tests.support.runner_harness import wait_for
from tests.support.service_api import document, queue_jobs, register
from tests.support.settings import ADMIN_TOKEN
from tests.uploads.conftest import Outcome, bearer, ci_token, post_upload, upload_body


def post(server, token: str, body: dict, **headers: str) -> Outcome:  # type: ignore[no-untyped-def]
    """The upload's outcome: a commit the service has not seen is answered 202 and polled."""
    return post_upload(server, token, body, **headers)


def test_a_results_document_is_stored_as_a_run_of_its_series(live_server, db, token, upstream: Upstream):
    sha = upstream.head()
    reply = post(live_server, token, upload_body(sha, document(), environment={"driver": "570.1"},
                                                 ci={"provider": "github-actions",
                                                     "run_url": "https://github.com/demo/engine/actions/runs/7"}))
    assert (reply.first, reply.status_code) == (202, 201), reply.text   # an unseen commit: git in the duty
    body = reply.json()
    with db.session() as session:
        run = session.get(Run, body["run_id"])
        assert run is not None and run.platform == "cpu" and run.runner_id is None
        assert {m.metric: list(m.samples) for m in run.measurements}["output_throughput"] == [1210.4, 1198.7, 1215.0]
        assert run.environment["driver"] == "570.1" and run.environment["device"] == "test cpu"
        job = session.get(Job, run.job_id)
        assert (job.state, job.reason) == (JobState.succeeded, JobReason.upload)
        upload = session.scalar(select(CiUpload).where(CiUpload.run_id == run.id))
        assert (upload.provider, upload.run_url) == ("github-actions", "https://github.com/demo/engine/actions/runs/7")


def test_an_upload_feeds_detection_and_the_commit_status_like_a_runner_run(live_server, app, db, token, upstream):
    sha = upstream.head()
    assert post(live_server, token, upload_body(sha, document())).status_code == 201
    with use_settings(app.extensions["parallax.settings"]):
        assert deliver_stored_runs(db) == 1
    with db.session() as session:
        assert session.scalar(select(DetectionState.id).where(DetectionState.dirty.is_(True))) is not None
        statuses = list(session.scalars(select(CommitStatusUpdate).where(CommitStatusUpdate.sha == sha)))
        assert [(s.context, s.state) for s in statuses] == [("parallax/cpu/decode-throughput", "success")]
        assert statuses[0].description.startswith("output_throughput 1210 tok/s")


def test_uploads_and_runner_runs_of_a_cell_share_one_series(live_server, app, db, token, upstream):
    client = app.test_client()
    runner = register(client, app, platform="cpu")
    shas = upstream("rev-list", "--reverse", "HEAD").split()
    (job,) = queue_jobs(client, shas[0], platform="cpu", suite="decode-throughput")
    claimed = client.post("/api/v1/jobs/claim", json={}, headers=runner).get_json()["job"]
    assert claimed["id"] == job["id"]
    done = client.post(f"/api/v1/jobs/{job['id']}/complete", data=json.dumps(document()), headers=runner)
    assert done.status_code == 201
    assert post(live_server, token, upload_body(shas[1], document())).status_code == 201
    with db.session() as session:
        runs = list(session.scalars(select(Run).order_by(Run.id)))
        assert len(runs) == 2
        assert runs[0].context_fingerprint == runs[1].context_fingerprint
        assert {r.suite_id for r in runs} == {runs[0].suite_id} and {r.platform for r in runs} == {"cpu"}


def test_an_upload_completes_a_queued_job_of_its_cell(live_server, app, db, token, upstream):
    (job,) = queue_jobs(app.test_client(), upstream.head(), platform="rocm", suite="decode-throughput")
    reply = post(live_server, token, upload_body(upstream.head(), document(), platform="rocm",
                                                 environment={"platform": "rocm"}))
    assert (reply.first, reply.status_code) == (201, 201), reply.text  # a commit queued for: no git, stored at once
    assert reply.json()["job_id"] == job["id"]
    with db.session() as session:
        stored = session.get(Job, job["id"])
        assert stored.state == JobState.succeeded and stored.reason != JobReason.upload


def test_an_unseen_commit_on_the_default_branch_is_fetched_and_placed_in_its_history(live_server, db, token, upstream):
    newest = upstream.commit("pushed after the service last looked")
    assert post(live_server, token, upload_body(newest, document())).status_code == 201
    from app.core.models import Branch, BranchCommit, Commit
    with db.session() as session:
        commit = session.scalar(select(Commit).where(Commit.sha == newest))
        assert commit.graph_loaded and commit.summary == "pushed after the service last looked"
        row = session.scalar(select(BranchCommit).join(Branch, Branch.id == BranchCommit.branch_id)
                             .where(Branch.name == "main", BranchCommit.commit_id == commit.id))
        assert row is not None and row.active and row.position == 5  # the sixth commit of main
        # A commit placed in the history changes the series under the same runs: the series
        # API's cached answers of the repository are stale (app/web/series_cache.py).
        assert session.get(Repository, commit.repository_id).series_epoch == 1


def test_a_commit_off_the_default_branch_is_stored_without_a_place_in_its_history(live_server, db, token, upstream):
    upstream("checkout", "-q", "-b", "feature")
    side = upstream.commit("on a branch")
    upstream("checkout", "-q", "main")
    assert post(live_server, token, upload_body(side, document())).status_code == 201
    from app.core.models import BranchCommit, Commit
    with db.session() as session:
        commit = session.scalar(select(Commit).where(Commit.sha == side))
        assert session.scalar(select(BranchCommit).where(BranchCommit.commit_id == commit.id)) is None
        assert session.get(Repository, commit.repository_id).series_epoch == 0


def test_a_retried_upload_with_the_same_idempotency_key_stores_once(live_server, db, token, upstream):
    body = upload_body(upstream.head(), document())
    first = post(live_server, token, body, **{"Idempotency-Key": "gha-7-1"})
    again = post(live_server, token, body, **{"Idempotency-Key": "gha-7-1"})
    assert (first.status_code, again.status_code) == (201, 200)
    assert again.json()["run_id"] == first.json()["run_id"] and again.json()["created"] is False
    assert count_rows(db)["runs"] == 1 and count_rows(db)["stored_run_hooks"] == 1


def test_a_retry_of_the_same_ci_run_suite_and_platform_stores_once(live_server, db, token, upstream):
    body = upload_body(upstream.head(), document(), ci={"provider": "buildkite",
                                                        "run_url": "https://buildkite.com/org/p/builds/3#job-1"})
    assert [post(live_server, token, body).status_code for _ in range(3)] == [201, 200, 200]
    assert count_rows(db)["runs"] == 1


def test_an_idempotency_key_reused_for_other_results_is_a_conflict_and_stores_nothing(live_server, db, token, upstream):
    assert post(live_server, token, upload_body(upstream.head(), document()), **{"Idempotency-Key": "k"}).status_code == 201
    before = count_rows(db)
    other = document(metrics=[{"name": "output_throughput", "unit": "tok/s", "direction": "higher_is_better",
                               "samples": [900.0]}])
    reply = post(live_server, token, upload_body(upstream.head(), other), **{"Idempotency-Key": "k"})
    assert reply.status_code == 409 and reply.json()["error"] == "idempotency_conflict"
    assert count_rows(db) == before


def test_concurrent_retries_of_one_upload_store_it_once(live_server, db, token, upstream):
    from concurrent.futures import ThreadPoolExecutor
    body = upload_body(upstream.head(), document())
    with ThreadPoolExecutor(8) as pool:
        codes = sorted(pool.map(lambda _: post(live_server, token, body, **{"Idempotency-Key": "same"}).status_code,
                                range(8)))
    assert codes == [200] * 7 + [201]
    assert count_rows(db)["runs"] == 1 and count_rows(db)["ci_uploads"] == 1


# ---------------------------------------------------------------- tokens

def test_a_ci_token_for_another_repository_is_forbidden_and_stores_nothing(live_server, app, db, upstream):
    token = ci_token(app, "other/repo")
    before = count_rows(db)
    reply = post(live_server, token, upload_body(upstream.head(), document()))
    assert reply.status_code == 403 and "only for repository 'other/repo'" in reply.json()["detail"]
    assert count_rows(db) == before


def test_a_ci_token_for_another_platform_is_forbidden_and_stores_nothing(live_server, app, db, upstream):
    token = ci_token(app, platform="rocm")
    before = count_rows(db)
    reply = post(live_server, token, upload_body(upstream.head(), document(), platform="cpu"))
    assert reply.status_code == 403 and "only for platform 'rocm'" in reply.json()["detail"]
    assert count_rows(db) == before
    rocm = document(environment={"platform": "rocm", "device": "AMD Instinct MI300X"})
    assert post(live_server, token, upload_body(upstream.head(), rocm, platform="rocm")).status_code == 201


def test_an_expired_ci_token_is_unauthorized(live_server, app, db, upstream):
    token = ci_token(app, expires_in=timedelta(days=1))
    from app.core.clock import utcnow
    from app.core.models import CiToken
    with db.session() as session:
        session.scalar(select(CiToken)).expires_at = utcnow() - timedelta(seconds=1)
    reply = post(live_server, token, upload_body(upstream.head(), document()))
    assert reply.status_code == 401 and "expired" in reply.json()["detail"]
    assert count_rows(db)["runs"] == 0


def test_a_revoked_ci_token_is_unauthorized(live_server, app, db, token, upstream):
    from app.auth.ci_tokens import revoke_ci_token
    with db.session() as session:
        revoke_ci_token(session, token)
    reply = post(live_server, token, upload_body(upstream.head(), document()))
    assert reply.status_code == 401 and "revoked" in reply.json()["detail"]
    assert count_rows(db)["runs"] == 0


def test_a_ci_token_cannot_claim_jobs(live_server, token):
    reply = requests.post(f"{live_server.url}/api/v1/jobs/claim", json={}, headers=bearer(token), timeout=30)
    assert reply.status_code == 401


def test_a_runner_token_cannot_upload(live_server, app, upstream):
    runner = register(app.test_client(), app, platform="cpu")
    reply = requests.post(f"{live_server.url}/api/v1/runs", json=upload_body(upstream.head(), document()),
                          headers=runner, timeout=30)
    assert reply.status_code == 401 and "unknown CI token" in reply.json()["detail"]


def test_the_commit_page_shows_where_an_upload_came_from(live_server, token, upstream):
    run_url = "https://github.com/demo/engine/actions/runs/99/attempts/1"
    body = upload_body(upstream.head(), document(), ci={"provider": "github-actions", "run_url": run_url})
    assert post(live_server, token, body).status_code == 201
    page = requests.get(f"{live_server.url}/commits/{upstream.head()}", timeout=60)
    assert page.status_code == 200
    assert "uploaded by github-actions" in page.text and f'href="{run_url}"' in page.text


def test_a_ci_token_cannot_read_pages_that_need_a_token(app, db, token, upstream, settings):
    from dataclasses import replace

    from app.web import create_app
    reading = create_app(replace(settings, read_requires_token=True))
    try:
        reply = reading.test_client().get("/api/v1/alerts", headers=bearer(token))
        assert reply.status_code == 401
    finally:
        reading.extensions["parallax.db"].engine.dispose()


def test_an_unseen_commit_of_a_repository_that_cannot_be_fetched_is_a_503(live_server, db, token, upstream, tmp_path):
    with db.session() as session:
        session.scalar(select(Repository).where(Repository.name == "demo/engine")).url = str(tmp_path / "gone")
    reply = post(live_server, token, upload_body(upstream.head(), document()))
    assert reply.first == 202 and reply.status_code == 503 and reply.json()["error"] == "git_unavailable"
    assert count_rows(db)["runs"] == 0 and count_rows(db)["commits"] == 0


def test_an_upload_leaves_a_job_a_runner_is_running_to_that_runner(live_server, app, db, token, upstream):
    client = app.test_client()
    runner = register(client, app, platform="cpu")
    (job,) = queue_jobs(client, upstream.head(), platform="cpu", suite="decode-throughput")
    assert client.post("/api/v1/jobs/claim", json={}, headers=runner).get_json()["job"]["id"] == job["id"]
    reply = post(live_server, token, upload_body(upstream.head(), document()))
    assert reply.status_code == 201 and reply.json()["job_id"] != job["id"]
    with db.session() as session:
        assert session.get(Job, job["id"]).state == JobState.running
        assert session.get(Job, reply.json()["job_id"]).reason == JobReason.upload


def test_the_commit_api_says_which_runs_were_uploaded_and_from_where(live_server, app, token, upstream):
    run_url = "https://buildkite.com/vllm/ci/builds/5#job"
    body = upload_body(upstream.head(), document(), ci={"provider": "buildkite", "run_url": run_url})
    run_id = post(live_server, token, body).json()["run_id"]
    commit = requests.get(f"{live_server.url}/api/v1/commits/{upstream.head()}", timeout=60).json()
    (run,) = commit["runs"]
    assert run["id"] == run_id and run["upload"] == {"provider": "buildkite", "run_url": run_url, "adapter": None}


# ---------------------------------------------------------------- no git in the request (issue 30)

def test_an_unseen_commit_is_answered_202_with_a_poll_url_that_says_when_it_is_stored(live_server, app, db, token,
                                                                                        upstream):
    reply = requests.post(f"{live_server.url}/api/v1/runs", json=upload_body(upstream.head(), document()),
                          headers=bearer(token), timeout=60)
    assert reply.status_code == 202, reply.text
    queued = reply.json()
    assert reply.headers["Location"] == queued["poll_url"] == f"/api/v1/uploads/{queued['upload_id']}"
    assert (queued["state"], queued["sha"], queued["retry"]) == ("pending", upstream.head(), False)
    final = wait_for(lambda: (body := requests.get(f"{live_server.url}{queued['poll_url']}", headers=bearer(token),
                                                   timeout=60).json())["state"] != "pending" and body, 120,
                     "the queued upload to be stored")
    assert final["state"] == "stored" and final["created"] is True
    outcome = post_upload(live_server, token, upload_body(upstream.head(), document()))  # no key: a second upload
    assert outcome.first == 201, "the duty recorded the commit, so another upload of it is stored at once"
    assert final["run_id"] != outcome.json()["run_id"]
    with db.session() as session:
        assert session.get(Run, final["run_id"]).job_id == final["job_id"]
    # The poll answers the CI token of the repository and users; not other repositories' tokens.
    poll = f"{live_server.url}{queued['poll_url']}"
    assert requests.get(poll, headers=bearer(ADMIN_TOKEN), timeout=60).json()["run_id"] == final["run_id"]
    assert requests.get(poll, headers=bearer(ci_token(app, "other/repo")), timeout=60).status_code == 404
    assert requests.get(poll, timeout=60).status_code == 401
    assert requests.get(f"{live_server.url}/api/v1/uploads/999999", headers=bearer(token), timeout=60).status_code == 404


def test_a_sha_the_repository_does_not_have_fails_in_the_poll_and_stores_nothing(live_server, db, token, upstream):
    missing = "0123456789abcdef0123456789abcdef01234567"
    reply = post(live_server, token, upload_body(missing, document()), **{"Idempotency-Key": "gone"})
    assert (reply.first, reply.status_code) == (202, 422) and reply.json()["field"] == "sha", reply.json()
    assert "is not in repository 'demo/engine'" in reply.json()["detail"]
    rows = count_rows(db)
    assert rows["runs"] == rows["jobs"] == rows["commits"] == rows["ci_uploads"] == 0 and rows["queued_uploads"] == 1


def test_a_failed_upload_retried_with_its_key_is_queued_again(live_server, db, token, upstream, tmp_path):
    with db.session() as session:
        session.scalar(select(Repository).where(Repository.name == "demo/engine")).url = str(tmp_path / "gone")
    body = upload_body(upstream.head(), document())
    first = post(live_server, token, body, **{"Idempotency-Key": "flaky"})
    assert (first.first, first.status_code) == (202, 503)
    with db.session() as session:
        session.scalar(select(Repository).where(Repository.name == "demo/engine")).url = str(upstream.path)
    again = post(live_server, token, body, **{"Idempotency-Key": "flaky"})
    assert (again.first, again.status_code) == (202, 201) and again.json()["upload_id"] == first.json().get(
        "upload_id", again.json()["upload_id"])
    third = post(live_server, token, body, **{"Idempotency-Key": "flaky"})
    assert (third.first, third.status_code) == (200, 200) and third.json()["run_id"] == again.json()["run_id"]
    assert count_rows(db)["runs"] == 1 and count_rows(db)["queued_uploads"] == 1


def test_the_upload_route_answers_while_a_mirror_fetch_is_held(live_server, app, db, token, upstream, monkeypatch):
    """The duty's git fetch of an unseen commit can take minutes: uploads (queued or stored),
    the poll and the pages answer while it is held, and the upload is stored once released."""
    fetching, release = hold_mirror_fetches(monkeypatch)
    try:
        first = requests.post(f"{live_server.url}/api/v1/runs", json=upload_body(upstream.head(), document()),
                              headers=bearer(token), timeout=60)
        assert first.status_code == 202, first.text
        assert fetching.wait(120), "the uploads duty never started its fetch"
        # While git is held: another upload of another unseen commit is queued, a commit the
        # service knows is stored at once, and the poll, the series API and pages answer.
        older = upstream("rev-list", "--reverse", "HEAD").split()[0]
        second = requests.post(f"{live_server.url}/api/v1/runs", json=upload_body(older, document()),
                               headers=bearer(token), timeout=60)
        assert second.status_code == 202 and second.json()["state"] == "pending", second.text
        queue_jobs(app.test_client(), upstream.head(), platform="rocm", suite="decode-throughput")
        known = requests.post(f"{live_server.url}/api/v1/runs", headers=bearer(token), timeout=60,
                              json=upload_body(upstream.head(), document(environment={"platform": "rocm"}),
                                               platform="rocm"))
        assert known.status_code == 201, known.text
        for path in (first.json()["poll_url"], "/", f"/commits/{upstream.head()}",
                     "/api/v1/series?repository=demo/engine&suite=decode-throughput&metric=output_throughput"
                     "&platform=rocm"):
            got = requests.get(f"{live_server.url}{path}", headers=bearer(token), timeout=60)
            assert got.status_code == 200, (path, got.status_code, got.text[:300])
        assert requests.get(f"{live_server.url}{first.json()['poll_url']}", headers=bearer(token),
                            timeout=60).json()["state"] == "pending"
        assert not release.is_set()
    finally:
        release.set()
    for queued in (first.json(), second.json()):
        final = wait_for(lambda: (body := requests.get(f"{live_server.url}{queued['poll_url']}", headers=bearer(token),
                                                       timeout=60).json())["state"] != "pending" and body, 120,
                         "the held upload to be stored")
        assert final["state"] == "stored", final
    assert count_rows(db)["runs"] == 3
