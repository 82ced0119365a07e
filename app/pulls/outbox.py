"""Pull-request writes to GitHub through an outbox: the `parallax` check run on the head, the one
comment edited in place, and short replies to `/parallax` commands.

Writers only insert `pull_request_writes` rows in their own transaction; the "github-pulls"
duty sends them with the commit-status outbox's rules (`app.github.status`): network errors and
5xx back off exponentially, a rate limit pauses every waiting row until GitHub's reset, other
4xx give up. Only the newest unsent check run of a comparison and the newest comment of a pull
request are sent (so after an outage each arrives once, in its latest form). The check run is
created once and then PATCHed; the comment is found by its marker before the first POST (a
POST whose answer was lost is not repeated as a second comment). Check runs need App mode.
"""
from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import Any

import requests
from sqlalchemy import select, update
from sqlalchemy.orm import Session

from app.core.clock import utcnow
from app.core.config import Settings, current_settings
from app.core.db import Database
from app.core.duties import Duty
from app.core.models import Commit, PullComparison, PullRequest, PullRequestGitHub, PullRequestWrite, Repository
from app.core.outbox import claim
from app.github import app_auth
from app.github.status import OWNER_NAME_RE
from app.github.status import _backoff as backoff
from app.github.status import _rate_limit_until as rate_limit_until
from app.pulls.report import COMMENT_MARKER

log = logging.getLogger(__name__)

MAX_ATTEMPTS = 8
CLAIM_S = 120.0
CHECK_NAME = "parallax"
MAX_SUMMARY = 60_000  # GitHub refuses check-run output over 65535 characters


def _enabled(session: Session, pull_id: int) -> Repository | None:
    settings = current_settings()
    if not app_auth.enabled(settings):
        return None
    pull = session.get(PullRequest, pull_id)
    repository = session.get(Repository, pull.repository_id) if pull is not None else None
    if repository is None or not OWNER_NAME_RE.match(repository.name):
        return None
    return repository


def queue_check_run(session: Session, comparison: PullComparison, *, status: str, conclusion: str | None,
                    title: str, summary: str, details_url: str | None = None) -> None:
    if _enabled(session, comparison.pull_request_id) is None or not app_auth.app_mode(current_settings()):
        return  # personal-token mode: statuses and the comment only
    body: dict[str, Any] = {"status": status, "title": title[:250], "summary": summary[:MAX_SUMMARY]}
    if conclusion:
        body["conclusion"] = conclusion
    if details_url:
        body["details_url"] = details_url
    session.add(PullRequestWrite(pull_request_id=comparison.pull_request_id, comparison_id=comparison.id,
                                 kind="check_run", body=body, next_attempt_at=utcnow()))


def queue_comment(session: Session, pull: PullRequest, text: str) -> None:
    if _enabled(session, pull.id) is None:
        return
    session.add(PullRequestWrite(pull_request_id=pull.id, kind="comment", body={"body": text}, next_attempt_at=utcnow()))


def queue_reply(session: Session, pull: PullRequest, text: str) -> None:
    if _enabled(session, pull.id) is None:
        return
    session.add(PullRequestWrite(pull_request_id=pull.id, kind="reply", body={"body": text}, next_attempt_at=utcnow()))


# ---------------------------------------------------------------- sender

def _claim(db: Database, row_id: int) -> bool:
    return claim(db, PullRequestWrite, row_id, moment=utcnow(), lease_s=CLAIM_S,
                 still_due=(PullRequestWrite.sent_at.is_(None), PullRequestWrite.attempts < MAX_ATTEMPTS))


def _superseded(session: Session, row: PullRequestWrite) -> bool:
    if row.kind == "reply":
        return False
    query = select(PullRequestWrite.id).where(PullRequestWrite.kind == row.kind, PullRequestWrite.id > row.id)
    if row.kind == "check_run":
        query = query.where(PullRequestWrite.comparison_id == row.comparison_id)
    else:
        query = query.where(PullRequestWrite.pull_request_id == row.pull_request_id)
    return session.scalar(query.limit(1)) is not None


