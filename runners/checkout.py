"""Checkouts: one bare mirror per repository in the work dir, a fetch of just the commit a job
needs, and a detached worktree per job at that exact commit, removed afterwards.

The commit SHA is validated as 40 lowercase hex characters before any git process starts, and
git only ever receives argv lists. A missing commit fails its job and keeps the mirror; a
checkout that fails although the commit is there means a damaged mirror, which is discarded so
the next job starts from a fresh fetch.
"""
from __future__ import annotations

import hashlib
import logging
import os
import re
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

log = logging.getLogger(__name__)
SHA_RE = re.compile(r"[0-9a-f]{40}")
# Refs tried when the server refuses to hand out a commit by SHA (uploadpack.allowReachableSHA1InWant).
FALLBACK_REFSPECS = ("+refs/heads/*:refs/heads/*", "+refs/pull/*/head:refs/pull/*/head")
# Fetched commits are kept under refs/parallax/<sha> (newest KEEP_REFS by commit date).
KEEP_PREFIX = "refs/parallax"
KEEP_REFS = 200
# Transports git may use for a job's repository URL; `ext::` (runs commands) is never allowed.
ALLOWED_PROTOCOLS = "file:git:http:https:ssh"


class CheckoutError(Exception):
    """The job cannot be checked out. `retryable`: another attempt may succeed."""

    def __init__(self, message: str, *, retryable: bool = False) -> None:
        super().__init__(message)
        self.retryable = retryable


def validate_sha(sha: object) -> str:
    if not isinstance(sha, str) or SHA_RE.fullmatch(sha) is None:
        raise CheckoutError(f"refusing commit {sha!r}: a commit must be exactly 40 lowercase hex characters")
    return sha


def validate_url(url: object) -> str:
    if not isinstance(url, str) or not url.strip():
        raise CheckoutError(f"refusing repository URL {url!r}: empty")
    if url.startswith("-") or any(ch in url for ch in "\n\r\0"):
        raise CheckoutError(f"refusing repository URL {url!r}: it could be read as a git option")
    if "::" in url.split("/", 1)[0]:
        raise CheckoutError(f"refusing repository URL {url!r}: remote helpers (<transport>::) are not allowed")
    return url


def git_env() -> dict[str, str]:
    env = dict(os.environ)
    env.update(GIT_TERMINAL_PROMPT="0", GIT_ALLOW_PROTOCOL=ALLOWED_PROTOCOLS, LC_ALL="C")
    return env


