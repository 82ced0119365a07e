"""URL converters: `<id:name>` is a database id, so it matches only 1 .. 2**31 - 1 (PostgreSQL
INTEGER); a larger number is a plain 404 instead of an overflow inside the database."""
from __future__ import annotations

from flask import Flask
from werkzeug.routing import IntegerConverter, Map

from app.core.limits import INT32_MAX


class IdConverter(IntegerConverter):
    def __init__(self, url_map: Map) -> None:
        super().__init__(url_map, min=1, max=INT32_MAX)


def register(app: Flask) -> None:
    app.url_map.converters["id"] = IdConverter
