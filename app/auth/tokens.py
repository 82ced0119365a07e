"""Tokens: registration tokens (operators), runner tokens (per runner), user tokens, the admin
token; and taking them back: revoking a registration token, disabling a runner or a user.
Registration and user tokens may carry an expiry.

Tokens are random URL-safe strings shown once; only their SHA-256 is stored (they carry 256
bits of entropy, so an unsalted fast hash is enough, and lookups stay an index hit).
"""
from __future__ import annotations

import hashlib
import hmac
import secrets
from datetime import datetime, timedelta
from typing import TypeVar

from sqlalchemy import select, update
from sqlalchemy.orm import Session

from app.core.clock import as_utc, utcnow
from app.core.errors import Forbidden, NotFound, Unauthorized
from app.core.models import Base, RegistrationToken, Runner, User

T = TypeVar("T", bound=Base)

ROLES = ("maintainer", "admin")


LAST_SEEN_RESOLUTION = timedelta(seconds=15)


def new_token(prefix: str) -> str:
    return f"{prefix}_{secrets.token_urlsafe(32)}"


def hash_token(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def _expiry(expires_in: timedelta | None) -> datetime | None:
    if expires_in is None:
        return None
    if expires_in <= timedelta(0):
        raise ValueError("the expiry must be in the future")
    return utcnow() + expires_in


def expired(expires_at: datetime | None) -> bool:
    return expires_at is not None and as_utc(expires_at) <= utcnow()


def create_registration_token(session: Session, note: str | None = None,
                              expires_in: timedelta | None = None) -> str:
    token = new_token("pxr")
    session.add(RegistrationToken(token_hash=hash_token(token), note=note, expires_at=_expiry(expires_in)))
    return token


def registration_token_for(session: Session, token: str) -> RegistrationToken:
    row = session.scalar(select(RegistrationToken).where(RegistrationToken.token_hash == hash_token(token)))
    if row is None or row.revoked or expired(row.expires_at):
        raise Unauthorized("unknown, revoked or expired registration token")
    return row


def revoke_token_row(session: Session, model: type[T], id_or_token: str | int, what: str) -> T:
    """Mark a stored token revoked, found by its id or by the token itself (its hash)."""
    if isinstance(id_or_token, int) or id_or_token.isdigit():
        row = session.get(model, int(id_or_token))
    else:
        row = session.scalar(select(model).where(model.token_hash == hash_token(id_or_token)))  # type: ignore[attr-defined]
    if row is None:
        raise NotFound(f"no {what} {id_or_token!r}")
    row.revoked = True  # type: ignore[attr-defined]
    return row


def revoke_registration_token(session: Session, id_or_token: str | int) -> RegistrationToken:
    """Revoke by id or by the token itself. Runners it registered keep their own tokens
    (disable them one by one)."""
    return revoke_token_row(session, RegistrationToken, id_or_token, "registration token")


def disable_runner(session: Session, runner_id: int) -> Runner:
    """Its token is refused from now on; a job it holds goes back to the queue when its lease
    expires."""
    runner = session.get(Runner, runner_id)
    if runner is None:
        raise NotFound(f"runner {runner_id} does not exist")
    runner.disabled = True
    return runner


def disable_user(session: Session, name: str) -> User:
    user = session.scalar(select(User).where(User.name == name))
    if user is None:
        raise NotFound(f"user {name!r} does not exist")
    user.disabled = True
    return user


def runner_for(session: Session, token: str) -> Runner:
    """The runner a token belongs to (refused when unknown or disabled); notes when it was seen."""
    runner = session.scalar(select(Runner).where(Runner.token_hash == hash_token(token)))
    if runner is None:
        raise Unauthorized("unknown runner token")
    if runner.disabled:
        raise Forbidden(f"runner {runner.id} is disabled")
    moment = utcnow()
    last_seen = as_utc(runner.last_seen_at)
    if last_seen is None or moment - last_seen > LAST_SEEN_RESOLUTION:
        # Coarse on purpose: a write per request would serialise every call on SQLite.
        session.execute(update(Runner).where(Runner.id == runner.id).values(last_seen_at=moment))
        session.commit()
    return runner


def create_user(session: Session, name: str, role: str = "maintainer", expires_in: timedelta | None = None) -> str:
    """Add a user; returns their API token (shown once, stored as a hash)."""
    if role not in ROLES:
        raise ValueError(f"role must be one of {', '.join(ROLES)}, got {role!r}")
    if not name.strip() or len(name) > 128:
        raise ValueError("name must be 1 to 128 characters")
    if session.scalar(select(User).where(User.name == name)) is not None:
        raise ValueError(f"user {name!r} already exists")
    token = new_token("pxu")
    session.add(User(name=name, role=role, token_hash=hash_token(token), expires_at=_expiry(expires_in)))
    return token


def actor_for(session: Session, token: str, admin_token: str | None, *, need_admin: bool) -> str:
    """The caller's name: "admin" for the configured admin token, else the user's name."""
    if admin_token and hmac.compare_digest(token.encode(), admin_token.encode()):
        return "admin"
    user = session.scalar(select(User).where(User.token_hash == hash_token(token)))
    if user is not None and (user.disabled or expired(user.expires_at)):
        raise Unauthorized(f"the token of user {user.name!r} is {'disabled' if user.disabled else 'expired'}")
    if user is None:
        raise Unauthorized("wrong admin token or unknown user token" if admin_token else
                           "unknown user token (and no PARALLAX_ADMIN_TOKEN is configured)")
    if need_admin and user.role != "admin":
        raise Forbidden(f"user {user.name!r} is a {user.role}; this needs an admin")
    return user.name
