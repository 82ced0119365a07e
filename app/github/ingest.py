"""GitHub webhook deliveries: verification, classification, and the duty that acts on them.

The request path (`app.web.webhooks`) is short on purpose (GitHub gives up after 10 s): the body size is checked,
the `X-Hub-Signature-256` HMAC is verified over the raw body before anything is parsed, the
delivery id is recorded once (a redelivery is answered 200 and changes nothing), and events
that Parallax does not act on (tags, branch deletions, untracked branches or repositories,
other events and actions) are answered 202 with the reason. Deliveries to act on are stored as
`pending`; `process_pending` (the "webhooks" duty, also called by tests) claims them through the
database, fetches the repository's git mirror, stores the commit graph and queues the matrix.
Deliveries of one repository are processed in the order they arrived, with one exception: a
delivery naming a commit that git does not have even after a fresh fetch (`CommitMissing`) gets
`MISSING_RETRY_DELAYS_S` quick retries and then fails for good, and never holds back the
deliveries after it (waiting would not bring the commit; the next push's fetch has the history).
"""
from __future__ import annotations

import hashlib
import hmac
import json
import logging
import threading
import time
import weakref
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any
from urllib.parse import parse_qs

from sqlalchemy import or_, select, update
from sqlalchemy.orm import Session

from app.core.clock import as_utc, utcnow
from app.core.config import Settings, current_settings, use_settings
from app.core.db import Database, is_database_unavailable
from app.core.duties import Duty
from app.core.errors import APIError, Unauthorized
from app.core.limits import invalid_unicode_field
from app.core.models import PullRequest, Repository, WebhookDelivery
from app.core.shas import SHA_RE
from app.git import commit_graph
from app.git.mirror import ZERO_SHA, Mirror
from app.github import app_auth
from app.jobs import matrix
from app.pulls import commands, comparisons

log = logging.getLogger(__name__)

PULL_REQUEST_ACTIONS = ("opened", "synchronize", "reopened", "closed")
CLAIM_S = 600.0  # a delivery's processing (a first fetch of a large repository) may take minutes
RETRY_DELAYS_S = (10, 60, 300, 1800)
MISSING_RETRY_DELAYS_S = (10, 60)  # then `error`; `parallax deliveries retry` tries again
MISSING_COMMIT = "missing_commit"

# Failures the database was unreachable to record (a restart mid-processing): kept here per
# database and written on the next pass, so the delivery waits its retry delay and not the rest
# of its `CLAIM_S` claim, which nothing else would shorten.
_unrecorded: weakref.WeakKeyDictionary[Database, dict[int, tuple[str, str, bool, float]]] = weakref.WeakKeyDictionary()
# Claims a lost connection left in doubt (the claim's UPDATE may have committed before the reply
# was lost) or stranded (the delivery's first read failed, so no failure could be recorded):
# the claim's expiry, which identifies it, per delivery; the next pass releases each.
_unreleased: weakref.WeakKeyDictionary[Database, dict[int, datetime]] = weakref.WeakKeyDictionary()
_unrecorded_lock = threading.Lock()


class CommitMissing(LookupError):
    """The delivery names a commit the repository's git does not have after a fresh fetch."""


class BadRequest(APIError):
    status, error = 400, "bad_request"


class ServiceUnavailable(APIError):
    status, error = 503, "not_configured"


@dataclass(frozen=True)
class Verdict:
    """What the request path decided: store as `state` and answer `status` with `reason`."""
    state: str  # pending / done / ignored
    status: int
    reason: str


# ---------------------------------------------------------------- request path

def verify_signature(secret: str, body: bytes, header: str | None) -> None:
    if not header:
        raise Unauthorized("X-Hub-Signature-256 header is missing; set the webhook secret on GitHub")
    if not header.startswith("sha256="):
        raise Unauthorized("X-Hub-Signature-256 must look like sha256=<hex digest>")
    expected = "sha256=" + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()
    if not hmac.compare_digest(expected.encode(), header.strip().encode()):
        raise Unauthorized("X-Hub-Signature-256 does not match the body (wrong secret or altered body)")


