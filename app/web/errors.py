"""Error responses: JSON `{"error", "detail"}` for the API, webhooks and health check; an HTML
page for dashboard routes."""
from __future__ import annotations

import logging

from flask import Flask, jsonify, make_response, render_template_string, request
from werkzeug.exceptions import HTTPException
from werkzeug.http import HTTP_STATUS_CODES

from app.core.db import RETRY_AFTER_S, is_database_unavailable
from app.core.errors import APIError

log = logging.getLogger(__name__)

HTML_ERROR = """<!doctype html><title>{{ code }} {{ name }} · Parallax</title>
<h1>{{ code }} {{ name }}</h1><p>{{ detail }}</p><p><a href="/">Parallax dashboard</a></p>"""


def wants_html() -> bool:
    """Dashboard pages answer errors in HTML; the API, webhooks and health check in JSON."""
    path = request.path
    return not (path.startswith("/api/") or path.startswith("/webhooks/") or path == "/healthz")


def html_error(code: int, name: str, detail: str):  # type: ignore[no-untyped-def]
    response = make_response(render_template_string(HTML_ERROR, code=code, name=name, detail=detail), code)
    if code == 401:  # lets a browser ask for the token (as the password) where reading needs one
        response.headers["WWW-Authenticate"] = 'Basic realm="Parallax", charset="UTF-8"'
    return response


def register(app: Flask) -> None:
    @app.errorhandler(APIError)
    def _api_error(exc: APIError):  # type: ignore[no-untyped-def]
        if wants_html():
            return html_error(exc.status, HTTP_STATUS_CODES.get(exc.status, "Error"), exc.detail)
        body = {"error": exc.error, "detail": exc.detail, **exc.extra}
        return jsonify(body), exc.status

    @app.errorhandler(HTTPException)
    def _http_error(exc: HTTPException):  # type: ignore[no-untyped-def]
        name = (exc.name or "error").lower().replace(" ", "_")
        if wants_html():
            return html_error(exc.code or 500, exc.name, exc.description or "")
        return jsonify({"error": name, "detail": exc.description}), exc.code or 500

    @app.errorhandler(Exception)
    def _unexpected(exc: Exception):  # type: ignore[no-untyped-def]
        if is_database_unavailable(exc):
            return _database_unavailable(exc)
        log.exception("unhandled error")
        if wants_html():
            return html_error(500, "Internal Server Error", "unexpected server error; see the service log")
        return jsonify({"error": "internal_error", "detail": "unexpected server error; see the service log"}), 500


def _database_unavailable(exc: Exception):  # type: ignore[no-untyped-def]
    """The database is restarting or unreachable: 503 with Retry-After, one log line, no
    traceback; the engine's pool reconnects (pre-ping) once it is back, without a restart."""
    log.warning("database unavailable: %s", str(getattr(exc, "orig", exc)).splitlines()[0] if str(exc) else type(exc).__name__)
    detail = "the database is unavailable (restarting or unreachable); retry shortly"
    if wants_html():
        response = html_error(503, "Service Unavailable", detail)
    else:
        response = jsonify({"error": "database_unavailable", "detail": detail})
        response.status_code = 503
    response.headers["Retry-After"] = str(RETRY_AFTER_S)
    return response
