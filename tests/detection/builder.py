"""Write branch histories and results straight into the database, as the GitHub area and the
runner protocol would, so detection tests control every commit and sample."""
from __future__ import annotations

import hashlib
from typing import Any, Sequence

import numpy as np
from sqlalchemy import select

from app.core.models import Branch, BranchCommit, Commit, ItemResult, Job, JobState, Measurement, Repository, Run, Suite
from app.detection import service as detection_service

SUITE = "decode-throughput"
METRIC = "output_throughput"


def sha(i: int, branch: str = "main") -> str:
    return f"{hashlib.sha1(branch.encode()).hexdigest()[:3]}{i:037x}"


class Builder:
    def __init__(self, db) -> None:  # type: ignore[no-untyped-def]
        self.db = db
        with db.session() as session:
            self.repository_id = session.scalar(select(Repository.id).where(Repository.name == "demo/engine"))
        self.job_count = 0

    def branch(self, count: int, name: str = "main", start: int = 0, shas: Sequence[str] | None = None) -> list[str]:
        """A first-parent history of `count` commits at positions start..start+count-1 (made-up
        SHAs, or `shas`, e.g. a real repository's)."""
        shas = list(shas) if shas is not None else [sha(start + i, name) for i in range(count)]
        with self.db.session() as session:
            branch = session.scalar(select(Branch).where(Branch.repository_id == self.repository_id,
                                                         Branch.name == name))
            if branch is None:
                branch = Branch(repository_id=self.repository_id, name=name)
                session.add(branch)
                session.flush()
            for i, value in enumerate(shas):
                commit = self._commit(session, value)
                session.add(BranchCommit(branch_id=branch.id, commit_id=commit.id, position=start + i, active=True))
        return shas

    def _commit(self, session, value: str) -> Commit:  # type: ignore[no-untyped-def]
        commit = session.scalar(select(Commit).where(Commit.repository_id == self.repository_id, Commit.sha == value))
        if commit is None:
            commit = Commit(repository_id=self.repository_id, sha=value, graph_loaded=True)
            session.add(commit)
            session.flush()
        return commit

    def result(self, commit_sha: str, platform: str, samples: Sequence[float] | None = None, *,
               metric: str = METRIC, direction: str = "higher_is_better", suite: str = SUITE,
               items: Sequence[int] | None = None, extra: dict[str, Sequence[float]] | None = None,
               context: dict[str, Any] | None = None, environment: dict[str, Any] | None = None) -> int:
        """One stored run (job, run, measurements) at the commit, marked for detection as the
        pipeline does. Returns the run id."""
        with self.db.session() as session:
            return self._result(session, {}, commit_sha, platform, samples, metric=metric, direction=direction,
                                suite=suite, items=items, extra=extra, context=context, environment=environment)

    def _result(self, session, suites: dict[str, int], commit_sha: str, platform: str,  # type: ignore[no-untyped-def]
                samples: Sequence[float] | None, *, metric: str = METRIC, direction: str = "higher_is_better",
                suite: str = SUITE, items: Sequence[int] | None = None,
                extra: dict[str, Sequence[float]] | None = None, context: dict[str, Any] | None = None,
                environment: dict[str, Any] | None = None) -> int:
        commit = self._commit(session, commit_sha)
        if suite not in suites:
            suite_id = session.scalar(select(Suite.id).where(Suite.name == suite))
            assert suite_id is not None
            suites[suite] = suite_id
        suite_id = suites[suite]
        job = Job(repository_id=self.repository_id, commit_id=commit.id, suite_id=suite_id,
                  platform=platform, state=JobState.succeeded)
        session.add(job)
        session.flush()
        run = Run(job_id=job.id, attempt=1, commit_id=commit.id, suite_id=suite_id, platform=platform,
                  document_sha256="0" * 64, context=context or {"model": "m"},
                  environment=environment or {"platform": platform},
                  context_fingerprint=f"fp-{platform}")
        metrics: dict[str, Sequence[float]] = dict(extra or {})
        if samples is not None:
            metrics[metric] = samples
        run.measurements = [Measurement(metric=name, unit="tok/s", direction=direction, samples=list(values))
                            for name, values in metrics.items()]
        if items is not None:
            run.items = [ItemResult(name="gsm8k", correct=list(items))]
        session.add(run)
        session.flush()
        detection_service.on_run_stored(session, run)
        return run.id

    def history(self, shas: Sequence[str], platform: str, levels: Sequence[float], *, cv: float = 0.005,
                seed: int = 0, repeats: int = 3, contexts: Sequence[dict[str, Any]] | None = None,
                environments: Sequence[dict[str, Any]] | None = None, **kwargs: Any) -> list[int]:
        """One result per commit, all stored in one transaction; `contexts` / `environments` (one
        per commit) are recorded as given."""
        rng = np.random.default_rng(seed)
        runs = []
        suites: dict[str, int] = {}
        with self.db.session() as session:
            for i, (value, level) in enumerate(zip(shas, levels)):
                run_level = level * (1 + cv * rng.standard_normal())
                runs.append(self._result(session, suites, value, platform,
                                         list(run_level * (1 + cv / 3 * rng.standard_normal(repeats))),
                                         context=contexts[i] if contexts else None,
                                         environment=environments[i] if environments else None, **kwargs))
        return runs


def step(n: int, at: int, before: float, relative: float) -> list[float]:
    return [before if i < at else before * (1 + relative) for i in range(n)]


def excursion_levels(n_before: int, dip: Sequence[float], n_after: int, seed: int) -> list[float]:
    """A series (sd 12 around 1000, never below 976) with `dip` values after `n_before`."""
    rng = np.random.default_rng(seed)
    quiet = list(1000.0 + np.clip(12.0 * rng.standard_normal(n_before + n_after), -24.0, 24.0))
    return quiet[:n_before] + list(dip) + quiet[n_before:]
