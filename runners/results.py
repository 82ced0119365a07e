"""The results document (contract `parallax.results/1`): what a job writes to `$PARALLAX_RESULTS`.

Lives on the runner side so that the runner validates before uploading and the service imports
the same rules. Validation is hand-written rather than JSON Schema because the contract needs
checks a schema cannot state (finite floats, a message naming the exact field path).
"""
from __future__ import annotations

import json
import math
import os
import sys
import unicodedata
from dataclasses import dataclass
from typing import Any

SCHEMA = "parallax.results/1"
DIRECTIONS = ("higher_is_better", "lower_is_better")
MAX_DOCUMENT_BYTES = 8_000_000
MAX_SAMPLES = 100_000
MAX_ITEMS = 1_000_000
MAX_METRICS = 256


@dataclass(frozen=True)
class Limits:
    """How big a document may be. The character limits are the service's column sizes (the
    service builds its `Limits` from its models, `app.core.limits`, and a test checks that these
    defaults agree); the counts are the service's settings (`PARALLAX_MAX_METRICS_PER_DOCUMENT`,
    ...), so a runner validating with the defaults refuses what a default service refuses."""

    name_chars: int = 128  # metric name, suite, items.name
    unit_chars: int = 32
    metrics: int = MAX_METRICS
    samples: int = MAX_SAMPLES
    items: int = MAX_ITEMS
    string_chars: int = 4096  # any string inside context and environment


DEFAULT_LIMITS = Limits()


