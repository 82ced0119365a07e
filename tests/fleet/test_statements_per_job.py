"""A job's claim and complete cost a fixed, small number of SQL statements, however many jobs,
runners and results there are: under a saturated worker each statement is a round trip that
waits behind every other runnable request (docs/scaling.md, "Cost per request"). The claim
answers with the job's commit, repository and suite loaded with the job, not one by one."""
import pytest

from bench.backends import StatementLog
from tests.support.service_api import document, queue_jobs, register

CLAIM_STATEMENTS = 5        # token check, the queue, the job update, the attempt row, commit + repository
# Token check, the job (with its suite), run, item results, measurements, job, attempt, hook. SQLite's
# driver gets one INSERT per measurement row where PostgreSQL's gets them in one.
COMPLETE_STATEMENTS = 8


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def database_url(request, sqlite_url):
    return sqlite_url if request.param == "sqlite" else request.getfixturevalue("postgres_url")


def statements_during(log: StatementLog, call):  # type: ignore[no-untyped-def]
    """What `call` returns and the statements it sent, SQLite's transaction control left out."""
    result, sent = log.during(call)
    return result, [s for s in sent if not s.startswith(("BEGIN", "SAVEPOINT"))]


def test_a_claim_and_its_complete_stay_within_their_statement_budgets(client, app, db):
    headers = register(client, app, platform="cpu")
    for sha in ("a" * 40, "b" * 40, "c" * 40):
        queue_jobs(client, sha=sha, suite="decode-throughput", platform="cpu")
    client.post("/api/v1/jobs/claim", json={"wait_s": 0}, headers=headers)   # "last seen" written once
    log = StatementLog(db.engine)
    claimed, sent = statements_during(log, lambda: client.post("/api/v1/jobs/claim", json={"wait_s": 0}, headers=headers))
    job = claimed.get_json()["job"]
    assert job["commit"] == "b" * 40 and job["repository_url"] and job["command"], job
    assert len(sent) <= CLAIM_STATEMENTS, sent
    completed, sent = statements_during(log, lambda: client.post(
        f"/api/v1/jobs/{job['id']}/complete", json=document(), headers=headers, query_string={"attempt": job["attempt"]}))
    assert completed.status_code == 201, completed.get_json()
    per_metric = len(document()["metrics"]) - 1 if db.engine.dialect.name == "sqlite" else 0
    assert len(sent) <= COMPLETE_STATEMENTS + per_metric, sent
