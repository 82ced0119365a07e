"""The whole product's schema, as SQLAlchemy 2 typed mappings.

Tables are designed for every area (queue, commit graph, measurements, detection, bisect,
GitHub statuses) so that later work adds behaviour, not upheaval. Alembic migrations in
`migrations/` are the only way the schema changes; a test checks that they agree with this file.
"""
from __future__ import annotations

import enum
from datetime import datetime
from typing import Any

from sqlalchemy import (
    JSON,
    Boolean,
    DateTime,
    Enum,
    Float,
    ForeignKey,
    Index,
    Integer,
    LargeBinary,
    MetaData,
    String,
    Text,
    UniqueConstraint,
)
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column, relationship

from app.core.clock import utcnow

NAMING = {
    "ix": "ix_%(column_0_label)s",
    "uq": "uq_%(table_name)s_%(column_0_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}


class UTCDateTime(DateTime):
    """Timezone-aware UTC timestamps on every backend (SQLite stores naive values)."""

    def __init__(self) -> None:
        super().__init__(timezone=True)


class Base(DeclarativeBase):
    metadata = MetaData(naming_convention=NAMING)
    type_annotation_map = {datetime: UTCDateTime, dict[str, Any]: JSON, list[Any]: JSON}


class JobState(str, enum.Enum):
    queued = "queued"
    running = "running"
    succeeded = "succeeded"
    failed = "failed"
    cancelled = "cancelled"


class JobReason(str, enum.Enum):
    push = "push"
    pull_request = "pull_request"
    bisect = "bisect"
    rerun = "rerun"
    manual = "manual"
    backfill = "backfill"
    confirm = "confirm"  # queued by detection to answer an inconclusive classification
    upload = "upload"  # results a CI job measured and sent (POST /api/v1/runs); never claimed
    reproduce = "reproduce"  # an alert's good and bad commits measured again, A/B on one runner


class AlertState(str, enum.Enum):
    new = "new"
    acknowledged = "acknowledged"
    invalid = "invalid"
    wont_fix = "wont_fix"
    fixed = "fixed"


class BisectState(str, enum.Enum):
    pending = "pending"  # stored by the API; the bisect duty checks it against git, then runs it
    running = "running"
    done = "done"
    failed = "failed"
    cancelled = "cancelled"


def _enum(cls: type[enum.Enum]) -> Enum:
    return Enum(cls, native_enum=False, length=32, validate_strings=True,
                values_callable=lambda e: [m.value for m in e])


class Repository(Base):
    __tablename__ = "repositories"
    id: Mapped[int] = mapped_column(primary_key=True)
    name: Mapped[str] = mapped_column(String(200), unique=True)
    url: Mapped[str] = mapped_column(String(1000))
    default_branch: Mapped[str] = mapped_column(String(255), default="main")
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    webhook_secret: Mapped[str | None] = mapped_column(String(255))  # None: PARALLAX_GITHUB_WEBHOOK_SECRET
    # Bumped (app.core.series_epoch) whenever what a series holds changes under the same runs:
    # a branch history re-written, an upload placed on the default branch, a retention prune
    # batch. Part of the series cache's stamp (app/web/series_cache.py).
    series_epoch: Mapped[int] = mapped_column(Integer, default=0, server_default="0")


class Commit(Base):
    __tablename__ = "commits"
    __table_args__ = (UniqueConstraint("repository_id", "sha"),)
    id: Mapped[int] = mapped_column(primary_key=True)
    repository_id: Mapped[int] = mapped_column(ForeignKey("repositories.id", ondelete="CASCADE"), index=True)
    sha: Mapped[str] = mapped_column(String(40), index=True)
    author: Mapped[str | None] = mapped_column(String(255))
    summary: Mapped[str | None] = mapped_column(String(500))
    committed_at: Mapped[datetime | None]
    # False while only the SHA is known (e.g. a parent not yet read from git).
    graph_loaded: Mapped[bool] = mapped_column(Boolean, default=False)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)

    repository: Mapped[Repository] = relationship()


class CommitParent(Base):
    """One edge of the commit DAG: `commit` has `parent` at `position` (0 = first parent)."""

    __tablename__ = "commit_parents"
    commit_id: Mapped[int] = mapped_column(ForeignKey("commits.id", ondelete="CASCADE"), primary_key=True)
    position: Mapped[int] = mapped_column(Integer, primary_key=True)
    parent_id: Mapped[int] = mapped_column(ForeignKey("commits.id", ondelete="CASCADE"), index=True)