def git(args: list[str], *, timeout_s: float = 600.0, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    # Own session: a Ctrl-C aimed at the agent must not kill a fetch half-way.
    try:
        return subprocess.run(["git", *args], capture_output=True, text=True, timeout=timeout_s, cwd=cwd,
                              env=git_env(), stdin=subprocess.DEVNULL, start_new_session=True)
    except subprocess.TimeoutExpired as exc:
        raise CheckoutError(f"git {args[0]} timed out after {timeout_s:.0f} s", retryable=True) from exc


def _last_lines(text: str, n: int = 6) -> str:
    return "\n".join(text.strip().splitlines()[-n:])


@dataclass
class Workspace:
    """The runner's work dir: `mirrors/<name>-<hash>.git` and `worktrees/job-<id>-<attempt>`."""
    root: Path
    fetch_timeout_s: float = 1800.0

    @property
    def mirrors(self) -> Path:
        return self.root / "mirrors"

    @property
    def worktrees(self) -> Path:
        return self.root / "worktrees"

    def clean_stale(self) -> list[str]:
        """After a crash: remove leftover worktrees and half-made mirrors; returns what went."""
        removed: list[str] = []
        self.mirrors.mkdir(parents=True, exist_ok=True)
        self.worktrees.mkdir(parents=True, exist_ok=True)
        for entry in sorted(self.worktrees.iterdir()):
            if entry.is_dir():
                shutil.rmtree(entry, ignore_errors=True)
            else:
                entry.unlink(missing_ok=True)
            removed.append(str(entry))
        for mirror in sorted(self.mirrors.iterdir()):
            if mirror.name.endswith(".tmp") or not (mirror / "HEAD").is_file():
                shutil.rmtree(mirror, ignore_errors=True)
                removed.append(str(mirror))
            else:
                git(["--git-dir", str(mirror), "worktree", "prune"], timeout_s=60)
        return removed

    def mirror_path(self, repository: str, url: str) -> Path:
        safe = re.sub(r"[^A-Za-z0-9._-]+", "_", repository or "repo").strip("._") or "repo"
        return self.mirrors / f"{safe[:60]}-{hashlib.sha256(url.encode()).hexdigest()[:12]}.git"

    def ensure_mirror(self, repository: str, url: str) -> Path:
        mirror = self.mirror_path(repository, url)
        if (mirror / "HEAD").is_file():
            return mirror
        tmp = mirror.with_name(mirror.name + ".tmp")
        shutil.rmtree(tmp, ignore_errors=True)
        done = git(["init", "--quiet", "--bare", str(tmp)], timeout_s=60)
        if done.returncode != 0:
            raise CheckoutError(f"could not create a mirror for {url}: {_last_lines(done.stderr)}", retryable=True)
        tmp.rename(mirror)  # a crash before this leaves only a .tmp, which clean_stale removes
        return mirror

    def has_commit(self, mirror: Path, sha: str) -> bool:
        done = git(["--git-dir", str(mirror), "cat-file", "-e", f"{sha}^{{commit}}"], timeout_s=60)
        return done.returncode == 0

    def fetch(self, mirror: Path, url: str, sha: str) -> None:
        """Fetch the commit (and whatever of its history the mirror lacks) by SHA; when the
        server will not serve a bare SHA, fetch the branches and pull-request heads instead."""
        # Into a ref: refs are what the next fetch offers as "have"s, so it sends only new objects.
        by_sha = git(["--git-dir", str(mirror), "fetch", "--quiet", "--no-tags", "--no-write-fetch-head",
                      "--", url, f"+{sha}:{KEEP_PREFIX}/{sha}"], timeout_s=self.fetch_timeout_s)
        if by_sha.returncode == 0 and self.has_commit(mirror, sha):
            self.trim_refs(mirror)
            return
        by_refs = git(["--git-dir", str(mirror), "fetch", "--quiet", "--no-tags", "--prune", "--no-write-fetch-head",
                       "--", url, *FALLBACK_REFSPECS], timeout_s=self.fetch_timeout_s)
        if self.has_commit(mirror, sha):
            return
        if by_refs.returncode != 0:
            raise CheckoutError(f"git fetch of {url} failed: {_last_lines(by_refs.stderr or by_sha.stderr)}",
                                retryable=True)
        raise CheckoutError(f"commit {sha} not found in {url} (not fetchable by SHA, not on any branch "
                            f"or pull-request head): {_last_lines(by_sha.stderr)}")

    def trim_refs(self, mirror: Path) -> None:
        """Keep the newest KEEP_REFS commit refs; older commits stay until git's own gc."""
        listed = git(["--git-dir", str(mirror), "for-each-ref", "--sort=-committerdate", "--format=%(refname)",
                      KEEP_PREFIX], timeout_s=60).stdout.split()
        if len(listed) > KEEP_REFS:
            stale = "".join(f"delete {ref}\n" for ref in listed[KEEP_REFS:])
            subprocess.run(["git", "--git-dir", str(mirror), "update-ref", "--stdin"], input=stale, text=True,
                           capture_output=True, env=git_env(), timeout=60, start_new_session=True)

    def discard_mirror(self, mirror: Path) -> None:
        trash = mirror.with_name(mirror.name + ".tmp")
        shutil.rmtree(trash, ignore_errors=True)
        if mirror.exists():
            mirror.rename(trash)
        shutil.rmtree(trash, ignore_errors=True)

    def prepare(self, job_id: int, attempt: int, repository: str, url: str, sha: str) -> Path:
        """A detached worktree of `url` at exactly `sha`, ready for the job."""
        sha = validate_sha(sha)
        url = validate_url(url)
        self.worktrees.mkdir(parents=True, exist_ok=True)
        mirror = self.ensure_mirror(repository, url)
        if not self.has_commit(mirror, sha):
            self.fetch(mirror, url, sha)
        path = self.worktrees / f"job-{int(job_id)}-{int(attempt)}"
        if path.exists():
            self.release(mirror, path)
        added = git(["--git-dir", str(mirror), "worktree", "add", "--quiet", "--detach", "--force",
                     str(path), sha], timeout_s=self.fetch_timeout_s)
        head = git(["rev-parse", "HEAD"], cwd=path, timeout_s=60).stdout.strip() if added.returncode == 0 else ""
        if added.returncode != 0 or head != sha:
            problem = _last_lines(added.stderr) if added.returncode != 0 else f"HEAD is {head!r}, not {sha}"
            self.release(mirror, path)
            self.discard_mirror(mirror)
            raise CheckoutError(f"checkout of {sha} failed, the local mirror of {url} looks damaged and was "
                                f"discarded (the next attempt fetches afresh): {problem}", retryable=True)
        return path

    def release(self, mirror: Path | None, path: Path) -> None:
        """Remove a job's worktree; never raises."""
        if mirror is not None and mirror.exists():
            git(["--git-dir", str(mirror), "worktree", "remove", "--force", "--force", str(path)], timeout_s=120)
        shutil.rmtree(path, ignore_errors=True)
        if mirror is not None and mirror.exists():
            git(["--git-dir", str(mirror), "worktree", "prune"], timeout_s=60)
