"""A measured history written straight into the tables: N commits on `main` x platforms x
metrics x samples, with regressions placed at chosen commits. The dashboard's browser tests and
`bench/dashboard.py` read it; detection (`app.detection.service.rescan`) can then run on it as
it would on uploaded results.
"""
from __future__ import annotations

import hashlib
import random
from dataclasses import dataclass, field
from datetime import timedelta

from sqlalchemy import select
from sqlalchemy.orm import Session

from app.auth.tokens import hash_token, new_token
from app.core.clock import utcnow
from app.core.models import (
    Branch,
    BranchCommit,
    Commit,
    Job,
    JobReason,
    JobState,
    Measurement,
    Repository,
    Run,
    Runner,
    Suite,
)

# name, unit, direction, level, relative noise (sigma of one sample)
METRICS = [
    ("output_throughput", "tok/s", "higher_is_better", 1200.0, 0.01),
    ("itl_p50", "ms", "lower_is_better", 8.0, 0.01),
    ("ttft_p50", "ms", "lower_is_better", 45.0, 0.02),
    ("peak_memory", "MB", "lower_is_better", 2100.0, 0.002),
]
PLATFORM_SPEED = {"cuda": 1.0, "rocm": 0.85, "cpu": 0.05}


@dataclass(frozen=True)
class Step:
    """From commit `at` on, throughput on `platforms` is multiplied by `factor` (latency divided)."""

    at: int
    platforms: tuple[str, ...]
    factor: float


@dataclass
class History:
    repository: str
    shas: list[str] = field(default_factory=list)


def sha_of(repository: str, index: int) -> str:
    return hashlib.sha1(f"{repository}:{index}".encode()).hexdigest()


def seed(session: Session, *, repository: str = "demo/engine", suite: str = "decode-throughput",
         commits: int = 48, platforms: tuple[str, ...] = ("cuda", "rocm", "cpu"), samples: int = 5,
         steps: tuple[Step, ...] = (), seed_value: int = 7, progress: bool = False) -> History:
    rng = random.Random(seed_value)
    repo = session.scalar(select(Repository).where(Repository.name == repository))
    if repo is None:
        repo = Repository(name=repository, url=f"https://github.com/{repository}.git", default_branch="main")
        session.add(repo)
    suite_row = session.scalar(select(Suite).where(Suite.name == suite))
    if suite_row is None:
        suite_row = Suite(name=suite, command=["true"], platforms=list(platforms))
        session.add(suite_row)
    session.flush()
    start = utcnow() - timedelta(hours=commits)
    history = History(repository=repository, shas=[sha_of(repository, i) for i in range(commits)])
    commit_rows = [Commit(repository_id=repo.id, sha=sha, author="Ada Lovelace", graph_loaded=True,
                          summary=f"engine: change {i} of the scheduler", committed_at=start + timedelta(hours=i))
                   for i, sha in enumerate(history.shas)]
    session.add_all(commit_rows)
    session.flush()
    branch = Branch(repository_id=repo.id, name="main", head_commit_id=commit_rows[-1].id)
    session.add(branch)
    session.flush()
    session.add_all([BranchCommit(branch_id=branch.id, commit_id=c.id, position=i) for i, c in enumerate(commit_rows)])
    runners = {p: Runner(name=f"{p}-box-1", platform=p, labels={"platform": p}, facts={"device": f"{p} device"},
                         token_hash=hash_token(new_token("pxn")), last_seen_at=utcnow()) for p in platforms}
    session.add_all(runners.values())
    session.flush()
    for i, commit in enumerate(commit_rows):
        jobs = {p: Job(repository_id=repo.id, commit_id=commit.id, suite_id=suite_row.id, platform=p,
                       state=JobState.succeeded, reason=JobReason.backfill, runner_id=runners[p].id,
                       created_at=start + timedelta(hours=i), started_at=start + timedelta(hours=i),
                       finished_at=start + timedelta(hours=i, seconds=90)) for p in platforms}
        session.add_all(jobs.values())
        session.flush()
        runs = {p: Run(job_id=jobs[p].id, attempt=1, runner_id=runners[p].id, commit_id=commit.id,
                       suite_id=suite_row.id, platform=p, document_sha256=hashlib.sha256(f"{i}{p}".encode()).hexdigest(),
                       environment={"platform": p}, context={"model": "SmolLM2-135M"},
                       context_fingerprint=f"fp-{p}") for p in platforms}
        session.add_all(runs.values())
        session.flush()
        for p in platforms:
            factor = 1.0
            for step in steps:
                if i >= step.at and p in step.platforms:
                    factor *= step.factor
            for name, unit, direction, level, noise in METRICS:
                base = level * PLATFORM_SPEED.get(p, 1.0) if name == "output_throughput" else level
                scale = factor if direction == "higher_is_better" else 1.0 / factor
                if name == "peak_memory":
                    scale = 1.0
                values = [round(base * scale * (1 + rng.gauss(0, noise)), 4) for _ in range(samples)]
                session.add(Measurement(run_id=runs[p].id, metric=name, unit=unit, direction=direction, samples=values))
        if progress and (i + 1) % 200 == 0:
            print(f"  seeded {i + 1}/{commits} commits", flush=True)
    session.commit()
    return history
