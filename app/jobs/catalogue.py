"""Mirror parallax.toml's repositories, platforms and suites into the database at start-up.

The database is the source of truth at run time (jobs reference suites by id, and a running
service reads suites and repositories from it for every push and job); the file only adds and
updates entries, it never deletes history. It is applied when the service starts, by `parallax
catalogue sync`, and by every other database command of the CLI, which each name what changed.
"""
from __future__ import annotations

from sqlalchemy import inspect, select
from sqlalchemy.orm import Session

from app.core.config import Settings
from app.core.db import get_or_create
from app.core.models import Platform, Repository, Suite


def sync_catalogue(session: Session, settings: Settings) -> list[str]:
    """Apply the catalogue; returns what changed, one line each (empty when nothing did)."""
    if not inspect(session.get_bind()).has_table("suites"):
        return []  # schema not created yet (the caller checked or will run migrations)
    changes: list[str] = []
    for spec in settings.repositories:
        repo = session.scalar(select(Repository).where(Repository.name == spec.name))
        if repo is None:
            session.add(Repository(name=spec.name, url=spec.url, default_branch=spec.default_branch))
            changes.append(f"repository {spec.name} added")
        elif (repo.url, repo.default_branch) != (spec.url, spec.default_branch):
            repo.url, repo.default_branch = spec.url, spec.default_branch
            changes.append(f"repository {spec.name} updated (url {spec.url}, default branch {spec.default_branch})")
    names = set(settings.platforms)
    for spec in settings.suites:
        names.update(spec.platforms)
        existing = session.scalar(select(Suite).where(Suite.name == spec.name))
        before = _suite_fields(existing) if existing is not None else None
        suite = get_or_create(session, Suite, {"command": list(spec.command), "platforms": list(spec.platforms)},
                              name=spec.name)
        suite.command = list(spec.command)
        suite.platforms = list(spec.platforms)
        suite.labels = dict(spec.labels)
        suite.timeout_s = spec.timeout_s
        suite.repeats = spec.repeats
        suite.commit_policy = spec.commit_policy
        suite.max_attempts = spec.max_attempts
        suite.adapter = spec.adapter
        suite.outputs = list(spec.outputs)
        suite.setup = list(spec.setup) if spec.setup else None
        suite.setup_timeout_s = spec.setup_timeout_s
        suite.env = dict(spec.env)
        suite.pull_requests = spec.pull_requests
        suite.pr_max_rounds = spec.pr_max_rounds
        suite.pr_platforms = list(spec.pr_platforms) if spec.pr_platforms else None
        if before is None:
            changes.append(f"suite {spec.name} added")
        elif before != _suite_fields(suite):
            changes.append(f"suite {spec.name} updated")
    known = set(session.scalars(select(Platform.name)))
    for name in sorted(names - known):
        session.add(Platform(name=name, simulated=name.endswith("-sim")))
        changes.append(f"platform {name} added")
    return changes


def _suite_fields(suite: Suite) -> tuple[object, ...]:
    return (list(suite.command), list(suite.platforms or []), dict(suite.labels or {}), suite.timeout_s, suite.repeats,
            suite.commit_policy, suite.max_attempts, suite.adapter, list(suite.outputs or []),
            list(suite.setup) if suite.setup else None, suite.setup_timeout_s, dict(suite.env or {}),
            suite.pull_requests, suite.pr_max_rounds, suite.pr_platforms)
