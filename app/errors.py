"""JSON errors for the API: every failure is `{"error": ..., "detail": ...}` with its status."""
from __future__ import annotations

import logging
from typing import Any

from flask import Flask, jsonify, render_template_string, request
from werkzeug.exceptions import HTTPException

log = logging.getLogger(__name__)


class APIError(Exception):
    status = 400
    error = "bad_request"

    def __init__(self, detail: str, *, status: int | None = None, error: str | None = None,
                 extra: dict[str, Any] | None = None) -> None:
        super().__init__(detail)
        self.detail = detail
        if status is not None:
            self.status = status
        if error is not None:
            self.error = error
        self.extra = extra or {}


class Unauthorized(APIError):
    status, error = 401, "unauthorized"


class Forbidden(APIError):
    status, error = 403, "forbidden"


class NotFound(APIError):
    status, error = 404, "not_found"


class Conflict(APIError):
    status, error = 409, "conflict"


class PayloadTooLarge(APIError):
    status, error = 413, "payload_too_large"


class Invalid(APIError):
    status, error = 422, "invalid"


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
