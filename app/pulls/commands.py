"""`/parallax` commands in pull-request comments (`issue_comment` webhooks).

`/parallax rerun [platform]` measures the head against its merge-base again (one platform, or
all); `/parallax accept` marks the regression as intended, so the check turns `success` with
"accepted by @name". Only the repository's OWNER, MEMBER or COLLABORATOR may use them; anyone
else, and any unknown command, gets a short reply and nothing changes.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from app.core.models import Commit, PullRequest, Repository
from app.pulls import comparisons, outbox

PREFIX = "/parallax"
ALLOWED = ("OWNER", "MEMBER", "COLLABORATOR")
HELP = ("Parallax commands: `/parallax rerun` (measure base against head again on every platform), "
        "`/parallax rerun <platform>` (one platform), `/parallax accept` (the regression is intended).")


@dataclass(frozen=True)
class Command:
    verb: str            # rerun / accept / unknown
    argument: str | None
    text: str            # what was written, for replies


def parse(body: str) -> Command | None:
    """The first line that starts with /parallax, or None when the comment has none."""
    for line in body.splitlines():
        words = line.strip().split()
        if not words or words[0].lower() != PREFIX:
            continue
        rest = [w.lower() for w in words[1:]]
        if rest[:1] == ["accept"] and len(rest) == 1:
            return Command("accept", None, line.strip())
        if rest[:1] == ["rerun"] and len(rest) <= 2:
            return Command("rerun", rest[1] if len(rest) == 2 else None, line.strip())
        return Command("unknown", None, line.strip())
    return None


def mentions_command(body: object) -> bool:
    return isinstance(body, str) and parse(body) is not None


def handle(session: Session, repository: Repository, payload: dict[str, Any]) -> str:
    """Act on one command comment; returns the delivery's one-line summary."""
    number = int(payload["issue"]["number"])
    comment = payload["comment"]
    who = str((comment.get("user") or {}).get("login") or "someone")
    command = parse(str(comment.get("body") or ""))
    assert command is not None
    pull = session.scalar(select(PullRequest).where(PullRequest.repository_id == repository.id,
                                                    PullRequest.number == number))
    if pull is None:
        return f"command on pull request #{number}, which Parallax has not seen; nothing done"
    if comment.get("author_association") not in ALLOWED:
        outbox.queue_reply(session, pull, f"@{who}: only the repository's owners, members and collaborators "
                                          f"can use `{PREFIX}` commands; nothing was changed.")
        return f"command from @{who} ({comment.get('author_association')}) refused: not a member"
    if command.verb == "unknown":
        outbox.queue_reply(session, pull, f"@{who}: `{command.text[:100]}` is not a command. {HELP}")
        return f"unknown command from @{who}: {command.text[:100]!r}"
    current = comparisons.latest(session, pull.id)
    if current is None:
        outbox.queue_reply(session, pull, f"@{who}: nothing has been measured for this pull request yet.")
        return f"{command.verb} from @{who}: nothing measured yet"
    if command.verb == "accept":
        comparisons.accept(session, current, who)
        return f"regression on pull request #{number} accepted by @{who}"
    platforms = sorted({p for suite in comparisons.pr_suites(session) for p in comparisons.pr_platforms(suite)})
    if command.argument is not None and command.argument not in platforms:
        outbox.queue_reply(session, pull, f"@{who}: unknown platform `{command.argument[:40]}`; "
                                          f"platforms: {', '.join(platforms)}. {HELP}")
        return f"rerun from @{who}: unknown platform {command.argument[:40]!r}"
    head = session.get(Commit, current.head_commit_id)
    base = session.get(Commit, current.base_commit_id) if current.base_commit_id else None
    assert head is not None
    _, queued = comparisons.start(session, repository, pull, head, base, rerun=True, only_platform=command.argument)
    return f"rerun on {command.argument or 'every platform'} by @{who}: {queued} job(s) queued"
