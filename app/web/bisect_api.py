"""`POST /api/v1/bisects` (start a bisect; admin or user token) and `GET /api/v1/bisects/<id>` (with
its `explanation`, app.explain.service, once finished)."""
from __future__ import annotations

from flask import Blueprint, jsonify

from app.bisect import service
from app.core.errors import NotFound
from app.core.models import Bisect
from app.explain.service import explain_bisect
from app.web.auth import require_maintainer
from app.web.bodies import json_body, settings
from app.web.session import request_session

bp = Blueprint("bisects", __name__)


@bp.post("/api/v1/bisects")
def create_bisect():  # type: ignore[no-untyped-def]
    session = request_session()
    require_maintainer(session)
    body = json_body()
    bisect = service.start(session, settings(), service.BisectRequest(
        repository=body.get("repository"), suite=body.get("suite"), metric=body.get("metric"),
        platform=body.get("platform"), good=body.get("good"), bad=body.get("bad"), effect=body.get("effect")))
    session.commit()
    return jsonify(service.bisect_json(session, bisect)), 201


@bp.get("/api/v1/bisects/<id:bisect_id>")
def get_bisect(bisect_id: int):  # type: ignore[no-untyped-def]
    session = request_session()
    bisect = session.get(Bisect, bisect_id)
    if bisect is None:
        raise NotFound(f"bisect {bisect_id} does not exist")
    return jsonify({**service.bisect_json(session, bisect), "explanation": explain_bisect(session, settings(), bisect)})
