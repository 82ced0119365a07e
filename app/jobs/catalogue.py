"""Mirror parallax.toml's repositories, platforms and suites into the database at start-up.

The database is the source of truth at run time (jobs reference suites by id, and a running
service reads suites and repositories from it for every push and job); the file only adds and
updates entries, it never deletes history. It is applied when the service starts, by `parallax
catalogue sync`, and by every other database command of the CLI, which each name what changed.
"""
from __future__ import annotations

from typing import Any

from sqlalchemy import inspect, select
from sqlalchemy.orm import Session

from app.core.config import Settings, SuiteSpec
from app.core.db import get_or_create
from app.core.models import Platform, Repository, Suite


def sync_catalogue(session: Session, settings: Settings, *, apply: bool = True) -> list[str]:
    """Apply the catalogue; returns what changed, one line each (empty when nothing did). With
    `apply=False` it only reads: the lines say what applying would change."""
    # The session's own connection: a second one would wait for its lock on SQLite (BEGIN IMMEDIATE).
    if not inspect(session.connection()).has_table("suites"):
        return []  # schema not created yet (the caller checked or will run migrations)
    changes: list[str] = []
    for spec in settings.repositories:
        repo = session.scalar(select(Repository).where(Repository.name == spec.name))
        if repo is None:
            if apply:
                session.add(Repository(name=spec.name, url=spec.url, default_branch=spec.default_branch))
            changes.append(f"repository {spec.name} added")
        elif (repo.url, repo.default_branch) != (spec.url, spec.default_branch):
            if apply:
                repo.url, repo.default_branch = spec.url, spec.default_branch
            changes.append(f"repository {spec.name} updated (url {spec.url}, default branch {spec.default_branch})")
    names = set(settings.platforms)
    for spec in settings.suites:
        names.update(spec.platforms)
        wanted = _suite_values(spec)
        existing = session.scalar(select(Suite).where(Suite.name == spec.name))
        if existing is None:
            changes.append(f"suite {spec.name} added")
        elif _comparable({k: getattr(existing, k) for k in wanted}) != _comparable(wanted):
            changes.append(f"suite {spec.name} updated")
        if apply:
            suite = existing or get_or_create(session, Suite, {"command": wanted["command"],
                                                               "platforms": wanted["platforms"]}, name=spec.name)
            for key, value in wanted.items():
                setattr(suite, key, value)
    known = set(session.scalars(select(Platform.name)))
    for name in sorted(names - known):
        if apply:
            session.add(Platform(name=name, simulated=name.endswith("-sim")))
        changes.append(f"platform {name} added")
    return changes


def _suite_values(spec: SuiteSpec) -> dict[str, Any]:
    """The Suite columns a catalogue entry sets."""
    return {"command": list(spec.command), "platforms": list(spec.platforms), "labels": dict(spec.labels),
            "timeout_s": spec.timeout_s, "repeats": spec.repeats, "commit_policy": spec.commit_policy,
            "max_attempts": spec.max_attempts, "adapter": spec.adapter, "outputs": list(spec.outputs),
            "setup": list(spec.setup) if spec.setup else None, "setup_timeout_s": spec.setup_timeout_s,
            "env": dict(spec.env), "pull_requests": spec.pull_requests, "pr_max_rounds": spec.pr_max_rounds,
            "pr_platforms": list(spec.pr_platforms) if spec.pr_platforms else None,
            "min_change": dict(spec.min_change)}


def _comparable(values: dict[str, Any]) -> dict[str, Any]:
    """Column values with empty collections and None alike, as a suite row may hold either."""
    out = dict(values)
    for key in ("command", "platforms", "outputs"):
        out[key] = list(out[key] or [])
    for key in ("labels", "env", "min_change"):
        out[key] = dict(out[key] or {})
    out["setup"] = list(out["setup"]) if out["setup"] else None
    out["pr_platforms"] = list(out["pr_platforms"]) if out["pr_platforms"] else None
    return out
