"""A generated upstream repository for bisect tests."""
from __future__ import annotations

from pathlib import Path

from app.git.workdir import git


class Upstream:
    """A real repository: `linear(n)` commits on main (tests branch and merge with `git`)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        path.mkdir(parents=True)
        git(path, "init", "-q", "-b", "main")
        self.counter = 0

    def commit(self) -> str:
        self.counter += 1
        (self.path / f"f{self.counter % 7}.txt").write_text(f"change {self.counter}\n")
        git(self.path, "add", "-A")
        git(self.path, "commit", "-q", "-m", f"commit {self.counter}")
        return git(self.path, "rev-parse", "HEAD")

    def linear(self, n: int) -> list[str]:
        return [self.commit() for _ in range(n)]
