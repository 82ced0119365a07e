"""What goes into the notification outbox (`notification_deliveries`), and when.

Receivers of `alert_opened`, `alert_fixed`, `alert_withdrawn`, `bisect_done` and `pull_request_verdict` run inside
the sender's transaction: they only insert rows, one per matching `[[notifications]]` target
(its `events`, `repository` and `platforms`), keyed so an event is queued once per target and
subject. A culprit that is known (an alert with one suspect, or a finished bisect) also queues
one comment on the pull request that merged it, once per alert, when a GitHub token is set. The
`notify-digest` duty queues one digest of open alerts per repository and target per UTC day.
Bodies are rendered later, by the sender (app.notify.sender), outside these transactions.
"""
from __future__ import annotations

from typing import Any, Iterable

from sqlalchemy import select
from sqlalchemy.orm import Session

from app.core.clock import utcnow
from app.core.config import NotificationSpec, Settings, current_settings
from app.core.db import Database
from app.core.models import Alert, AlertChange, AlertState, Bisect, Commit, NotificationDelivery, PullRequest, Repository
from app.github.status import enabled_for

GITHUB_TARGET = "github"
OPEN_STATES = (AlertState.new, AlertState.acknowledged)


def matching(settings: Settings, event: str, repository: str | None, platforms: Iterable[str]) -> list[NotificationSpec]:
    """The targets that asked for `event` about this repository and (any of) these platforms."""
    wanted = set(platforms)
    return [spec for spec in settings.notifications
            if event in spec.events
            and (spec.repository is None or spec.repository == repository)
            and (not spec.platforms or not wanted or wanted & set(spec.platforms))]


def _queue(session: Session, *, key: str, target: str, kind: str, event: str, repository_id: int | None,
           alert_id: int | None = None, bisect_id: int | None = None, subject: dict[str, Any] | None = None) -> bool:
    if session.scalar(select(NotificationDelivery.id).where(NotificationDelivery.dedupe_key == key)) is not None:
        return False
    session.add(NotificationDelivery(dedupe_key=key[:255], target=target, kind=kind, event=event,
                                     repository_id=repository_id, alert_id=alert_id, bisect_id=bisect_id,
                                     subject=subject or {}, state="pending", next_attempt_at=utcnow()))
    return True


def _repository_name(session: Session, repository_id: int) -> str | None:
    repository = session.get(Repository, repository_id)
    return repository.name if repository else None


def _alert_platforms(alert: Alert) -> list[str]:
    return sorted({c.platform for c in alert.changes})


def queue_alert_event(session: Session, alert: Alert, event: str) -> int:
    settings = current_settings()
    name = _repository_name(session, alert.repository_id)
    queued = 0
    for spec in matching(settings, event, name, _alert_platforms(alert)):
        queued += _queue(session, key=f"{spec.name}|{event}|alert:{alert.id}", target=spec.name, kind=spec.kind,
                         event=event, repository_id=alert.repository_id, alert_id=alert.id)
    return queued


def queue_pull_request_comment(session: Session, alert: Alert, culprit_sha: str) -> bool:
    """One comment per alert on the merged pull request that brought the culprit in (the sender
    asks GitHub which one; none found is recorded as skipped)."""
    settings = current_settings()
    name = _repository_name(session, alert.repository_id)
    if name is None or not enabled_for(settings, name):
        return False
    return _queue(session, key=f"{GITHUB_TARGET}|pull_request.comment|alert:{alert.id}", target=GITHUB_TARGET,
                  kind="github_comment", event="pull_request.comment", repository_id=alert.repository_id,
                  alert_id=alert.id, subject={"sha": culprit_sha, "repository": name})


def on_alert_opened(session: Session, alert: Alert) -> None:
    queue_alert_event(session, alert, "alert.opened")
    suspects = {sha for change in alert.changes for sha in (change.suspected_commits or [])}
    if len(suspects) == 1:
        queue_pull_request_comment(session, alert, suspects.pop())


def on_alert_fixed(session: Session, alert: Alert) -> None:
    queue_alert_event(session, alert, "alert.fixed")


def on_alert_withdrawn(session: Session, alert: Alert) -> None:
    queue_alert_event(session, alert, "alert.withdrawn")


def on_bisect_done(session: Session, bisect: Bisect) -> None:
    settings = current_settings()
    name = _repository_name(session, bisect.repository_id)
    for spec in matching(settings, "bisect.done", name, [bisect.platform]):
        _queue(session, key=f"{spec.name}|bisect.done|bisect:{bisect.id}", target=spec.name, kind=spec.kind,
               event="bisect.done", repository_id=bisect.repository_id, alert_id=bisect.alert_id, bisect_id=bisect.id)
    if bisect.alert_id is not None and bisect.culprit_commit_id is not None:
        alert = session.get(Alert, bisect.alert_id)
        culprit = session.get(Commit, bisect.culprit_commit_id)
        if alert is not None and culprit is not None:
            queue_pull_request_comment(session, alert, culprit.sha)


def on_pull_request_verdict(session: Session, pull: PullRequest) -> None:
    settings = current_settings()
    name = _repository_name(session, pull.repository_id)
    for spec in matching(settings, "pull_request.verdict", name, []):
        _queue(session, key=f"{spec.name}|pull_request.verdict|pull:{pull.id}:{utcnow().isoformat()}",
               target=spec.name, kind=spec.kind, event="pull_request.verdict", repository_id=pull.repository_id,
               subject={"pull_request_id": pull.id, "number": pull.number})


def queue_digests(db: Database, settings: Settings | None = None) -> int:
    """The `notify-digest` duty: one message per repository with open regressions and per target
    that takes `alert.opened` for it (and one of their platforms), once per UTC day."""
    settings = settings or current_settings()
    day = utcnow().date().isoformat()
    queued = 0
    with db.session() as session:
        platforms: dict[int, set[str]] = {}
        for repository_id, platform in session.execute(
                select(Alert.repository_id, AlertChange.platform).join(AlertChange, AlertChange.alert_id == Alert.id)
                .where(Alert.state.in_(OPEN_STATES), Alert.is_regression.is_(True)).distinct()):
            platforms.setdefault(repository_id, set()).add(platform)
        for repository_id in sorted(platforms):
            name = _repository_name(session, repository_id)
            for spec in matching(settings, "alert.opened", name, platforms[repository_id]):
                queued += _queue(session, key=f"{spec.name}|digest|{repository_id}|{day}", target=spec.name,
                                 kind=spec.kind, event="digest", repository_id=repository_id,
                                 subject={"day": day, "platforms": list(spec.platforms)})
        session.commit()
    return queued