def webhook_secret(session: Session, settings: Settings, body: bytes, content_type: str) -> str | None:
    """The secret to check the signature with: the repository's own when the body names a tracked
    repository that has one, else PARALLAX_GITHUB_WEBHOOK_SECRET. The body is only looked at
    here to find the repository; nothing is stored or acted on before the signature matches."""
    try:
        payload, _ = parse_payload(body, content_type)
    except BadRequest:
        payload = {}  # checked against the global secret; refused as malformed after that
    if isinstance(payload.get("repository"), dict):
        repository = find_repository(session, payload)
        if repository is not None and repository.webhook_secret:
            return repository.webhook_secret
    return settings.github_webhook_secret


def parse_payload(body: bytes, content_type: str) -> tuple[dict[str, Any], str]:
    """The payload and its JSON text, from JSON or GitHub's form encoding (`payload=<json>`)."""
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise BadRequest(f"body is not UTF-8: {exc}") from exc
    if content_type.startswith("application/x-www-form-urlencoded"):
        values = parse_qs(text).get("payload")
        if not values:
            raise BadRequest("form-encoded webhook without a 'payload' field; use content type application/json")
        text = values[0]
    try:
        payload = json.loads(text)
    except ValueError as exc:
        raise BadRequest(f"body is not valid JSON: {exc}") from exc
    if not isinstance(payload, dict):
        raise BadRequest("body must be a JSON object")
    field = invalid_unicode_field(payload)
    if field is not None:
        raise BadRequest(f"{field}: not valid Unicode (a lone surrogate such as \\ud800)", extra={"field": field})
    return payload, text


def _field(payload: dict[str, Any], path: str, kind: type | tuple[type, ...]) -> Any:
    value: Any = payload
    for key in path.split("."):
        value = value.get(key) if isinstance(value, dict) else None
    if not isinstance(value, kind) or isinstance(value, bool) and kind is int:
        raise BadRequest(f"{path}: missing or not a {getattr(kind, '__name__', kind)}", extra={"field": path})
    return value


def _sha_field(payload: dict[str, Any], path: str) -> str:
    value = _field(payload, path, str)
    if not SHA_RE.match(value):
        raise BadRequest(f"{path}: not a 40-character lowercase hex SHA: {value[:60]!r}", extra={"field": path})
    return value


def find_repository(session: Session, payload: dict[str, Any]) -> Repository | None:
    """The tracked repository a payload is about: by owner/name, else by its clone URLs."""
    info = payload.get("repository") or {}
    full_name = info.get("full_name")
    if isinstance(full_name, str):
        repo = session.scalar(select(Repository).where(Repository.name == full_name))
        if repo is not None:
            return repo
    urls = {u for key in ("clone_url", "html_url", "ssh_url", "git_url", "url")
            if isinstance(u := info.get(key), str)}
    urls |= {u[:-4] for u in urls if u.endswith(".git")} | {u + ".git" for u in urls}
    if not urls:
        return None
    return session.scalar(select(Repository).where(Repository.url.in_(sorted(urls))).limit(1))


def classify(session: Session, event: str, payload: dict[str, Any]) -> Verdict:
    """Decide from the payload alone (plus the tracked repositories) what the delivery is."""
    if event == "ping":
        return Verdict("done", 200, "pong")
    if event not in ("push", "pull_request", "issue_comment"):
        return Verdict("ignored", 202, f"event {event!r} is not handled (only push, pull_request and issue_comment)")
    if event == "issue_comment":
        ignored = _classify_comment(payload)
        if ignored is not None:
            return ignored
    if event == "push":
        ref = _field(payload, "ref", str)
        _sha_field(payload, "before")
        after = _sha_field(payload, "after")
        if ref.startswith("refs/tags/"):
            return Verdict("ignored", 202, f"tag push ({ref}) is not measured")
        if payload.get("deleted") is True or after == ZERO_SHA:
            return Verdict("ignored", 202, f"branch deletion ({ref}) changes nothing")
        if not ref.startswith("refs/heads/"):
            return Verdict("ignored", 202, f"push to {ref} is not a branch push")
    elif event == "pull_request":
        _field(payload, "pull_request", dict)
        action = _field(payload, "action", str)
        if action not in PULL_REQUEST_ACTIONS:
            return Verdict("ignored", 202, f"pull_request action {action!r} is not handled "
                                           f"(handled: {', '.join(PULL_REQUEST_ACTIONS)})")
        _field(payload, "pull_request.number", int)
        _sha_field(payload, "pull_request.head.sha")
        _field(payload, "pull_request.base.ref", str)
    repo = find_repository(session, payload)
    if repo is None:
        name = (payload.get("repository") or {}).get("full_name")
        return Verdict("ignored", 202, f"repository {name!r} is not tracked; add it with `parallax repo add`")
    if event == "push":
        branch = payload["ref"][len("refs/heads/"):]
        if branch != repo.default_branch:
            return Verdict("ignored", 202, f"branch {branch!r} is not tracked (only the default branch "
                                           f"{repo.default_branch!r}; other branches are measured as pull requests)")
    return Verdict("pending", 202, "queued for processing")


