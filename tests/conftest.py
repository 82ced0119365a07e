"""Shared fixtures: databases (SQLite always, PostgreSQL when reachable — required under CI),
the app, a real HTTP server on loopback, and temporary git repositories."""
from __future__ import annotations

import gc
import os
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Iterator

import pytest
import sqlalchemy as sa
from flask import Flask

from app.core.migrate import upgrade
from app.core.models import Base
from app.core.scratch import postgres_unreachable, scratch_postgres
from app.git.workdir import git
from app.jobs.catalogue import sync_catalogue
from app.web import create_app, pages_home
from tests.support.live_server import LiveServer
from tests.support.ordering import spread_slow
from tests.support.settings import ADMIN_TOKEN, DEFAULT_PG, REPO_ROOT, SHARED, SUITES, make_settings  # noqa: F401

pytest_plugins = ["tests.support.examples"]


def pytest_configure(config: pytest.Config) -> None:
    """Under pytest-xdist (`make test` runs a worker per core) each worker and the jobs it starts
    get one BLAS/OpenMP thread: two workers with a thread per core each would oversubscribe.

    Parsed GGUF models go to a model cache of this run's own (`PARALLAX_MODEL_CACHE`, unless set),
    made before the workers start so they and the jobs they run share it, and removed at the end:
    tests neither read nor fill the user's cache."""
    # scheduler_core.model.cache.CACHE_ENV, spelled out: importing it here would import torch in
    # every worker before its first test needs it.
    if not hasattr(config, "workerinput") and "PARALLAX_MODEL_CACHE" not in os.environ:
        run_cache = tempfile.mkdtemp(prefix="parallax-test-models-")
        os.environ["PARALLAX_MODEL_CACHE"] = run_cache
        config.add_cleanup(lambda: shutil.rmtree(run_cache, ignore_errors=True))
    if hasattr(config, "workerinput"):
        for name in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
            os.environ.setdefault(name, "1")
        if "torch" in sys.modules:  # imported already: the variables above came too late for it
            sys.modules["torch"].set_num_threads(1)


