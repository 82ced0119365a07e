"""What the benchmarks share: scratch databases on both backends (from `app.core.scratch`), the
service benches' catalogue, seeding and `parallax serve` environment, a log of the SQL statements
an engine sends, an aligned table printer and the JSON results writer."""
from __future__ import annotations

import json
import tomllib
from pathlib import Path
from typing import Any, Callable, TypeVar

import sqlalchemy as sa

from app.auth.tokens import create_registration_token
from app.core.config import Settings, parse_catalogue
from app.core.db import Database
from app.core.migrate import upgrade
from app.core.models import Job, Repository, Suite
from app.core.scratch import scratch_postgres, scratch_sqlite  # noqa: F401 (re-exported for the benches)
from app.jobs.catalogue import sync_catalogue
from app.jobs.queue import get_or_create_commit

T = TypeVar("T")
ROOT = Path(__file__).resolve().parents[1]
DEFAULT_POSTGRES = "postgresql+psycopg://postgres@127.0.0.1:5432/test"

# One repository and one suite on the "cpu" platform, and the results document a bench runner uploads.
CATALOGUE = """
[[repositories]]
name = "bench/engine"
url = "file:///nonexistent"

[[suites]]
name = "decode-throughput"
command = ["true"]
platforms = ["cpu"]
"""
DOC = {"schema": "parallax.results/1", "suite": "decode-throughput",
       "metrics": [{"name": "output_throughput", "unit": "tok/s", "direction": "higher_is_better",
                    "samples": [1.0, 2.0, 3.0]}],
       "context": {}, "environment": {"platform": "cpu"}}


def seed(url: str, jobs: int = 0) -> str:
    """Migrate, load the catalogue and write `jobs` queued jobs straight into the table (no
    wake-ups: for benches whose runners do not wait); returns a registration token."""
    upgrade(url)
    database = Database(url)
    with database.session() as session:
        sync_catalogue(session, Settings(database_url=url, **parse_catalogue(tomllib.loads(CATALOGUE))))
        session.flush()
        repo = session.scalar(sa.select(Repository))
        suite = session.scalar(sa.select(Suite))
        for i in range(jobs):
            commit = get_or_create_commit(session, repo, f"{i:040x}")
            session.add(Job(repository_id=repo.id, commit_id=commit.id, suite_id=suite.id, platform="cpu"))
        token = create_registration_token(session)
    database.engine.dispose()
    return token


class StatementLog:
    """The statements an engine sends (SQLAlchemy's cursor event; transaction control included, as
    the driver sends it), each with its whitespace collapsed and cut to 120 characters."""

    def __init__(self, engine: sa.Engine) -> None:
        self.seen: list[str] = []
        sa.event.listen(engine, "before_cursor_execute", self._seen)

    def _seen(self, _conn: Any, _cursor: Any, statement: str, *_: Any) -> None:
        self.seen.append(" ".join(statement.split())[:120])

    def during(self, call: Callable[[], T]) -> tuple[T, list[str]]:
        """What `call` returns and the statements sent while it ran."""
        self.seen.clear()
        result = call()
        return result, list(self.seen)


def service_env(url: str, tmp: Path, **extra: str) -> dict[str, str]:
    """The environment of a bench's `parallax serve`: its database, the catalogue (written
    under `tmp`), quiet logs, and `extra` PARALLAX_* settings."""
    config = tmp / "parallax.toml"
    config.write_text(CATALOGUE)
    return {"PARALLAX_DATABASE_URL": url, "PARALLAX_CONFIG": str(config), "PARALLAX_LOG_LEVEL": "WARNING", **extra}


def print_table(rows: list[dict[str, Any]], columns: list[tuple[str, str]]) -> None:
    """Print rows as an aligned table; `columns` are (header, key) pairs."""
    widths = [max(len(header), *(len(str(row[key])) for row in rows)) for header, key in columns]
    print("  ".join(header.rjust(w) for (header, _), w in zip(columns, widths)))
    for row in rows:
        print("  ".join(str(row[key]).rjust(w) for (_, key), w in zip(columns, widths)))


def write_results(name: str, results: Any) -> Path:
    out = ROOT / "bench/results" / f"{name}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(results, indent=2))
    print(f"wrote {out.relative_to(ROOT)}")
    return out