class Branch(Base):
    __tablename__ = "branches"
    __table_args__ = (UniqueConstraint("repository_id", "name"),)
    id: Mapped[int] = mapped_column(primary_key=True)
    repository_id: Mapped[int] = mapped_column(ForeignKey("repositories.id", ondelete="CASCADE"), index=True)
    name: Mapped[str] = mapped_column(String(255))
    head_commit_id: Mapped[int | None] = mapped_column(ForeignKey("commits.id"))
    updated_at: Mapped[datetime] = mapped_column(default=utcnow)


class BranchCommit(Base):
    """A commit's place in a branch's first-parent history (series order). A force push sets
    `active` False on the commits it dropped: they stay stored but leave the history."""

    __tablename__ = "branch_commits"
    branch_id: Mapped[int] = mapped_column(ForeignKey("branches.id", ondelete="CASCADE"), primary_key=True)
    commit_id: Mapped[int] = mapped_column(ForeignKey("commits.id", ondelete="CASCADE"), primary_key=True)
    position: Mapped[int] = mapped_column(Integer, index=True)
    active: Mapped[bool] = mapped_column(Boolean, default=True)


class PullRequest(Base):
    __tablename__ = "pull_requests"
    __table_args__ = (UniqueConstraint("repository_id", "number"),)
    id: Mapped[int] = mapped_column(primary_key=True)
    repository_id: Mapped[int] = mapped_column(ForeignKey("repositories.id", ondelete="CASCADE"), index=True)
    number: Mapped[int] = mapped_column(Integer)
    title: Mapped[str | None] = mapped_column(String(500))
    base_branch: Mapped[str] = mapped_column(String(255))
    head_commit_id: Mapped[int | None] = mapped_column(ForeignKey("commits.id"))
    merge_base_commit_id: Mapped[int | None] = mapped_column(ForeignKey("commits.id"))
    state: Mapped[str] = mapped_column(String(32), default="open")
    updated_at: Mapped[datetime] = mapped_column(default=utcnow)


class Platform(Base):
    __tablename__ = "platforms"
    id: Mapped[int] = mapped_column(primary_key=True)
    name: Mapped[str] = mapped_column(String(64), unique=True)
    simulated: Mapped[bool] = mapped_column(Boolean, default=False)


class Suite(Base):
    __tablename__ = "suites"
    id: Mapped[int] = mapped_column(primary_key=True)
    name: Mapped[str] = mapped_column(String(128), unique=True)
    command: Mapped[list[Any]] = mapped_column(JSON)
    platforms: Mapped[list[Any]] = mapped_column(JSON, default=list)
    labels: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)
    timeout_s: Mapped[int] = mapped_column(Integer, default=1800)
    repeats: Mapped[int] = mapped_column(Integer, default=5)
    commit_policy: Mapped[str] = mapped_column(String(16), default="every")
    max_attempts: Mapped[int] = mapped_column(Integer, default=3)
    adapter: Mapped[str | None] = mapped_column(String(64))
    outputs: Mapped[list[Any]] = mapped_column(JSON, default=list)
    setup: Mapped[list[Any] | None] = mapped_column(JSON)
    setup_timeout_s: Mapped[int] = mapped_column(Integer, default=1800)
    env: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)
    pull_requests: Mapped[bool] = mapped_column(Boolean, default=True)  # measured base against head on PRs
    pr_max_rounds: Mapped[int] = mapped_column(Integer, default=12)  # A/B rounds per platform at most
    pr_platforms: Mapped[list[str] | None] = mapped_column(JSON)  # compared on PRs; None: every platform
    min_change: Mapped[dict[str, float]] = mapped_column(JSON, default=dict)  # noise floor per platform


class RegistrationToken(Base):
    __tablename__ = "registration_tokens"
    id: Mapped[int] = mapped_column(primary_key=True)
    token_hash: Mapped[str] = mapped_column(String(64), unique=True)
    note: Mapped[str | None] = mapped_column(String(255))
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    revoked: Mapped[bool] = mapped_column(Boolean, default=False)
    expires_at: Mapped[datetime | None]  # None: never


class User(Base):
    """A person who triages alerts and queues work through the API with a personal token
    (`parallax user add`). Role "admin" may also do what the admin token does."""

    __tablename__ = "users"
    id: Mapped[int] = mapped_column(primary_key=True)
    name: Mapped[str] = mapped_column(String(128), unique=True)
    role: Mapped[str] = mapped_column(String(16), default="maintainer")  # maintainer / admin
    token_hash: Mapped[str] = mapped_column(String(64), unique=True)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    disabled: Mapped[bool] = mapped_column(Boolean, default=False)
    expires_at: Mapped[datetime | None]  # the token's; None: never


