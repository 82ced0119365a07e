"""The import graph of the project's packages, read from the source (imports inside functions
included), and the rules it must keep."""
from __future__ import annotations

import ast
import graphlib
from dataclasses import dataclass
from pathlib import Path

PACKAGES = ("app", "runners", "scheduler_core")
AREAS = ("app.jobs", "app.git", "app.detection", "app.github", "app.auth", "app.bisect", "app.retention", "app.uploads",
         "app.explain", "app.notify", "app.pulls", "app.reproduce")
ENTRY_POINTS = ("app.web", "app.cli", "app.demo", "app.wiring")


@dataclass(frozen=True)
class Edge:
    source: str
    target: str
    line: int
    inside_function: bool


def module_name(root: Path, path: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def modules(root: Path) -> dict[str, Path]:
    found: dict[str, Path] = {}
    for package in PACKAGES:
        for path in sorted((root / package).rglob("*.py")):
            found[module_name(root, path)] = path
    return found


def _resolve(name: str, known: dict[str, Path]) -> str | None:
    """The longest known module that `name` is or lies inside."""
    while name:
        if name in known:
            return name
        name = name.rpartition(".")[0]
    return None


def edges(root: Path) -> list[Edge]:
    known = modules(root)
    found: list[Edge] = []
    for source, path in known.items():
        tree = ast.parse(path.read_text(), str(path))
        functions = [node for node in ast.walk(tree) if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))]
        nested = {id(inner) for fn in functions for inner in ast.walk(fn) if inner is not fn}
        nested |= {id(fn) for fn in functions}
        for node in ast.walk(tree):
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                # `from pkg import name` names a submodule when one exists, else an attribute of pkg.
                targets = [f"{node.module}.{alias.name}" for alias in node.names]
            for target in targets:
                resolved = _resolve(target, known)
                if resolved is not None and resolved != source:
                    found.append(Edge(source, resolved, node.lineno, id(node) in nested))
    return found


def cycles(graph_edges: list[Edge]) -> list[str]:
    """Each cycle found, as 'a -> b -> a' (graphlib reports one at a time; edges are removed
    from the cycle just reported until none is left)."""
    remaining = {(e.source, e.target) for e in graph_edges}
    reports: list[str] = []
    while True:
        graph: dict[str, set[str]] = {}
        for source, target in remaining:
            graph.setdefault(source, set()).add(target)
        try:
            graphlib.TopologicalSorter(graph).prepare()
            return reports
        except graphlib.CycleError as exc:
            cycle = exc.args[1]
            reports.append(" -> ".join(reversed(cycle)))
            remaining.discard((cycle[1], cycle[0]))


def _inside(module: str, packages: tuple[str, ...] | str) -> bool:
    packages = (packages,) if isinstance(packages, str) else packages
    return any(module == p or module.startswith(p + ".") for p in packages)


def violations(graph_edges: list[Edge]) -> list[str]:
    """Every import against the allowed direction, with where it is."""
    rules = [
        ("scheduler_core", ("app", "runners"), "scheduler_core is the system under test: it imports neither app nor runners"),
        ("runners", ("app",), "runners never import app (a GPU box has no Flask or database)"),
        ("app.core", AREAS + ENTRY_POINTS, "app.core imports no area and no entry point"),
        (AREAS, ENTRY_POINTS, "areas never import web, cli, demo or wiring"),
    ]
    found = []
    for edge in graph_edges:
        for sources, forbidden, why in rules:
            if _inside(edge.source, sources) and _inside(edge.target, forbidden):
                found.append(f"{edge.source}:{edge.line} imports {edge.target}: {why}")
        if edge.source == "app":
            found.append(f"app/__init__.py:{edge.line} imports {edge.target}: the package root imports nothing")
    return found
