"""Dependencies run one way and never in a circle (DESIGN.md, app/__init__.py)."""
from __future__ import annotations

from pathlib import Path

from tests.architecture.import_graph import cycles, edges, violations

ROOT = Path(__file__).resolve().parents[2]


def test_the_project_has_no_import_cycle() -> None:
    assert cycles(edges(ROOT)) == []


def test_every_import_runs_in_the_allowed_direction() -> None:
    assert violations(edges(ROOT)) == []


def test_no_first_party_import_hides_inside_a_function_in_the_service() -> None:
    """A local import used to dodge a cycle: the layout has none left in app/ (the lazy CLI
    loads command modules through importlib, which is not an import statement)."""
    hidden = [f"{e.source}:{e.line} -> {e.target}" for e in edges(ROOT)
              if e.inside_function and e.source.startswith("app")]
    assert hidden == []


def _write(root: Path, module: str, text: str) -> None:
    path = root / (module.replace(".", "/") + ".py")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def test_the_checker_finds_a_cycle_hidden_inside_a_function(tmp_path: Path) -> None:
    for package in ("app", "app/jobs", "app/github", "runners", "scheduler_core"):
        _write(tmp_path, package.replace("/", ".") + ".__init__", "")
    _write(tmp_path, "app.jobs.queue", "from app.github import status\n")
    _write(tmp_path, "app.github.status", "def hook():\n    from app.jobs import queue\n")
    found = cycles(edges(tmp_path))
    assert len(found) == 1 and "app.jobs.queue" in found[0] and "app.github.status" in found[0]


def test_the_checker_finds_imports_against_the_direction(tmp_path: Path) -> None:
    for package in ("app", "app/core", "app/jobs", "app/web", "runners", "scheduler_core"):
        _write(tmp_path, package.replace("/", ".") + ".__init__", "")
    _write(tmp_path, "app.jobs.queue", "from app.web import bodies\n")
    _write(tmp_path, "app.web.bodies", "")
    _write(tmp_path, "app.core.db", "import app.jobs.queue\n")
    _write(tmp_path, "runners.agent", "from app.core import db\n")
    _write(tmp_path, "scheduler_core.engine", "import runners.agent\n")
    found = "\n".join(violations(edges(tmp_path)))
    for culprit in ("app.jobs.queue:1 imports app.web.bodies", "app.core.db:1 imports app.jobs.queue",
                    "runners.agent:1 imports app.core", "scheduler_core.engine:1 imports runners.agent"):
        assert culprit in found
