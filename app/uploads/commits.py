"""The commit an upload measured. A SHA the service already knows is used as it is. An unseen
one is looked up in the repository's git mirror, which is fetched first when it lacks the SHA
(synchronously, in the request: see docs/upload.md for why); a SHA the repository does not have
is a 422. A commit on the default branch's first-parent chain gets its place in that branch's
history (its absolute position, see `app.git.commit_graph`), so its runs join the series in
order."""
from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from app.core.errors import APIError, Invalid
from app.core.models import BranchCommit, Commit, Repository
from app.git import commit_graph
from app.git.mirror import CommitInfo, GitError, Mirror


class GitUnavailable(APIError):
    status, error = 503, "git_unavailable"


@dataclass(frozen=True)
class Place:
    """What git needs of the repository: its name (for messages) and the branch to place on."""
    repository: str
    default_branch: str


def known_commit(session: Session, repository: Repository, sha: str) -> Commit | None:
    return session.scalar(select(Commit).where(Commit.repository_id == repository.id, Commit.sha == sha))


def _first_parent_depth(mirror: Mirror, sha: str, tip: str) -> int | None:
    """`sha`'s depth when it lies on `tip`'s first-parent chain, else None."""
    if not mirror.is_ancestor(sha, tip):
        return None
    depth, tip_depth = mirror.first_parent_depth(sha), mirror.first_parent_depth(tip)
    chain = mirror.rev_list(tip, first_parent=True, max_count=tip_depth - depth + 1)
    return depth if chain and chain[-1] == sha else None


def look_up(mirror: Mirror, place: Place, sha: str) -> tuple[CommitInfo, int | None]:
    """The commit's metadata and its depth on the default branch (None when not on it), read
    from git before any database write; fetches the mirror when it lacks the SHA."""
    try:
        if not mirror.path.joinpath("HEAD").is_file() or not mirror.has_commit(sha):
            mirror.fetch([sha])
        if not mirror.has_commit(sha):
            raise Invalid(f"sha: commit {sha} is not in repository {place.repository!r} (fetched from its URL)",
                          extra={"field": "sha"})
        (info,) = mirror.commit_info([sha])
        tip = mirror.resolve_branch(place.default_branch)
        depth = _first_parent_depth(mirror, sha, tip) if tip else None
    except GitError as exc:
        raise GitUnavailable(f"cannot read repository {place.repository!r} to find commit {sha}: {exc}") from exc
    return info, depth


def record(session: Session, repository: Repository, info: CommitInfo, depth: int | None) -> tuple[Commit, bool]:
    """Store the commit (and its place in the default branch's history when it has one there
    and no other commit holds that position). Returns the commit and whether this call placed
    it in the branch's history (the caller then bumps the repository's series epoch)."""
    commit = commit_graph.record_commits(session, repository, [info])[info.sha]
    if depth is None:
        return commit, False
    branch = commit_graph.get_branch(session, repository, repository.default_branch)
    taken = session.scalar(select(BranchCommit.commit_id).where(
        BranchCommit.branch_id == branch.id, BranchCommit.position == depth, BranchCommit.active.is_(True)).limit(1))
    placed = session.get(BranchCommit, (branch.id, commit.id))
    if taken is None and placed is None:
        try:
            with session.begin_nested():
                session.add(BranchCommit(branch_id=branch.id, commit_id=commit.id, position=depth, active=True))
            return commit, True
        except IntegrityError:
            pass  # a concurrent upload of the same commit placed it
    return commit, False
