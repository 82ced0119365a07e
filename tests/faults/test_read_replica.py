"""`PARALLAX_READ_DATABASE_URL`: dashboard pages and read APIs read from a streaming replica,
writes and the queue go to the primary, and a browser that just posted a form reads from the
primary. The test starts its own primary and a `pg_basebackup` replica of it (temporary
directories, other ports), never the machine's shared server."""
from __future__ import annotations

import shutil
import uuid
from typing import Any, Iterator

import pytest

from app.auth.tokens import create_user
from app.core.migrate import upgrade
from app.web import create_app
from app.web.session import FRESH_COOKIE
from bench.backends import StatementLog
from bench.pg_instance import PgInstance, available, scratch_root
from tests.dashboard.test_pages import sign_in
from tests.support.service_api import admin_headers
from tests.support.settings import make_settings

pytestmark = [pytest.mark.slow, pytest.mark.postgres]
SHA = "c" * 40


class Pair:
    def __init__(self, primary: PgInstance, replica: PgInstance, url: str) -> None:
        self.primary, self.replica, self.url = primary, replica, url
        self.replica_url = url.replace(f":{primary.port}/", f":{replica.port}/")


@pytest.fixture(scope="module")
def pair() -> Iterator[Pair]:
    reason = available()
    if reason:
        pytest.skip(f"cannot start a PostgreSQL of the test's own: {reason}")
    root = scratch_root()
    primary = PgInstance.create(root / "primary")
    primary.start()
    url = primary.create_database(f"replica_{uuid.uuid4().hex[:8]}")
    upgrade(url)
    replica = primary.replica(root / "replica")
    yield Pair(primary, replica, url)
    replica.destroy()
    primary.destroy()
    shutil.rmtree(root, ignore_errors=True)


@pytest.fixture
def app(pair: Pair) -> Iterator[Any]:
    flask_app = create_app(make_settings(pair.url, read_database_url=pair.replica_url))
    yield flask_app
    flask_app.extensions["parallax.db"].engine.dispose()
    flask_app.extensions["parallax.read_db"].engine.dispose()


class Logs:
    def __init__(self, flask_app: Any) -> None:
        self.primary = StatementLog(flask_app.extensions["parallax.db"].engine)
        self.replica = StatementLog(flask_app.extensions["parallax.read_db"].engine)

    def clear(self) -> None:
        self.primary.seen.clear()
        self.replica.seen.clear()


def queue_job(client: Any) -> int:
    response = client.post("/api/v1/jobs", json={"repository": "demo/engine", "commit": SHA, "suite": "decode-throughput",
                                                 "platform": "cpu"}, headers=admin_headers())
    assert response.status_code == 201, response.get_json()
    return int(response.get_json()["jobs"][0]["id"])


READS = ["/", "/alerts", "/runners", "/bisects", f"/commits/{SHA}", "/api/v1/alerts",
         "/api/v1/series?repository=demo/engine&suite=decode-throughput&metric=output_throughput&platform=cpu"]


def test_pages_and_read_apis_read_from_the_replica_and_writes_go_to_the_primary(app: Any, pair: Pair) -> None:
    client, logs = app.test_client(), Logs(app)
    logs.clear()
    job_id = queue_job(client)
    assert logs.primary.seen and not logs.replica.seen, "a write goes to the primary only"
    pair.replica.wait_replayed(pair.primary)
    for path in [*READS, f"/api/v1/jobs/{job_id}"]:
        logs.clear()
        response = client.get(path)
        assert response.status_code == 200, (path, response.status_code)
        assert logs.replica.seen and not logs.primary.seen, (path, logs.primary.seen[:3])
    assert client.get(f"/api/v1/jobs/{job_id}").get_json()["state"] == "queued", "the replica has the write"


def test_pages_keep_answering_from_the_replica_while_the_primary_is_down(app: Any, pair: Pair) -> None:
    client = app.test_client()
    # Its own commit and job: xdist may run this test in another worker than the one above, with
    # a pair of its own (a CI run got 404 for the commit page that way).
    queue_job(client)
    pair.replica.wait_replayed(pair.primary)
    pair.primary.stop("fast")
    try:
        for path in READS:
            assert client.get(path).status_code == 200, path
        refused = client.post("/api/v1/jobs", json={"repository": "demo/engine", "commit": SHA}, headers=admin_headers())
        assert refused.status_code == 503 and refused.headers["Retry-After"]
    finally:
        pair.primary.start()


def test_after_a_form_post_the_browser_reads_from_the_primary(app: Any, pair: Pair) -> None:
    db = app.extensions["parallax.db"]
    name = f"maintainer-{uuid.uuid4().hex[:6]}"
    with db.session() as session:
        token = create_user(session, name)
    pair.replica.wait_replayed(pair.primary)
    client, logs = app.test_client(), Logs(app)
    signed_in = sign_in(client, token, name)
    assert signed_in.status_code == 302 and FRESH_COOKIE in signed_in.headers.get("Set-Cookie", "")
    logs.clear()
    assert client.get("/").status_code == 200
    assert logs.primary.seen and not logs.replica.seen, "the page after a form post reads what was just written"
    client.set_cookie(FRESH_COOKIE, "0")  # the read-your-writes window is over
    logs.clear()
    assert client.get("/").status_code == 200
    assert logs.replica.seen and not logs.primary.seen