class Runner(Base):
    __tablename__ = "runners"
    id: Mapped[int] = mapped_column(primary_key=True)
    name: Mapped[str] = mapped_column(String(255))
    platform: Mapped[str] = mapped_column(String(64), index=True)
    labels: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)
    facts: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)
    token_hash: Mapped[str] = mapped_column(String(64), unique=True)
    registration_token_id: Mapped[int | None] = mapped_column(ForeignKey("registration_tokens.id"))
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    last_seen_at: Mapped[datetime | None]
    disabled: Mapped[bool] = mapped_column(Boolean, default=False)
    # The runner process that claimed last (a random id per process, sent with each claim): a
    # long-poll of an earlier process of the same runner, still waiting after it died, takes no job.
    claim_session: Mapped[str | None] = mapped_column(String(64))


class Job(Base):
    __tablename__ = "jobs"
    __table_args__ = (
        Index("ix_jobs_claim", "state", "platform", "priority", "id"),
        Index("ix_jobs_cell", "commit_id", "suite_id", "platform"),
        Index("ix_jobs_bisect_id", "bisect_id"),
    )
    id: Mapped[int] = mapped_column(primary_key=True)
    repository_id: Mapped[int] = mapped_column(ForeignKey("repositories.id", ondelete="CASCADE"), index=True)
    commit_id: Mapped[int] = mapped_column(ForeignKey("commits.id", ondelete="CASCADE"))
    suite_id: Mapped[int] = mapped_column(ForeignKey("suites.id"))
    platform: Mapped[str] = mapped_column(String(64))
    state: Mapped[JobState] = mapped_column(_enum(JobState), default=JobState.queued)
    reason: Mapped[JobReason] = mapped_column(_enum(JobReason), default=JobReason.manual)
    priority: Mapped[int] = mapped_column(Integer, default=0)  # higher runs first
    attempt: Mapped[int] = mapped_column(Integer, default=1)
    max_attempts: Mapped[int] = mapped_column(Integer, default=3)
    runner_id: Mapped[int | None] = mapped_column(ForeignKey("runners.id"))
    lease_expires_at: Mapped[datetime | None]
    cancel_requested: Mapped[bool] = mapped_column(Boolean, default=False)
    failure_reason: Mapped[str | None] = mapped_column(Text)
    # "build" when the suite's setup failed (nothing measured; a bisect skips the commit)
    failure_kind: Mapped[str | None] = mapped_column(String(16))
    log_bytes: Mapped[int] = mapped_column(Integer, default=0)
    pull_request_id: Mapped[int | None] = mapped_column(ForeignKey("pull_requests.id"))
    bisect_id: Mapped[int | None] = mapped_column(ForeignKey("bisects.id"))
    # Only this runner may claim the job (a pull request's base/head pair runs on one machine).
    pinned_runner_id: Mapped[int | None] = mapped_column(ForeignKey("runners.id"))
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    started_at: Mapped[datetime | None]
    finished_at: Mapped[datetime | None]

    commit: Mapped[Commit] = relationship()
    suite: Mapped[Suite] = relationship()
    repository: Mapped[Repository] = relationship()


class JobAttempt(Base):
    """Who held which attempt of a job, and how it ended (history; lets the API tell a runner
    that lost its lease (409) from one that never held the job (403))."""

    __tablename__ = "job_attempts"
    job_id: Mapped[int] = mapped_column(ForeignKey("jobs.id", ondelete="CASCADE"), primary_key=True)
    attempt: Mapped[int] = mapped_column(Integer, primary_key=True)
    runner_id: Mapped[int] = mapped_column(ForeignKey("runners.id"), index=True)
    claimed_at: Mapped[datetime] = mapped_column(default=utcnow)
    ended_at: Mapped[datetime | None]
    outcome: Mapped[str | None] = mapped_column(String(32))  # succeeded/failed/retry/lease_expired


class JobLog(Base):
    __tablename__ = "job_logs"
    id: Mapped[int] = mapped_column(primary_key=True)
    job_id: Mapped[int] = mapped_column(ForeignKey("jobs.id", ondelete="CASCADE"), index=True)
    attempt: Mapped[int] = mapped_column(Integer)
    text: Mapped[str] = mapped_column(Text)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)