@pytest.hookimpl(trylast=True)  # after `-m` has deselected: the slices are of what runs
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Slow tests at the start of every xdist worker's first slice (tests/support/ordering.py):
    workers take the longest tests while the short ones are still there to fill the gaps."""
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
    items[:] = spread_slow(items, workers, lambda item: item.get_closest_marker("slow") is not None,
                           lambda item: item.nodeid.split("::")[0])


@pytest.fixture(autouse=True)
def unfrozen_heap() -> Iterator[None]:
    """A job run in-process freezes the heap (scheduler_core.jobs.common.freeze_heap), as it would
    in a process of its own; in a test worker the frozen objects would never be collected after."""
    yield
    if gc.get_freeze_count():
        gc.unfreeze()


@pytest.fixture
def one_torch_thread() -> Iterator[None]:
    """torch on one thread for the test, where the CPU engine's decode attention is the C kernel
    (scheduler_core.decode_attention); the thread count is restored after."""
    import torch  # here, not at the top: workers must not import torch before pytest_configure sets threads

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def _postgres_admin_url() -> str:
    return os.environ.get("PARALLAX_TEST_DATABASE_URL") or DEFAULT_PG


@pytest.fixture(scope="session")
def postgres_server_url() -> Iterator[str]:
    """A fresh PostgreSQL database for this test session, dropped afterwards."""
    admin_url = _postgres_admin_url()
    reason = postgres_unreachable(admin_url)
    if reason is not None:
        if os.environ.get("CI") == "true":
            pytest.fail(f"CI=true but PostgreSQL at {admin_url} is not reachable: {reason}")
        pytest.skip(f"PostgreSQL not reachable ({reason})")
    with scratch_postgres(admin_url, prefix="parallax_test") as url:
        yield url


@pytest.fixture(scope="session")
def migrated_postgres(postgres_server_url: str) -> str:
    upgrade(postgres_server_url)
    return postgres_server_url


@pytest.fixture(scope="session")
def migrated_sqlite_template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("sqlite-template") / "template.db"
    upgrade(f"sqlite:///{path}")
    return path


# Every table emptied, children first, and every sequence a test used set back to 1, as
# `TRUNCATE ... RESTART IDENTITY` would. TRUNCATE gives each table new files: on the 2-core test
# machine it cost about 150-290 ms of the host's CPU per test (the server's work, outside every test
# process), this about 2.4 ms on empty tables (docs/testing.md), and it runs before each of about
# 600 PostgreSQL tests.
_EMPTY_ALL = ";\n".join([*(f'DELETE FROM "{table.name}"' for table in reversed(Base.metadata.sorted_tables)),
                          "SELECT setval((quote_ident(schemaname) || '.' || quote_ident(sequencename))::regclass, 1, false) "
                          "FROM pg_sequences WHERE schemaname = current_schema() AND last_value IS NOT NULL"])


@pytest.fixture(scope="session")
def _postgres_emptier(migrated_postgres: str) -> Iterator[sa.Engine]:
    """One connection for emptying the session's database between tests (a new one per test would
    start a server process each time)."""
    engine = sa.create_engine(migrated_postgres, pool_size=1, max_overflow=0)
    yield engine
    engine.dispose()


def _empty_all(engine: sa.Engine) -> None:
    with engine.begin() as conn:
        conn.exec_driver_sql(_EMPTY_ALL)


@pytest.fixture(scope="session")
def kept_apps() -> Iterator[dict[str, Flask]]:
    """Apps reused across tests, keyed by their settings: the last one made on each database kind
    (the database is emptied or replaced between tests, `app` re-applies the catalogue). Making an
    app costs 36 ms of CPU (mostly werkzeug compiling its routes), and a new engine compiles every
    statement again: docs/testing.md."""
    apps: dict[str, Flask] = {}
    yield apps
    for flask_app in apps.values():
        _disconnect(flask_app)


def _disconnect(flask_app: Flask) -> None:
    """Close the app's pooled connections; it opens new ones when next used."""
    for name in ("parallax.db", "parallax.read_db"):
        if name in flask_app.extensions:
            flask_app.extensions[name].engine.dispose()


def _is_sqlite(url: str) -> bool:
    return url.startswith("sqlite")


@pytest.fixture(scope="session")
def _sqlite_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """This worker's SQLite database file: one path, so that an app made for it can be reused."""
    return tmp_path_factory.mktemp("sqlite-db") / "parallax.db"


def _fresh_sqlite(template: Path, path: Path, apps: dict[str, Flask]) -> str:
    """Replace the worker's SQLite file with a copy of the migrated, empty template. The kept apps'
    connections are closed first (they reconnect to the new file), and the file is swapped in whole
    (a new inode), so a connection another test left open can only see the old one."""
    for flask_app in apps.values():
        if _is_sqlite(flask_app.extensions["parallax.settings"].database_url):
            _disconnect(flask_app)
    staged = path.with_name(path.name + ".new")
    shutil.copy(template, staged)
    for suffix in ("-wal", "-shm", "-journal"):  # a stale journal would be replayed into the new file
        Path(f"{path}{suffix}").unlink(missing_ok=True)
    os.replace(staged, path)
    return f"sqlite:///{path}"


@pytest.fixture(scope="session")
def _worker_data_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("service-data") / "data"


@pytest.fixture
def data_dir(_worker_data_dir: Path) -> str:
    """The service's data directory (its git mirrors), empty: one path for this worker, so that an
    app whose settings name it can be kept (`kept_apps`) instead of made again for every test."""
    shutil.rmtree(_worker_data_dir, ignore_errors=True)
    _worker_data_dir.mkdir(parents=True)
    return str(_worker_data_dir)