class ResultsError(ValueError):
    """The document is invalid. `field` is the JSON path of the offending value."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field
        self.message = message


@dataclass(frozen=True)
class Metric:
    name: str
    unit: str
    direction: str
    samples: tuple[float, ...]


@dataclass(frozen=True)
class Items:
    name: str
    correct: tuple[int, ...]


@dataclass(frozen=True)
class ResultsDocument:
    suite: str
    metrics: tuple[Metric, ...]
    items: Items | None
    context: dict[str, Any]
    environment: dict[str, Any]

    @property
    def simulated(self) -> bool:
        return bool(self.environment.get("simulated", False))


def _reject_constant(name: str) -> Any:
    # json.loads accepts NaN/Infinity literals by default; the contract refuses them.
    raise ResultsError("$", f"non-finite number {name} is not allowed")


def loads(text: str | bytes, max_bytes: int = MAX_DOCUMENT_BYTES, limits: Limits = DEFAULT_LIMITS) -> ResultsDocument:
    """Parse and validate a document from JSON text."""
    size = len(text.encode() if isinstance(text, str) else text)
    if size > max_bytes:
        raise ResultsError("$", f"document is {size} bytes, over the limit of {max_bytes}")
    try:
        data = json.loads(text, parse_constant=_reject_constant)
    except ResultsError:
        raise
    except (ValueError, UnicodeDecodeError) as exc:
        raise ResultsError("$", f"not valid JSON: {exc}") from exc
    return validate(data, limits)


def control_character(value: str) -> str | None:
    """The first control character (NUL, escape, ...) in `value`, or None."""
    return next((c for c in value if unicodedata.category(c) == "Cc"), None)


def _string(value: Any, field: str, max_chars: int, *, allow_empty: bool = False) -> str:
    if not isinstance(value, str):
        raise ResultsError(field, f"must be a string, got {type(value).__name__}")
    if not allow_empty and not value.strip():
        raise ResultsError(field, "must not be empty")
    if len(value) > max_chars:
        raise ResultsError(field, f"is {len(value)} characters, longer than the limit of {max_chars}")
    bad = control_character(value)
    if bad is not None:
        raise ResultsError(field, f"contains the control character {bad!r}")
    return value


def is_valid_unicode(value: str) -> bool:
    """False for a string holding a lone surrogate (JSON's `\\ud800` escape parses into one):
    no database or UTF-8 encoder can store it."""
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _bounded(value: Any, field: str, limits: Limits) -> None:
    """Numbers must fit a double and free-form strings the string limit and be valid Unicode,
    anywhere in the document (an integer literal of 400 digits parses in Python but overflows
    every later float())."""
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) > sys.float_info.max:
        raise ResultsError(field, "number is out of range (larger than a double)")
    if isinstance(value, str) and len(value) > limits.string_chars:
        raise ResultsError(field, f"is {len(value)} characters, longer than the limit of {limits.string_chars}")
    if isinstance(value, str) and not is_valid_unicode(value):
        raise ResultsError(field, "is not valid Unicode (it holds a lone surrogate such as \\ud800)")
    if isinstance(value, dict):
        for key, inner in value.items():
            if len(key) > limits.string_chars:
                raise ResultsError(field, f"has a key longer than {limits.string_chars} characters")
            if not is_valid_unicode(key):
                raise ResultsError(f"{field}.{key.encode('utf-8', 'backslashreplace').decode()}",
                                   "key is not valid Unicode (it holds a lone surrogate such as \\ud800)")
            _bounded(inner, f"{field}.{key}", limits)
    elif isinstance(value, list):
        for i, inner in enumerate(value):
            _bounded(inner, f"{field}[{i}]", limits)


def _finite_json(value: Any, field: str) -> None:
    """Context and environment are free-form, but must still be finite JSON."""
    if isinstance(value, float) and not math.isfinite(value):
        raise ResultsError(field, "non-finite number is not allowed")
    if isinstance(value, dict):
        for key, inner in value.items():
            _finite_json(inner, f"{field}.{key}")
    elif isinstance(value, list):
        for i, inner in enumerate(value):
            _finite_json(inner, f"{field}[{i}]")


def validate(data: Any, limits: Limits = DEFAULT_LIMITS) -> ResultsDocument:
    """Validate a parsed document; raises ResultsError naming the first bad field."""
    if not isinstance(data, dict):
        raise ResultsError("$", f"must be a JSON object, got {type(data).__name__}")
    if data.get("schema") != SCHEMA:
        raise ResultsError("schema", f"must be {SCHEMA!r}, got {data.get('schema')!r}")
    for key, value in data.items():
        if not is_valid_unicode(key):
            raise ResultsError(key.encode("utf-8", "backslashreplace").decode(),
                               "key is not valid Unicode (it holds a lone surrogate such as \\ud800)")
        _bounded(value, key, limits)
    suite = _string(data.get("suite"), "suite", limits.name_chars)
    raw_metrics = data.get("metrics")
    if not isinstance(raw_metrics, list) or not raw_metrics:
        raise ResultsError("metrics", "must be a non-empty list")
    if len(raw_metrics) > limits.metrics:
        raise ResultsError("metrics", f"has {len(raw_metrics)} metrics, over the limit of {limits.metrics}")
    metrics: list[Metric] = []
    seen: set[str] = set()
    for i, raw in enumerate(raw_metrics):
        where = f"metrics[{i}]"
        if not isinstance(raw, dict):
            raise ResultsError(where, "must be an object")
        name = _string(raw.get("name"), f"{where}.name", limits.name_chars)
        if name in seen:
            raise ResultsError(f"{where}.name", f"duplicate metric {name!r}")
        seen.add(name)
        unit = _string(raw.get("unit", ""), f"{where}.unit", limits.unit_chars, allow_empty=True)
        direction = raw.get("direction")
        if direction not in DIRECTIONS:
            raise ResultsError(f"{where}.direction",
                               f"unknown direction {direction!r}; expected one of {', '.join(DIRECTIONS)}")
        samples = raw.get("samples")
        if not isinstance(samples, list):
            raise ResultsError(f"{where}.samples", "must be a list of numbers")
        if not samples:
            raise ResultsError(f"{where}.samples", "must not be empty")
        if len(samples) > limits.samples:
            raise ResultsError(f"{where}.samples", f"has more than {limits.samples} samples")
        values: list[float] = []
        for j, sample in enumerate(samples):
            if isinstance(sample, bool) or not isinstance(sample, (int, float)):
                raise ResultsError(f"{where}.samples[{j}]", f"must be a number, got {type(sample).__name__}")
            # `1e999` parses to infinity without passing through parse_constant, and an integer
            # too large for a float overflows on conversion: both are non-finite samples.
            try:
                value = float(sample)
            except OverflowError:
                value = math.inf
            if not math.isfinite(value):
                raise ResultsError(f"{where}.samples[{j}]", "must be finite (NaN and infinity are refused)")
            values.append(value)
        metrics.append(Metric(name=name, unit=unit, direction=direction, samples=tuple(values)))
    items = None
    if data.get("items") is not None:
        raw_items = data["items"]
        if not isinstance(raw_items, dict):
            raise ResultsError("items", "must be an object")
        name = _string(raw_items.get("name"), "items.name", limits.name_chars)
        correct = raw_items.get("correct")
        if not isinstance(correct, list) or not correct:
            raise ResultsError("items.correct", "must be a non-empty list of 0/1")
        if len(correct) > limits.items:
            raise ResultsError("items.correct", f"has more than {limits.items} items")
        for j, value in enumerate(correct):
            if isinstance(value, bool):
                value = int(value)
            if value not in (0, 1) or isinstance(value, float):
                raise ResultsError(f"items.correct[{j}]", f"must be 0 or 1, got {value!r}")
        items = Items(name=name, correct=tuple(int(v) for v in correct))
    context = data.get("context", {})
    if not isinstance(context, dict):
        raise ResultsError("context", "must be an object")
    _finite_json(context, "context")
    environment = data.get("environment", {})
    if not isinstance(environment, dict):
        raise ResultsError("environment", "must be an object")
    _finite_json(environment, "environment")
    if "platform" in environment and not isinstance(environment["platform"], str):
        raise ResultsError("environment.platform", "must be a string")
    if "simulated" in environment and not isinstance(environment["simulated"], bool):
        raise ResultsError("environment.simulated", "must be true or false")
    return ResultsDocument(suite=suite, metrics=tuple(metrics), items=items,
                           context=dict(context), environment=dict(environment))


def to_json(document: ResultsDocument) -> dict[str, Any]:
    out: dict[str, Any] = {
        "schema": SCHEMA,
        "suite": document.suite,
        "metrics": [{"name": m.name, "unit": m.unit, "direction": m.direction, "samples": list(m.samples)}
                    for m in document.metrics],
        "context": document.context,
        "environment": document.environment,
    }
    if document.items is not None:
        out["items"] = {"name": document.items.name, "correct": list(document.items.correct)}
    return out


def write(path: str, *, suite: str, metrics: list[dict[str, Any]], context: dict[str, Any],
          environment: dict[str, Any], items: dict[str, Any] | None = None) -> ResultsDocument:
    """Validate and write a document (for jobs). Nothing is written if it is invalid."""
    data: dict[str, Any] = {"schema": SCHEMA, "suite": suite, "metrics": metrics,
                            "context": context, "environment": environment}
    if items is not None:
        data["items"] = items
    document = validate(data)
    text = json.dumps(to_json(document), allow_nan=False)
    tmp = f"{path}.tmp"
    with open(tmp, "w") as fh:
        fh.write(text)
    os.replace(tmp, path)
    return document
