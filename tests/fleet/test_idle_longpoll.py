"""An idle fleet's cost: a long-poll that nothing wakes looks at the queue once, when it arrives,
while this process receives NOTIFY (PostgreSQL). It does not look again at its deadline: the
runner's next claim looks first thing, and 500 runners renewing 20 s waits would pay two more
statements each, 25 times a second."""
import pytest

from app.jobs import wakeups
from bench.backends import StatementLog
from tests.fleet.test_statements_per_job import statements_during
from tests.support.runner_harness import wait_for
from tests.support.service_api import register

# The runner's token, the queue, the lease reaper's look for expired leases.
EMPTY_LONGPOLL_STATEMENTS = 3


@pytest.fixture
def database_url(postgres_url):
    return postgres_url


@pytest.mark.postgres
def test_a_long_poll_that_nothing_wakes_looks_at_the_queue_once(client, app, db):
    headers = register(client, app, platform="rocm")
    assert client.post("/api/v1/jobs/claim", json={"wait_s": 0.2}, headers=headers).status_code == 204
    found = wakeups.for_engine(db.engine, app.extensions["parallax.settings"].claim_concurrency)
    wait_for(found.listening, 60, "the LISTEN connection")
    log = StatementLog(db.engine)
    answered, sent = statements_during(log, lambda: client.post("/api/v1/jobs/claim", json={"wait_s": 0.5}, headers=headers))
    assert answered.status_code == 204
    assert len(sent) <= EMPTY_LONGPOLL_STATEMENTS, sent
