"""One transaction at a time per SQLite file in this process, waited for in Python.

Every SQLite transaction here begins with `BEGIN IMMEDIATE` (app.core.db), so it holds the
file's write lock until it ends. When another connection wants the lock, SQLite waits in C (its
busy handler). With threads that is harmless: the holder's thread runs on. Under gevent it
freezes the worker: the waiting greenlet never yields, so the greenlet that holds the lock, say
a request still reading its body from the socket, cannot run to finish, and every request of
the process stands still until SQLite's busy timeout (30 s) runs out.

The gate puts that wait in Python, on a lock that gevent makes cooperative: a transaction takes
the gate before `BEGIN IMMEDIATE` and gives it back when it commits or rolls back (or its
connection goes back to the pool with the transaction open). Since SQLite lets one writer in at
a time and every transaction here is a writer, the gate costs no concurrency. Other processes
still meet SQLite's own lock and busy timeout, which is safe: they hold no greenlet of this one.

No library does this (SQLAlchemy's pool and pysqlite know nothing of greenlets), hence these
few lines by hand.
"""
from __future__ import annotations

import os
import sqlite3
import threading
from typing import Any

from sqlalchemy.exc import OperationalError


class WriteGate:
    """The lock of one SQLite file, and which DBAPI connection holds it."""

    def __init__(self, path: str, wait_s: float) -> None:
        self.path = path
        self.wait_s = wait_s
        # Created when the gate is: after gevent's monkey patch, so this lock is gevent's.
        self._lock = threading.Lock()
        self._holder: Any = None

    def enter(self, dbapi_connection: Any) -> None:
        if self._holder is dbapi_connection:
            return
        if not self._lock.acquire(timeout=self.wait_s):
            raise OperationalError(
                "BEGIN IMMEDIATE", None,
                sqlite3.OperationalError(f"database is locked: another transaction of this process held {self.path} "
                                         f"for over {self.wait_s:g} s"))
        self._holder = dbapi_connection

    def leave(self, dbapi_connection: Any) -> None:
        """Give the gate back if this connection holds it (a no-op otherwise, so every way a
        transaction can end may call it)."""
        if self._holder is dbapi_connection:
            self._holder = None
            self._lock.release()


_gates: dict[str, WriteGate] = {}


def gate_for(database: str, wait_s: float) -> WriteGate:
    """The one gate of this SQLite file in this process (engines of the same file share it)."""
    path = os.path.realpath(database)
    if path not in _gates:
        _gates[path] = WriteGate(path, wait_s)
    return _gates[path]


# A forked worker starts with no transaction of its own; its gates (and their locks) are made anew.
os.register_at_fork(after_in_child=_gates.clear)