class Run(Base):
    """One completed attempt of a job: the stored results document."""

    __tablename__ = "runs"
    __table_args__ = (UniqueConstraint("job_id", "attempt"),
                      Index("ix_runs_series", "suite_id", "platform", "commit_id"),
                      Index("ix_runs_created_at", "created_at"),
                      # A platform's run count and newest run id in one index-only scan: the
                      # series cache's stamp (app/web/series_cache.py).
                      Index("ix_runs_platform_id", "platform", "id"))
    id: Mapped[int] = mapped_column(primary_key=True)
    job_id: Mapped[int] = mapped_column(ForeignKey("jobs.id", ondelete="CASCADE"))
    attempt: Mapped[int] = mapped_column(Integer)
    runner_id: Mapped[int | None] = mapped_column(ForeignKey("runners.id"))
    commit_id: Mapped[int] = mapped_column(ForeignKey("commits.id", ondelete="CASCADE"))
    suite_id: Mapped[int] = mapped_column(ForeignKey("suites.id"))
    platform: Mapped[str] = mapped_column(String(64))
    document_sha256: Mapped[str] = mapped_column(String(64))
    environment: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)
    context: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)
    # Hash of the context that defines a comparable series (device, model, batch, sync policy).
    context_fingerprint: Mapped[str] = mapped_column(String(64), index=True)
    simulated: Mapped[bool] = mapped_column(Boolean, default=False)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)

    measurements: Mapped[list["Measurement"]] = relationship(back_populates="run", cascade="all, delete-orphan")
    items: Mapped[list["ItemResult"]] = relationship(cascade="all, delete-orphan")


class StoredRunHook(Base):
    """A stored run whose `run_stored` hooks (detection marks, commit status) have not run yet:
    written in the completing transaction, deleted in the transaction that runs the hooks, so
    each stored run is announced exactly once, after its own transaction committed."""

    __tablename__ = "stored_run_hooks"
    run_id: Mapped[int] = mapped_column(ForeignKey("runs.id", ondelete="CASCADE"), primary_key=True)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)


class Measurement(Base):
    __tablename__ = "measurements"
    __table_args__ = (UniqueConstraint("run_id", "metric"),)
    id: Mapped[int] = mapped_column(primary_key=True)
    run_id: Mapped[int] = mapped_column(ForeignKey("runs.id", ondelete="CASCADE"), index=True)
    metric: Mapped[str] = mapped_column(String(128), index=True)
    unit: Mapped[str] = mapped_column(String(32))
    direction: Mapped[str] = mapped_column(String(32))
    samples: Mapped[list[Any]] = mapped_column(JSON)
    # The per-run summary, kept when retention drops the raw samples (then `samples` holds only
    # the median and `samples_pruned_at` says when); None on rows stored before issue 30.
    sample_count: Mapped[int | None] = mapped_column(Integer)
    sample_median: Mapped[float | None] = mapped_column(Float)
    sample_min: Mapped[float | None] = mapped_column(Float)
    sample_max: Mapped[float | None] = mapped_column(Float)
    samples_pruned_at: Mapped[datetime | None]

    run: Mapped[Run] = relationship(back_populates="measurements")


class ItemResult(Base):
    """Per-item correctness vector (e.g. GSM8k question i correct = 1) for paired tests."""

    __tablename__ = "item_results"
    id: Mapped[int] = mapped_column(primary_key=True)
    run_id: Mapped[int] = mapped_column(ForeignKey("runs.id", ondelete="CASCADE"), index=True)
    name: Mapped[str] = mapped_column(String(128))
    correct: Mapped[list[Any]] = mapped_column(JSON)


class WebhookDelivery(Base):
    __tablename__ = "webhook_deliveries"
    id: Mapped[int] = mapped_column(primary_key=True)
    delivery_id: Mapped[str] = mapped_column(String(128), unique=True)
    event: Mapped[str] = mapped_column(String(64))
    action: Mapped[str | None] = mapped_column(String(64))
    payload: Mapped[str] = mapped_column(Text)
    state: Mapped[str] = mapped_column(String(16), default="pending", index=True)  # pending/done/ignored/error/skipped
    result: Mapped[str | None] = mapped_column(Text)
    attempts: Mapped[int] = mapped_column(Integer, default=0)
    received_at: Mapped[datetime] = mapped_column(default=utcnow)
    processed_at: Mapped[datetime | None]
    claimed_until: Mapped[datetime | None]
    failure_kind: Mapped[str | None] = mapped_column(String(32))  # the last failure: missing_commit / error


