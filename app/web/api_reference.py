"""The API reference page: Swagger UI rendering `/api/v1/openapi.json`, served by the service
itself (no CDN, works offline). Swagger UI's files come from the `flask-swagger-ui` package,
which ships its release build (`dist/`); the page and its start-up script are ours, so no inline
script is needed and the dashboard's Content-Security-Policy holds (plus `data:` images, which
Swagger UI's stylesheet uses for its icons). `/openapi.json` redirects to the document."""
from __future__ import annotations

from pathlib import Path

import flask_swagger_ui
from flask import Blueprint, redirect, render_template, send_from_directory, url_for
from werkzeug.wrappers import Response

SWAGGER_DIST = Path(flask_swagger_ui.__file__).resolve().parent / "dist"
SWAGGER_FILES = {"swagger-ui-bundle.js", "swagger-ui.css", "LICENSE", "VERSION"}
CSP = "default-src 'self'; img-src 'self' data:; base-uri 'none'; form-action 'self'; frame-ancestors 'none'"

bp = Blueprint("api_reference", __name__, template_folder="templates", static_folder="static/api_reference",
               static_url_path="/api-reference/static")


@bp.get("/api-reference")
def reference_page() -> Response:
    response = Response(render_template("api_reference.html",
                                        swagger_version=(SWAGGER_DIST / "VERSION").read_text().strip()),
                        mimetype="text/html")
    response.headers["Content-Security-Policy"] = CSP
    return response


@bp.get("/api-reference/swagger-ui/<name>")
def swagger_file(name: str) -> Response:
    if name not in SWAGGER_FILES:
        return Response(f"no such file: {name[:80]}\n", status=404, content_type="text/plain; charset=utf-8")
    response = send_from_directory(SWAGGER_DIST, name, max_age=86400)
    response.headers["Content-Security-Policy"] = CSP
    return response


@bp.get("/openapi.json")
def openapi_alias() -> Response:
    return redirect(url_for("api.openapi"), code=308)
