"""The bodies of notifications, rendered once per delivery (the sender keeps them, so a retry
sends the same bytes and the same signature).

- webhook: `{"event", "alert": <as GET /api/v1/alerts/<id>, with "explanation">, "url"}`;
  `bisect.done` adds `"bisect"` (as GET /api/v1/bisects/<id>); the digest is
  `{"event": "digest", "repository", "alerts": [...], "url"}`; `pull_request.verdict` carries
  `"pull_request": {repository, number, title, state}`.
- slack: Slack's incoming-webhook format, `{"text", "blocks": [section, context]}`.
- github_comment: `{"body": markdown}` for GitHub's issue-comments API.
"""
from __future__ import annotations

import json
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from app.bisect.service import bisect_json
from app.core.config import Settings
from app.core.models import Alert, AlertState, Bisect, NotificationDelivery, PullRequest, Repository
from app.detection.documents import alert_json
from app.explain.service import explain_alert, explain_bisect

OPEN_STATES = (AlertState.new, AlertState.acknowledged)


class Gone(LookupError):
    """The delivery's subject no longer exists (deleted alert, pruned repository)."""


def _alert_document(session: Session, settings: Settings, alert: Alert) -> dict[str, Any]:
    return {**alert_json(session, alert), "explanation": explain_alert(session, settings, alert)}


def headline(alert: dict[str, Any]) -> str:
    """`output_throughput -18.0 % on rocm (platform_specific)`: the alert's largest change."""
    changes = [c for c in alert["changes"] if c["is_regression"]] or alert["changes"]
    if not changes:
        return f"{alert['kind']} alert"
    change = max(changes, key=lambda c: abs(c["relative_change"] or 0))
    platforms = ", ".join(change.get("platforms") or [change["platform"]])
    return (f"{change['suite']} {change['metric']} {change['relative_change'] * 100:+.1f} % on {platforms} "
            f"({change['classification'].replace('_', '-')})")


def document(session: Session, settings: Settings, row: NotificationDelivery) -> dict[str, Any]:
    """The webhook body (the Slack and comment texts are made from it)."""
    base = settings.public_url
    if row.event == "digest":
        repository = session.get(Repository, row.repository_id) if row.repository_id else None
        if repository is None:
            raise Gone("repository no longer exists")
        alerts = session.scalars(select(Alert).where(Alert.repository_id == repository.id, Alert.state.in_(OPEN_STATES),
                                                     Alert.is_regression.is_(True)).order_by(Alert.id))
        wanted = set(row.subject.get("platforms") or [])
        chosen = [a for a in alerts if not wanted or wanted & {c.platform for c in a.changes}]
        return {"event": "digest", "day": row.subject.get("day"), "repository": repository.name,
                "alerts": [alert_json(session, a) for a in chosen], "url": f"{base}/alerts"}
    if row.event == "pull_request.verdict":
        pull = session.get(PullRequest, row.subject.get("pull_request_id"))
        if pull is None:
            raise Gone("pull request no longer exists")
        repository = session.get(Repository, pull.repository_id)
        name = repository.name if repository else None
        return {"event": row.event, "pull_request": {"repository": name, "number": pull.number, "title": pull.title,
                                                     "state": pull.state},
                "url": f"{base}/api/v1/pulls/{name}/{pull.number}"}
    body: dict[str, Any] = {"event": row.event}
    if row.bisect_id is not None:
        bisect = session.get(Bisect, row.bisect_id)
        if bisect is None:
            raise Gone("bisect no longer exists")
        body["bisect"] = {**bisect_json(session, bisect), "explanation": explain_bisect(session, settings, bisect)}
        body["url"] = f"{base}/bisects/{bisect.id}"
    if row.alert_id is not None:
        alert = session.get(Alert, row.alert_id)
        if alert is None:
            raise Gone("alert no longer exists")
        body["alert"] = _alert_document(session, settings, alert)
        body.setdefault("url", f"{base}/alerts/{alert.id}")
    return body


def summary_line(body: dict[str, Any]) -> str:
    """One line of text for a body: what happened, where, and the explanation's summary."""
    event = body["event"]
    if event == "digest":
        count = len(body["alerts"])
        return f"Parallax daily digest for {body['repository']}: {count} open regression alert{'s' * (count != 1)}"
    if event == "pull_request.verdict":
        pull = body["pull_request"]
        return f"Parallax: verdict for {pull['repository']}#{pull['number']} ({pull['state']})"
    if "bisect" in body and body["bisect"].get("culprit") and event == "bisect.done":
        bisect = body["bisect"]
        return (f"Parallax bisect #{bisect['id']} done: culprit {bisect['culprit']['sha'][:10]} for {bisect['metric']} "
                f"on {bisect['platform']}")
    if "bisect" in body:
        return f"Parallax bisect #{body['bisect']['id']} finished: {body['bisect']['reason']}"
    alert = body["alert"]
    if event == "alert.withdrawn":
        return (f"Parallax withdrew alert #{alert['id']} in {alert['repository']}: {headline(alert)}: "
                f"{alert.get('note') or 'no longer supported by the data'}")
    verb = {"alert.opened": "regression", "alert.fixed": "fixed"}.get(event, event)
    return f"Parallax {verb} in {alert['repository']}: {headline(alert)} (alert #{alert['id']})"


def _explanation(body: dict[str, Any]) -> dict[str, Any] | None:
    if "bisect" in body and body["bisect"].get("explanation"):
        return body["bisect"]["explanation"]
    return (body.get("alert") or {}).get("explanation")


def slack(body: dict[str, Any]) -> dict[str, Any]:
    """Slack's incoming-webhook message: `text` (notifications, fallback) plus blocks."""
    text = summary_line(body)
    lines = [f"*{text}*"]
    explanation = _explanation(body)
    if explanation:
        lines.append(f"What changed: {explanation['summary']}")
    if body["event"] == "digest":
        lines += [f"• #{a['id']} {headline(a)}" for a in body["alerts"][:20]]
    url = body.get("url")
    blocks: list[dict[str, Any]] = [{"type": "section", "text": {"type": "mrkdwn", "text": "\n".join(lines)[:2900]}}]
    if url:
        blocks.append({"type": "context", "elements": [{"type": "mrkdwn", "text": f"<{url}|Open in Parallax>"}]})
    return {"text": text, "blocks": blocks}


def pull_request_comment(body: dict[str, Any], culprit_sha: str) -> str:
    """Markdown naming the regression, the platforms, the explanation and the dashboard link."""
    alert = body["alert"]
    platforms = sorted({p for c in alert["changes"] if c["is_regression"] for p in (c.get("platforms") or [c["platform"]])})
    lines = [f"**Parallax found a performance regression at {culprit_sha[:10]}**, a commit this pull request merged.",
             "", f"- {headline(alert)}", f"- platforms: {', '.join(platforms) or 'none'}"]
    explanation = alert.get("explanation")
    if explanation:
        lines.append(f"- what changed: {explanation['summary']}")
        files = explanation.get("files") or []
        if files:
            lines.append("- files: " + ", ".join(f"`{f['path']}` (+{f['added']}/-{f['deleted']})" for f in files[:10]))
    lines += ["", f"Details: {body.get('url')}"]
    return "\n".join(lines)


def encode(data: dict[str, Any]) -> str:
    return json.dumps(data, sort_keys=True, allow_nan=False, default=str)