class Alert(Base):
    """One alert group per commit range of one branch."""

    __tablename__ = "alerts"
    id: Mapped[int] = mapped_column(primary_key=True)
    repository_id: Mapped[int] = mapped_column(ForeignKey("repositories.id", ondelete="CASCADE"), index=True)
    branch: Mapped[str] = mapped_column(String(255))
    # The range: last commit measured at the old level, first measured at the new one.
    good_commit_id: Mapped[int | None] = mapped_column(ForeignKey("commits.id"))
    bad_commit_id: Mapped[int] = mapped_column(ForeignKey("commits.id"))
    kind: Mapped[str] = mapped_column(String(32), default="performance")  # performance/accuracy/correctness
    is_regression: Mapped[bool] = mapped_column(Boolean, default=True)
    state: Mapped[AlertState] = mapped_column(_enum(AlertState), default=AlertState.new, index=True)
    note: Mapped[str | None] = mapped_column(Text)
    updated_by: Mapped[str | None] = mapped_column(String(128))  # user name, or "admin"
    issue_url: Mapped[str | None] = mapped_column(String(1000))  # the tracker issue a maintainer linked
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    updated_at: Mapped[datetime] = mapped_column(default=utcnow)

    changes: Mapped[list["AlertChange"]] = relationship(back_populates="alert", cascade="all, delete-orphan")


class AlertChange(Base):
    __tablename__ = "alert_changes"
    id: Mapped[int] = mapped_column(primary_key=True)
    alert_id: Mapped[int] = mapped_column(ForeignKey("alerts.id", ondelete="CASCADE"), index=True)
    suite: Mapped[str] = mapped_column(String(128))
    metric: Mapped[str] = mapped_column(String(128))
    platform: Mapped[str] = mapped_column(String(64))
    context_fingerprint: Mapped[str] = mapped_column(String(64))
    direction: Mapped[str] = mapped_column(String(32))  # higher_is_better / lower_is_better
    relative_change: Mapped[float] = mapped_column(Float)
    ci_low: Mapped[float | None] = mapped_column(Float)
    ci_high: Mapped[float | None] = mapped_column(Float)
    p_value: Mapped[float | None] = mapped_column(Float)
    before_value: Mapped[float | None] = mapped_column(Float)
    after_value: Mapped[float | None] = mapped_column(Float)
    classification: Mapped[str] = mapped_column(String(32), default="inconclusive")
    is_regression: Mapped[bool] = mapped_column(Boolean, default=True)
    suspected_commits: Mapped[list[Any]] = mapped_column(JSON, default=list)
    details: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)

    alert: Mapped[Alert] = relationship(back_populates="changes")


class Bisect(Base):
    """A search for the commit that changed `metric` on `platform` between good and bad.
    `stages` are the ranges searched (the first-parent range, then a merged branch when the
    culprit is a merge), each a list of SHAs from good to bad; `steps` the rounds queued;
    `result` the latest verdicts, the culprit's effect and the other platforms' confirmation."""

    __tablename__ = "bisects"
    id: Mapped[int] = mapped_column(primary_key=True)
    repository_id: Mapped[int] = mapped_column(ForeignKey("repositories.id", ondelete="CASCADE"))
    suite: Mapped[str] = mapped_column(String(128))
    metric: Mapped[str] = mapped_column(String(128))
    platform: Mapped[str] = mapped_column(String(64))
    good_commit_id: Mapped[int] = mapped_column(ForeignKey("commits.id"))
    bad_commit_id: Mapped[int] = mapped_column(ForeignKey("commits.id"))
    state: Mapped[BisectState] = mapped_column(_enum(BisectState), default=BisectState.running)
    culprit_commit_id: Mapped[int | None] = mapped_column(ForeignKey("commits.id"))
    steps: Mapped[list[Any]] = mapped_column(JSON, default=list)
    alert_id: Mapped[int | None] = mapped_column(ForeignKey("alerts.id"), index=True)
    effect: Mapped[float] = mapped_column(Float, default=0.05)  # relative change sought
    stages: Mapped[list[Any]] = mapped_column(JSON, default=list)
    result: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)
    reason: Mapped[str | None] = mapped_column(Text)  # why it ended, in words
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    updated_at: Mapped[datetime] = mapped_column(default=utcnow)
    finished_at: Mapped[datetime | None]


class CommitStatusUpdate(Base):
    """Outbox of commit statuses to report to GitHub; sent by a background worker with retries."""

    __tablename__ = "commit_status_updates"
    id: Mapped[int] = mapped_column(primary_key=True)
    repository_id: Mapped[int] = mapped_column(ForeignKey("repositories.id", ondelete="CASCADE"))
    sha: Mapped[str] = mapped_column(String(40))
    context: Mapped[str] = mapped_column(String(255))
    state: Mapped[str] = mapped_column(String(16))  # pending/success/failure/error
    description: Mapped[str] = mapped_column(String(140))
    target_url: Mapped[str | None] = mapped_column(String(1000))
    attempts: Mapped[int] = mapped_column(Integer, default=0)
    next_attempt_at: Mapped[datetime] = mapped_column(default=utcnow, index=True)
    sent_at: Mapped[datetime | None]
    last_error: Mapped[str | None] = mapped_column(Text)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)


