"""The commit graph in the database: commits, their parent edges, branch histories, pull requests.

Series order (the contract detection relies on): a branch's history is its first-parent chain.
`branch_commits.position` is the commit's 0-based depth in that chain counted from the root
commit (`git rev-list --first-parent --count <sha>` - 1), so positions are absolute: they never
shift when older history is added later (backfill), and a commit that replaces another at the
same depth (force push) gets the same position. Exactly one row per position has `active`
True; rows of commits that a force push (or a merge that moved the branch to another
first-parent chain) took out of the history stay stored with `active` False. Order a series by
`position` over the rows where `active` is true.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterable, Sequence

from sqlalchemy import select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from app.core.clock import utcnow
from app.core.db import get_or_create
from app.core.models import Branch, BranchCommit, Commit, CommitParent, PullRequest, Repository
from app.core.series_epoch import bump_series_epoch
from app.git.mirror import CommitInfo, Mirror

CHUNK = 500
RECORD_ATTEMPTS = 3  # each retry follows a concurrent writer that committed some of the same commits


@dataclass
class BranchUpdate:
    branch: Branch
    added: list[tuple[Commit, int]] = field(default_factory=list)  # (commit, position), newest first
    dropped: list[Commit] = field(default_factory=list)
    pushed: list[tuple[Commit, int]] = field(default_factory=list)  # `added` less the push's base
    head: Commit | None = None
    head_position: int = 0


def _chunks(items: Sequence[str], size: int = CHUNK) -> Iterable[Sequence[str]]:
    for start in range(0, len(items), size):
        yield items[start:start + size]


def commits_by_sha(session: Session, repository: Repository, shas: Sequence[str]) -> dict[str, Commit]:
    found: dict[str, Commit] = {}
    for chunk in _chunks(list(dict.fromkeys(shas))):
        for commit in session.scalars(select(Commit).where(Commit.repository_id == repository.id,
                                                           Commit.sha.in_(chunk))):
            found[commit.sha] = commit
    return found


def record_commits(session: Session, repository: Repository, infos: Sequence[CommitInfo]) -> dict[str, Commit]:
    """Store commits with metadata and their parent edges (parents not read yet are stored as
    bare SHAs with `graph_loaded` False). Idempotent, and safe against concurrent transactions
    recording the same commits (two bisects of one range started at once): the writes run in a
    savepoint, and when they hit a unique key the other transaction has committed its rows,
    so they are read and the rest written again. Returns every commit touched, by SHA."""
    attempt = 1
    while True:
        try:
            with session.begin_nested():
                return _record_commits(session, repository, infos)
        except IntegrityError:
            if attempt >= RECORD_ATTEMPTS:
                raise
            attempt += 1


def _record_commits(session: Session, repository: Repository, infos: Sequence[CommitInfo]) -> dict[str, Commit]:
    wanted = [info.sha for info in infos] + [p for info in infos for p in info.parents]
    known = commits_by_sha(session, repository, wanted)
    for sha in dict.fromkeys(wanted):
        if sha not in known:
            known[sha] = Commit(repository_id=repository.id, sha=sha, graph_loaded=False)
            session.add(known[sha])
    session.flush()
    for info in infos:
        commit = known[info.sha]
        if commit.graph_loaded:
            continue
        commit.author = info.author[:255]
        commit.summary = info.summary[:500]
        commit.committed_at = info.committed_at
        for position, parent in enumerate(info.parents):
            session.add(CommitParent(commit_id=commit.id, position=position, parent_id=known[parent].id))
        commit.graph_loaded = True
    session.flush()
    return known


def get_branch(session: Session, repository: Repository, name: str) -> Branch:
    return get_or_create(session, Branch, repository_id=repository.id, name=name)


def active_positions(session: Session, branch: Branch, shas: Sequence[str]) -> dict[str, int]:
    """Which of these SHAs are in the branch's active history, with their positions."""
    found: dict[str, int] = {}
    for chunk in _chunks(list(shas)):
        rows = session.execute(select(Commit.sha, BranchCommit.position)
                               .join(BranchCommit, BranchCommit.commit_id == Commit.id)
                               .where(BranchCommit.branch_id == branch.id, BranchCommit.active.is_(True),
                                      Commit.sha.in_(chunk)))
        found.update({sha: position for sha, position in rows})
    return found


