"""The scheduler's modules import one way: records is a leaf, overlap never imports scheduler at run time,
and scheduler.py / overlap.py import at the top, never inside a function."""
from __future__ import annotations

import ast
from pathlib import Path

import scheduler_core

PACKAGE = Path(scheduler_core.__file__).parent


def _tree(module: str) -> ast.Module:
    return ast.parse((PACKAGE / f"{module}.py").read_text())


def _runtime_imports(tree: ast.Module) -> set[str]:
    """Modules imported at module level outside ``if TYPE_CHECKING:`` blocks."""
    found: set[str] = set()
    for node in tree.body:
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            continue
        for sub in ast.walk(node):
            if isinstance(sub, ast.ImportFrom) and sub.module:
                found.add(sub.module)
            elif isinstance(sub, ast.Import):
                found.update(alias.name for alias in sub.names)
    return found


def _function_imports(tree: ast.Module) -> list[str]:
    out = []
    for fn in ast.walk(tree):
        if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
            for sub in ast.walk(fn):
                if isinstance(sub, ast.ImportFrom) and (sub.module or "").startswith("scheduler_core"):
                    out.append(f"{fn.name}: {sub.module}")
    return out


def test_records_is_a_leaf_module() -> None:
    assert not {m for m in _runtime_imports(_tree("records")) if m.startswith("scheduler_core")}


def test_overlap_does_not_import_the_scheduler_at_run_time() -> None:
    assert "scheduler_core.scheduler" not in _runtime_imports(_tree("overlap"))


def test_scheduler_imports_overlap_at_the_top() -> None:
    assert "scheduler_core.overlap" in _runtime_imports(_tree("scheduler"))


def test_no_scheduler_core_import_inside_functions_of_scheduler_or_overlap() -> None:
    assert _function_imports(_tree("scheduler")) == []
    assert _function_imports(_tree("overlap")) == []
