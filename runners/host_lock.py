"""The host lock: runners that share one machine never time a real platform while another job runs.

Wall-clock numbers on a shared host measure the neighbours as much as the commit: a CPU job
that runs beside a simulator job (on the other hyperthread of its core, or fighting for memory
bandwidth) can lose half its throughput, and when the neighbour's backlog ends the "speed-up"
reads as a change. Runners given the same `--host-lock` path take it exclusively for a job on a
real platform and shared for a simulated one (its numbers come from virtual time, so simulator
jobs may run side by side).

Readers-writer on `flock(2)` with a turnstile (a second lock file): a job that needs the host
alone holds the turnstile while it waits, so a stream of overlapping shared holders cannot
starve it. Before it queues there, it waits up to `join_s` (1 s) as an ordinary waiter, so shared
jobs that arrive together with a running one (the simulators of one push, claimed a few
milliseconds apart) start together instead of one before the real job and one after it: on the
demo's 2-core machine a push took about 4.3 s when its two simulator jobs ran together and 6-9 s
when the cpu job came between them. `flock` has no such fairness of its own, and no library offers a cross-process
readers-writer lock that releases on process death; flock does, so a killed runner never
leaves the host locked.
"""
from __future__ import annotations

import fcntl
import os
import time
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator


class HostLockError(Exception):
    """The lock file cannot be opened (a missing directory, no permission)."""


class Interrupted(Exception):
    """The wait for the lock was given up: `reason` says why (the job's lease, a shutdown, ...)."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


@dataclass(frozen=True)
class HostLock:
    path: Path
    poll_s: float = 0.05  # how often a waiter tries again (and asks `interrupted`) while the lock is held elsewhere
    join_s: float = 1.0  # how long an exclusive waiter lets later shared jobs join the running ones

    @property
    def turnstile(self) -> Path:
        return self.path.with_name(self.path.name + ".turnstile")

    def check(self) -> None:
        """Open both files once, at start-up, so a bad path is refused before any job is claimed."""
        for path in (self.path, self.turnstile):
            os.close(_open(path))

    @contextmanager
    def hold(self, exclusive: bool, interrupted: Callable[[], str | None] = lambda: None,
             waiting: Callable[[], None] = lambda: None) -> Iterator[None]:
        """Hold the lock (exclusive or shared) for the body. `waiting()` is called once if the lock
        is held elsewhere; while waiting, `interrupted()` is asked every `poll_s`, and a reason
        (not None) ends the wait with `Interrupted(reason)`."""
        lock_fd = _open(self.path)
        try:
            turnstile_fd = _open(self.turnstile)
            try:
                told = False

                def wait_once() -> None:
                    nonlocal told
                    if not told:
                        told = True
                        waiting()
                taken = exclusive and self._acquire(lock_fd, fcntl.LOCK_EX, interrupted, wait_once,
                                                     time.monotonic() + self.join_s)
                if not taken:
                    self._acquire(turnstile_fd, fcntl.LOCK_EX, interrupted, wait_once)
                    try:
                        self._acquire(lock_fd, fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH, interrupted, wait_once)
                    finally:
                        fcntl.flock(turnstile_fd, fcntl.LOCK_UN)  # a shared holder only passes through
            finally:
                os.close(turnstile_fd)
            try:
                yield
            finally:
                fcntl.flock(lock_fd, fcntl.LOCK_UN)
        finally:
            os.close(lock_fd)

    def _acquire(self, fd: int, mode: int, interrupted: Callable[[], str | None],
                 waiting: Callable[[], None], until: float | None = None) -> bool:
        """Take `fd`'s lock; False if `until` (a monotonic time) passes first."""
        # Non-blocking tries in a loop: a blocking flock could not be given up when the job is
        # cancelled or the runner is told to stop.
        while True:
            try:
                fcntl.flock(fd, mode | fcntl.LOCK_NB)
                return True
            except BlockingIOError:
                waiting()
            reason = interrupted()
            if reason is not None:
                raise Interrupted(reason)
            if until is not None and time.monotonic() >= until:
                return False
            time.sleep(self.poll_s if until is None else min(self.poll_s, max(0.0, until - time.monotonic())))


def _open(path: Path) -> int:
    try:
        return os.open(path, os.O_RDWR | os.O_CREAT, 0o666)
    except OSError as exc:
        raise HostLockError(f"host lock {path}: cannot open it ({exc.strerror}); pass a path in a directory "
                            "this runner can write, the same path for every runner on this machine") from None
