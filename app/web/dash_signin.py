"""Dashboard sign-in and CSRF.

A person added with `parallax user add` signs in with their name and personal token; the
session (Flask's signed cookie, HttpOnly, SameSite=Lax) then holds their user id. Every write
form carries a per-session CSRF token, checked before any dashboard POST runs.

The CSRF token is our own rather than Flask-WTF's: its `CSRFProtect` guards every POST of the
whole app, so the bearer-token API, the runner protocol and the webhook (and any blueprint a
later change adds) would each need an exemption, and the dashboard uses no WTForms. What is
left is a random value kept in the signed session and compared in constant time.
"""
from __future__ import annotations

import hmac
import secrets

from flask import abort, current_app, g, redirect, render_template, request, session, url_for
from sqlalchemy import select
from werkzeug.wrappers import Response

from app.auth.tokens import hash_token
from app.core.models import User
from app.web.session import request_session

CSRF_FIELD = "csrf_token"


def current_user() -> User | None:
    """The signed-in user of this request (None when signed out, or the account is disabled)."""
    if "dashboard_user" not in g:
        user = None
        user_id = session.get("user_id")
        if isinstance(user_id, int):
            user = request_session().get(User, user_id)
            if user is not None and user.disabled:
                user = None
        g.dashboard_user = user
    return g.dashboard_user


def csrf_token() -> str:
    token = session.get(CSRF_FIELD)
    if not isinstance(token, str):
        token = session[CSRF_FIELD] = secrets.token_urlsafe(32)
    return token


def check_csrf() -> None:
    """Refuse a write whose form lacks this session's CSRF token."""
    sent = request.form.get(CSRF_FIELD, "")
    expected = session.get(CSRF_FIELD)
    if not isinstance(expected, str) or not sent or not hmac.compare_digest(sent.encode(), expected.encode()):
        abort(400, description="CSRF token missing or wrong: reload the page and submit the form again")


def require_user() -> User:
    user = current_user()
    if user is None:
        abort(403, description="sign in to change anything (a user from `parallax user add`)")
    return user


def reading_allowed() -> bool:
    return current_app.extensions["parallax.settings"].dashboard_public or current_user() is not None


def signin_page() -> str | Response:
    error = None
    status = 200
    next_url = request.values.get("next", "")
    if not next_url.startswith("/") or next_url.startswith("//"):
        next_url = url_for("dashboard.index")
    if request.method == "POST":
        name, token = request.form.get("name", "").strip(), request.form.get("token", "").strip()
        user = request_session().scalar(select(User).where(User.name == name)) if name else None
        if user is None or user.disabled or not hmac.compare_digest(user.token_hash, hash_token(token)):
            error, status = "unknown user, wrong token, or a disabled account", 401
        else:
            session.clear()
            session["user_id"] = user.id
            csrf_token()
            return redirect(next_url)
    return render_template("signin.html", error=error, next_url=next_url), status


def signout() -> Response:
    session.clear()
    return redirect(url_for("dashboard.index"))
