"""HTTP client for the runner protocol (DESIGN.md): register, claim, heartbeat, logs, complete,
fail — with retries on connection errors and 5xx.

Retries are hand-written rather than urllib3's `Retry` because each call needs a time budget
(a heartbeat is pointless after its lease has gone, an upload may wait out a long outage) and
must stop at once when the agent aborts; `Retry` counts attempts and sleeps uninterruptibly.
"""
from __future__ import annotations

import logging
import random
import secrets
import threading
import time
from dataclasses import dataclass
from typing import Any

import requests

log = logging.getLogger(__name__)

# Why an attempt failed back when its runner died and started again: given by the restarted runner
# for the attempt it had recorded, and by the service for one it could not record
# (`app.jobs.queue.fail_back_running`).
RESTARTED_REASON = "the runner stopped during this attempt (killed or crashed) and started again"


def _tail(text: str, limit: int = 160) -> str:
    """The end of an error (where urllib3 puts the cause), cut at a word, never inside one."""
    text = " ".join(text.split())
    if len(text) <= limit:
        return text
    cut = text[-limit:]
    return "…" + cut[cut.find(" ") + 1:] if " " in cut else "…" + cut


class ServiceError(Exception):
    """The service answered with a 4xx (or retries ran out). `status` is None for a transport
    failure that outlived its retry budget."""

    def __init__(self, message: str, status: int | None = None, body: Any = None) -> None:
        super().__init__(message)
        self.status = status
        self.body = body


class LeaseLost(ServiceError):
    """409: this runner no longer holds the job's lease (expired, requeued, taken over)."""


class Unauthorized(ServiceError):
    """401/403: the token is unknown, revoked or the runner is disabled."""


class Aborted(ServiceError):
    """The caller's abort event was set while retrying."""


@dataclass(frozen=True)
class RetryPolicy:
    """Exponential backoff with full jitter: sleep uniform(0, min(max_delay, base * 2**n))."""
    base_delay_s: float = 0.5
    max_delay_s: float = 8.0
    budget_s: float = 900.0

    def delay(self, attempt: int) -> float:
        return random.uniform(0.0, min(self.max_delay_s, self.base_delay_s * (2 ** attempt)))


@dataclass(frozen=True)
class Heartbeat:
    lease_expires_at: str
    cancel: bool


def _detail(response: requests.Response) -> tuple[str, Any]:
    try:
        body = response.json()
    except ValueError:
        return response.text[:500], None
    if isinstance(body, dict) and "detail" in body:
        return str(body["detail"]), body
    return str(body)[:500], body


