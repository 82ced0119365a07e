"""Operator API (admin token): registration tokens, and taking access back — revoke a
registration token, disable a runner or a user. The same actions as `parallax token revoke`,
`parallax runner disable` and `parallax user disable`."""
from __future__ import annotations

from datetime import timedelta
from typing import Any, Callable

from flask import Blueprint, Response, jsonify
from sqlalchemy import select
from sqlalchemy.orm import Session

from app.auth.tokens import create_registration_token, disable_runner, disable_user, hash_token, revoke_registration_token
from app.core import limits
from app.core.clock import as_utc
from app.core.models import RegistrationToken, User
from app.web.auth import require_admin
from app.web.bodies import json_body
from app.web.session import request_session

bp = Blueprint("admin_api", __name__, url_prefix="/api/v1")
MAX_EXPIRY_DAYS = 3650


@bp.post("/registration-tokens")
def create_token():  # type: ignore[no-untyped-def]
    session = request_session()
    require_admin(session)
    body = json_body(required=False)
    note = body.get("note")
    if note is not None:
        note = limits.identifier(note, "note", limits.column_chars(RegistrationToken.__table__.c.note))
    days = body.get("expires_in_days")
    expires_in = None
    if days is not None:
        expires_in = timedelta(days=limits.number(days, "expires_in_days", minimum=0.001, maximum=MAX_EXPIRY_DAYS))
    value = create_registration_token(session, note, expires_in)
    session.flush()
    row = session.scalar(select(RegistrationToken).where(RegistrationToken.token_hash == hash_token(value)))
    session.commit()
    return jsonify({"id": row.id, "token": value,
                    "expires_at": row.expires_at and as_utc(row.expires_at).isoformat()}), 201


def _take_back(action: Callable[[Session], dict[str, Any]]) -> Response:
    """One admin action that takes access back, in one transaction; answers what it changed."""
    session = request_session()
    require_admin(session)
    answer = action(session)
    session.commit()
    return jsonify(answer)


@bp.post("/registration-tokens/<id:token_id>/revoke")
def revoke_token(token_id: int) -> Response:
    return _take_back(lambda session: {"id": revoke_registration_token(session, token_id).id, "revoked": True})


@bp.post("/runners/<id:runner_id>/disable")
def disable_runner_endpoint(runner_id: int) -> Response:
    return _take_back(lambda session: {"id": disable_runner(session, runner_id).id, "disabled": True})


@bp.post("/users/<name>/disable")
def disable_user_endpoint(name: str) -> Response:
    def disable(session: Session) -> dict[str, Any]:
        limits.identifier(name, "name", limits.column_chars(User.__table__.c.name))
        return {"name": disable_user(session, name).name, "disabled": True}
    return _take_back(disable)
