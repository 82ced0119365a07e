"""Histories for the explanation tests: a rocm-only regression whose culprit flips a recorded
sync-policy switch, measured on rocm and cuda, with the context each job records."""
from __future__ import annotations

from typing import Any

from sqlalchemy import select

from app.core.models import AlertChange
from app.detection.service import scan_dirty
from tests.detection.builder import Builder, step


def engine_context(war_barrier: bool, platform: str) -> dict[str, Any]:
    return {"model": "SmolLM2-135M-Instruct", "batch_size": 8, "platform": platform,
            "sync_policy": {"war_barrier": war_barrier, "copy_stream": False, "fwd_prepare_d2h": False},
            "commit": "recorded per run, never a cause", "sim_stream_busy": {"forward": 0.9}}


def environment(platform: str, torch: str = "2.13.0") -> dict[str, Any]:
    return {"platform": platform, "device": f"{platform} device", "torch": torch, "simulated": False}


def barrier_on_rocm(build: Builder, db, shas: list[str], at: int, *, torch_after: str = "2.13.0") -> int:  # type: ignore[no-untyped-def]
    """rocm throughput drops 18 % at `at`, where its engine turns the WAR barrier on (and torch
    becomes `torch_after` on rocm); cuda keeps its level and its policy. Returns the alert id."""
    n = len(shas)
    build.history(shas, "rocm", step(n, at, 1000.0, -0.18), seed=1,
                  contexts=[engine_context(i >= at, "rocm") for i in range(n)],
                  environments=[environment("rocm", torch_after if i >= at else "2.13.0") for i in range(n)])
    build.history(shas, "cuda", step(n, at, 3000.0, 0.0), seed=2,
                  contexts=[engine_context(True, "cuda") for _ in range(n)],
                  environments=[environment("cuda") for _ in range(n)])
    report = scan_dirty(db)
    assert report.created, "the rocm step was not detected"
    with db.session() as session:
        return session.scalar(select(AlertChange.alert_id).where(AlertChange.id == report.created[0]))
