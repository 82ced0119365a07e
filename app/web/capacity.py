"""Separate capacity per route class, so no class of request can starve another.

Every request is sorted into a class by its endpoint: `webhooks` (GitHub deliveries), `runner`
(register, heartbeat, logs, complete, fail), `longpoll` (`POST /api/v1/jobs/claim`),
`dashboard` (pages and the read/operator API) and `health` (`/healthz`, `/metrics`, never
limited). Each limited class has its own semaphore per worker process; a request that finds its
class full waits up to `PARALLAX_CAPACITY_WAIT_S`, then gets 503 with `Retry-After` (GitHub and
the runner agent both retry). The limits are `Settings` fields, read with the other
`PARALLAX_*` variables by `app.core.config` (`PARALLAX_WEBHOOK_CONCURRENCY`, ...). They also
bound the database connections a class can take, so they should sum to less than the
connection pool (30 per process).

A waiting long-poll holds no database connection and, under the gevent worker, no thread;
`PARALLAX_LONGPOLL_LIMIT` only caps how many may wait in one process, and
`PARALLAX_CLAIM_CONCURRENCY` bounds the claim attempts they make at once (`app.jobs.queue.claim`).
"""
from __future__ import annotations

import threading
import time

from flask import Flask, Response, g, jsonify, request

from app.core.config import Settings
from app.web import metrics

# Each limited class and the `Settings` field (PARALLAX_<FIELD> upper-cased) holding its limit.
LIMITS = {"webhooks": "webhook_concurrency", "runner": "runner_concurrency", "longpoll": "longpoll_limit",
          "dashboard": "dashboard_concurrency"}
CLASSES = tuple(LIMITS)


def class_limits(settings: Settings) -> dict[str, int]:
    return {name: int(getattr(settings, field)) for name, field in LIMITS.items()}


def route_class(endpoint: str | None) -> str:
    if endpoint == "runner_api.claim_job":
        return "longpoll"
    if endpoint in ("api.healthz", "metrics.scrape", "static"):
        return "health"
    blueprint = (endpoint or "").partition(".")[0]
    if blueprint == "runner_api":
        return "runner"
    if blueprint == "webhooks":
        return "webhooks"
    return "dashboard"


class Gates:
    """One semaphore per limited class, for this process."""

    def __init__(self, settings: Settings) -> None:
        self.wait_s = settings.capacity_wait_s
        self.limits = class_limits(settings)
        self.semaphores = {name: threading.BoundedSemaphore(limit) for name, limit in self.limits.items()}

    def enter(self, name: str) -> bool:
        # A long-poll that cannot wait is answered at once: runners retry 503s with backoff.
        timeout = 0.0 if name == "longpoll" else self.wait_s
        return self.semaphores[name].acquire(timeout=timeout)

    def leave(self, name: str) -> None:
        self.semaphores[name].release()


def busy(name: str, detail: str) -> tuple[Response, int, dict[str, str]]:
    """503 with Retry-After, counted for /metrics."""
    metrics.REJECTED.labels(name).inc()
    return jsonify({"error": "busy", "detail": detail}), 503, {"Retry-After": "1"}


def install(flask_app: Flask, settings: Settings) -> None:
    """Admit each request through its class's gate and time it by class."""
    gates = Gates(settings)
    flask_app.extensions["parallax.gates"] = gates

    @flask_app.before_request
    def _admit() -> Response | tuple[Response, int, dict[str, str]] | None:
        name = route_class(request.endpoint)
        g.px_route_class = name
        g.px_started = time.perf_counter()
        if name == "health":
            return None
        if not gates.enter(name):
            return busy(name, f"the {name} capacity of this process ({gates.limits[name]} at once) is in use; "
                              f"retry shortly")
        g.px_admitted = name
        return None

    @flask_app.teardown_request
    def _leave(exc: BaseException | None) -> None:
        admitted = g.pop("px_admitted", None)
        if admitted is not None:
            gates.leave(admitted)
        started = g.pop("px_started", None)
        if started is not None:
            metrics.LATENCY.labels(g.pop("px_route_class", "dashboard")).observe(time.perf_counter() - started)
