"""`POST /api/v1/bisects` (start a bisect; admin or user token) and `GET /api/v1/bisects/<id>` (with
its `explanation`, app.explain.service, once finished).

Starting one answers 202 at once with the bisect `pending`: the bisect duty fetches the git
mirror and checks good and bad there (a fetch can take minutes under load), then the state
moves to `running`, or to `failed` with `field` naming what was wrong."""
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
    bisect = service.submit(session, service.BisectRequest(
        repository=body.get("repository"), suite=body.get("suite"), metric=body.get("metric"),
        platform=body.get("platform"), good=body.get("good"), bad=body.get("bad"), effect=body.get("effect")))
    session.commit()
    response = jsonify(service.bisect_json(session, bisect))
    response.headers["Location"] = f"/api/v1/bisects/{bisect.id}"
    return response, 202


@bp.get("/api/v1/bisects/<id:bisect_id>")
def get_bisect(bisect_id: int):  # type: ignore[no-untyped-def]
    session = request_session()
    bisect = session.get(Bisect, bisect_id)
    if bisect is None:
        raise NotFound(f"bisect {bisect_id} does not exist")
    return jsonify({**service.bisect_json(session, bisect), "explanation": explain_bisect(session, settings(), bisect)})
