"""More claim long-polls than request threads: the health check and a signed webhook still
answer while every long-poll is waiting, because a waiting long-poll holds no request thread
(gevent worker) and webhooks have capacity of their own. With the threads held they would answer
only once the long-polls' waits were over; the test asserts the order, not a duration, so a loaded
machine cannot fail it (it did, on a 1-second read timeout, beside five other test workers)."""
from __future__ import annotations

import json
import threading
import time

import pytest
import requests

from app.demo.service_process import ServiceProcess
from tests.support.github import SECRET, webhook_headers
from tests.support.service_api import registration_token_at

THREADS = 4
LONG_POLLS = 12 * THREADS
WAIT_S = 30
# Well under WAIT_S: an answer that needed a long-poll's thread would come only after its wait.
ANSWER_S = 10
PUSH = {"ref": "refs/heads/main", "before": "1" * 40, "after": "2" * 40, "commits": [],
        "repository": {"full_name": "fleet/not-tracked", "clone_url": "https://github.com/fleet/not-tracked.git"}}


def start_long_polls(base: str, registration: str, count: int) -> tuple[list[threading.Thread], list[int]]:
    tokens = []
    for i in range(count):
        response = requests.post(f"{base}/api/v1/runners", json={"name": f"r{i}", "labels": {"platform": "cpu"}},
                                 headers={"Authorization": f"Bearer {registration}"}, timeout=10)
        response.raise_for_status()
        tokens.append(response.json()["token"])
    statuses: list[int] = []

    def poll(token: str) -> None:
        response = requests.post(f"{base}/api/v1/jobs/claim", json={"wait_s": WAIT_S},
                                 headers={"Authorization": f"Bearer {token}"}, timeout=WAIT_S + 30)
        statuses.append(response.status_code)

    threads = [threading.Thread(target=poll, args=(token,), daemon=True) for token in tokens]
    for thread in threads:
        thread.start()
    return threads, statuses


def long_polls_waiting(base: str) -> float:
    text = requests.get(f"{base}/metrics", timeout=5).text
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
               if line.startswith("parallax_longpolls_waiting{"))


@pytest.mark.slow
def test_health_and_webhooks_answer_while_long_polls_outnumber_threads(database_url: str) -> None:
    registration = registration_token_at(database_url)
    env = {"PARALLAX_DATABASE_URL": database_url, "PARALLAX_GITHUB_WEBHOOK_SECRET": SECRET,
           "PARALLAX_LOG_LEVEL": "WARNING"}
    with ServiceProcess(env, workers=1, args=["--threads", str(THREADS)]) as service:
        threads, statuses = start_long_polls(service.base, registration, LONG_POLLS)
        deadline = time.monotonic() + 15
        while long_polls_waiting(service.base) < LONG_POLLS and time.monotonic() < deadline:
            time.sleep(0.2)
        assert long_polls_waiting(service.base) == LONG_POLLS, "the long-polls did not all start waiting"

        # Both must answer before the long-polls' waits end (WAIT_S): a request queued behind them
        # would time out here first.
        health = requests.get(f"{service.base}/healthz", timeout=ANSWER_S)
        body = json.dumps(PUSH).encode()
        webhook = requests.post(f"{service.base}/webhooks/github", data=body,
                                headers=webhook_headers("push", body), timeout=ANSWER_S)

        assert health.status_code == 200
        assert webhook.status_code in (200, 202), webhook.text
        assert statuses == [], "a long-poll returned before the health check and the webhook were answered"
        assert long_polls_waiting(service.base) == LONG_POLLS
        for thread in threads:
            thread.join(WAIT_S + 30)
        assert statuses == [204] * LONG_POLLS
