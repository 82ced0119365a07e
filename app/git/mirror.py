"""Bare git mirrors of tracked repositories, and the few history queries Parallax needs.

A webhook payload lists at most 2048 commits and no parents, so the commit graph is read from
git itself: each repository gets a bare mirror under `<data_dir>/mirrors/`, fetched before a
delivery is processed. Every git call is an argv list (never a shell), every SHA is validated
before it reaches git, and ref names are checked with `git check-ref-format`. Fetches into one
mirror are serialised with a file lock, so the webhook worker and `parallax backfill` can share it.
"""
from __future__ import annotations

import fcntl
import os
import re
import subprocess
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Iterator, Sequence

from app.core.shas import SHA_RE

ZERO_SHA = "0" * 40
GIT_TIMEOUT_S = 600.0
_FIELD, _RECORD = "\x1f", "\x1e"


class GitError(RuntimeError):
    """A git command failed; the message carries the command and git's own words."""


@dataclass(frozen=True)
class CommitInfo:
    sha: str
    parents: tuple[str, ...]
    author: str
    committed_at: datetime
    summary: str


def require_sha(value: object, what: str = "commit") -> str:
    if not isinstance(value, str) or not SHA_RE.match(value):
        raise ValueError(f"{what}: not a full 40-character lowercase hex SHA: {value!r}")
    return value


def mirror_dir_name(repository_name: str) -> str:
    """A file-system-safe, collision-free directory name for a repository name."""
    safe = re.sub(r"[^A-Za-z0-9._-]", "_", repository_name).lstrip(".") or "repo"
    return f"{safe}.git"


