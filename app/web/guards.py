"""What every request passes through: refusal of control characters in the URL, the optional
token for reading (`PARALLAX_READ_REQUIRES_TOKEN`), and security headers on every response."""
from __future__ import annotations

import base64
import binascii

from flask import Flask, Response, current_app, request

from app.core.errors import Invalid, Unauthorized
from app.web.auth import require_maintainer
from app.web.session import request_session
from runners.results import control_character

# No script runs on any page; styles come from /static (and the inline SVG charts' attributes).
CONTENT_SECURITY_POLICY = ("default-src 'none'; style-src 'self' 'unsafe-inline'; img-src 'self' data:; "
                           "base-uri 'none'; form-action 'self'; frame-ancestors 'none'")
SECURITY_HEADERS = {
    "Content-Security-Policy": CONTENT_SECURITY_POLICY,
    "X-Content-Type-Options": "nosniff",
    "X-Frame-Options": "DENY",
    "Referrer-Policy": "no-referrer",
    "Cross-Origin-Opener-Policy": "same-origin",
}
# Open whatever the reading policy: probes, the API description, runners, GitHub and the poll of
# a queued upload (which authenticate themselves: the CI token polls), and the stylesheet.
PUBLIC_PATHS = ("/healthz", "/api/v1/openapi.json", "/webhooks/", "/static/", "/api/v1/uploads/")


def check_url() -> None:
    """NUL or another control character in a query parameter or the path is a 422 naming it."""
    bad = control_character(request.path)
    if bad is not None:
        raise Invalid(f"path: contains the control character {bad!r}", extra={"field": "path"})
    for key, value in request.args.items(multi=True):
        if control_character(key) is not None or control_character(value) is not None:
            raise Invalid(f"{key!r}: query parameter contains a control character", extra={"field": key})


def _basic_password() -> str | None:
    """The password of HTTP Basic credentials: how a browser sends a token to the pages."""
    scheme, _, value = request.headers.get("Authorization", "").partition(" ")
    if scheme.lower() != "basic":
        return None
    try:
        decoded = base64.b64decode(value.strip(), validate=True).decode("utf-8")
    except (binascii.Error, UnicodeDecodeError):
        return None
    return decoded.partition(":")[2] or None


def check_reader() -> None:
    """With `read_requires_token`, every read needs a user's or the admin token (Bearer, or the
    password of HTTP Basic for browsers). Writes check their own tokens."""
    if not current_app.extensions["parallax.settings"].read_requires_token:
        return
    if request.method not in ("GET", "HEAD") or request.path.startswith(PUBLIC_PATHS):
        return
    password = _basic_password()
    if password is not None:
        request.environ["HTTP_AUTHORIZATION"] = f"Bearer {password}"
    try:
        require_maintainer(request_session())
    except Unauthorized as exc:
        exc.extra.setdefault("hint", "this service needs a token for reading (PARALLAX_READ_REQUIRES_TOKEN)")
        raise


def add_security_headers(response: Response) -> Response:
    for name, value in SECURITY_HEADERS.items():
        response.headers.setdefault(name, value)
    return response


def register(app: Flask) -> None:
    app.before_request(check_url)
    app.before_request(check_reader)
    app.after_request(add_security_headers)
