"""The bisect page: the range, each round's tested commits with their samples and verdicts, the
jobs it queued, and the culprit. It reads the `bisects` table as the bisect area writes it:
`steps` is a list of rounds, each a mapping with (when present) `round`, `commit`/`sha`,
`samples`, `verdict` and `job_ids`; keys it does not know are shown as they are."""
from __future__ import annotations

from typing import Any

from flask import abort, render_template
from sqlalchemy import select

from app.core.models import Bisect, Commit, Job, Repository
from app.web.dash_common import median
from app.web.session import request_session

KNOWN_KEYS = {"round", "commit", "sha", "samples", "verdict", "job_ids", "position"}


def step_rows(steps: list[Any]) -> list[dict[str, Any]]:
    rows = []
    for i, step in enumerate(steps or []):
        if not isinstance(step, dict):
            rows.append({"round": i + 1, "sha": None, "samples": [], "median": None, "verdict": None,
                         "extra": {"step": step}})
            continue
        samples = [float(v) for v in step.get("samples") or [] if isinstance(v, (int, float))]
        rows.append({"round": step.get("round", i + 1), "sha": step.get("commit") or step.get("sha"),
                     "samples": samples, "median": median(samples), "verdict": step.get("verdict"),
                     "extra": {k: v for k, v in step.items() if k not in KNOWN_KEYS}})
    return rows


def bisect_page(bisect_id: int) -> str:
    session = request_session()
    bisect = session.get(Bisect, bisect_id)
    if bisect is None:
        abort(404, description=f"bisect {bisect_id} does not exist")
    ids = {bisect.good_commit_id, bisect.bad_commit_id} | ({bisect.culprit_commit_id} if bisect.culprit_commit_id else set())
    commits = {c.id: c for c in session.scalars(select(Commit).where(Commit.id.in_(ids)))}
    jobs = list(session.scalars(select(Job).where(Job.bisect_id == bisect.id).order_by(Job.id)))
    return render_template("bisect.html", bisect=bisect, repository=session.get(Repository, bisect.repository_id),
                           commits=commits, steps=step_rows(bisect.steps), jobs=jobs)


def bisects_page() -> str:
    session = request_session()
    bisects = list(session.scalars(select(Bisect).order_by(Bisect.id.desc()).limit(100)))
    ids = {b.bad_commit_id for b in bisects} | {b.culprit_commit_id for b in bisects if b.culprit_commit_id}
    commits = {c.id: c for c in session.scalars(select(Commit).where(Commit.id.in_(ids)))} if ids else {}
    return render_template("bisects.html", bisects=bisects, commits=commits)
