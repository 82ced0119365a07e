"""The runners page: each runner's platform and facts, whether it is online (seen within one
lease), its current job, its recent failures and its last heartbeat; and the queue."""
from __future__ import annotations

from flask import current_app, render_template
from sqlalchemy import select

from app.core.models import Job, JobAttempt, JobState, Runner
from app.web.pages_home import fleet, runner_online
from app.web.session import request_session

RECENT_FAILURES = 5


def runners_page() -> str:
    session = request_session()
    lease_s = current_app.extensions["parallax.settings"].lease_s
    listed = session.execute(select(Runner, runner_online()).order_by(Runner.platform, Runner.name)).all()
    runners = [runner for runner, _ in listed]
    online = {runner.id: bool(is_online) for runner, is_online in listed}   # NULL (never seen) is offline
    current = {runner_id: job for runner_id, job in
               ((j.runner_id, j) for j in session.scalars(select(Job).where(Job.state == JobState.running)))}
    failures: dict[int, list[JobAttempt]] = {}
    for attempt in session.scalars(select(JobAttempt).where(JobAttempt.outcome.in_(("failed", "retry", "lease_expired")))
                                   .order_by(JobAttempt.ended_at.desc()).limit(500)):
        listed = failures.setdefault(attempt.runner_id, [])
        if len(listed) < RECENT_FAILURES:
            listed.append(attempt)
    queued = list(session.scalars(select(Job).where(Job.state == JobState.queued)
                                  .order_by(Job.priority.desc(), Job.id).limit(50)))
    return render_template("runners.html", runners=runners, current=current, failures=failures, online=online,
                           queued=queued, fleet=fleet(session), lease_s=lease_s)
