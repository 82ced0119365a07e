"""Whether parallax.toml still says what the database holds. A running service reads suites and
repositories from the database, so an edit of the file it was started with does nothing until
`parallax catalogue sync` (or any database command of the CLI) applies it; the service says so
in GET /healthz (`catalogue`) and in a banner on the dashboard's home page.

"Differs" means "a sync would change something": the check runs the same `sync_catalogue`
read-only (`apply=False`) in the caller's session (a web request's own: on SQLite a second
session would wait for the request's lock), and writes nothing. It runs at once when the file's size or mtime
changed, else at most every `recheck_s` seconds (a sync by another process clears it)."""
from __future__ import annotations

import dataclasses
import os
import threading
import time
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

from sqlalchemy.orm import Session

from app.core.config import ConfigError, Settings, parse_catalogue
from app.jobs.catalogue import sync_catalogue

CURRENT = "current"
STALE = "stale: run parallax catalogue sync"
NO_FILE = "no file"  # started without parallax.toml: nothing to be stale against


@dataclass(frozen=True)
class CatalogueState:
    status: str  # CURRENT, NO_FILE, or starting with "stale:"
    changes: tuple[str, ...] = ()  # what a sync would do, or why the file cannot be applied

    @property
    def stale(self) -> bool:
        return self.status.startswith("stale:")


@dataclass
class CatalogueCheck:
    settings: Settings
    recheck_s: float = 30.0
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _stamp: tuple[int, int] | None = None
    _checked_at: float | None = None
    _state: CatalogueState = CatalogueState(CURRENT)

    def state(self, session: Session) -> CatalogueState:
        path = self.settings.config_path
        if path is None:
            return CatalogueState(NO_FILE)
        stamp = _stamp(Path(path))
        now = time.monotonic()
        with self._lock:
            fresh = self._checked_at is not None and now - self._checked_at < self.recheck_s
            if stamp == self._stamp and fresh:
                return self._state
            self._state = _compare(session, self.settings, Path(path))
            self._stamp, self._checked_at = stamp, now
            return self._state


def _stamp(path: Path) -> tuple[int, int] | None:
    try:
        info = os.stat(path)
    except OSError:
        return None
    return info.st_mtime_ns, info.st_size


def _compare(session: Session, settings: Settings, path: Path) -> CatalogueState:
    try:
        catalogue = parse_catalogue(tomllib.loads(path.read_text()), source=str(path))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError, ConfigError) as exc:
        return CatalogueState(f"stale: {path} cannot be applied; fix it, then run parallax catalogue sync",
                              (str(exc)[:300],))
    changes = sync_catalogue(session, dataclasses.replace(settings, **catalogue), apply=False)
    return CatalogueState(STALE, tuple(changes)) if changes else CatalogueState(CURRENT)
