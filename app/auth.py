"""Tokens: registration tokens (operators), runner tokens (per runner), the admin token.

Tokens are random URL-safe strings shown once; only their SHA-256 is stored (they carry 256
bits of entropy, so an unsalted fast hash is enough, and lookups stay an index hit).
"""
from __future__ import annotations

import hashlib
import hmac
import secrets
from datetime import datetime, timedelta, timezone

from flask import current_app, request
from sqlalchemy import select, update
from sqlalchemy.orm import Session

from app.errors import Forbidden, Unauthorized
from app.models import RegistrationToken, Runner, User

ROLES = ("maintainer", "admin")


LAST_SEEN_RESOLUTION = timedelta(seconds=15)


def new_token(prefix: str) -> str:
    return f"{prefix}_{secrets.token_urlsafe(32)}"


def hash_token(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def bearer_token() -> str:
    header = request.headers.get("Authorization", "")
    scheme, _, token = header.partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        raise Unauthorized("missing bearer token: send 'Authorization: Bearer <token>'")
    return token.strip()


def create_registration_token(session: Session, note: str | None = None) -> str:
    token = new_token("pxr")
    session.add(RegistrationToken(token_hash=hash_token(token), note=note))
    return token


def require_registration_token(session: Session) -> RegistrationToken:
    token = bearer_token()
    row = session.scalar(select(RegistrationToken).where(RegistrationToken.token_hash == hash_token(token)))
    if row is None or row.revoked:
        raise Unauthorized("unknown or revoked registration token")
    return row


def require_runner(session: Session) -> Runner:
    token = bearer_token()
    runner = session.scalar(select(Runner).where(Runner.token_hash == hash_token(token)))
    if runner is None:
        raise Unauthorized("unknown runner token")
    if runner.disabled:
        raise Forbidden(f"runner {runner.id} is disabled")
    moment = datetime.now(timezone.utc)
    last_seen = runner.last_seen_at
    if last_seen is not None and last_seen.tzinfo is None:
        last_seen = last_seen.replace(tzinfo=timezone.utc)
    if last_seen is None or moment - last_seen > LAST_SEEN_RESOLUTION:
        # Coarse on purpose: a write per request would serialise every call on SQLite.
        session.execute(update(Runner).where(Runner.id == runner.id).values(last_seen_at=moment))
        session.commit()
    return runner


def create_user(session: Session, name: str, role: str = "maintainer") -> str:
    """Add a user; returns their API token (shown once, stored as a hash)."""
    if role not in ROLES:
        raise ValueError(f"role must be one of {', '.join(ROLES)}, got {role!r}")
    if not name.strip() or len(name) > 128:
        raise ValueError("name must be 1 to 128 characters")
    if session.scalar(select(User).where(User.name == name)) is not None:
        raise ValueError(f"user {name!r} already exists")
    token = new_token("pxu")
    session.add(User(name=name, role=role, token_hash=hash_token(token)))
    return token


def _actor(session: Session, need_admin: bool) -> str:
    """The caller's name: "admin" for PARALLAX_ADMIN_TOKEN, else the user's name."""
    token = bearer_token()
    expected = current_app.extensions["parallax.settings"].admin_token
    if expected and hmac.compare_digest(token.encode(), expected.encode()):
        return "admin"
    user = session.scalar(select(User).where(User.token_hash == hash_token(token)))
    if user is None or user.disabled:
        raise Unauthorized("wrong admin token or unknown user token" if expected else
                           "unknown user token (and no PARALLAX_ADMIN_TOKEN is configured)")
    if need_admin and user.role != "admin":
        raise Forbidden(f"user {user.name!r} is a {user.role}; this needs an admin")
    return user.name


def require_admin(session: Session) -> str:
    """The admin token or an admin user's token; returns who called."""
    return _actor(session, need_admin=True)


def require_maintainer(session: Session) -> str:
    """Any user's token or the admin token (alert triage); returns who called."""
    return _actor(session, need_admin=False)
