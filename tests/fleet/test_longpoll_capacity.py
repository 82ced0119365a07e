"""More claim long-polls than request threads: the health check and a signed webhook still
answer while every long-poll is waiting, because a waiting long-poll holds no request thread
(gevent worker) and webhooks have capacity of their own. With the threads held they would answer
only once a long-poll's wait was over.

The test asserts an order, not a duration, so a loaded machine cannot fail it: a window counts
only when all the long-polls were waiting before the two requests and still waiting after them,
none having ended in between; a window in which a long-poll's wait happened to end is tried again.
(It failed twice on load before: on a 1-second read timeout, and when the 48 long-polls took over
15 s to start waiting on a loaded 2-core CI machine.)"""
from __future__ import annotations

import json
import threading
import time
from dataclasses import dataclass, field

import pytest
import requests

from app.demo.service_process import ServiceProcess
from tests.support.github import SECRET, webhook_headers
from tests.support.runner_harness import wait_for
from tests.support.service_api import registration_token_at

THREADS = 4
LONG_POLLS = 12 * THREADS
WAIT_S = 30
# Well under WAIT_S: an answer that needed a long-poll's thread would come only after its wait.
ANSWER_S = 10
WINDOWS = 4
PUSH = {"ref": "refs/heads/main", "before": "1" * 40, "after": "2" * 40, "commits": [],
        "repository": {"full_name": "fleet/not-tracked", "clone_url": "https://github.com/fleet/not-tracked.git"}}


@dataclass
class LongPolls:
    """Runner threads that each claim again as soon as a claim returns, as the agent does, until
    stopped; `ended` counts every claim that returned, `statuses` says how."""

    base: str
    tokens: list[str]
    stop: threading.Event = field(default_factory=threading.Event)
    statuses: list[int] = field(default_factory=list)
    threads: list[threading.Thread] = field(default_factory=list)

    @property
    def ended(self) -> int:
        return len(self.statuses)

    def start(self) -> None:
        self.threads = [threading.Thread(target=self.poll, args=(token,), daemon=True) for token in self.tokens]
        for thread in self.threads:
            thread.start()

    def poll(self, token: str) -> None:
        while not self.stop.is_set():
            response = requests.post(f"{self.base}/api/v1/jobs/claim", json={"wait_s": WAIT_S},
                                     headers={"Authorization": f"Bearer {token}"}, timeout=WAIT_S + 60)
            self.statuses.append(response.status_code)
            if response.status_code == 503:  # the claim gate was busy: the agent retries too
                time.sleep(float(response.headers.get("Retry-After", 1)))

    def finish(self) -> None:
        self.stop.set()
        for thread in self.threads:
            thread.join(WAIT_S + 60)


def register_runners(base: str, registration: str, count: int) -> list[str]:
    tokens = []
    for i in range(count):
        response = requests.post(f"{base}/api/v1/runners", json={"name": f"r{i}", "labels": {"platform": "cpu"}},
                                 headers={"Authorization": f"Bearer {registration}"}, timeout=30)
        response.raise_for_status()
        tokens.append(response.json()["token"])
    return tokens


def long_polls_waiting(base: str) -> float:
    """The service's gauge of waiting long-polls; 0 while /metrics cannot get an answer in time
    (as when every request thread is held)."""
    try:
        text = requests.get(f"{base}/metrics", timeout=ANSWER_S).text
    except requests.Timeout:
        return 0
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
               if line.startswith("parallax_longpolls_waiting{"))


def answers_while_all_wait(base: str, polls: LongPolls) -> tuple[int, int] | None:
    """The health check's and the webhook's statuses when both answered while every long-poll was
    waiting; None when a long-poll ended in the window (its wait ran out) or an answer timed out."""
    wait_for(lambda: long_polls_waiting(base) >= LONG_POLLS, 120, f"all {LONG_POLLS} long-polls to be waiting",
             interval_s=0.2)
    ended = polls.ended
    try:
        health = requests.get(f"{base}/healthz", timeout=ANSWER_S)
        body = json.dumps(PUSH).encode()
        webhook = requests.post(f"{base}/webhooks/github", data=body, headers=webhook_headers("push", body),
                                timeout=ANSWER_S)
    except requests.Timeout:
        return None
    if polls.ended != ended or long_polls_waiting(base) != LONG_POLLS:
        return None
    return health.status_code, webhook.status_code


@pytest.mark.slow
def test_health_and_webhooks_answer_while_long_polls_outnumber_threads(database_url: str) -> None:
    registration = registration_token_at(database_url)
    env = {"PARALLAX_DATABASE_URL": database_url, "PARALLAX_GITHUB_WEBHOOK_SECRET": SECRET,
           "PARALLAX_LOG_LEVEL": "WARNING"}
    with ServiceProcess(env, workers=1, args=["--threads", str(THREADS)]) as service:
        polls = LongPolls(service.base, register_runners(service.base, registration, LONG_POLLS))
        polls.start()
        try:
            answers = None
            for _ in range(WINDOWS):
                answers = answers_while_all_wait(service.base, polls)
                if answers is not None:
                    break
            assert answers is not None, (f"in {WINDOWS} tries the health check and the webhook never both "
                                         f"answered while all {LONG_POLLS} long-polls were waiting")
            health, webhook = answers
            assert health == 200
            assert webhook in (200, 202)
        finally:
            polls.finish()
        assert set(polls.statuses) <= {204, 503}, polls.statuses
        assert all(not thread.is_alive() for thread in polls.threads)