class Mirror:
    """One bare mirror: `refs/heads/*` follow the remote's branches (force pushes included)."""

    def __init__(self, path: Path, url: str) -> None:
        self.path = Path(path)
        self.url = url

    @classmethod
    def for_repository(cls, data_dir: str | Path, name: str, url: str) -> "Mirror":
        return cls(Path(data_dir) / "mirrors" / mirror_dir_name(name), url)

    # ------------------------------------------------------------ plumbing

    def _git(self, *args: str, input_text: str | None = None, check: bool = True) -> subprocess.CompletedProcess[str]:
        env = dict(os.environ, GIT_TERMINAL_PROMPT="0", GIT_ASKPASS="true", LC_ALL="C")
        try:
            result = subprocess.run(["git", "--git-dir", str(self.path), *args], input=input_text,
                                    capture_output=True, text=True, env=env, timeout=GIT_TIMEOUT_S)
        except subprocess.TimeoutExpired as exc:
            raise GitError(f"git {args[0]} timed out after {GIT_TIMEOUT_S:.0f} s") from exc
        if check and result.returncode != 0:
            raise GitError(f"git {' '.join(args[:3])} failed (exit {result.returncode}): "
                           f"{result.stderr.strip()[-2000:]}")
        return result

    @contextmanager
    def _locked(self) -> Iterator[None]:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with open(f"{self.path}.lock", "w") as handle:
            fcntl.flock(handle, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(handle, fcntl.LOCK_UN)

    def _ensure(self) -> None:
        if not (self.path / "HEAD").is_file():
            self.path.mkdir(parents=True, exist_ok=True)
            self._git("init", "--quiet", "--bare")
        if self._git("remote", "get-url", "origin", check=False).returncode != 0:
            self._git("remote", "add", "origin", "--", self.url)
        else:
            self._git("remote", "set-url", "origin", "--", self.url)

    # ------------------------------------------------------------ fetching

    def fetch(self, extra: Sequence[str] = ()) -> None:
        """Bring every branch up to date (pruning deleted ones); `extra` are more refs or SHAs
        to fetch (e.g. `refs/pull/7/head`); extras the remote lacks are skipped silently."""
        with self._locked():
            self._ensure()
            self._git("fetch", "--quiet", "--prune", "--no-tags", "origin", "+refs/heads/*:refs/heads/*")
            for item in extra:
                if SHA_RE.match(item):
                    if self.has_commit(item):
                        continue
                    self._git("fetch", "--quiet", "--no-tags", "origin", item, check=False)
                else:
                    ref = check_ref(self, item)
                    self._git("fetch", "--quiet", "--no-tags", "origin", f"+{ref}:{ref}", check=False)

    # ------------------------------------------------------------ queries

    def has_commit(self, sha: str) -> bool:
        require_sha(sha)
        return self._git("cat-file", "-e", f"{sha}^{{commit}}", check=False).returncode == 0

    def resolve_branch(self, branch: str) -> str | None:
        ref = check_ref(self, f"refs/heads/{branch}")
        result = self._git("rev-parse", "--verify", "--quiet", f"{ref}^{{commit}}", check=False)
        return result.stdout.strip() if result.returncode == 0 else None

    def rev_list(self, head: str, exclude: Sequence[str] = (), *, first_parent: bool = False,
                 max_count: int | None = None) -> list[str]:
        """SHAs reachable from `head` but not from any of `exclude`, newest first (with
        `first_parent`: the first-parent chain, i.e. the branch's own history)."""
        args = ["rev-list"]
        if first_parent:
            args.append("--first-parent")
        if max_count is not None:
            args.append(f"--max-count={int(max_count)}")
        args += [require_sha(head), *(f"^{require_sha(x)}" for x in exclude)]
        return self._git(*args).stdout.split()

    def first_parent_depth(self, sha: str) -> int:
        """0-based index of `sha` in its own first-parent chain counted from the root commit."""
        return int(self._git("rev-list", "--first-parent", "--count", require_sha(sha)).stdout) - 1

    def is_ancestor(self, ancestor: str, descendant: str) -> bool:
        result = self._git("merge-base", "--is-ancestor", require_sha(ancestor), require_sha(descendant),
                           check=False)
        return result.returncode == 0

    def merge_base(self, a: str, b: str) -> str | None:
        result = self._git("merge-base", require_sha(a), require_sha(b), check=False)
        sha = result.stdout.strip()
        return sha if result.returncode == 0 and SHA_RE.match(sha) else None

    def commits(self, head: str, exclude: Sequence[str] = (), *, max_count: int | None = None) -> list[CommitInfo]:
        """Metadata and parents of the commits `rev_list(head, exclude)` names, newest first."""
        args = ["log", f"--format={_RECORD}%H{_FIELD}%P{_FIELD}%an{_FIELD}%ct{_FIELD}%s", "--topo-order"]
        if max_count is not None:
            args.append(f"--max-count={int(max_count)}")
        args += [require_sha(head), *(f"^{require_sha(x)}" for x in exclude), "--"]
        return _parse_log(self._git(*args).stdout)

    def commit_info(self, shas: Sequence[str]) -> list[CommitInfo]:
        """Metadata of exactly these commits, in the given order."""
        if not shas:
            return []
        args = ["log", "--no-walk=unsorted", f"--format={_RECORD}%H{_FIELD}%P{_FIELD}%an{_FIELD}%ct{_FIELD}%s",
                *(require_sha(s) for s in shas), "--"]
        return _parse_log(self._git(*args).stdout)

    def numstat(self, base: str, head: str) -> list[tuple[str, int | None, int | None]]:
        """(path, lines added, lines deleted) of every file that differs from `base` to `head`;
        None for both counts of a binary file."""
        out = self._git("diff", "--numstat", "--no-renames", require_sha(base), require_sha(head), "--").stdout
        files = []
        for line in out.splitlines():
            added, deleted, path = line.split("\t", 2)
            files.append((path, int(added) if added.isdigit() else None, int(deleted) if deleted.isdigit() else None))
        return files


def check_ref(mirror: Mirror, ref: str) -> str:
    """A full ref name git accepts (no `..`, no leading dash, no control characters)."""
    if not isinstance(ref, str) or ref.startswith("-") or not ref.startswith("refs/"):
        raise ValueError(f"not a valid ref name: {ref!r}")
    if subprocess.run(["git", "check-ref-format", ref], capture_output=True).returncode != 0:
        raise ValueError(f"not a valid ref name: {ref!r}")
    return ref


def _parse_log(output: str) -> list[CommitInfo]:
    infos = []
    for record in output.split(_RECORD):
        record = record.strip("\n")
        if not record:
            continue
        sha, parents, author, timestamp, summary = record.split(_FIELD, 4)
        infos.append(CommitInfo(sha=sha, parents=tuple(parents.split()), author=author,
                                committed_at=datetime.fromtimestamp(int(timestamp), tz=timezone.utc),
                                summary=summary.strip()))
    return infos