class WorkerLease(Base):
    """Named background duties (reaper, webhook processing, detection, status sender): a worker
    runs one only while it holds the row's lease, so exactly one process does each piece."""

    __tablename__ = "worker_leases"
    name: Mapped[str] = mapped_column(String(64), primary_key=True)
    owner: Mapped[str | None] = mapped_column(String(128))
    lease_expires_at: Mapped[datetime | None]
    last_run_at: Mapped[datetime | None]


class DetectionState(Base):
    """Per-series bookkeeping for incremental detection."""

    __tablename__ = "detection_state"
    id: Mapped[int] = mapped_column(primary_key=True)
    series_key: Mapped[str] = mapped_column(String(64), unique=True)
    dirty: Mapped[bool] = mapped_column(Boolean, default=True, index=True)
    last_scanned_at: Mapped[datetime | None]
    marked_at: Mapped[datetime | None]  # the latest mark (a run stored): the duty's arrival check
    description: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)


# --- CI uploads (issue 29) ---

class CiToken(Base):
    """A token a CI job uploads results with (`parallax token create --ci`): only for its
    repository, and only for `platform` when that is set. It cannot claim jobs or read pages."""

    __tablename__ = "ci_tokens"
    id: Mapped[int] = mapped_column(primary_key=True)
    token_hash: Mapped[str] = mapped_column(String(64), unique=True)
    repository_id: Mapped[int] = mapped_column(ForeignKey("repositories.id", ondelete="CASCADE"), index=True)
    platform: Mapped[str | None] = mapped_column(String(64))  # None: any platform
    note: Mapped[str | None] = mapped_column(String(255))
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    expires_at: Mapped[datetime | None]  # None: never
    revoked: Mapped[bool] = mapped_column(Boolean, default=False)


class CiUpload(Base):
    """Where an uploaded run came from: the token, the CI run, the idempotency key. The key
    (the `Idempotency-Key` header, else the CI run URL + suite + platform) is unique per
    repository, so a retried upload finds the run it stored the first time."""

    __tablename__ = "ci_uploads"
    __table_args__ = (UniqueConstraint("repository_id", "idempotency_key"),)
    id: Mapped[int] = mapped_column(primary_key=True)
    repository_id: Mapped[int] = mapped_column(ForeignKey("repositories.id", ondelete="CASCADE"))
    run_id: Mapped[int] = mapped_column(ForeignKey("runs.id", ondelete="CASCADE"), unique=True)
    ci_token_id: Mapped[int | None] = mapped_column(ForeignKey("ci_tokens.id", ondelete="SET NULL"))
    idempotency_key: Mapped[str | None] = mapped_column(String(255))
    request_sha256: Mapped[str] = mapped_column(String(64))
    provider: Mapped[str | None] = mapped_column(String(64))
    run_url: Mapped[str | None] = mapped_column(String(1000))
    adapter: Mapped[str | None] = mapped_column(String(64))
    created_at: Mapped[datetime] = mapped_column(default=utcnow)


class QueuedUpload(Base):
    """An upload of a commit the service had not seen, answered 202 and finished by the `uploads`
    duty (app/uploads/queued.py), which reads the commit from git outside any request. Holds the
    validated document as it will be stored, and then the outcome: `stored` with its run, or
    `failed` with the HTTP status and error body the request would have answered. Its
    idempotency key is unique per repository, like a stored upload's."""

    __tablename__ = "queued_uploads"
    __table_args__ = (UniqueConstraint("repository_id", "idempotency_key"),
                      Index("ix_queued_uploads_state", "state"))
    id: Mapped[int] = mapped_column(primary_key=True)
    repository_id: Mapped[int] = mapped_column(ForeignKey("repositories.id", ondelete="CASCADE"))
    ci_token_id: Mapped[int | None] = mapped_column(ForeignKey("ci_tokens.id", ondelete="SET NULL"))
    idempotency_key: Mapped[str | None] = mapped_column(String(255))
    request_sha256: Mapped[str] = mapped_column(String(64))
    sha: Mapped[str] = mapped_column(String(40))
    suite: Mapped[str] = mapped_column(String(128))
    platform: Mapped[str] = mapped_column(String(64))
    document: Mapped[str] = mapped_column(Text)  # the validated results document, as its run will store it
    provider: Mapped[str | None] = mapped_column(String(64))
    run_url: Mapped[str | None] = mapped_column(String(1000))
    adapter: Mapped[str | None] = mapped_column(String(64))
    state: Mapped[str] = mapped_column(String(16), default="pending")  # pending, stored, failed
    run_id: Mapped[int | None] = mapped_column(ForeignKey("runs.id", ondelete="SET NULL"))
    created: Mapped[bool] = mapped_column(Boolean, default=True)  # False: stored by an earlier upload
    error_status: Mapped[int | None] = mapped_column(Integer)
    error: Mapped[dict[str, Any] | None] = mapped_column(JSON)  # {error, detail, field, ...} as a request's answer
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    finished_at: Mapped[datetime | None]


