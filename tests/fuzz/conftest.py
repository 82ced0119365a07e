"""Fuzzing fixtures: a record of how many examples each property or schemathesis run tried,
printed at the end of the test run (so `make test` shows the figures)."""
from __future__ import annotations

from typing import Any

import pytest

COUNTS: list[str] = []


@pytest.fixture
def record_examples():  # type: ignore[no-untyped-def]
    def record(line: str) -> None:
        COUNTS.append(line)
    return record


def pytest_terminal_summary(terminalreporter: Any) -> None:
    if COUNTS:
        terminalreporter.section("fuzzing: examples tried")
        for line in COUNTS:
            terminalreporter.write_line(line)
