"""CI tokens: what an existing CI job (GitHub Actions, Buildkite) uploads results with. Each is
scoped to one repository and, optionally, one platform; it may expire and can be revoked. Like
the other tokens it is shown once and stored as its SHA-256 (see `app.auth.tokens`)."""
from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta

from sqlalchemy import select
from sqlalchemy.orm import Session

from app.auth.tokens import _expiry, expired, hash_token, new_token, revoke_token_row
from app.core.errors import Forbidden, NotFound, Unauthorized
from app.core.models import CiToken, Repository

PREFIX = "pxc"


@dataclass(frozen=True)
class CiScope:
    """What the bearer of a CI token may upload for."""
    token_id: int
    repository_id: int
    repository: str
    platform: str | None  # None: any platform


def create_ci_token(session: Session, repository: str, platform: str | None = None, *, note: str | None = None,
                    expires_in: timedelta | None = None) -> tuple[int, str]:
    """A new CI token for `repository` (and `platform` when given); returns (id, token)."""
    repo = session.scalar(select(Repository).where(Repository.name == repository))
    if repo is None:
        known = ", ".join(session.scalars(select(Repository.name).order_by(Repository.name))) or "none"
        raise NotFound(f"unknown repository {repository!r}; known: {known}")
    token = new_token(PREFIX)
    row = CiToken(token_hash=hash_token(token), repository_id=repo.id, platform=platform, note=note,
                  expires_at=_expiry(expires_in))
    session.add(row)
    session.flush()
    return row.id, token


def ci_scope_for(session: Session, token: str) -> CiScope:
    """The scope of a CI token; 401 when it is unknown, revoked or expired."""
    row = session.scalar(select(CiToken).where(CiToken.token_hash == hash_token(token)))
    if row is None:
        raise Unauthorized("unknown CI token (create one with `parallax token create --ci --repository OWNER/NAME`)")
    if row.revoked:
        raise Unauthorized(f"CI token {row.id} was revoked")
    if expired(row.expires_at):
        raise Unauthorized(f"CI token {row.id} expired")
    repository = session.get(Repository, row.repository_id)
    assert repository is not None  # the foreign key cascades
    return CiScope(token_id=row.id, repository_id=row.repository_id, repository=repository.name, platform=row.platform)


def check_scope(scope: CiScope, repository: str, platform: str) -> None:
    """403 unless the token may upload for this repository and platform."""
    if repository != scope.repository:
        raise Forbidden(f"CI token {scope.token_id} may upload only for repository {scope.repository!r}, "
                        f"not {repository!r}")
    if scope.platform is not None and platform != scope.platform:
        raise Forbidden(f"CI token {scope.token_id} may upload only for platform {scope.platform!r}, not {platform!r}")


def revoke_ci_token(session: Session, id_or_token: str | int) -> CiToken:
    """Revoke by id or by the token itself; uploads with it are refused (401) from now on."""
    return revoke_token_row(session, CiToken, id_or_token, "CI token")
