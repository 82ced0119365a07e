"""The series API's answers kept in memory, per process (issue 30: the newest 5,000 commits of a
series cost 0.6 s of Python per request - reading, summarising and analysing every point).

An entry is the exact JSON body `GET /api/v1/series` answered, under the request (repository,
branch, suite, metric, platform, context fingerprint, window) and a *stamp* of the data it was
made from, read before the data:

- the repository's `series_epoch` (app.core.series_epoch), bumped in the transaction of every
  write that changes a series without adding a run: a branch history re-written (push, force
  push, backfill), an upload placed on the default branch, a retention prune batch;
- the number of runs of the platform and the newest run id (one index-only scan of
  `ix_runs_platform_id`). Every point and context the answer holds comes from runs of that
  platform, so a new run changes the stamp. The count is needed beside the newest id: run ids
  are handed out when a run is inserted, not when its transaction commits, so a run committed
  late can have an id below the newest one already seen.

A lookup whose stored stamp differs from the current one is a miss and is answered from the
database (and replaces the entry); a hit returns the bytes a miss made, so the two answers are
identical. Runs of other repositories on the same platform also change the stamp: that costs
a miss, never a stale answer. The stamp is read before the data, so a write that commits while
an answer is being made leaves that answer under the older stamp, which the next request no
longer matches.

The cache is bounded by the estimated size of what it holds (the body's bytes plus a fixed
allowance per entry) and drops the least recently used entries past the bound.
"""
from __future__ import annotations

import threading
from collections import OrderedDict
from dataclasses import dataclass

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from app.core.models import Run

DEFAULT_MAX_BYTES = 256 * 2**20
ENTRY_OVERHEAD_BYTES = 512  # the key, the stamp and the dictionary's own share of an entry


@dataclass(frozen=True)
class SeriesRequest:
    """What a series answer depends on besides the data: the request, with the branch resolved."""
    repository_id: int
    repository: str                    # the name the answer carries
    branch: str
    suite: str
    metric: str
    platform: str
    context_fingerprint: str | None
    last: int | None


@dataclass(frozen=True)
class Stamp:
    epoch: int
    runs: int
    newest_run: int | None


@dataclass(frozen=True)
class Entry:
    stamp: Stamp
    body: bytes

    @property
    def size(self) -> int:
        return len(self.body) + ENTRY_OVERHEAD_BYTES


def read_stamp(session: Session, epoch: int, platform: str) -> Stamp:
    """The stamp of a platform's series data; `epoch` is the repository's `series_epoch`, read
    (with the repository row) before this."""
    runs, newest = session.execute(select(func.count(Run.id), func.max(Run.id)).where(Run.platform == platform)).one()
    return Stamp(epoch=int(epoch), runs=int(runs), newest_run=None if newest is None else int(newest))


@dataclass
class CacheStats:
    hits: int = 0
    misses: int = 0
    evictions: int = 0


class SeriesCache:
    """A thread-safe LRU of series answers, at most `max_bytes` (estimated) in all."""

    def __init__(self, max_bytes: int = DEFAULT_MAX_BYTES) -> None:
        if max_bytes < 0:
            raise ValueError(f"max_bytes: must be >= 0, got {max_bytes}")
        self.max_bytes = max_bytes
        self.stats = CacheStats()
        self._entries: OrderedDict[SeriesRequest, Entry] = OrderedDict()
        self._bytes = 0
        self._lock = threading.Lock()

    def get(self, key: SeriesRequest, stamp: Stamp) -> bytes | None:
        """The stored body when it was made under this very stamp, else None (a miss)."""
        with self._lock:
            entry = self._entries.get(key)
            if entry is None or entry.stamp != stamp:
                self.stats.misses += 1
                return None
            self._entries.move_to_end(key)
            self.stats.hits += 1
            return entry.body

    def put(self, key: SeriesRequest, stamp: Stamp, body: bytes) -> None:
        entry = Entry(stamp, body)
        with self._lock:
            old = self._entries.pop(key, None)
            if old is not None:
                self._bytes -= old.size
            if entry.size > self.max_bytes:
                return  # larger than the whole cache: answered, not kept
            self._entries[key] = entry
            self._bytes += entry.size
            while self._bytes > self.max_bytes:
                _, dropped = self._entries.popitem(last=False)
                self._bytes -= dropped.size
                self.stats.evictions += 1

    def clear(self) -> None:
        """Drop every entry and start the counters over."""
        with self._lock:
            self._entries.clear()
            self._bytes = 0
            self.stats = CacheStats()

    @property
    def size_bytes(self) -> int:
        return self._bytes

    def __len__(self) -> int:
        return len(self._entries)

    def __contains__(self, key: object) -> bool:
        return key in self._entries
