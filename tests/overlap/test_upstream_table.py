"""docs/overlap.md's table of upstream mechanisms stays true: every "ours" cell names a line of this
tree and a name that occurs on it, and every state is one of the three words."""
from __future__ import annotations

import re

from tests.support.settings import REPO_ROOT

DOC = REPO_ROOT / "docs" / "overlap.md"
CELL = re.compile(r"`(scheduler_core/[\w/]+\.py):(\d+)` `([^`]+)`")


def table_rows() -> list[list[str]]:
    text = DOC.read_text()
    section = text.split("## Upstream mechanisms and where they are here", 1)[1].split("\n## ", 1)[0]
    return [[c.strip() for c in line.strip("|").split("|")] for line in section.splitlines()
            if line.startswith("| ") and not line.startswith("| mechanism")]


def test_every_file_line_in_the_table_names_code_on_that_line() -> None:
    cells = [m for row in table_rows() for m in CELL.finditer(row[2])]
    assert len(cells) >= 10
    for path, line, name in (m.groups() for m in cells):
        lines = (REPO_ROOT / path).read_text().splitlines()
        assert name in lines[int(line) - 1], f"{path}:{line} no longer holds {name!r}: {lines[int(line) - 1]!r}"


def test_every_row_says_faithful_simplified_or_missing() -> None:
    rows = table_rows()
    assert rows
    for row in rows:
        assert row[3].split(":")[0].split(" ")[0] in ("faithful", "simplified", "missing", "—"), row
