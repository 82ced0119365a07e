"""Whether a platform has a Parallax runner at all, and the plain note said where work queued
on a platform without one would otherwise wait silently (bisects, pull-request comparisons)."""
from __future__ import annotations

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from app.core.models import Runner


def has_runner(session: Session, platform: str) -> bool:
    """An enabled runner of the platform is registered (seen lately or not)."""
    count = session.scalar(select(func.count()).select_from(Runner).where(
        Runner.platform == platform, Runner.disabled.is_(False)))
    return bool(count)


def no_runner_note(session: Session, platform: str, *, waiting: str = "this search's jobs",
                   commits: str = "its commits") -> str | None:
    """Said plainly when no enabled runner of the platform is registered: `waiting` then waits
    until one registers, or until CI uploads results for `commits`."""
    if has_runner(session, platform):
        return None
    return (f"no Parallax runner is registered for platform {platform!r}: {waiting} wait in the queue "
            f"until one registers, or until CI uploads results for {commits} (POST /api/v1/runs, `parallax upload`)")
