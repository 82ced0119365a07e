"""Request authentication: the bearer token of the current request, checked by `app.auth`."""
from __future__ import annotations

from flask import current_app, request
from sqlalchemy.orm import Session

from app.auth.tokens import actor_for, registration_token_for, runner_for
from app.core.errors import Unauthorized
from app.core.models import RegistrationToken, Runner


def bearer_token() -> str:
    header = request.headers.get("Authorization", "")
    scheme, _, token = header.partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        raise Unauthorized("missing bearer token: send 'Authorization: Bearer <token>'")
    return token.strip()


def require_registration_token(session: Session) -> RegistrationToken:
    return registration_token_for(session, bearer_token())


def require_runner(session: Session) -> Runner:
    return runner_for(session, bearer_token())


def _admin_token() -> str | None:
    return current_app.extensions["parallax.settings"].admin_token


def require_admin(session: Session) -> str:
    """The admin token or an admin user's token; returns who called."""
    return actor_for(session, bearer_token(), _admin_token(), need_admin=True)


def require_maintainer(session: Session) -> str:
    """Any user's token or the admin token (alert triage); returns who called."""
    return actor_for(session, bearer_token(), _admin_token(), need_admin=False)
