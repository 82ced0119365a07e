"""The Flask application: `create_app(config)` builds an app from `Settings` (environment +
parallax.toml), binds the database, connects the areas (`app.wiring`), registers one blueprint
per area and the error handlers. It refuses to start on a database whose schema is behind the
migrations.
"""
from __future__ import annotations

from typing import Any

from flask import Flask, current_app, has_app_context
from flask.json.provider import DefaultJSONProvider

from app import wiring
from app.core import logs
from app.core.config import Settings, add_settings_provider, load_settings
from app.core.db import Database
from app.core.migrate import ensure_current
from app.jobs.catalogue import sync_catalogue
from app.jobs.catalogue_check import CatalogueCheck
from app.web import capacity, errors, guards, routing
from app.web.admin_api import bp as admin_bp
from app.web.api import bp as api_bp
from app.web.api_reference import bp as api_reference_bp
from app.web.artifacts_api import bp as artifacts_bp
from app.web.bisect_api import bp as bisect_bp
from app.web.bodies import read_small_body_first
from app.web.dashboard import bp as dashboard_bp
from app.web.metrics import bp as metrics_bp
from app.web.operator_api import bp as operator_bp
from app.web.pulls_api import bp as pulls_bp
from app.web.runner_api import bp as runner_bp
from app.web.series_api import bp as series_bp
from app.web.series_cache import SeriesCache
from app.web.session import close_request_session, mark_written
from app.web.uploads_api import bp as uploads_bp
from app.web.webhooks import bp as webhooks_bp


class StrictJSONProvider(DefaultJSONProvider):
    """JSON has no NaN or Infinity: a response that would carry one fails loudly (a logged 500
    caught by the tests) instead of reaching a client as invalid JSON."""

    def dumps(self, obj: Any, **kwargs: Any) -> str:
        kwargs.setdefault("allow_nan", False)
        return super().dumps(obj, **kwargs)


def _app_settings() -> Settings | None:
    return current_app.extensions["parallax.settings"] if has_app_context() else None


def create_app(config: Settings | dict[str, Any] | None = None, *, check_schema: bool = True) -> Flask:
    if config is None:
        settings = load_settings()
    elif isinstance(config, dict):
        settings = load_settings(**config)
    else:
        settings = config

    logs.configure()
    wiring.connect()
    add_settings_provider(_app_settings)
    flask_app = Flask(__name__)
    flask_app.json = StrictJSONProvider(flask_app)
    flask_app.config["SECRET_KEY"] = settings.secret_key
    # The dashboard's sign-in session: not sent with cross-site posts, never readable by scripts.
    flask_app.config["SESSION_COOKIE_SAMESITE"] = "Lax"
    flask_app.config["SESSION_COOKIE_HTTPONLY"] = True
    flask_app.config["MAX_CONTENT_LENGTH"] = max(settings.max_document_bytes, settings.max_webhook_bytes)
    flask_app.extensions["parallax.settings"] = settings
    database = Database(settings.database_url)
    flask_app.extensions["parallax.db"] = database
    if settings.read_database_url:  # a streaming replica of the same schema (app.web.session)
        flask_app.extensions["parallax.read_db"] = Database(settings.read_database_url)
    if check_schema:
        ensure_current(database.engine)
    with database.session() as session:
        sync_catalogue(session, settings)
    flask_app.extensions["parallax.catalogue_check"] = CatalogueCheck(settings)
    flask_app.extensions["parallax.series_cache"] = SeriesCache()  # per process: app/web/series_cache.py

    routing.register(flask_app)
    flask_app.before_request(read_small_body_first)  # first: before any hook touches the database
    errors.register(flask_app)
    guards.register(flask_app)
    capacity.install(flask_app, settings)
    for blueprint in (runner_bp, admin_bp, api_bp, bisect_bp, webhooks_bp, series_bp, dashboard_bp, metrics_bp,
                      operator_bp, api_reference_bp, uploads_bp, artifacts_bp, pulls_bp):
        flask_app.register_blueprint(blueprint)

    flask_app.after_request(mark_written)

    @flask_app.teardown_appcontext
    def _close_session(exc: BaseException | None) -> None:
        close_request_session(exc)

    return flask_app
