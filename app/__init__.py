"""Parallax service: the Flask application factory.

`create_app(config)` builds an app from `Settings` (environment + parallax.toml), binds the
database, registers one blueprint per area and JSON error handlers. The service refuses to
start on a database whose schema is behind the migrations.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

from app.config import Settings, load_settings

if TYPE_CHECKING:  # imported lazily: `parallax runner` runs on boxes without Flask
    from flask import Flask


def create_app(config: Settings | dict[str, Any] | None = None, *, check_schema: bool = True) -> Flask:
    from flask import Flask

    from app import db, errors, logs
    from app.api import bp as api_bp
    from app.catalogue import sync_catalogue
    from app.dashboard import bp as dashboard_bp
    from app.runner_api import bp as runner_bp
    from app.series_api import bp as series_bp
    from app.webhooks import bp as webhooks_bp

    if config is None:
        settings = load_settings()
    elif isinstance(config, dict):
        settings = load_settings(**config)
    else:
        settings = config

    logs.configure()
    flask_app = Flask(__name__)
    flask_app.config["SECRET_KEY"] = settings.secret_key
    flask_app.config["MAX_CONTENT_LENGTH"] = max(settings.max_document_bytes, settings.max_webhook_bytes)
    flask_app.extensions["parallax.settings"] = settings
    database = db.Database(settings.database_url)
    flask_app.extensions["parallax.db"] = database
    if check_schema:
        from app.migrate import ensure_current
        ensure_current(database.engine)
    with database.session() as session:
        sync_catalogue(session, settings)

    errors.register(flask_app)
    flask_app.register_blueprint(runner_bp)
    flask_app.register_blueprint(api_bp)
    for blueprint in (webhooks_bp, series_bp, dashboard_bp):
        flask_app.register_blueprint(blueprint)

    @flask_app.teardown_appcontext
    def _close_session(exc: BaseException | None) -> None:
        db.close_request_session(exc)

    return flask_app

