"""Fixtures for the GitHub integration: a signing secret, the real payload examples, and a real
git repository in a temp dir standing in for the repository on GitHub."""
from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.github import REPO_NAME, SECRET, Upstream
from tests.support.settings import make_settings


@pytest.fixture
def upstream(tmp_path: Path) -> Upstream:
    return Upstream(tmp_path / "upstream")


@pytest.fixture
def settings(database_url: str, data_dir: str):  # type: ignore[no-untyped-def]
    return make_settings(database_url, github_webhook_secret=SECRET, data_dir=data_dir)


@pytest.fixture
def tracked(app, db, upstream: Upstream):  # type: ignore[no-untyped-def]
    """The payloads' repository, tracked, with the temp repository as its URL."""
    from app.core.models import Repository
    with db.session() as session:
        repo = Repository(name=REPO_NAME, url=str(upstream.path), default_branch="master")
        session.add(repo)
        session.flush()
        return repo.id
