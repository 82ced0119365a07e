"""Shared fixtures: databases (SQLite always, PostgreSQL when reachable — required under CI),
the app, a real HTTP server on loopback, and temporary git repositories."""
from __future__ import annotations

import os
import threading
import uuid
from pathlib import Path
from typing import Iterator

import pytest

from app.git.workdir import git

REPO_ROOT = Path(__file__).resolve().parents[1]
SHARED = REPO_ROOT.parent / "shared"
DEFAULT_PG = "postgresql+psycopg://postgres@127.0.0.1:5432/test"
ADMIN_TOKEN = "admin-test-token"

SUITES = [
    {"name": "decode-throughput", "command": ["python", "-c", "print('decode')"],
     "platforms": ["cuda", "rocm", "cpu"], "timeout_s": 60, "repeats": 3},
    {"name": "gsm8k", "command": ["python", "-c", "print('gsm8k')"],
     "platforms": ["cuda", "rocm"], "timeout_s": 60, "repeats": 1},
]


def _postgres_admin_url() -> str:
    return os.environ.get("PARALLAX_TEST_DATABASE_URL") or DEFAULT_PG


def _postgres_reachable(url: str) -> str | None:
    """None when reachable, else the reason."""
    try:
        import sqlalchemy as sa
        engine = sa.create_engine(url, connect_args={"connect_timeout": 3})
        with engine.connect() as conn:
            conn.execute(sa.text("SELECT 1"))
        engine.dispose()
        return None
    except Exception as exc:  # any failure to connect means "not reachable"
        return f"{type(exc).__name__}: {exc}"


@pytest.fixture(scope="session")
def postgres_server_url() -> Iterator[str]:
    """A fresh PostgreSQL database for this test session, dropped afterwards."""
    import sqlalchemy as sa
    admin_url = _postgres_admin_url()
    reason = _postgres_reachable(admin_url)
    if reason is not None:
        if os.environ.get("CI") == "true":
            pytest.fail(f"CI=true but PostgreSQL at {admin_url} is not reachable: {reason}")
        pytest.skip(f"PostgreSQL not reachable ({reason})")
    name = f"parallax_test_{uuid.uuid4().hex[:10]}"
    admin = sa.create_engine(admin_url, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(sa.text(f'CREATE DATABASE "{name}"'))
    url = sa.engine.make_url(admin_url).set(database=name).render_as_string(hide_password=False)
    try:
        yield url
    finally:
        with admin.connect() as conn:
            conn.execute(sa.text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        admin.dispose()


@pytest.fixture(scope="session")
def migrated_postgres(postgres_server_url: str) -> str:
    from app.core.migrate import upgrade
    upgrade(postgres_server_url)
    return postgres_server_url


@pytest.fixture(scope="session")
def migrated_sqlite_template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from app.core.migrate import upgrade
    path = tmp_path_factory.mktemp("sqlite-template") / "template.db"
    upgrade(f"sqlite:///{path}")
    return path


def _truncate_all(url: str) -> None:
    import sqlalchemy as sa

    from app.core.models import Base
    engine = sa.create_engine(url)
    with engine.begin() as conn:
        names = ", ".join(f'"{t.name}"' for t in Base.metadata.sorted_tables)
        conn.execute(sa.text(f"TRUNCATE {names} RESTART IDENTITY CASCADE"))
    engine.dispose()


@pytest.fixture(params=["sqlite", "postgresql"])
def database_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A migrated, empty database: a SQLite file, and PostgreSQL when reachable."""
    if request.param == "sqlite":
        import shutil
        template: Path = request.getfixturevalue("migrated_sqlite_template")
        path = tmp_path / "parallax.db"
        shutil.copy(template, path)
        return f"sqlite:///{path}"
    url = request.getfixturevalue("migrated_postgres")
    _truncate_all(url)
    return url


@pytest.fixture
def sqlite_url(tmp_path: Path, migrated_sqlite_template: Path) -> str:
    import shutil
    path = tmp_path / "parallax.db"
    shutil.copy(migrated_sqlite_template, path)
    return f"sqlite:///{path}"


@pytest.fixture
def postgres_url(migrated_postgres: str) -> str:
    _truncate_all(migrated_postgres)
    return migrated_postgres


def make_settings(database_url: str, **overrides):  # type: ignore[no-untyped-def]
    from app.core.config import Settings, parse_catalogue
    catalogue = parse_catalogue({
        "repositories": [{"name": "demo/engine", "url": "https://github.com/demo/engine.git"}],
        "suites": SUITES,
    })
    values = dict(database_url=database_url, admin_token=ADMIN_TOKEN, testing=True, **catalogue)
    values.update(overrides)
    return Settings(**values)


@pytest.fixture
def settings(database_url: str):  # type: ignore[no-untyped-def]
    return make_settings(database_url)


@pytest.fixture
def app(settings):  # type: ignore[no-untyped-def]
    from app.web import create_app
    flask_app = create_app(settings)
    yield flask_app
    flask_app.extensions["parallax.db"].engine.dispose()


@pytest.fixture
def client(app):  # type: ignore[no-untyped-def]
    return app.test_client()


@pytest.fixture
def db(app):  # type: ignore[no-untyped-def]
    return app.extensions["parallax.db"]


class LiveServer:
    def __init__(self, flask_app) -> None:  # type: ignore[no-untyped-def]
        from werkzeug.serving import make_server
        self.server = make_server("127.0.0.1", 0, flask_app, threaded=True)
        self.url = f"http://127.0.0.1:{self.server.server_port}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> "LiveServer":
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.thread.join(5)


@pytest.fixture
def live_server(app) -> Iterator[LiveServer]:  # type: ignore[no-untyped-def]
    with LiveServer(app) as server:
        yield server




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
