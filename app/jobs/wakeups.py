"""Wake-ups for waiting claimers: a long-poll sleeps on its own event instead of polling the
jobs table, and is woken when a job for its platform may be claimable.

PostgreSQL: `queue.announce` sends `NOTIFY parallax_jobs, '<platform>'` inside the transaction
that queues (or requeues) a job, so it is delivered on commit, once per platform per
transaction, to every listening process of every instance. One listener thread per process
(`LISTEN parallax_jobs` on a connection of its own) wakes a few of that platform's waiters;
each waiter that then claims a job wakes the next one, since more may be waiting. SQLite has no
NOTIFY: a commit wakes the waiters of its own process, and writes the platforms to a signal file
beside the database file (`<database>-wakeup`), which a watcher thread in every process with
waiters reads every `SIGNAL_POLL_S`: the other processes of the same server (gunicorn workers)
hear of the job within that, instead of on their fallback poll. Every waiter also polls at
`poll_s` (jittered), which covers a listener that is reconnecting and a signal that was missed.

The primitives are `threading` ones, so the same code serves real threads (gthread workers,
tests) and greenlets (gevent workers, where `threading` is monkey-patched).
"""
from __future__ import annotations

import contextlib
import logging
import os
import secrets
import tempfile
import threading
import time
import weakref
from collections import defaultdict
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Iterator

from sqlalchemy import Engine

log = logging.getLogger(__name__)
CHANNEL = "parallax_jobs"
# How often a SQLite process with waiting claims reads the signal file: a read of a few bytes,
# about 20 us, so 20 a second cost nothing next to one claim's query.
SIGNAL_POLL_S = 0.05


@dataclass(eq=False)
class Ticket:
    """One waiting claim: its event is set when it should look at the queue again."""
    platform: str
    # Looked up at each call, not bound at import: a gevent worker patches `threading` after
    # this module was imported, and an unpatched Event.wait would block every greenlet.
    event: threading.Event = field(default_factory=lambda: threading.Event())

    def wait(self, timeout_s: float) -> bool:
        woken = self.event.wait(max(0.0, timeout_s))
        self.event.clear()
        return woken