@dataclass(frozen=True)
class _Write:
    """What sending one write needs, read in a transaction and used outside it: the network
    calls hold no transaction (on SQLite one holds the write lock of every process)."""
    kind: str
    body: dict[str, Any]
    api: str
    number: int
    installation_id: int | None
    check_run_id: str | None
    head_sha: str | None
    comment_id: str | None


def _prepare(session: Session, settings: Settings, row: PullRequestWrite) -> _Write:
    pull = session.get(PullRequest, row.pull_request_id)
    assert pull is not None
    repository = session.get(Repository, pull.repository_id)
    assert repository is not None
    check_run_id = head_sha = comment_id = None
    if row.kind == "check_run":
        comparison = session.get(PullComparison, row.comparison_id)
        assert comparison is not None
        check_run_id = comparison.check_run_id
        if not check_run_id:
            commit = session.get(Commit, comparison.head_commit_id)
            assert commit is not None
            head_sha = commit.sha
    elif row.kind == "comment":
        state = session.get(PullRequestGitHub, pull.id)
        comment_id = state.comment_id if state is not None else None
    return _Write(kind=row.kind, body=dict(row.body), api=f"{settings.github_api_url}/repos/{repository.name}",
                  number=pull.number, installation_id=app_auth.installation_for(session, repository.id),
                  check_run_id=check_run_id, head_sha=head_sha, comment_id=comment_id)


def _send(http: requests.Session, headers: dict[str, str], write: _Write, timeout: tuple[float, float]) -> requests.Response:
    api = write.api
    if write.kind == "check_run":
        output = {"title": write.body["title"], "summary": write.body["summary"]}
        body: dict[str, Any] = {"name": CHECK_NAME, "status": write.body["status"], "output": output}
        for key in ("conclusion", "details_url"):
            if key in write.body:
                body[key] = write.body[key]
        if write.check_run_id:
            return http.patch(f"{api}/check-runs/{write.check_run_id}", json=body, headers=headers, timeout=timeout)
        return http.post(f"{api}/check-runs", json={**body, "head_sha": write.head_sha}, headers=headers, timeout=timeout)
    if write.kind == "reply":
        return http.post(f"{api}/issues/{write.number}/comments", json=write.body, headers=headers, timeout=timeout)
    comment_id = write.comment_id
    if comment_id is None:
        comment_id = _find_comment(http, f"{api}/issues/{write.number}/comments", headers, timeout)
    if comment_id is not None:
        return http.patch(f"{api}/issues/comments/{comment_id}", json=write.body, headers=headers, timeout=timeout)
    return http.post(f"{api}/issues/{write.number}/comments", json=write.body, headers=headers, timeout=timeout)


def _find_comment(http: requests.Session, url: str, headers: dict[str, str], timeout: tuple[float, float]) -> str | None:
    """Our comment on the pull request, if one exists already (its marker), else None."""
    response = http.get(url, params={"per_page": 100}, headers=headers, timeout=timeout)
    if response.status_code != 200:
        raise requests.HTTPError(f"listing comments: HTTP {response.status_code}", response=response)
    for comment in response.json() or []:
        if isinstance(comment, dict) and COMMENT_MARKER in str(comment.get("body") or ""):
            return str(comment["id"])
    return None


def _remember(session: Session, row: PullRequestWrite, response: requests.Response) -> None:
    try:
        created = response.json()
    except ValueError:
        created = {}
    new_id = str(created.get("id")) if isinstance(created, dict) and created.get("id") is not None else None
    if row.kind == "check_run" and new_id:
        comparison = session.get(PullComparison, row.comparison_id)
        if comparison is not None and not comparison.check_run_id:
            comparison.check_run_id = new_id
    elif row.kind == "comment" and new_id:
        state = session.get(PullRequestGitHub, row.pull_request_id)
        if state is None:
            session.add(PullRequestGitHub(pull_request_id=row.pull_request_id, comment_id=new_id))
        elif state.comment_id != new_id:
            state.comment_id = new_id


