"""Storing a validated results document as a run with its measurements and item vectors."""
from __future__ import annotations

import hashlib
import json
from typing import Any, Sequence

from sqlalchemy.orm import Session

from app.core.models import ItemResult, Job, Measurement, Run
from runners.results import ResultsDocument

# Context keys that vary per run without changing what is measured; they stay out of the
# series fingerprint so that one configuration forms one series across commits. Besides run
# bookkeeping, that is what the code under test decided or observed: the sync policy a commit's
# engine chose (a commit that changes it is exactly the change to detect, not a new series) and
# the simulator's per-run observations (stream busy shares, hazard kinds).
VOLATILE_CONTEXT_KEYS = frozenset({
    "commit", "head", "checked_out", "started_at", "finished_at", "duration_s", "wall_s",
    "hostname", "job_id", "run_id", "attempt", "pid",
    "sync_policy", "sim_stream_busy", "sim_hazard_kinds",
})


def context_fingerprint(context: dict[str, Any], environment: dict[str, Any]) -> str:
    """Hash of what defines a comparable series: the device model plus the stable context
    (model, batch settings, sync policy, ...)."""
    stable = {k: v for k, v in context.items() if k not in VOLATILE_CONTEXT_KEYS}
    key = {"device": environment.get("device"), "simulated": bool(environment.get("simulated", False)),
           "context": stable}
    return hashlib.sha256(json.dumps(key, sort_keys=True, default=str).encode()).hexdigest()


def document_hash(raw: bytes) -> str:
    return hashlib.sha256(raw).hexdigest()


def sample_summary(samples: Sequence[float]) -> dict[str, Any]:
    """The per-run summary stored beside the raw samples (and kept when retention drops them)."""
    values = sorted(float(x) for x in samples)
    n = len(values)
    middle = values[n // 2] if n % 2 else (values[n // 2 - 1] + values[n // 2]) / 2
    return {"sample_count": n, "sample_median": middle, "sample_min": values[0], "sample_max": values[-1]}


def store_run(session: Session, job: Job, runner_id: int | None, document: ResultsDocument, digest: str) -> Run:
    run = Run(
        job_id=job.id, attempt=job.attempt, runner_id=runner_id, commit_id=job.commit_id,
        suite_id=job.suite_id, platform=job.platform, document_sha256=digest,
        environment=document.environment, context=document.context,
        context_fingerprint=context_fingerprint(document.context, document.environment),
        simulated=document.simulated,
    )
    run.measurements = [Measurement(metric=m.name, unit=m.unit, direction=m.direction, samples=list(m.samples),
                                    **sample_summary(m.samples))
                        for m in document.metrics]
    if document.items is not None:
        run.items = [ItemResult(name=document.items.name, correct=list(document.items.correct))]
    session.add(run)
    session.flush()
    return run