class Board:
    """The waiting claims of one process, by platform, woken oldest first."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._waiting: dict[str, list[Ticket]] = defaultdict(list)

    @contextmanager
    def waiting(self, platform: str) -> Iterator[Ticket]:
        """Register before the first look at the queue, so a wake-up in between is not lost."""
        ticket = Ticket(platform)
        with self._lock:
            self._waiting[platform].append(ticket)
        try:
            yield ticket
        finally:
            with self._lock:
                self._waiting[platform].remove(ticket)

    def wake(self, platform: str, count: int) -> int:
        """Set the events of up to `count` waiters of `platform` not already woken."""
        woken = 0
        with self._lock:
            for ticket in self._waiting.get(platform, ()):
                if woken >= count:
                    break
                if not ticket.event.is_set():
                    ticket.event.set()
                    woken += 1
        return woken

    def wake_all_platforms(self, count: int) -> None:
        with self._lock:
            platforms = [p for p, tickets in self._waiting.items() if tickets]
        for platform in platforms:
            self.wake(platform, count)

    def count(self) -> int:
        with self._lock:
            return sum(len(tickets) for tickets in self._waiting.values())


class _WhileClaimsWait:
    """A daemon thread (`_loop`) that runs while this process has waiting claims and ends `idle_s`
    after the last one left."""

    thread_name = "parallax-wakeups"

    def __init__(self, board: Board, fanout: int, idle_s: float) -> None:
        self.board = board
        self.fanout = fanout
        self.idle_s = idle_s
        self.lock = threading.Lock()
        self.thread: threading.Thread | None = None
        self.last_busy = time.monotonic()

    def ensure_running(self) -> None:
        with self.lock:
            self.last_busy = time.monotonic()
            if self.thread is None or not self.thread.is_alive():
                self._starting()
                self.thread = threading.Thread(target=self._loop, name=self.thread_name, daemon=True)
                self.thread.start()

    def _starting(self) -> None:
        """Called under the lock before a new thread starts."""

    def _loop(self) -> None:
        raise NotImplementedError

    def _idle(self) -> bool:
        """Stop (under the lock, so `ensure_running` starts a new thread) when idle long enough."""
        with self.lock:
            if self.board.count():
                self.last_busy = time.monotonic()
            elif time.monotonic() - self.last_busy >= self.idle_s:
                self.thread = None
                return True
            return False


class Listener(_WhileClaimsWait):
    """`LISTEN parallax_jobs` on a dedicated PostgreSQL connection, in a daemon thread that runs
    while claims wait (it closes its connection after `idle_s` without waiters, so processes
    and test runs that stop claiming do not keep a connection each)."""

    thread_name = "parallax-listen"

    def __init__(self, engine: Engine, board: Board, fanout: int, idle_s: float = 15.0,
                 reconnect_s: float = 2.0) -> None:
        super().__init__(board, fanout, idle_s)
        self.engine = engine
        self.reconnect_s = reconnect_s
        self.connected = threading.Event()
        self.failures = 0

    def _loop(self) -> None:
        while True:
            try:
                if self._listen():
                    return
            except Exception:
                self.failures += 1
                # Once per outage; a database that is gone for good (a dropped test database)
                # would otherwise log every few seconds until the listener goes idle.
                log.log(logging.WARNING if self.failures == 1 else logging.DEBUG,
                        "LISTEN connection lost; waiters poll until it is back", exc_info=True)
            if self._idle():
                return
            time.sleep(self.reconnect_s)

    def _listen(self) -> bool:
        pooled = self.engine.raw_connection()
        connection = pooled.driver_connection
        pooled.detach()  # ours alone: the pool neither counts nor hands it out
        try:
            connection.autocommit = True
            connection.execute(f"LISTEN {CHANNEL}")
            self.connected.set()
            self.failures = 0
            # Whatever was queued while nobody listened is found by a look right away.
            self.board.wake_all_platforms(self.fanout)
            while True:
                for notice in connection.notifies(timeout=1.0):
                    self.board.wake(notice.payload, self.fanout)
                if self._idle():
                    return True
        finally:
            self.connected.clear()
            pooled.close()


def signal_path(engine: Engine) -> str | None:
    """The signal file of a SQLite database file (None for PostgreSQL or an in-memory database)."""
    database = engine.url.database if engine.dialect.name == "sqlite" else None
    if not database or database == ":memory:" or database.startswith("file:"):
        return None
    return os.path.abspath(database) + "-wakeup"


def signal_other_processes(path: str, platforms: set[str]) -> None:
    """Write a fresh token and `platforms` to the signal file, whole (a rename), so a reader sees
    the old content or the new one. A failure costs the other processes only their wake-up."""
    try:
        handle, temporary = tempfile.mkstemp(prefix=".wakeup-", dir=os.path.dirname(path))
    except OSError:
        log.debug("could not write the wake-up signal %s", path, exc_info=True)
        return
    try:
        with os.fdopen(handle, "w") as out:
            out.write(" ".join([secrets.token_hex(8), *sorted(platforms)]))
        os.replace(temporary, path)
    except OSError:
        log.debug("could not write the wake-up signal %s", path, exc_info=True)
        with contextlib.suppress(OSError):
            os.unlink(temporary)


class SignalWatcher(_WhileClaimsWait):
    """Reads a SQLite database's signal file in a daemon thread while this process has waiting
    claims, and wakes the waiters of the platforms a new token names (a token this process wrote
    itself wakes its waiters a second time: a look that finds the job taken costs one query)."""

    thread_name = "parallax-wakeup-file"

    def __init__(self, path: str, board: Board, fanout: int, idle_s: float = 15.0) -> None:
        super().__init__(board, fanout, idle_s)
        self.path = path
        self.seen = ""  # read in `_starting`, before each thread's first look

    def _read(self) -> str:
        try:
            with open(self.path) as signal:
                return signal.read()
        except OSError:
            return ""

    def _starting(self) -> None:
        self.seen = self._read()  # what was signalled before the waiters came, their first look finds

    def _loop(self) -> None:
        while True:
            time.sleep(SIGNAL_POLL_S)
            content = self._read()
            if content != self.seen:
                self.seen = content
                for platform in content.split()[1:]:
                    self.board.wake(platform, self.fanout)
            if self._idle():
                return


@dataclass
class Wakeups:
    """What `queue.claim` needs per process and database: the board, the bound on concurrent
    claim attempts, and the listener (PostgreSQL only)."""
    board: Board
    attempts: threading.BoundedSemaphore
    fanout: int
    listener: Listener | None = None
    watcher: SignalWatcher | None = None  # SQLite on a file

    def ensure_listening(self) -> None:
        if self.listener is not None:
            self.listener.ensure_running()
        if self.watcher is not None:
            self.watcher.ensure_running()

    def listening(self) -> bool:
        """Whether NOTIFY wakes this process's waiters right now (else they must poll)."""
        return self.listener is not None and self.listener.connected.is_set()


_registry: "weakref.WeakKeyDictionary[Engine, Wakeups]" = weakref.WeakKeyDictionary()
_registry_lock = threading.Lock()


def for_engine(engine: Engine, concurrency: int = 2) -> Wakeups:
    """This process's wake-ups for `engine`, made on first use. `concurrency` bounds the claim
    attempts that run at once; a notification wakes four times as many waiters (they queue on
    the bound without touching the database, and a transaction often queues several jobs)."""
    with _registry_lock:
        found = _registry.get(engine)
        if found is None:
            board = Board()
            fanout = 4 * concurrency
            listener = Listener(engine, board, fanout=fanout) if engine.dialect.name == "postgresql" else None
            path = signal_path(engine)
            watcher = SignalWatcher(path, board, fanout) if path is not None else None
            found = Wakeups(board, threading.BoundedSemaphore(concurrency), fanout, listener, watcher)
            _registry[engine] = found
        return found


def waiting_count() -> int:
    """Long-polls waiting in this process, over every database (for /metrics)."""
    with _registry_lock:
        return sum(w.board.count() for w in _registry.values())
