"""A rendered fragment kept per worker process and served stale while it is refreshed in the
background (stale-while-revalidate), so a page that many people and monitors load costs its
queries once per `max_age_s` rather than once per request.

Written here rather than taken from a library: cachetools' TTL caches drop an entry when it
expires, so the request that finds it gone pays the whole render on its own latency, which is
the tail this exists to remove; the refresh has to run beside the request that noticed the age.
"""
from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from typing import Callable

from flask import copy_current_request_context


@dataclass(frozen=True)
class Rendered:
    html: str
    rendered_at: float      # time.time() when its render started: what the page says it shows


class Snapshot:
    """One fragment. `get(render, max_age_s)`:

    - `max_age_s` 0: render on every request (no snapshot kept);
    - no snapshot yet: render now; concurrent first requests wait for one render, not one each;
    - snapshot older than `max_age_s`: return it, and start one background render (in a copy
      of the current request context) unless one is running;
    - a background render that raises leaves the old snapshot in place, and the next request
      past the age starts another (the error is logged by the caller's `on_error`)."""

    def __init__(self, on_error: Callable[[BaseException], None] | None = None) -> None:
        self._lock = threading.Lock()
        self._current: Rendered | None = None
        self._refreshing = False
        self._on_error = on_error

    def get(self, render: Callable[[], str], max_age_s: float) -> Rendered:
        if max_age_s <= 0:
            return _timed(render)
        current = self._current
        if current is None:
            with self._lock:                 # the first requests share one render
                if self._current is None:
                    self._current = _timed(render)
                return self._current
        if time.time() - current.rendered_at > max_age_s and self._claim_refresh():
            threading.Thread(target=copy_current_request_context(self._refresh), args=(render,),
                             name="snapshot-refresh", daemon=True).start()
        return current

    def forget(self) -> None:
        """Drop the snapshot: the next request renders anew, as the first did (for data replaced
        underneath it, such as a database emptied or restored)."""
        with self._lock:
            self._current = None

    def _claim_refresh(self) -> bool:
        with self._lock:
            if self._refreshing:
                return False
            self._refreshing = True
            return True

    def _refresh(self, render: Callable[[], str]) -> None:
        try:
            fresh = _timed(render)
            with self._lock:
                self._current = fresh
        except Exception as exc:  # the old snapshot stays; the next stale request retries
            if self._on_error is not None:
                self._on_error(exc)
        finally:
            with self._lock:
                self._refreshing = False


def _timed(render: Callable[[], str]) -> Rendered:
    started = time.time()
    return Rendered(html=render(), rendered_at=started)
