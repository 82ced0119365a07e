"""`repositories.series_epoch`: a counter bumped in the transaction that changes what a
repository's series hold without adding a run (a branch history re-written by a push or a force
push, an upload that places a commit on the default branch, a retention prune batch that drops
raw samples). With a platform's run count and newest run id it makes the series cache's stamp
(app/web/series_cache.py): any write that changes a series changes the stamp.

The bump is one UPDATE of the repository's row, so it takes that row's lock
until the transaction ends: callers bump last, just before they commit."""
from __future__ import annotations

from typing import Iterable

from sqlalchemy import update
from sqlalchemy.orm import Session

from app.core.models import Repository


def bump_series_epoch(session: Session, repository_ids: Iterable[int]) -> None:
    """Advance the epoch of these repositories (each once, in id order: two transactions
    bumping the same pair never wait on each other in opposite orders)."""
    for repository_id in sorted(set(repository_ids)):
        session.execute(update(Repository).where(Repository.id == repository_id)
                        .values(series_epoch=Repository.series_epoch + 1)
                        .execution_options(synchronize_session=False))
