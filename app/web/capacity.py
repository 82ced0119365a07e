"""Separate capacity per route class, so no class of request can starve another.

Every request is sorted into a class by its endpoint: `webhooks` (GitHub deliveries), `runner`
(register, heartbeat, logs, complete, fail), `longpoll` (`POST /api/v1/jobs/claim`),
`dashboard` (pages and the read/operator API) and `health` (`/healthz`, `/metrics`, never
limited). Each limited class has its own semaphore per worker process; a request that finds its
class full waits up to `PARALLAX_CAPACITY_WAIT_S`, then gets 503 with `Retry-After` (GitHub and
the runner agent both retry). The limits are also what bounds the database connections a class
can take, so they should sum to less than the connection pool (30 per process).

A waiting long-poll holds no database connection and, under the gevent worker, no thread;
`PARALLAX_LONGPOLL_LIMIT` only caps how many may wait in one process, and
`PARALLAX_CLAIM_CONCURRENCY` bounds the claim attempts they make at once (`app.jobs.queue.claim`).
"""
from __future__ import annotations

import os
import threading
import time
from dataclasses import dataclass, fields
from typing import Mapping

from flask import Flask, Response, g, jsonify, request

from app.core.config import ConfigError
from app.web import metrics

CLASSES = ("webhooks", "runner", "longpoll", "dashboard")


@dataclass(frozen=True)
class Capacity:
    """Per worker process. Env: PARALLAX_<FIELD> upper-cased, except the class limits, which
    are PARALLAX_<CLASS>_CONCURRENCY (and PARALLAX_LONGPOLL_LIMIT)."""
    webhooks: int = 4
    runner: int = 8
    dashboard: int = 4
    longpoll: int = 1000
    claim_concurrency: int = 2
    capacity_wait_s: float = 5.0
    claim_poll_s: float | None = None  # None: 5 s on PostgreSQL (NOTIFY wakes), 1 s on SQLite
    claim_notify: bool = True  # off: waiters poll (e.g. behind a pooler that cannot LISTEN)


ENV_NAMES = {
    "webhooks": "PARALLAX_WEBHOOK_CONCURRENCY",
    "runner": "PARALLAX_RUNNER_CONCURRENCY",
    "dashboard": "PARALLAX_DASHBOARD_CONCURRENCY",
    "longpoll": "PARALLAX_LONGPOLL_LIMIT",
    "claim_concurrency": "PARALLAX_CLAIM_CONCURRENCY",
    "capacity_wait_s": "PARALLAX_CAPACITY_WAIT_S",
    "claim_poll_s": "PARALLAX_CLAIM_POLL_S",
    "claim_notify": "PARALLAX_CLAIM_NOTIFY",
}
SWITCH = {"1": True, "true": True, "on": True, "0": False, "false": False, "off": False}


def load_capacity(env: Mapping[str, str] | None = None) -> Capacity:
    """Read the limits from the environment; a value that is not a positive number is refused
    with the variable named."""
    env = os.environ if env is None else env
    values: dict[str, int | float | bool] = {}
    for item in fields(Capacity):
        name = ENV_NAMES[item.name]
        raw = env.get(name)
        if raw is None or raw == "":
            continue
        if item.name == "claim_notify":
            if raw.lower() not in SWITCH:
                raise ConfigError(f"{name} must be 1 or 0 (true/false, on/off), got {raw!r}")
            values[item.name] = SWITCH[raw.lower()]
            continue
        integral = item.name not in ("capacity_wait_s", "claim_poll_s")
        try:
            value: int | float = int(raw) if integral else float(raw)
        except ValueError as exc:
            kind = "an integer" if integral else "a number"
            raise ConfigError(f"{name} must be {kind}, got {raw!r}") from exc
        if value <= 0:
            raise ConfigError(f"{name} must be positive, got {raw!r}")
        values[item.name] = value
    return Capacity(**values)  # type: ignore[arg-type]


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

    def __init__(self, capacity: Capacity) -> None:
        self.capacity = capacity
        self.limits = {name: getattr(capacity, name) for name in CLASSES}
        self.semaphores = {name: threading.BoundedSemaphore(limit) for name, limit in self.limits.items()}

    def enter(self, name: str) -> bool:
        # A long-poll that cannot wait is answered at once: runners retry 503s with backoff.
        timeout = 0.0 if name == "longpoll" else self.capacity.capacity_wait_s
        return self.semaphores[name].acquire(timeout=timeout)

    def leave(self, name: str) -> None:
        self.semaphores[name].release()


def busy(name: str, detail: str) -> tuple[Response, int, dict[str, str]]:
    """503 with Retry-After, counted for /metrics."""
    metrics.REJECTED.labels(name).inc()
    return jsonify({"error": "busy", "detail": detail}), 503, {"Retry-After": "1"}


def install(flask_app: Flask, capacity: Capacity) -> None:
    """Admit each request through its class's gate and time it by class."""
    gates = Gates(capacity)
    flask_app.extensions["parallax.capacity"] = capacity
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
