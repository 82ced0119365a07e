"""Input limits, derived from the schema rather than repeated: the longest metric name is the
`measurements.metric` column's length, and so on. Every entry point (runner API, results
documents, webhooks, the read API) checks input here before the database sees it, so a value the
database cannot store is a 422 naming the field, never a 500.

Two rules for text: identifiers (names, units, platforms, labels) refuse control characters;
free text (logs, failure reasons, notes) keeps them except NUL, which neither PostgreSQL text
nor a log viewer can hold, and which is replaced by U+FFFD like any undecodable byte.
"""
from __future__ import annotations

import math
import sys
from typing import Any

from sqlalchemy import Column

from app.core.config import Settings
from app.core.errors import Invalid
from app.core.models import ItemResult, Job, Measurement, Runner, Suite
from runners.results import Limits, control_character, is_valid_unicode

INT32_MAX = 2**31 - 1  # PostgreSQL INTEGER: ids, attempts, priorities


def column_chars(column: Column[Any]) -> int:
    length = getattr(column.type, "length", None)
    assert isinstance(length, int), f"{column} has no length"
    return length


METRIC_NAME_CHARS = column_chars(Measurement.__table__.c.metric)
UNIT_CHARS = column_chars(Measurement.__table__.c.unit)
ITEM_NAME_CHARS = column_chars(ItemResult.__table__.c.name)
SUITE_NAME_CHARS = column_chars(Suite.__table__.c.name)
RUNNER_NAME_CHARS = column_chars(Runner.__table__.c.name)
PLATFORM_CHARS = min(column_chars(Runner.__table__.c.platform), column_chars(Job.__table__.c.platform))


def document_limits(settings: Settings) -> Limits:
    """The results-document limits this service enforces."""
    return Limits(name_chars=min(METRIC_NAME_CHARS, ITEM_NAME_CHARS, SUITE_NAME_CHARS), unit_chars=UNIT_CHARS,
                  metrics=settings.max_metrics_per_document, samples=settings.max_samples_per_metric,
                  items=settings.max_items_per_document, string_chars=settings.max_string_chars)


def identifier(value: Any, field: str, max_chars: int) -> str:
    """A non-empty single-line string that fits its column."""
    if not isinstance(value, str) or not value.strip():
        raise Invalid(f"{field}: must be a non-empty string", extra={"field": field})
    if len(value) > max_chars:
        raise Invalid(f"{field}: is {len(value)} characters, longer than the limit of {max_chars}",
                      extra={"field": field})
    bad = control_character(value)
    if bad is not None:
        raise Invalid(f"{field}: contains the control character {bad!r}", extra={"field": field})
    return value


def free_text(value: str) -> str:
    """Free text as stored: NUL becomes U+FFFD."""
    return value.replace("\x00", "\ufffd")


def integer(value: Any, field: str, *, minimum: int = 0, maximum: int = INT32_MAX) -> int:
    """A JSON integer (not a bool, not 1.9, not "1") within [minimum, maximum]."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise Invalid(f"{field}: must be an integer, got {value!r}", extra={"field": field})
    if not minimum <= value <= maximum:
        raise Invalid(f"{field}: must be between {minimum} and {maximum}", extra={"field": field})
    return value


def number(value: Any, field: str, *, minimum: float, maximum: float = sys.float_info.max) -> float:
    """A finite JSON number within [minimum, maximum] (10**400 is out of range, not a 500)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise Invalid(f"{field}: must be a number, got {value!r}", extra={"field": field})
    if not (minimum <= value <= maximum) or (isinstance(value, float) and not math.isfinite(value)):
        raise Invalid(f"{field}: must be a finite number between {minimum:g} and {maximum:g}", extra={"field": field})
    return float(value)


def boolean(value: Any, field: str) -> bool:
    if not isinstance(value, bool):
        raise Invalid(f"{field}: must be true or false, got {value!r}", extra={"field": field})
    return value


def json_value(value: Any, field: str, settings: Settings) -> Any:
    """Free-form JSON (runner facts): finite numbers that fit a double, strings within the
    string limit, no NUL in keys."""
    if isinstance(value, float) and not math.isfinite(value):
        raise Invalid(f"{field}: non-finite number is not allowed", extra={"field": field})
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) > sys.float_info.max:
        raise Invalid(f"{field}: number is out of range", extra={"field": field})
    if isinstance(value, str) and len(value) > settings.max_string_chars:
        raise Invalid(f"{field}: longer than {settings.max_string_chars} characters", extra={"field": field})
    if isinstance(value, dict):
        for key, inner in value.items():
            identifier(key, f"{field} key", settings.max_string_chars)
            json_value(inner, f"{field}.{key}", settings)
    elif isinstance(value, list):
        for i, inner in enumerate(value):
            json_value(inner, f"{field}[{i}]", settings)
    return value


def invalid_unicode_field(value: Any, field: str = "$") -> str | None:
    """The path of the first string (value or object key) in parsed JSON that is not valid
    Unicode — a lone surrogate from a `\\ud800` escape, which no database can store — or None."""
    if isinstance(value, str):
        return None if is_valid_unicode(value) else field
    if isinstance(value, dict):
        for key, inner in value.items():
            path = key if field == "$" else f"{field}.{key}"
            if not is_valid_unicode(key):
                return path.encode("utf-8", "backslashreplace").decode()
            found = invalid_unicode_field(inner, path)
            if found is not None:
                return found
    elif isinstance(value, list):
        for i, inner in enumerate(value):
            found = invalid_unicode_field(inner, f"{field}[{i}]")
            if found is not None:
                return found
    return None


def require_valid_unicode(value: Any) -> None:
    """422 naming the field when any string in a parsed JSON body is not valid Unicode."""
    field = invalid_unicode_field(value)
    if field is not None:
        raise Invalid(f"{field}: not valid Unicode (a lone surrogate such as \\ud800); send UTF-8 text",
                      extra={"field": field})