# --- notifications and artifacts (issue 28) ---


class JobArtifact(Base):
    """A file a job uploaded beside its results document (a simulator timeline, a profiler
    trace): kept apart from the measurements, size-capped per file, removed after the retention."""

    __tablename__ = "job_artifacts"
    __table_args__ = (UniqueConstraint("job_id", "attempt", "name"),)
    id: Mapped[int] = mapped_column(primary_key=True)
    job_id: Mapped[int] = mapped_column(ForeignKey("jobs.id", ondelete="CASCADE"), index=True)
    attempt: Mapped[int] = mapped_column(Integer)
    name: Mapped[str] = mapped_column(String(128))
    content_type: Mapped[str] = mapped_column(String(128))
    size_bytes: Mapped[int] = mapped_column(Integer)
    sha256: Mapped[str] = mapped_column(String(64))
    data: Mapped[bytes] = mapped_column(LargeBinary)
    created_at: Mapped[datetime] = mapped_column(default=utcnow, index=True)


class NotificationDelivery(Base):
    """Outbox of messages to people: one row per (configured target, event, subject). The body is
    rendered at the first attempt and kept, so retries send the same bytes; `state` is pending,
    sent, skipped (nothing to say, e.g. no merged pull request) or dead (gave up; `last_error` says why)."""

    __tablename__ = "notification_deliveries"
    id: Mapped[int] = mapped_column(primary_key=True)
    dedupe_key: Mapped[str] = mapped_column(String(255), unique=True)
    target: Mapped[str] = mapped_column(String(128))  # the [[notifications]] entry's name, or "github"
    kind: Mapped[str] = mapped_column(String(32))  # webhook / slack / github_comment
    event: Mapped[str] = mapped_column(String(64))
    repository_id: Mapped[int | None] = mapped_column(ForeignKey("repositories.id", ondelete="CASCADE"))
    alert_id: Mapped[int | None] = mapped_column(ForeignKey("alerts.id", ondelete="CASCADE"))
    bisect_id: Mapped[int | None] = mapped_column(ForeignKey("bisects.id", ondelete="CASCADE"))
    subject: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)
    body: Mapped[str | None] = mapped_column(Text)
    state: Mapped[str] = mapped_column(String(16), default="pending", index=True)
    attempts: Mapped[int] = mapped_column(Integer, default=0)
    next_attempt_at: Mapped[datetime] = mapped_column(default=utcnow)
    last_error: Mapped[str | None] = mapped_column(Text)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    sent_at: Mapped[datetime | None]


# --- pull requests (issue 26) ---

class PullComparison(Base):
    """One head of a pull request measured against its merge-base: A/B rounds per platform and
    suite, the verdicts, and what GitHub was told. A newer head supersedes it (results kept)."""

    __tablename__ = "pull_comparisons"
    id: Mapped[int] = mapped_column(primary_key=True)
    pull_request_id: Mapped[int] = mapped_column(ForeignKey("pull_requests.id", ondelete="CASCADE"), index=True)
    head_commit_id: Mapped[int] = mapped_column(ForeignKey("commits.id"))
    base_commit_id: Mapped[int | None] = mapped_column(ForeignKey("commits.id"))
    state: Mapped[str] = mapped_column(String(16), default="measuring")  # measuring/done/superseded/closed
    conclusion: Mapped[str | None] = mapped_column(String(16))  # success/failure/neutral
    title: Mapped[str | None] = mapped_column(String(500))
    summary: Mapped[str | None] = mapped_column(Text)
    verdicts: Mapped[list[Any]] = mapped_column(JSON, default=list)
    classification: Mapped[list[Any]] = mapped_column(JSON, default=list)
    accepted_by: Mapped[str | None] = mapped_column(String(128))
    check_run_id: Mapped[str | None] = mapped_column(String(32))
    dirty: Mapped[bool] = mapped_column(Boolean, default=True, index=True)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    updated_at: Mapped[datetime] = mapped_column(default=utcnow)


