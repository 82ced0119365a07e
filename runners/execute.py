"""Running a job's command: an argv list (never a shell) in its own process group, output read
as it comes and shipped to the service in chunks, a timeout and interruptions (cancel, lost
lease, shutdown) that kill the whole group.
"""
from __future__ import annotations

import codecs
import collections
import logging
import os
import re
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from runners.children import die_with_parent
from runners.warm import ForkedJob, WarmInterpreter

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Outcome:
    """How the command ended. `stopped_by` is None when it exited on its own, else "timeout" or
    the interrupt reason ("cancelled", "lease_lost", "shutdown")."""
    exit_code: int | None
    stopped_by: str | None
    duration_s: float


def resolve_argv(command: list[str]) -> list[str]:
    """The suite's argv; a bare `python`/`python3` means this runner's interpreter, which has the
    engine's dependencies and the box's own torch build."""
    if not isinstance(command, list) or not command or not all(isinstance(p, str) and p for p in command):
        raise ValueError(f"command must be a non-empty list of non-empty strings, got {command!r}")
    argv = list(command)
    if argv[0] in ("python", "python3"):
        argv[0] = sys.executable
    return argv


def kill_group(pgid: int, proc: subprocess.Popen[bytes] | ForkedJob | None, grace_s: float) -> None:
    """SIGTERM the process group, SIGKILL it after `grace_s`. Descendants that left the group
    (setsid) are found through psutil when it is installed."""
    strays: list[object] = []
    try:
        import psutil
        try:
            strays = psutil.Process(proc.pid).children(recursive=True) if proc is not None else []
        except psutil.Error:
            strays = []
    except ImportError:
        psutil = None  # type: ignore[assignment]
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(pgid, sig)
        except (ProcessLookupError, PermissionError):
            pass
        if sig == signal.SIGTERM and proc is not None:
            try:
                proc.wait(timeout=grace_s)
            except subprocess.TimeoutExpired:
                pass
    if psutil is not None:
        for child in strays:
            try:
                child.kill()  # type: ignore[attr-defined]
            except psutil.Error:
                pass


def group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


class LogShipper:
    """Buffers the command's output and sends it in chunks from a thread, so a slow or absent
    service never blocks the job. Keeps the tail for failure reasons."""

    def __init__(self, send: Callable[[str], None], *, interval_s: float = 1.0, chunk_chars: int = 64_000,
                 max_buffer_chars: int = 2_000_000, tail_chars: int = 16_000) -> None:
        self.send = send
        self.interval_s = interval_s
        self.chunk_chars = chunk_chars
        self.max_buffer_chars = max_buffer_chars
        self.decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self.buffer: list[str] = []
        self.buffered = 0
        self.dropped = 0
        self.tail: collections.deque[str] = collections.deque()
        self.tail_len = 0
        self.tail_chars = tail_chars
        self.lock = threading.Lock()
        self.wake = threading.Event()
        self.closed = threading.Event()
        self.broken = False
        self.thread = threading.Thread(target=self._loop, name="log-shipper", daemon=True)
        self.thread.start()

    def write(self, data: bytes | str) -> None:
        text = data if isinstance(data, str) else self.decoder.decode(data)
        if not text:
            return
        with self.lock:
            self.tail.append(text)
            self.tail_len += len(text)
            while self.tail_len - len(self.tail[0]) >= self.tail_chars:
                self.tail_len -= len(self.tail.popleft())
            if self.buffered + len(text) > self.max_buffer_chars:
                self.dropped += len(text)
                return
            self.buffer.append(text)
            self.buffered += len(text)
        if self.buffered >= self.chunk_chars:
            self.wake.set()

    def tail_text(self, max_chars: int = 4000) -> str:
        with self.lock:
            text = "".join(self.tail)
        return text[-max_chars:]

    def _take(self) -> str:
        with self.lock:
            text = "".join(self.buffer)
            chunk, rest = text[:self.chunk_chars], text[self.chunk_chars:]
            self.buffer = [rest] if rest else []
            self.buffered = len(rest)
        return chunk

    def _flush_all(self) -> None:
        while not self.broken:
            chunk = self._take()
            if not chunk:
                return
            with self.lock:
                lost, self.dropped = self.dropped, 0
            marked = chunk
            if lost:
                marked = f"[parallax-runner: {lost} characters of output dropped while the service was unreachable]\n" + chunk
            try:
                self.send(marked)
            except Exception as exc:  # the job goes on; its output stays in the local tail
                from runners.client import LeaseLost
                log.warning("could not ship a log chunk (%d chars): %s", len(chunk), exc)
                with self.lock:
                    self.dropped += lost + len(chunk)
                if isinstance(exc, LeaseLost):
                    self.broken = True

    def _loop(self) -> None:
        while not self.closed.is_set():
            self.wake.wait(self.interval_s)
            self.wake.clear()
            self._flush_all()

    def close(self, timeout_s: float = 30.0) -> None:
        """Ship what is left (waiting at most `timeout_s`) and stop the thread."""
        self.write(self.decoder.decode(b"", final=True))
        self.closed.set()
        self.wake.set()
        self.thread.join(timeout_s)
        if not self.thread.is_alive():
            self._flush_all()


