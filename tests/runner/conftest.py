"""Fixtures for runner tests: the real service on a fixed loopback port (restartable, to stage
outages), a three-commit git repository, and `parallax runner` as a separate process."""
from __future__ import annotations

import sys
from pathlib import Path
from typing import Callable, Iterator

import pytest

from tests.support.runner_harness import FAKE_SUITE, Harness, Server, free_port
from tests.support.settings import make_settings


@pytest.fixture
def make_harness(tmp_path: Path, git_repo: Path) -> Iterator[Callable[..., Harness]]:
    """Builds a Harness on a given database URL: `make_harness(url, lease_s=3, timeout_s=30,
    command=(python, fake_suite.py))`."""
    made: list[Harness] = []

    def build(database_url: str, *, lease_s: int = 3, timeout_s: int = 30,
              command: tuple[str, ...] = (sys.executable, str(FAKE_SUITE))) -> Harness:
        from app.core.config import RepositorySpec, SuiteSpec
        from app.web import create_app
        suite = SuiteSpec(name="fake", command=command, platforms=("cpu", "rocm-sim"),
                          timeout_s=timeout_s, repeats=3, max_attempts=3)
        settings = make_settings(database_url, lease_s=lease_s, claim_max_wait_s=2.0,
                                 repositories=(RepositorySpec(name="demo/engine", url=str(git_repo)),),
                                 suites=(suite,))
        flask_app = create_app(settings)
        server = Server(flask_app, free_port())
        server.start()
        harness = Harness(flask_app, server, git_repo, tmp_path)
        made.append(harness)
        return harness

    yield build
    for harness in made:
        harness.close()
        harness.db.engine.dispose()


@pytest.fixture
def harness(make_harness: Callable[..., Harness], sqlite_url: str) -> Harness:
    """The fault tests run on SQLite only; the core flow runs on both databases."""
    return make_harness(sqlite_url)