def set_history(session: Session, repository: Repository, branch: Branch, chain: Sequence[str],
                head_depth: int) -> BranchUpdate:
    """Make `chain` (a first-parent chain, newest first, `chain[0]` at depth `head_depth`) the
    branch's active history at those positions: rows at or above the chain's lowest position
    that are not in the chain become inactive; chain commits become active at their position.
    The commits must already be stored (`record_commits`). A change bumps the repository's
    `series_epoch` (app.core.series_epoch)."""
    result = BranchUpdate(branch=branch)
    if not chain:
        return result
    commits = commits_by_sha(session, repository, chain)
    lowest = head_depth - (len(chain) - 1)
    chain_ids = {commits[sha].id for sha in chain}
    stale = list(session.scalars(
        select(BranchCommit).where(BranchCommit.branch_id == branch.id, BranchCommit.active.is_(True),
                                   BranchCommit.position >= lowest)))
    for row in stale:
        if row.commit_id not in chain_ids:
            row.active = False
            result.dropped.append(session.get(Commit, row.commit_id))  # type: ignore[arg-type]
    existing = {row.commit_id: row for row in session.scalars(
        select(BranchCommit).where(BranchCommit.branch_id == branch.id,
                                   BranchCommit.commit_id.in_(list(chain_ids))))}
    for index, sha in enumerate(chain):
        commit, position = commits[sha], head_depth - index
        row = existing.get(commit.id)
        if row is None:
            session.add(BranchCommit(branch_id=branch.id, commit_id=commit.id, position=position, active=True))
            result.added.append((commit, position))
        elif not row.active or row.position != position:
            row.active, row.position = True, position
            result.added.append((commit, position))
    head = commits[chain[0]]
    branch.head_commit_id = head.id
    branch.updated_at = utcnow()
    result.head, result.head_position = head, head_depth
    session.flush()
    if result.added or result.dropped:
        # Series order changed under the same runs (a measured commit joined or left the
        # history): cached series of the repository are stale.
        bump_series_epoch(session, [repository.id])
    return result


def update_branch_from_push(session: Session, repository: Repository, mirror: Mirror, branch_name: str,
                            before: str | None, after: str, *, history_limit: int = 5000,
                            graph_limit: int = 10000) -> BranchUpdate:
    """Apply a push (fast-forward, force push or merge) to the stored graph and branch history.

    The first-parent chain of `after` is walked back to the first commit already active in the
    branch's history (the fork point); commits after it become the new history. A branch
    Parallax has never seen starts at `before` when that is known to git (and `before` is
    measured too, as the baseline), else at `after` alone (older history is added with
    `parallax backfill`)."""
    branch = get_branch(session, repository, branch_name)
    has_history = session.scalar(select(BranchCommit.commit_id).where(
        BranchCommit.branch_id == branch.id, BranchCommit.active.is_(True)).limit(1)) is not None
    exclude: list[str] = []
    if before and mirror.has_commit(before):
        exclude.append(before)
    if has_history:
        walk = mirror.rev_list(after, first_parent=True, max_count=history_limit)
        chain: list[str] = []
        for chunk in _chunks(walk):
            known = active_positions(session, branch, chunk)
            stop = next((i for i, sha in enumerate(chunk) if sha in known), None)
            if stop is not None:
                chain.extend(chunk[:stop + 1])
                break
            chain.extend(chunk)
        fork_point = chain[-1] if chain and active_positions(session, branch, chain[-1:]) else None
        if fork_point:
            exclude.append(fork_point)
    elif exclude and mirror.is_ancestor(exclude[0], after):
        new = mirror.rev_list(after, exclude, first_parent=True, max_count=history_limit)
        # One more step down the first-parent chain: `before` itself, or (when `before` came in
        # through a merge's second parent) the chain commit the branch grew from.
        chain = mirror.rev_list(after, first_parent=True, max_count=len(new) + 1)
        exclude.append(chain[-1])
    else:
        chain = [after]
    infos = mirror.commits(after, exclude, max_count=graph_limit)
    listed = {info.sha for info in infos}
    missing = [sha for sha in chain if sha not in listed]
    record_commits(session, repository, infos + mirror.commit_info(missing))
    result = set_history(session, repository, branch, chain, mirror.first_parent_depth(after))
    # The first push Parallax sees of a branch also measures the commit it grew from: the new
    # commits' first point then has a baseline to be compared with.
    baseline = chain[-1] if not has_history and len(chain) > 1 else None
    result.pushed = [(commit, position) for commit, position in result.added
                     if commit.sha not in exclude or commit.sha == baseline]
    return result


def record_pull_request(session: Session, repository: Repository, mirror: Mirror, *, number: int,
                        title: str | None, base_branch: str, head: str, base: str | None,
                        state: str = "open", graph_limit: int = 2000) -> tuple[PullRequest, Commit, Commit | None]:
    """Store a pull request's head, its commits since the merge-base, and the merge-base with
    the base branch (at `base` when given and known to git, else the base branch's tip)."""
    base_sha = base if base and mirror.has_commit(base) else mirror.resolve_branch(base_branch)
    merge_base = mirror.merge_base(head, base_sha) if base_sha else None
    exclude = [merge_base] if merge_base else []
    infos = mirror.commits(head, exclude, max_count=graph_limit)
    if merge_base:
        infos += mirror.commit_info([merge_base])
    known = record_commits(session, repository, infos or mirror.commit_info([head]))
    pull = get_or_create(session, PullRequest, {"base_branch": base_branch}, repository_id=repository.id, number=number)
    pull.title = (title or "")[:500] or None
    pull.base_branch = base_branch
    pull.head_commit_id = known[head].id
    pull.merge_base_commit_id = known[merge_base].id if merge_base else None
    pull.state = state
    pull.updated_at = utcnow()
    session.flush()
    return pull, known[head], known.get(merge_base) if merge_base else None