def run(argv: list[str], *, cwd: Path, env: dict[str, str], timeout_s: float, output: Callable[[bytes], None],
        interrupt: Callable[[], str | None], kill_grace_s: float = 5.0, poll_s: float = 0.1,
        on_start: Callable[[subprocess.Popen[bytes] | ForkedJob], None] | None = None,
        warm: WarmInterpreter | None = None) -> Outcome:
    """Run `argv` to completion, timeout or interruption. `interrupt()` is polled; a non-None
    answer names why the command is being stopped. A `warm` interpreter that fits the command
    (`WarmInterpreter.mismatch`) forks it instead of a new process."""
    started = time.monotonic()
    proc: subprocess.Popen[bytes] | ForkedJob | None
    proc = warm.take(argv, cwd, env) if warm is not None and warm.mismatch(argv, env) is None else None
    if proc is None:
        proc = subprocess.Popen(argv, cwd=cwd, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, start_new_session=True, preexec_fn=die_with_parent)
    pgid = proc.pid  # start_new_session makes the child the leader of its own group
    if on_start is not None:
        on_start(proc)
    assert proc.stdout is not None
    fd = proc.stdout.fileno()

    def pump() -> None:
        while True:
            try:
                data = os.read(fd, 65536)
            except OSError:
                return
            if not data:
                return
            output(data)

    reader = threading.Thread(target=pump, name="job-output", daemon=True)
    reader.start()
    deadline = started + timeout_s
    stopped_by: str | None = None
    while proc.poll() is None:
        reason = interrupt()
        if reason is None and time.monotonic() >= deadline:
            reason = "timeout"
        if reason is not None:
            stopped_by = reason
            log.info("stopping command (pid %d): %s", proc.pid, reason)
            kill_group(pgid, proc, kill_grace_s)
            break
        time.sleep(poll_s)
    exit_code = proc.wait()
    # Whatever the command left running in its group (daemons, stuck children) goes with it.
    if group_alive(pgid):
        kill_group(pgid, None, 0.0)
    reader.join(10.0)
    if not reader.is_alive():  # never close a descriptor another thread is still reading
        proc.stdout.close()
    return Outcome(exit_code=None if stopped_by else exit_code, stopped_by=stopped_by,
                   duration_s=time.monotonic() - started)


# Variables a suite's argv may name, as $NAME or ${NAME}; the argv never goes through a shell.
ARGV_VARIABLES = ("PARALLAX_OUTPUT_DIR", "PARALLAX_WORKTREE", "PARALLAX_RUN", "PARALLAX_REPEATS",
                  "PARALLAX_PLATFORM", "PARALLAX_COMMIT", "PARALLAX_SUITE")


def substitute(argv: list[str], env: dict[str, str]) -> list[str]:
    """Replace the PARALLAX_* variables above in each argument with their values for this run
    (e.g. `--result-filename $PARALLAX_OUTPUT_DIR/one_batch.jsonl`)."""
    out = []
    for part in argv:
        for name in ARGV_VARIABLES:
            if name in env:
                part = part.replace("${" + name + "}", env[name])
                part = re.sub(r"\$" + name + r"(?![A-Za-z0-9_])", lambda _m, v=env[name]: v, part)
        out.append(part)
    return out
