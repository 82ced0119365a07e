"""Structured logging: one JSON object per line on stderr (PARALLAX_LOG_FORMAT=text for humans)."""
from __future__ import annotations

import json
import logging
import os
import sys
from datetime import datetime, timezone

_configured = False


class JSONFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        entry = {
            "ts": datetime.fromtimestamp(record.created, timezone.utc).isoformat(timespec="milliseconds"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
        }
        for key, value in record.__dict__.items():
            if key.startswith("px_"):
                entry[key[3:]] = value
        if record.exc_info:
            entry["exc"] = self.formatException(record.exc_info)
        return json.dumps(entry, default=str)


class TextFormatter(logging.Formatter):
    """One line for people: time, level, logger, message, then the structured fields as
    key=value (the same fields the JSON lines carry), and the traceback when there is one."""

    def __init__(self) -> None:
        super().__init__("%(asctime)s %(levelname)s %(name)s: %(message)s")

    def format(self, record: logging.LogRecord) -> str:
        line = super().format(record)
        fields = [f"{key[3:]}={_text_value(value)}" for key, value in record.__dict__.items() if key.startswith("px_")]
        if not fields:
            return line
        head, sep, rest = line.partition("\n")  # the traceback, if any, stays below the fields
        return f"{head} " + " ".join(fields) + sep + rest


def _text_value(value: object) -> str:
    text = value if isinstance(value, str) else json.dumps(value, default=str)
    return json.dumps(text) if not text or any(c.isspace() or c in '"=' for c in text) else text


def configure() -> None:
    global _configured
    if _configured:
        return
    _configured = True
    handler = logging.StreamHandler(sys.stderr)
    if os.environ.get("PARALLAX_LOG_FORMAT", "json") == "text":
        handler.setFormatter(TextFormatter())
    else:
        handler.setFormatter(JSONFormatter())
    root = logging.getLogger("app")
    root.addHandler(handler)
    root.setLevel(os.environ.get("PARALLAX_LOG_LEVEL", "INFO").upper())
    root.propagate = False
