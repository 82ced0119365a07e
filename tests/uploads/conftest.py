"""Fixtures for uploads: the catalogue's repository backed by a real git repository (so unseen
commits are fetched into a real mirror), CI tokens, and a helper that posts an upload."""
from __future__ import annotations

from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from app.core.config import RepositorySpec, parse_catalogue
from tests.support.github import Upstream
from tests.support.settings import SUITES, make_settings

REPOSITORY = "demo/engine"
UPLOAD_SUITES = [*SUITES, {"name": "sglang-one-batch", "command": ["true"], "platforms": ["cuda", "rocm"],
                           "adapter": "sglang-bench-one-batch", "outputs": ["one_batch.jsonl"]}]


@pytest.fixture
def upstream(tmp_path: Path) -> Upstream:
    """The repository's own copy (its URL is this path), with five commits on main."""
    repo = Upstream(tmp_path / "upstream", branch="main")
    repo.commits(5)
    return repo


@pytest.fixture
def settings(database_url: str, tmp_path: Path, upstream: Upstream):  # type: ignore[no-untyped-def]
    catalogue = parse_catalogue({"suites": UPLOAD_SUITES})
    return make_settings(database_url, repositories=(RepositorySpec(name=REPOSITORY, url=str(upstream.path)),
                                                     RepositorySpec(name="other/repo", url=str(upstream.path))),
                         suites=catalogue["suites"], data_dir=str(tmp_path / "data"), github_token="test-token")


def ci_token(app, repository: str = REPOSITORY, platform: str | None = None,  # type: ignore[no-untyped-def]
             expires_in: timedelta | None = None) -> str:
    from app.auth.ci_tokens import create_ci_token
    with app.extensions["parallax.db"].session() as session:
        return create_ci_token(session, repository, platform, expires_in=expires_in)[1]


@pytest.fixture
def token(app) -> str:  # type: ignore[no-untyped-def]
    return ci_token(app)


def upload_body(sha: str, document: dict[str, Any], *, platform: str = "cpu", suite: str = "decode-throughput",
                **extra: Any) -> dict[str, Any]:
    return {"repository": REPOSITORY, "sha": sha, "platform": platform, "suite": suite, "document": document, **extra}


def bearer(token: str, **headers: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}", **headers}