def _classify_comment(payload: dict[str, Any]) -> Verdict | None:
    """A pull-request comment that holds a `/parallax` command is processed; others are ignored."""
    action = _field(payload, "action", str)
    if action != "created":
        return Verdict("ignored", 202, f"issue_comment action {action!r} is not handled (only created)")
    issue = _field(payload, "issue", dict)
    _field(payload, "issue.number", int)
    body = _field(payload, "comment.body", str)
    if not isinstance(issue.get("pull_request"), dict):
        return Verdict("ignored", 202, "comment on an issue, not on a pull request")
    if not commands.mentions_command(body):
        return Verdict("ignored", 202, "comment holds no /parallax command")
    return None


# ---------------------------------------------------------------- processing

@dataclass
class ProcessReport:
    processed: list[str] = field(default_factory=list)
    failed: list[str] = field(default_factory=list)
    results: dict[str, str] = field(default_factory=dict)


def _repo_key(payload_text: str) -> str:
    try:
        info = json.loads(payload_text).get("repository") or {}
        return str(info.get("full_name") or info.get("clone_url") or "")
    except ValueError:
        return ""


def process_pending(db: Database, settings: Settings, *, limit: int = 50, budget_s: float = 25.0) -> ProcessReport:
    """Process pending deliveries, oldest first. Each is claimed with a conditional UPDATE
    (`claimed_until`), so concurrent workers never process one twice; a delivery waiting for a
    retry holds back the later deliveries of its repository, so their order is kept."""
    report = ProcessReport()
    _settle_unrecorded(db)
    started = time.monotonic()
    now = utcnow()
    with db.session() as session:
        rows = list(session.execute(select(WebhookDelivery.id, WebhookDelivery.payload, WebhookDelivery.claimed_until,
                                           WebhookDelivery.failure_kind)
                                    .where(WebhookDelivery.state == "pending")
                                    .order_by(WebhookDelivery.id).limit(limit)))
    blocked: set[str] = set()
    for row_id, payload_text, claimed_until, failure_kind in rows:
        key = _repo_key(payload_text)
        if key in blocked:
            continue
        if time.monotonic() - started > budget_s:
            break
        claim = None if claimed_until is not None and as_utc(claimed_until) >= now else _claim(db, row_id)
        if claim is None:
            if failure_kind != MISSING_COMMIT:
                blocked.add(key)
            continue
        delivery_id, ok, result, kind = _process_one(db, settings, row_id, claim)
        report.results[delivery_id] = result
        (report.processed if ok else report.failed).append(delivery_id)
        if not ok and kind != MISSING_COMMIT:
            blocked.add(key)
    return report


def _claim(db: Database, row_id: int) -> datetime | None:
    """Claim the delivery for `CLAIM_S`; returns the claim's expiry, which identifies the claim,
    or None when it is not free."""
    now = utcnow()
    until = now + timedelta(seconds=CLAIM_S)
    try:
        with db.session() as session:
            claimed = session.execute(
                update(WebhookDelivery)
                .where(WebhookDelivery.id == row_id, WebhookDelivery.state == "pending",
                       or_(WebhookDelivery.claimed_until.is_(None), WebhookDelivery.claimed_until < now))
                .values(claimed_until=until, attempts=WebhookDelivery.attempts + 1)).rowcount == 1
    except Exception as exc:
        _release_later(db, row_id, until, exc)  # the commit may have landed before the reply was lost
        raise
    return until if claimed else None


def _release_later(db: Database, row_id: int, claim: datetime, exc: BaseException) -> None:
    """Where the database went away, have the next pass release `claim` (`_settle_unrecorded`),
    so the delivery and the later ones of its repository wait a pass, not `CLAIM_S`."""
    if is_database_unavailable(exc):
        with _unrecorded_lock:
            _unreleased.setdefault(db, {})[row_id] = claim