class Client:
    """One runner's view of the service, safe to use from several threads."""

    def __init__(self, server: str, token: str | None = None, *, retry: RetryPolicy | None = None,
                 abort: threading.Event | None = None, timeout_s: float = 30.0) -> None:
        self.server = server.rstrip("/")
        self.token = token
        # Sent with every claim: the service then gives jobs only to this client's claims, not to
        # a long-poll an earlier process of the same runner left waiting when it died.
        self.claim_session = secrets.token_hex(8)
        self.retry = retry or RetryPolicy()
        self.abort = abort or threading.Event()
        self.timeout_s = timeout_s
        self._local = threading.local()

    @property
    def http(self) -> requests.Session:
        """One session (connection pool) per thread: heartbeats, log shipping and uploads run
        on different threads, and requests does not promise a shared Session is thread-safe."""
        session = getattr(self._local, "session", None)
        if session is None:
            session = self._local.session = requests.Session()
        return session

    # ------------------------------------------------------------ transport

    def request(self, method: str, path: str, *, json: Any = None, data: bytes | str | None = None,
                params: dict[str, Any] | None = None, token: str | None = None,
                budget_s: float | None = None, read_timeout_s: float | None = None,
                headers: dict[str, str] | None = None,
                content_type: str = "application/octet-stream",
                retry_log_level: int | None = None) -> requests.Response:
        """Send, retrying connection errors, timeouts and 5xx until `budget_s` has passed.
        4xx are returned to the caller (they are answers, not faults). `retry_log_level` sets
        the level of every retry line, for callers that report the outage themselves."""
        budget = self.retry.budget_s if budget_s is None else budget_s
        deadline = time.monotonic() + budget
        headers = {**(headers or {}), "Authorization": f"Bearer {token or self.token}"}
        if data is not None and json is None:
            headers.setdefault("Content-Type", content_type)
        url = f"{self.server}/api/v1{path}"
        attempt = 0
        while True:
            if self.abort.is_set():
                raise Aborted(f"{method} {path}: aborted")
            problem: str
            try:
                response = self.http.request(method, url, json=json, data=data, params=params, headers=headers,
                                             timeout=(5.0, read_timeout_s or self.timeout_s))
                if response.status_code < 500:
                    return response
                problem = f"HTTP {response.status_code}: {_detail(response)[0]}"
            except requests.RequestException as exc:
                reason = exc.__context__ if isinstance(exc, requests.ConnectionError) and exc.__context__ else exc
                problem = f"{type(exc).__name__}: {_tail(str(reason))}"
            pause = self.retry.delay(attempt)
            attempt += 1
            if time.monotonic() + pause > deadline:
                raise ServiceError(f"{method} {path}: gave up after {attempt} tries over {budget:.0f} s; "
                                   f"last error: {problem}")
            # The first failure and then every fifth are warnings; the ones between are details.
            level = logging.WARNING if attempt == 1 or attempt % 5 == 0 else logging.DEBUG
            if retry_log_level is not None:
                level = retry_log_level
            log.log(level, "%s %s failed (%s); retry %d in %.1f s", method, path, problem, attempt, pause)
            if self.abort.wait(pause):
                raise Aborted(f"{method} {path}: aborted while retrying ({problem})")

    @staticmethod
    def check(response: requests.Response, what: str) -> requests.Response:
        if response.status_code < 400:
            return response
        detail, body = _detail(response)
        message = f"{what}: HTTP {response.status_code}: {detail}"
        if response.status_code == 409:
            raise LeaseLost(message, response.status_code, body)
        if response.status_code in (401, 403):
            raise Unauthorized(message, response.status_code, body)
        raise ServiceError(message, response.status_code, body)

    # ------------------------------------------------------------ protocol

    def register(self, registration_token: str, name: str, labels: dict[str, str],
                 facts: dict[str, Any]) -> tuple[int, str]:
        response = self.request("POST", "/runners", json={"name": name, "labels": labels, "facts": facts},
                                token=registration_token)
        body = self.check(response, "register").json()
        return int(body["id"]), str(body["token"])

    def claim(self, wait_s: float, budget_s: float) -> dict[str, Any] | None:
        """One job, or None when none came within `wait_s`; retries are debug lines (the agent's
        claim loop reports an outage once, see runners/outage.py)."""
        response = self.request("POST", "/jobs/claim", json={"wait_s": wait_s, "session": self.claim_session},
                                budget_s=budget_s,
                                read_timeout_s=wait_s + 30.0, retry_log_level=logging.DEBUG)
        if response.status_code == 204:
            return None
        return self.check(response, "claim").json()["job"]

    def heartbeat(self, job_id: int, attempt: int, budget_s: float) -> Heartbeat:
        response = self.request("POST", f"/jobs/{job_id}/heartbeat", json={"attempt": attempt}, budget_s=budget_s)
        body = self.check(response, f"heartbeat job {job_id}").json()
        return Heartbeat(lease_expires_at=body["lease_expires_at"], cancel=bool(body["cancel"]))

    def logs(self, job_id: int, attempt: int, text: str, budget_s: float) -> None:
        response = self.request("POST", f"/jobs/{job_id}/logs", data=text.encode("utf-8"),
                                params={"attempt": attempt}, budget_s=budget_s)
        self.check(response, f"logs job {job_id}")

    def complete(self, job_id: int, attempt: int, document: bytes, budget_s: float | None = None) -> int:
        """Upload the results document; 201 first time, 200 for a retry the service already has."""
        response = self.request("POST", f"/jobs/{job_id}/complete", data=document,
                                params={"attempt": attempt}, budget_s=budget_s)
        self.check(response, f"complete job {job_id}")
        return response.status_code

    def upload_artifact(self, job_id: int, attempt: int, name: str, data: bytes, content_type: str,
                        budget_s: float | None = None) -> dict[str, Any]:
        """Keep one file beside the job's results (201 new, 200 already kept); a 413 past the
        service's cap raises ServiceError and leaves the job alone."""
        response = self.request("POST", f"/jobs/{job_id}/artifacts", data=data,
                                params={"attempt": attempt, "name": name}, budget_s=budget_s,
                                content_type=content_type)
        return self.check(response, f"artifact {name} of job {job_id}").json()

    def fail(self, job_id: int, attempt: int, reason: str, retryable: bool, *, handback: bool = False,
             kind: str | None = None, budget_s: float | None = None) -> dict[str, Any]:
        body: dict[str, Any] = {"reason": reason, "retryable": retryable, "attempt": attempt}
        if handback:
            body["handback"] = True
        if kind is not None:
            body["kind"] = kind  # "build": the suite's setup failed; nothing was measured
        response = self.request("POST", f"/jobs/{job_id}/fail", json=body, budget_s=budget_s)
        return self.check(response, f"fail job {job_id}").json()
