"""What the benchmarks share: scratch databases on both backends (from `app.core.scratch`), an
aligned table printer and the JSON results writer."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from app.core.scratch import scratch_postgres, scratch_sqlite  # noqa: F401 (re-exported for the benches)

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_POSTGRES = "postgresql+psycopg://postgres@127.0.0.1:5432/test"


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
