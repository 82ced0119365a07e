"""The service's error types: each carries its HTTP status, an error code and a detail that names
the problem. Areas raise them; `app.web.errors` turns them into responses."""
from __future__ import annotations

from typing import Any


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
