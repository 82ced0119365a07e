"""The HTTP client: retries with backoff on connection errors and 5xx, never on 4xx; a time
budget bounds the retries; an abort stops them at once."""
from __future__ import annotations

import http.server
import json
import threading
import time
from typing import Callable, Iterator

import pytest

from runners.client import Aborted, Client, LeaseLost, RetryPolicy, ServiceError
from tests.support.runner_harness import free_port

FAST = RetryPolicy(base_delay_s=0.05, max_delay_s=0.2, budget_s=5.0)


class Scripted(http.server.ThreadingHTTPServer):
    """Answers each request with the next (status, body) of its script and records it."""

    def __init__(self, script: list[tuple[int, dict]]) -> None:
        self.script = list(script)
        self.seen: list[tuple[str, bytes]] = []
        super().__init__(("127.0.0.1", 0), Handler)


class Handler(http.server.BaseHTTPRequestHandler):
    def do_POST(self) -> None:  # noqa: N802
        server: Scripted = self.server  # type: ignore[assignment]
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        server.seen.append((self.path, body))
        status, payload = server.script.pop(0) if server.script else (500, {"detail": "script ran out"})
        data = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def scripted() -> Iterator[Callable[..., Scripted]]:
    servers: list[Scripted] = []

    def start(*script: tuple[int, dict]) -> Scripted:
        server = Scripted(list(script))
        threading.Thread(target=server.serve_forever, daemon=True).start()
        servers.append(server)
        return server

    yield start
    for server in servers:
        server.shutdown()
        server.server_close()


def url(server: Scripted) -> str:
    return f"http://127.0.0.1:{server.server_address[1]}"


def test_5xx_answers_are_retried_until_the_upload_lands(scripted):
    server = scripted((503, {"detail": "busy"}), (502, {}), (201, {"run_id": 1}))
    client = Client(url(server), "tok", retry=FAST)
    assert client.complete(7, 1, b'{"doc": 1}') == 201
    assert [path for path, _ in server.seen] == ["/api/v1/jobs/7/complete?attempt=1"] * 3
    assert {body for _, body in server.seen} == {b'{"doc": 1}'}  # the same bytes every time


def test_4xx_answers_are_not_retried(scripted):
    server = scripted((422, {"detail": "metrics[0].samples: must not be empty"}))
    client = Client(url(server), "tok", retry=FAST)
    with pytest.raises(ServiceError, match="HTTP 422: metrics\\[0\\].samples: must not be empty"):
        client.complete(7, 1, b"{}")
    assert len(server.seen) == 1


def test_409_means_the_lease_was_lost(scripted):
    server = scripted((409, {"detail": "runner 1 no longer holds the lease on job 7"}))
    with pytest.raises(LeaseLost):
        Client(url(server), "tok", retry=FAST).heartbeat(7, 1, budget_s=1.0)


def test_connection_errors_are_retried_until_the_budget_runs_out():
    client = Client(f"http://127.0.0.1:{free_port()}", "tok", retry=FAST)
    started = time.monotonic()
    with pytest.raises(ServiceError, match="gave up after .* tries .*ConnectionError"):
        client.fail(7, 1, "boom", False, budget_s=1.0)
    assert 0.5 < time.monotonic() - started < 30  # the 1 s budget, generous for a loaded machine


def test_an_abort_stops_the_retries_at_once():
    client = Client(f"http://127.0.0.1:{free_port()}", "tok", retry=RetryPolicy(base_delay_s=600, max_delay_s=600))
    threading.Timer(0.3, client.abort.set).start()
    started = time.monotonic()
    with pytest.raises(Aborted):
        client.complete(7, 1, b"{}", budget_s=1200)
    assert time.monotonic() - started < 60  # against a 600 s back-off


def test_backoff_grows_exponentially_and_is_capped():
    policy = RetryPolicy(base_delay_s=0.5, max_delay_s=8.0)
    for attempt, cap in [(0, 0.5), (1, 1.0), (3, 4.0), (10, 8.0)]:
        delays = [policy.delay(attempt) for _ in range(200)]
        assert all(0 <= d <= cap for d in delays)
        assert max(delays) > cap * 0.7  # full jitter spreads over the whole range


def test_a_long_error_is_shortened_at_a_word_and_keeps_its_cause():
    from runners.client import _tail
    message = ("HTTPConnectionPool(host='127.0.0.1', port=8765): Max retries exceeded with url: /api/v1/jobs/claim "
               "(Caused by NewConnectionError('<urllib3.connection.HTTPConnection object at 0x7f>: "
               "Failed to establish a new connection: [Errno 111] Connection refused'))")
    short = _tail(message)
    assert short.startswith("…") and short.endswith("Connection refused'))") and len(short) <= 161
    assert message.split().count(short[1:].split()[0]) >= 1   # begins with a whole word of the message
    assert _tail("short and whole") == "short and whole"
