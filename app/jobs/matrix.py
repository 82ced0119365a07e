"""The job matrix: which (commit x suite x platform) cells a push, a pull request or a backfill
queues, and how urgent each is.

Suites come from the `suites` table (synced from parallax.toml), each with its platforms and
commit policy: "every" measures each commit a push adds to the branch's first-parent history;
"head" measures only the pushed head (the range stays in the commit graph for bisect).
Priorities (higher runs first): the default branch above pull requests above backfill; within a
tier, newer commits first. Queueing goes through `app.queue.enqueue`, which dedupes a cell that
is already queued, running or done (and raises its priority when the new request is more urgent).
"""
from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Sequence

from sqlalchemy import select
from sqlalchemy.orm import Session

from app.core.models import Commit, Job, JobReason, Repository, Suite
from app.jobs.queue import enqueue

# Tiers are 500 M apart; the offset inside a tier stays below that (PostgreSQL INTEGER is 32-bit).
TIER_DEFAULT_BRANCH = 1_000_000_000
TIER_PULL_REQUEST = 500_000_000
TIER_BACKFILL = 0
TIER_SPAN = 500_000_000
_EPOCH = datetime(2025, 1, 1, tzinfo=timezone.utc)


@dataclass(frozen=True)
class Queued:
    job: Job
    created: bool


def _offset(value: int) -> int:
    return max(0, min(TIER_SPAN - 1, value))


def branch_priority(position: int) -> int:
    """Default-branch commits: newer (deeper in the first-parent chain) first."""
    return TIER_DEFAULT_BRANCH + _offset(position)


def pull_request_priority(moment: datetime | None = None) -> int:
    """Pull requests: the most recently updated first (seconds since 2025, ~15 years of room)."""
    moment = moment or datetime.now(timezone.utc)
    return TIER_PULL_REQUEST + _offset(int((moment - _EPOCH).total_seconds()))


def backfill_priority(position: int) -> int:
    return TIER_BACKFILL + _offset(position)


def suites(session: Session) -> list[Suite]:
    return list(session.scalars(select(Suite).order_by(Suite.name)))


def _queue_cells(session: Session, repository: Repository, commit: Commit, suite: Suite, *, reason: JobReason,
                 priority: int, pull_request_id: int | None = None) -> list[Queued]:
    out = []
    for platform in suite.platforms:
        job, created = enqueue(session, repository, commit, suite, platform, reason=reason, priority=priority,
                               pull_request_id=pull_request_id)
        out.append(Queued(job, created))
    return out


def queue_push(session: Session, repository: Repository, commits: Sequence[tuple[Commit, int]], *,
               head: Commit, head_position: int) -> list[Queued]:
    """Queue a push: `commits` are (commit, position) the push added to the branch history;
    suites with policy "every" get each of them, suites with policy "head" only `head`."""
    if not commits:  # e.g. a reset back to a commit already in the history
        return []
    ordered = sorted(commits, key=lambda item: item[1], reverse=True)
    out: list[Queued] = []
    for suite in suites(session):
        targets = ordered if suite.commit_policy == "every" else [(head, head_position)]
        for commit, position in targets:
            out += _queue_cells(session, repository, commit, suite, reason=JobReason.push,
                                priority=branch_priority(position))
    return out


def queue_pull_request(session: Session, repository: Repository, pull_request_id: int, head: Commit,
                       merge_base: Commit | None) -> list[Queued]:
    """Queue a pull request's head for every suite and platform; the merge-base (its baseline)
    too when it has no job yet (usually it was measured on the default branch already)."""
    priority = pull_request_priority()
    out: list[Queued] = []
    for suite in suites(session):
        out += _queue_cells(session, repository, head, suite, reason=JobReason.pull_request, priority=priority,
                            pull_request_id=pull_request_id)
        if merge_base is not None:
            out += _queue_cells(session, repository, merge_base, suite, reason=JobReason.pull_request,
                                priority=priority - 1, pull_request_id=pull_request_id)
    return out


def queue_backfill(session: Session, repository: Repository, commits: Sequence[tuple[Commit, int]]) -> list[Queued]:
    """Queue every suite and platform for each commit of an existing history, newest first."""
    out: list[Queued] = []
    ordered = sorted(commits, key=lambda item: item[1], reverse=True)
    for suite in suites(session):
        for commit, position in ordered:
            out += _queue_cells(session, repository, commit, suite, reason=JobReason.backfill,
                                priority=backfill_priority(position))
    return out
