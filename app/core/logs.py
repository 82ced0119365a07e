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


def configure() -> None:
    global _configured
    if _configured:
        return
    _configured = True
    handler = logging.StreamHandler(sys.stderr)
    if os.environ.get("PARALLAX_LOG_FORMAT", "json") == "text":
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    else:
        handler.setFormatter(JSONFormatter())
    root = logging.getLogger("app")
    root.addHandler(handler)
    root.setLevel(os.environ.get("PARALLAX_LOG_LEVEL", "INFO").upper())
    root.propagate = False
