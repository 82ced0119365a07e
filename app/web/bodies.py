"""What every blueprint reads from a request: the app's settings, a size-capped body, a JSON
object body, and a commit SHA field; and a small body read before anything else happens."""
from __future__ import annotations

import json
from typing import Any

from flask import current_app, request

from app.core.config import Settings
from app.core.errors import APIError, Invalid, PayloadTooLarge
from app.core.limits import require_valid_unicode
from app.core.shas import is_sha


def settings() -> Settings:
    return current_app.extensions["parallax.settings"]


JSON_BODY_BYTES = 1_000_000  # a JSON body's cap; a body up to it is also read before the handler runs


def read_small_body_first() -> None:
    """A request's small body (a declared length up to JSON_BODY_BYTES), read before the
    handler checks tokens: a client sending its body slowly then holds no database transaction
    while it does (on SQLite every transaction holds the write lock). Larger or chunked bodies
    are read by their handlers, after the tokens. Kept where werkzeug keeps it, so forms parse
    from it as well."""
    length = request.content_length
    if length is not None and 0 < length <= JSON_BODY_BYTES:
        request.environ["parallax.body"] = request.get_data(cache=True)


def json_body(*, required: bool = True, max_bytes: int = JSON_BODY_BYTES) -> dict[str, Any]:
    """The request body as a JSON object: 413 over `max_bytes`, 400 when malformed, 422 naming
    the field when a string in it is not valid Unicode."""
    raw = read_body(max_bytes)
    if not raw.strip():
        if required:
            raise APIError("request body must be a JSON object")
        return {}
    try:
        data = json.loads(raw)
    except ValueError as exc:
        raise APIError(f"malformed JSON: {exc}", error="malformed_json") from exc
    if not isinstance(data, dict):
        raise APIError("request body must be a JSON object", error="malformed_json")
    require_valid_unicode(data)
    return data


def read_body(max_bytes: int) -> bytes:
    """The whole body, refused with 413 over `max_bytes`: by its Content-Length up front, or,
    for a chunked body, as soon as more than `max_bytes` arrived. (One `read(max_bytes + 1)`
    silently stops at the app's MAX_CONTENT_LENGTH, cutting a chunked body off.)"""
    length = request.content_length
    if length is not None and length > max_bytes:
        raise PayloadTooLarge(f"body is {length} bytes, over the limit of {max_bytes}")
    cached = request.environ.get("parallax.body")
    if cached is not None:
        return cached
    stream = request.stream  # werkzeug's: it raises 413 itself past the app's MAX_CONTENT_LENGTH
    chunks: list[bytes] = []
    size = 0
    while True:
        chunk = stream.read(min(65536, max_bytes + 1 - size))
        if not chunk:
            break
        chunks.append(chunk)
        size += len(chunk)
        if size > max_bytes:
            raise PayloadTooLarge(f"body is over the limit of {max_bytes} bytes")
    raw = b"".join(chunks)
    request.environ["parallax.body"] = raw
    return raw


def require_sha(value: Any, field: str = "commit") -> str:
    if not is_sha(value):
        raise Invalid(f"{field}: must be a full 40-character lowercase hex commit SHA, got {value!r}",
                      extra={"field": field})
    return value