def _process_one(db: Database, settings: Settings, row_id: int, claim: datetime) -> tuple[str, bool, str, str | None]:
    try:
        with db.session() as session:
            delivery = session.get(WebhookDelivery, row_id)
            assert delivery is not None
            delivery_id, attempts, event, payload_text = (delivery.delivery_id, delivery.attempts, delivery.event,
                                                          delivery.payload)
    except Exception as exc:  # nothing ran, and without the delivery no failure can be recorded
        _release_later(db, row_id, claim, exc)
        raise
    try:
        payload = json.loads(payload_text)
        # Fetch outside any transaction: on SQLite a transaction holds the write lock, and a
        # fetch may take minutes; the request path must keep storing deliveries meanwhile.
        with db.session() as session:
            repository = find_repository(session, payload)
            mirror = mirror_for(settings, repository) if repository is not None else None
        if mirror is not None:
            fetch_for(mirror, event, payload)
        with use_settings(settings), db.session() as session:
            delivery = session.get(WebhookDelivery, row_id)
            assert delivery is not None
            state, result = handle(session, settings, event, payload)
            delivery.state, delivery.result = state, result
            delivery.processed_at, delivery.claimed_until, delivery.failure_kind = utcnow(), None, None
        log.info("webhook processed", extra={"px_delivery": delivery_id, "px_result": result})
        return delivery_id, True, result, None
    except Exception as exc:  # recorded on the delivery and retried; the worker keeps going
        kind = MISSING_COMMIT if isinstance(exc, CommitMissing) else "error"
        delays = MISSING_RETRY_DELAYS_S if kind == MISSING_COMMIT else RETRY_DELAYS_S
        final = attempts > len(delays)
        message = f"{type(exc).__name__}: {exc}"[:4000]
        if final:
            message += f" (gave up after {attempts} attempts; `parallax deliveries retry {delivery_id}` tries again)"
        log.warning("webhook processing failed", extra={"px_delivery": delivery_id, "px_attempt": attempts,
                                                        "px_final": final, "px_error": message})
        delay_s = 0.0 if final else float(delays[attempts - 1])
        try:
            _record_failure(db, row_id, message, kind, final, delay_s)
        except Exception as recording:
            if not is_database_unavailable(recording):
                raise
            with _unrecorded_lock:
                _unrecorded.setdefault(db, {})[row_id] = (message, kind, final, delay_s)
            raise
        return delivery_id, False, message, kind


def _record_failure(db: Database, row_id: int, message: str, kind: str, final: bool, delay_s: float) -> None:
    with db.session() as session:
        delivery = session.get(WebhookDelivery, row_id)
        assert delivery is not None
        delivery.result, delivery.failure_kind = message, kind
        if final:
            delivery.state, delivery.processed_at, delivery.claimed_until = "error", utcnow(), None
        else:
            delivery.claimed_until = utcnow() + timedelta(seconds=delay_s)


def _settle_unrecorded(db: Database) -> None:
    """Record the failures the database was down to take, and release the claims it left in
    doubt; raises while it is still down."""
    with _unrecorded_lock:
        pending = dict(_unrecorded.get(db, {}))
        unreleased = dict(_unreleased.get(db, {}))
    for row_id, failure in pending.items():
        _record_failure(db, row_id, *failure)
        with _unrecorded_lock:
            _unrecorded.get(db, {}).pop(row_id, None)
    for row_id, claim in unreleased.items():
        with db.session() as session:
            # Only that very claim, and its attempt that never ran: if the UPDATE never landed,
            # or the claim expired and another worker took the delivery, nothing matches.
            session.execute(update(WebhookDelivery)
                            .where(WebhookDelivery.id == row_id, WebhookDelivery.state == "pending",
                                   WebhookDelivery.claimed_until == claim)
                            .values(claimed_until=None, attempts=WebhookDelivery.attempts - 1))
        with _unrecorded_lock:
            _unreleased.get(db, {}).pop(row_id, None)


def fetch_for(mirror: Mirror, event: str, payload: dict[str, Any]) -> None:
    """Bring the mirror up to date with what the delivery names (branches, the pushed head, the
    pull request's head ref and SHA). Only the tracked repository's configured URL is fetched,
    never a URL from the payload."""
    if event == "push" and isinstance(payload.get("after"), str) and SHA_RE.match(payload["after"]):
        mirror.fetch(extra=[payload["after"]])
    elif event == "pull_request" and payload.get("action") != "closed":
        pr = payload.get("pull_request") or {}
        extra = []
        if isinstance(pr.get("number"), int):
            extra.append(f"refs/pull/{pr['number']}/head")
        head = (pr.get("head") or {}).get("sha")
        if isinstance(head, str) and SHA_RE.match(head):
            extra.append(head)
        mirror.fetch(extra=extra)


