"""Scratch databases for the benchmarks: a fresh PostgreSQL database (dropped afterwards) and a
fresh SQLite file, so every bench measures both backends the same way."""
from __future__ import annotations

import json
import uuid
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator

import sqlalchemy as sa

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_POSTGRES = "postgresql+psycopg://postgres@127.0.0.1:5432/test"


@contextmanager
def scratch_postgres(server_url: str = DEFAULT_POSTGRES) -> Iterator[str]:
    admin = sa.create_engine(server_url, isolation_level="AUTOCOMMIT")
    name = f"parallax_bench_{uuid.uuid4().hex[:8]}"
    with admin.connect() as conn:
        conn.execute(sa.text(f'CREATE DATABASE "{name}"'))
    try:
        yield sa.engine.make_url(server_url).set(database=name).render_as_string(hide_password=False)
    finally:
        with admin.connect() as conn:
            conn.execute(sa.text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        admin.dispose()


@contextmanager
def scratch_sqlite(directory: Path) -> Iterator[str]:
    directory.mkdir(parents=True, exist_ok=True)
    path = (directory / f"bench-{uuid.uuid4().hex[:8]}.db").resolve()
    try:
        yield f"sqlite:///{path}"
    finally:
        for suffix in ("", "-wal", "-shm"):
            Path(f"{path}{suffix}").unlink(missing_ok=True)


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
