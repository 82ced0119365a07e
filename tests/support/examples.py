"""How many examples each property or schemathesis run tried, printed at the end of `make test`.

A pytest plugin (registered in tests/conftest.py): tests record lines through the
`record_examples` fixture; under pytest-xdist each worker hands its lines to the controller
when it finishes, and the controller prints them all in one section."""
from __future__ import annotations

from typing import Any, Callable

import pytest

LINES: list[str] = []


@pytest.fixture
def record_examples() -> Callable[[str], None]:
    return LINES.append


def pytest_sessionfinish(session: pytest.Session) -> None:
    workeroutput = getattr(session.config, "workeroutput", None)
    if workeroutput is not None:  # an xdist worker: the controller prints
        workeroutput["examples"] = list(LINES)


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node: Any, error: Any) -> None:
    """xdist's controller hook: a worker finished; keep its lines."""
    LINES.extend(getattr(node, "workeroutput", {}).get("examples", []))


def pytest_terminal_summary(terminalreporter: Any) -> None:
    if LINES and not hasattr(terminalreporter.config, "workerinput"):
        terminalreporter.section("fuzzing: examples tried")
        for line in sorted(LINES):
            terminalreporter.write_line(line)