@pytest.fixture(params=["sqlite", "postgresql"])
def database_url(request: pytest.FixtureRequest, kept_apps: dict[str, Flask]) -> str:
    """A migrated, empty database: SQLite, and PostgreSQL when reachable."""
    if request.param == "sqlite":
        return _fresh_sqlite(request.getfixturevalue("migrated_sqlite_template"),
                             request.getfixturevalue("_sqlite_path"), kept_apps)
    _empty_all(request.getfixturevalue("_postgres_emptier"))
    return str(request.getfixturevalue("migrated_postgres"))


@pytest.fixture
def sqlite_url(migrated_sqlite_template: Path, _sqlite_path: Path, kept_apps: dict[str, Flask]) -> str:
    return _fresh_sqlite(migrated_sqlite_template, _sqlite_path, kept_apps)


@pytest.fixture
def postgres_url(migrated_postgres: str, _postgres_emptier: sa.Engine) -> str:
    _empty_all(_postgres_emptier)
    return migrated_postgres


@pytest.fixture
def settings(database_url: str):  # type: ignore[no-untyped-def]
    return make_settings(database_url)


@pytest.fixture
def app(settings, kept_apps):  # type: ignore[no-untyped-def]
    key = repr(settings)
    flask_app = kept_apps.get(key)
    if flask_app is None:
        # Keep one app per database kind: tests of one module share settings, and every kept app
        # holds pooled connections (a PostgreSQL server has a limit for them).
        kind = _is_sqlite(settings.database_url)
        for stale in [k for k, a in kept_apps.items() if _is_sqlite(a.extensions["parallax.settings"].database_url) == kind]:
            _disconnect(kept_apps.pop(stale))
        flask_app = kept_apps[key] = create_app(settings)
    else:
        with flask_app.extensions["parallax.db"].session() as session:
            sync_catalogue(session, settings)  # emptying the database between tests removed it
        # The database restarted its ids, so the last test's series answers could match a stamp of
        # this test's data (app/web/series_cache.py), and its home page is not this test's.
        flask_app.extensions["parallax.series_cache"].clear()
        flask_app.extensions[pages_home.SNAPSHOT].forget()
    yield flask_app


@pytest.fixture
def client(app):  # type: ignore[no-untyped-def]
    return app.test_client()


@pytest.fixture
def db(app):  # type: ignore[no-untyped-def]
    return app.extensions["parallax.db"]


@pytest.fixture
def live_server(app) -> Iterator[LiveServer]:  # type: ignore[no-untyped-def]
    with LiveServer(app) as server:
        yield server




CHROMIUM = "/usr/bin/chromium"


# One browser for the whole session, whatever directory asks for it: a second sync_playwright()
# while the first is open fails ("Sync API inside the asyncio loop").
@pytest.fixture(scope="session")
def browser():
    if not shutil.which(CHROMIUM):
        if os.environ.get("CI") == "true":
            pytest.fail(f"CI=true but {CHROMIUM} is missing (make installs Debian's chromium)")
        pytest.skip(f"{CHROMIUM} is not installed")
    from playwright.sync_api import sync_playwright
    with sync_playwright() as playwright:
        instance = playwright.chromium.launch(
            executable_path=CHROMIUM,
            args=["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
                  "--disable-sync", "--no-first-run", "--disable-quic"])
        yield instance
        instance.close()


@pytest.fixture
def page(browser):
    context = browser.new_context(viewport={"width": 1400, "height": 1000})
    tab = context.new_page()
    yield tab
    context.close()


@pytest.fixture
def git_repo(tmp_path: Path) -> Path:
    """A real git repository with three commits on main."""
    repo = tmp_path / "upstream"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    for i in range(3):
        (repo / "file.txt").write_text(f"version {i}\n")
        git(repo, "add", "file.txt")
        git(repo, "commit", "-q", "-m", f"commit {i}")
    return repo