def send_due(db: Database, settings: Settings, *, limit: int = 100, budget_s: float = 20.0,
             timeout: tuple[float, float] = (5.0, 10.0), http: requests.Session | None = None) -> dict[str, int]:
    """Send the due writes, oldest first. Returns counts: sent, superseded, retried, gave_up."""
    counts = {"sent": 0, "superseded": 0, "retried": 0, "gave_up": 0}
    if not app_auth.enabled(settings):
        return counts
    started = time.monotonic()
    http = http or requests.Session()
    with db.session() as session:
        due = list(session.scalars(select(PullRequestWrite.id).where(
            PullRequestWrite.sent_at.is_(None), PullRequestWrite.attempts < MAX_ATTEMPTS,
            PullRequestWrite.next_attempt_at <= utcnow()).order_by(PullRequestWrite.id).limit(limit)))
    for row_id in due:
        if time.monotonic() - started > budget_s or not _claim(db, row_id):
            continue
        with db.session() as session:
            row = session.get(PullRequestWrite, row_id)
            assert row is not None
            if _superseded(session, row):
                row.sent_at, row.last_error = utcnow(), "superseded by a newer write"
                counts["superseded"] += 1
                continue
            write = _prepare(session, settings, row)
        try:
            headers = app_auth.headers(settings, write.installation_id, http=http, timeout=timeout)
            response: requests.Response | None = _send(http, headers, write, timeout)
            failure = None
        except (requests.RequestException, app_auth.MissingInstallation) as exc:
            response, failure = None, exc
        with db.session() as session:
            row = session.get(PullRequestWrite, row_id)
            assert row is not None
            if _record(session, row, response, failure, counts):
                return counts
    return counts


def _record(session: Session, row: PullRequestWrite, response: requests.Response | None,
            failure: Exception | None, counts: dict[str, int]) -> bool:
    """Store how the attempt went; True when a rate limit stops this round."""
    limited = response if failure is None else getattr(failure, "response", None)
    until = rate_limit_until(limited, utcnow()) if limited is not None else None
    if until is not None and (response is None or not 200 <= response.status_code < 300):
        _pause_all(session, row, until)
        return True
    if failure is not None or response is None:
        row.next_attempt_at, row.last_error = utcnow() + backoff(row.attempts), f"{type(failure).__name__}: {failure}"[:2000]
        counts["retried"] += 1
        return False
    if 200 <= response.status_code < 300:
        _remember(session, row, response)
        row.sent_at, row.last_error = utcnow(), None
        counts["sent"] += 1
        return False
    message = f"HTTP {response.status_code}: {response.text[:500]}"
    row.last_error = message
    if response.status_code >= 500 or response.status_code in (408, 409):
        row.next_attempt_at = utcnow() + backoff(row.attempts)
        counts["retried"] += 1
    else:
        row.attempts = MAX_ATTEMPTS
        counts["gave_up"] += 1
        log.warning("pull request write refused", extra={"px_write": row.id, "px_error": message})
    return False


def _pause_all(session: Session, row: PullRequestWrite, until: Any) -> None:
    """A rate limit is the token's, not the row's: every waiting write waits; this attempt
    does not count."""
    row.attempts -= 1
    row.last_error = f"rate limited; waiting until {until.isoformat()}"
    session.execute(update(PullRequestWrite).where(PullRequestWrite.sent_at.is_(None),
                                                   PullRequestWrite.next_attempt_at < until)
                    .values(next_attempt_at=until).execution_options(synchronize_session=False))


DUTIES = [Duty("github-pulls", lambda db: send_due(db, current_settings()), interval_s=2.0, lease_s=60.0)]