class PullComparisonJob(Base):
    """A job of a comparison: which side (base/head) and which A/B round it measures (a rerun of
    one platform links the other platforms' jobs to the new comparison too)."""

    __tablename__ = "pull_comparison_jobs"
    comparison_id: Mapped[int] = mapped_column(ForeignKey("pull_comparisons.id", ondelete="CASCADE"), primary_key=True)
    job_id: Mapped[int] = mapped_column(ForeignKey("jobs.id", ondelete="CASCADE"), primary_key=True, index=True)
    suite_id: Mapped[int] = mapped_column(ForeignKey("suites.id"))
    platform: Mapped[str] = mapped_column(String(64))
    side: Mapped[str] = mapped_column(String(8))  # base/head
    round: Mapped[int] = mapped_column(Integer)


class Reproduction(Base):
    """An alert's good and bad commits measured again on one platform and suite, as interleaved
    A/B rounds pinned to one runner, before the alert stands (`app.reproduce`)."""

    __tablename__ = "reproductions"
    id: Mapped[int] = mapped_column(primary_key=True)
    alert_id: Mapped[int] = mapped_column(ForeignKey("alerts.id", ondelete="CASCADE"), index=True)
    suite_id: Mapped[int] = mapped_column(ForeignKey("suites.id"))
    platform: Mapped[str] = mapped_column(String(64))
    good_commit_id: Mapped[int] = mapped_column(ForeignKey("commits.id"))
    bad_commit_id: Mapped[int] = mapped_column(ForeignKey("commits.id"))
    # measuring / reproduced / not_reproduced / inconclusive / failed / skipped / cancelled
    state: Mapped[str] = mapped_column(String(16), default="measuring", index=True)
    rounds: Mapped[int] = mapped_column(Integer, default=0)  # A/B rounds queued
    runner_id: Mapped[int | None] = mapped_column(ForeignKey("runners.id"))  # the runner the rounds are pinned to
    verdicts: Mapped[list[Any]] = mapped_column(JSON, default=list)
    reason: Mapped[str | None] = mapped_column(Text)  # the outcome in one line
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    updated_at: Mapped[datetime] = mapped_column(default=utcnow)


class ReproductionJob(Base):
    """A job of a reproduction: which side (good/bad) and which A/B round it measures."""

    __tablename__ = "reproduction_jobs"
    reproduction_id: Mapped[int] = mapped_column(ForeignKey("reproductions.id", ondelete="CASCADE"), primary_key=True)
    job_id: Mapped[int] = mapped_column(ForeignKey("jobs.id", ondelete="CASCADE"), primary_key=True, index=True)
    side: Mapped[str] = mapped_column(String(8))  # good/bad
    round: Mapped[int] = mapped_column(Integer)


class PullRequestGitHub(Base):
    """What Parallax keeps of a pull request on GitHub: the one comment it edits in place."""

    __tablename__ = "pull_request_github"
    pull_request_id: Mapped[int] = mapped_column(ForeignKey("pull_requests.id", ondelete="CASCADE"), primary_key=True)
    comment_id: Mapped[str | None] = mapped_column(String(32))


class GitHubInstallation(Base):
    """The GitHub App installation that covers a repository (from its webhooks' `installation.id`)."""

    __tablename__ = "github_installations"
    repository_id: Mapped[int] = mapped_column(ForeignKey("repositories.id", ondelete="CASCADE"), primary_key=True)
    installation_id: Mapped[int] = mapped_column(Integer)
    updated_at: Mapped[datetime] = mapped_column(default=utcnow)


class PullRequestWrite(Base):
    """Outbox of pull-request writes to GitHub (the check run, the comment, replies to commands),
    sent by the "github-pulls" duty with the commit-status outbox's retries and rate-limit pauses.
    The newest unsent check run or comment of a pull request replaces the older ones."""

    __tablename__ = "pull_request_writes"
    id: Mapped[int] = mapped_column(primary_key=True)
    pull_request_id: Mapped[int] = mapped_column(ForeignKey("pull_requests.id", ondelete="CASCADE"), index=True)
    comparison_id: Mapped[int | None] = mapped_column(ForeignKey("pull_comparisons.id", ondelete="CASCADE"))
    kind: Mapped[str] = mapped_column(String(16))  # check_run/comment/reply
    body: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)
    attempts: Mapped[int] = mapped_column(Integer, default=0)
    next_attempt_at: Mapped[datetime] = mapped_column(default=utcnow, index=True)
    sent_at: Mapped[datetime | None]
    last_error: Mapped[str | None] = mapped_column(Text)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
