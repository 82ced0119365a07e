"""`GET /api/v1/pulls/<owner>/<repo>/<number>`: a pull request's base-against-head verdict."""
from __future__ import annotations

from flask import Blueprint, jsonify

from app.pulls.view import find, pull_json
from app.web.session import request_session

bp = Blueprint("pulls", __name__)


@bp.get("/api/v1/pulls/<owner>/<repo>/<id:number>")
def get_pull(owner: str, repo: str, number: int):  # type: ignore[no-untyped-def]
    session = request_session()
    repository, pull = find(session, f"{owner}/{repo}", number)
    return jsonify(pull_json(session, repository, pull))
