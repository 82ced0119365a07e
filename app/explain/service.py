"""The explanation of an alert or a finished bisect, as the API, the pages and the
notifications carry it (`explanation`):

- `good` / `culprit`: the commits compared: the alert's last good and first bad measured commits,
  or the bisect's culprit and the commit before it;
- `platforms`: per platform measured at both, the recorded `context` and `environment` keys
  that differ (app.explain.compare), regressed platforms first, each marked `regressed`;
- `files`: the culprit's changed files with line counts, from the repository's git mirror
  (`files_error` says why there are none, e.g. no mirror yet);
- `timelines`: the regressed platform's `timeline.json` artifacts at both commits, with the
  median idle share per decode step (app.explain.timeline);
- `summary`: one line, e.g. `sync_policy.war_barrier false → true on rocm-sim; idle per decode
  step 1 % → 24 %`.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from app.core.config import Settings
from app.core.models import Alert, Bisect, BisectState, Commit, Repository, Run, Suite
from app.explain.compare import Difference, differences, show
from app.explain.timeline import TraceError, read_trace
from app.git.mirror import GitError, Mirror
from app.jobs import artifacts

log = logging.getLogger(__name__)
MAX_FILES = 200


@dataclass(frozen=True)
class Question:
    """What to explain: a suite measured at two commits, the platforms that regressed."""

    repository_id: int
    suite: str
    good_commit_id: int | None
    bad_commit_id: int
    regressed: tuple[str, ...]
    culprit_known: bool


def _run_at(session: Session, suite: str, platform: str, commit_id: int) -> Run | None:
    return session.scalar(select(Run).join(Suite, Suite.id == Run.suite_id)
                          .where(Suite.name == suite, Run.platform == platform, Run.commit_id == commit_id)
                          .order_by(Run.id.desc()).limit(1))


def _platforms_measured(session: Session, suite: str, commit_ids: list[int]) -> set[str]:
    rows = session.execute(select(Run.platform, Run.commit_id).join(Suite, Suite.id == Run.suite_id)
                           .where(Suite.name == suite, Run.commit_id.in_(commit_ids)).distinct()).all()
    by_platform: dict[str, set[int]] = {}
    for platform, commit_id in rows:
        by_platform.setdefault(platform, set()).add(commit_id)
    return {p for p, ids in by_platform.items() if ids >= set(commit_ids)}


def _files(settings: Settings, repository: Repository, good: Commit | None, bad: Commit) -> tuple[list[dict], str | None]:
    if good is None:
        return [], "no earlier measured commit to compare with"
    mirror = Mirror.for_repository(settings.data_dir, repository.name, repository.url)
    if not (mirror.path / "HEAD").is_file():
        return [], f"no git mirror of {repository.name} on this service yet"
    try:
        found = _numstat(mirror.path, good.sha, bad.sha)
    except (GitError, ValueError) as exc:
        return [], f"git could not compare the commits: {exc}"[:500]
    files = [{"path": path, "added": added, "deleted": deleted} for path, added, deleted in found[:MAX_FILES]]
    return files, None if len(found) <= MAX_FILES else f"{len(found)} files changed; the first {MAX_FILES} listed"


@lru_cache(maxsize=512)
def _numstat(path: Path, good: str, bad: str) -> tuple[tuple[str, int | None, int | None], ...]:
    """The diff of two commits never changes: an alert's page and API, its notifications and a
    polling dashboard ask for the same pair again and again, so git runs once per pair and process.
    (Errors are not cached: a mirror that lacks a commit now may have it after the next fetch.)"""
    return tuple(Mirror(path, url="").numstat(good, bad))


def _timeline(session: Session, run: Run | None) -> dict[str, Any] | None:
    if run is None:
        return None
    row = artifacts.of_run(session, run, artifacts.TIMELINE)
    if row is None:
        return None
    out: dict[str, Any] = {"job_id": row.job_id, "attempt": row.attempt, "name": row.name, "size_bytes": row.size_bytes,
                           "url": f"/api/v1/jobs/{row.job_id}/artifacts/{row.name}?attempt={row.attempt}",
                           "idle_per_step": None, "error": None}
    try:
        out["idle_per_step"] = read_trace(row.data).idle_per_step()
    except TraceError as exc:
        out["error"] = f"unreadable timeline: {exc}"
    return out


def explain(session: Session, settings: Settings, question: Question) -> dict[str, Any]:
    repository = session.get(Repository, question.repository_id)
    bad = session.get(Commit, question.bad_commit_id)
    good = session.get(Commit, question.good_commit_id) if question.good_commit_id is not None else None
    assert repository is not None and bad is not None
    platforms_out: list[dict[str, Any]] = []
    runs: dict[str, tuple[Run | None, Run | None]] = {}
    if good is not None:
        measured = _platforms_measured(session, question.suite, [good.id, bad.id])
        order = sorted(measured, key=lambda p: (p not in question.regressed, p))
        for platform in order:
            before = _run_at(session, question.suite, platform, good.id)
            after = _run_at(session, question.suite, platform, bad.id)
            runs[platform] = (before, after)
            assert before is not None and after is not None
            platforms_out.append({
                "platform": platform, "regressed": platform in question.regressed,
                "context": [d.as_json() for d in differences(before.context, after.context)],
                "environment": [d.as_json() for d in differences(before.environment, after.environment)]})
    files, files_error = _files(settings, repository, good, bad)
    timelines: dict[str, Any] = {}
    lead = next((p for p in question.regressed if p in runs), None)
    if lead is not None:
        before, after = runs[lead]
        timelines = {"platform": lead, "good": _timeline(session, before), "culprit": _timeline(session, after)}
    return {"good": good.sha if good else None, "culprit": bad.sha, "culprit_is_range": not question.culprit_known,
            "suite": question.suite, "regressed_platforms": list(question.regressed), "platforms": platforms_out,
            "files": files, "files_error": files_error, "timelines": timelines,
            "summary": summary(platforms_out, timelines)}


def _percent(share: float) -> str:
    return f"{share * 100:.0f} %"


def summary(platforms: list[dict[str, Any]], timelines: dict[str, Any]) -> str:
    """`key before → after on platform` for what changed on the regressed platforms only (the
    differences every platform shares, e.g. a torch upgrade everywhere, come after, with
    `everywhere`), then the idle share per decode step before and after."""
    regressed = [p for p in platforms if p["regressed"]]
    others = [p for p in platforms if not p["regressed"]]
    parts: list[str] = []
    for entry in regressed:
        for block in ("context", "environment"):
            for change in entry[block]:
                difference = Difference(change["key"], change["before"], change["after"])
                elsewhere = [o["platform"] for o in others
                             if any(c["key"] == change["key"] for c in o[block])]
                where = "everywhere" if others and len(elsewhere) == len(others) else f"on {entry['platform']}"
                text = f"{difference.key} {show(difference.before)} → {show(difference.after)} {where}"
                if text not in parts:
                    parts.append(text)
    good, culprit = (timelines.get("good") or {}), (timelines.get("culprit") or {})
    if good.get("idle_per_step") is not None and culprit.get("idle_per_step") is not None:
        parts.append(f"idle per decode step {_percent(good['idle_per_step'])} → {_percent(culprit['idle_per_step'])}")
    if not parts:
        return "no recorded context or environment key differs between the two commits"
    return "; ".join(parts)


# ---------------------------------------------------------------- alerts and bisects

def _culprit_bisect(session: Session, alert: Alert) -> Bisect | None:
    return session.scalar(select(Bisect).where(Bisect.alert_id == alert.id, Bisect.state == BisectState.done,
                                               Bisect.culprit_commit_id.is_not(None)).order_by(Bisect.id.desc()).limit(1))


def bisect_pair(session: Session, bisect: Bisect) -> tuple[int | None, int, bool]:
    """(commit before the culprit, culprit, True) of a bisect that found one, else its range."""
    if bisect.culprit_commit_id is None:
        return bisect.good_commit_id, bisect.bad_commit_id, False
    culprit = session.get(Commit, bisect.culprit_commit_id)
    assert culprit is not None
    for stage in bisect.stages:
        shas = stage.get("commits") or []
        if culprit.sha in shas and shas.index(culprit.sha) > 0:
            before = shas[shas.index(culprit.sha) - 1]
            good_id = session.scalar(select(Commit.id).where(Commit.repository_id == bisect.repository_id,
                                                             Commit.sha == before))
            return good_id, culprit.id, True
    return bisect.good_commit_id, culprit.id, True


def explain_alert(session: Session, settings: Settings, alert: Alert) -> dict[str, Any] | None:
    """None for an alert without changes (nothing to compare)."""
    changes = sorted(alert.changes, key=lambda c: c.id)
    if not changes:
        return None
    regressed = tuple(dict.fromkeys(c.platform for c in changes if c.is_regression)) or (changes[0].platform,)
    bisect = _culprit_bisect(session, alert)
    if bisect is not None:
        good_id, bad_id, known = bisect_pair(session, bisect)
        suite = bisect.suite
    else:
        good_id, bad_id = alert.good_commit_id, alert.bad_commit_id
        known = len(changes[0].suspected_commits or []) <= 1
        suite = changes[0].suite
    return explain(session, settings, Question(alert.repository_id, suite, good_id, bad_id, regressed, known))


def explain_bisect(session: Session, settings: Settings, bisect: Bisect) -> dict[str, Any] | None:
    """None while the bisect runs."""
    if bisect.state == BisectState.running:
        return None
    good_id, bad_id, known = bisect_pair(session, bisect)
    return explain(session, settings, Question(bisect.repository_id, bisect.suite, good_id, bad_id,
                                               (bisect.platform,), known))