def mirror_for(settings: Settings, repository: Repository) -> Mirror:
    return Mirror.for_repository(settings.data_dir, repository.name, repository.url)


def handle(session: Session, settings: Settings, event: str, payload: dict[str, Any]) -> tuple[str, str]:
    """Act on one stored delivery (its mirror already fetched); returns the delivery's final
    state and a one-line summary. Tracking may have changed since it arrived: then it is ignored."""
    verdict = classify(session, event, payload)
    if verdict.state != "pending":
        return verdict.state, verdict.reason
    repository = find_repository(session, payload)
    assert repository is not None
    mirror = mirror_for(settings, repository)
    app_auth.remember_installation(session, repository, (payload.get("installation") or {}).get("id"))
    if event == "push":
        return "done", _handle_push(session, repository, mirror, payload)
    if event == "issue_comment":
        return "done", commands.handle(session, repository, payload)
    return "done", _handle_pull_request(session, repository, mirror, payload)


def _handle_push(session: Session, repository: Repository, mirror: Mirror, payload: dict[str, Any]) -> str:
    branch_name = payload["ref"][len("refs/heads/"):]
    before, after = payload["before"], payload["after"]
    if not mirror.has_commit(after):
        raise CommitMissing(f"commit {after} is not in {repository.url}, even after a fresh fetch")
    change = commit_graph.update_branch_from_push(session, repository, mirror, branch_name,
                                                   None if before == ZERO_SHA else before, after)
    assert change.head is not None
    queued = matrix.queue_push(session, repository, change.pushed, head=change.head,
                               head_position=change.head_position)
    created = sum(1 for q in queued if q.created)
    return (f"push {branch_name} {before[:12]}..{after[:12]}: {len(change.pushed)} commit(s) added, "
            f"{len(change.dropped)} dropped from history; {created} job(s) queued, "
            f"{len(queued) - created} already queued or done")


def _handle_pull_request(session: Session, repository: Repository, mirror: Mirror, payload: dict[str, Any]) -> str:
    pr = payload["pull_request"]
    number, head = int(pr["number"]), pr["head"]["sha"]
    base_branch = pr["base"]["ref"]
    base_sha = pr["base"].get("sha") if isinstance(pr["base"].get("sha"), str) else None
    if base_sha is not None and not SHA_RE.match(base_sha):
        base_sha = None
    if payload["action"] == "closed":
        pull = session.scalar(select(PullRequest).where(PullRequest.repository_id == repository.id,
                                                        PullRequest.number == number))
        if pull is None:
            return f"pull request #{number} closed; it was never measured"
        pull.state = "merged" if pr.get("merged") is True else "closed"
        cancelled = comparisons.close(session, pull)
        return f"pull request #{number} {pull.state}: {cancelled} queued job(s) cancelled"
    if not mirror.has_commit(head):
        raise CommitMissing(f"pull request #{number} head {head} is not in {repository.url}, even after a fresh fetch")
    pull, head_commit, merge_base = commit_graph.record_pull_request(
        session, repository, mirror, number=number, title=pr.get("title") if isinstance(pr.get("title"), str) else None,
        base_branch=base_branch, head=head, base=base_sha)
    comparison, queued = comparisons.start(session, repository, pull, head_commit, merge_base)
    base_text = merge_base.sha[:12] if merge_base else "unknown"
    return (f"pull request #{number} ({payload['action']}) head {head[:12]}, merge-base {base_text}: "
            f"{queued} job(s) queued" + ("" if queued else f" (head already compared in comparison {comparison.id})"))


def arrived_since(session: Session, since: datetime | None) -> bool:
    """A delivery stored since `since` waits for its first pass (the duty's `due` check)."""
    query = select(WebhookDelivery.id).where(WebhookDelivery.state == "pending")
    if since is not None:
        query = query.where(WebhookDelivery.received_at > since)
    return session.scalar(query.limit(1)) is not None


DUTIES = [Duty("webhooks", lambda db: process_pending(db, current_settings()), interval_s=1.0, lease_s=60.0,
               due=arrived_since)]
