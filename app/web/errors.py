"""Error responses: JSON `{"error", "detail"}` for the API, webhooks and health check; an HTML
page for dashboard routes."""
from __future__ import annotations

import logging

from flask import Flask, jsonify, render_template_string, request
from werkzeug.exceptions import HTTPException

from app.core.errors import APIError

log = logging.getLogger(__name__)

HTML_ERROR = """<!doctype html><title>{{ code }} {{ name }} · Parallax</title>
<h1>{{ code }} {{ name }}</h1><p>{{ detail }}</p><p><a href="/">Parallax dashboard</a></p>"""


def wants_html() -> bool:
    """Dashboard pages answer errors in HTML; the API, webhooks and health check in JSON."""
    path = request.path
    return not (path.startswith("/api/") or path.startswith("/webhooks/") or path == "/healthz")


def register(app: Flask) -> None:
    @app.errorhandler(APIError)
    def _api_error(exc: APIError):  # type: ignore[no-untyped-def]
        body = {"error": exc.error, "detail": exc.detail, **exc.extra}
        return jsonify(body), exc.status

    @app.errorhandler(HTTPException)
    def _http_error(exc: HTTPException):  # type: ignore[no-untyped-def]
        name = (exc.name or "error").lower().replace(" ", "_")
        if wants_html():
            return render_template_string(HTML_ERROR, code=exc.code, name=exc.name, detail=exc.description), exc.code
        return jsonify({"error": name, "detail": exc.description}), exc.code or 500

    @app.errorhandler(Exception)
    def _unexpected(exc: Exception):  # type: ignore[no-untyped-def]
        log.exception("unhandled error")
        return jsonify({"error": "internal_error", "detail": "unexpected server error; see the service log"}), 500
