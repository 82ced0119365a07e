"""A warm interpreter: the next job's Python process, started while the runner waits for work,
with the heavy libraries (`--warm-import torch`) already imported.

A suite run as `python -m MODULE ARGS...` spends most of a short job importing torch (about
0.9 s of a 1.2 s decode-throughput job here). The runner starts that interpreter ahead of time:
it imports the named libraries in an empty directory and waits. When a job comes, the runner
hands it the job's argv, directory and environment on its stdin; it changes into the worktree,
takes the job's environment and runs the module as `python -m` would (`runpy`, `sys.path[0]` the
worktree). It is the same interpreter, a child of the runner in its own session, so the timeout,
cancellation, kill and output handling are those of a cold start.

What it may differ in is only what the libraries read while they were imported, so a job is
handed over only when its environment equals the one the interpreter started with, except for
the per-job PARALLAX_* variables (which no library reads). Anything else (a suite `env` such as
OMP_NUM_THREADS, another interpreter, interpreter flags, a script path) starts cold, as before.
The commit's own code is never imported ahead: only the named libraries, from the runner's
environment. Written here because no library starts an interpreter ahead and hands it a module
to run; a fork server (one process that imported torch, forked per job) would make every job a
child of that server instead of the runner, and share the server's torch state.
"""
from __future__ import annotations

import json
import logging
import os
import select
import signal
import subprocess
import time
from pathlib import Path

from runners.children import die_with_parent

log = logging.getLogger("parallax.runner")

# Set per job by the runner (agent.job_env / measure); the interpreter takes them at hand-over.
JOB_VARIABLES = frozenset({"PARALLAX_RESULTS", "PARALLAX_PLATFORM", "PARALLAX_REPEATS", "PARALLAX_JOB_ID",
                           "PARALLAX_ATTEMPT", "PARALLAX_COMMIT", "PARALLAX_SUITE", "PARALLAX_WORKTREE",
                           "PARALLAX_OUTPUT_DIR", "PARALLAX_RUN"})

# Run with `python -c BOOT READY_FD MODULE...`. Imports the modules, says so on READY_FD, reads one
# JSON document {argv, cwd, env} from stdin (to its end) and becomes `python -m argv[2] argv[3:]` there.
BOOT = """
import importlib, json, os, runpy, sys
ready = int(sys.argv[1])
for name in sys.argv[2:]:
    importlib.import_module(name)
os.write(ready, b"ready")
os.close(ready)
data = b""
while True:
    chunk = os.read(0, 65536)
    if not chunk:
        break
    data += chunk
if not data:
    sys.exit(0)
spec = json.loads(data)
null = os.open(os.devnull, os.O_RDONLY)
os.dup2(null, 0)
os.close(null)
os.chdir(spec["cwd"])
os.environ.clear()
os.environ.update(spec["env"])
sys.path[0] = os.getcwd()
sys.argv = [spec["argv"][2], *spec["argv"][3:]]
runpy.run_module(sys.argv[0], run_name="__main__", alter_sys=True)
"""


def _without_job_variables(env: dict[str, str]) -> dict[str, str]:
    return {key: value for key, value in env.items() if key not in JOB_VARIABLES}


class WarmInterpreter:
    """One started interpreter waiting for a job; `take` hands it one, or says why it cannot."""

    def __init__(self, proc: subprocess.Popen[bytes], ready_fd: int, python: str, env: dict[str, str],
                 modules: tuple[str, ...]) -> None:
        self.proc = proc
        self.ready_fd = ready_fd
        self.python = python
        self.env = env
        self.modules = modules
        self.is_ready = False
        self.taken = False  # handed a job: the process is that job's now

    @classmethod
    def start(cls, python: str, env: dict[str, str], modules: tuple[str, ...], directory: Path) -> WarmInterpreter:
        """Start it in `directory` (created empty, so nothing there shadows a library). Like a
        job's process it leads its own session and dies with the runner."""
        directory.mkdir(parents=True, exist_ok=True)
        read_end, write_end = os.pipe()
        try:
            proc = subprocess.Popen([python, "-c", BOOT, str(write_end), *modules], cwd=directory, env=env,
                                    stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                    start_new_session=True, preexec_fn=die_with_parent, pass_fds=(write_end,))
        except BaseException:
            os.close(read_end)
            raise
        finally:
            os.close(write_end)
        return cls(proc, read_end, python, dict(env), modules)

    def wait_ready(self, timeout_s: float) -> bool:
        """True once the modules are imported; False if it failed (the reason is logged) or took
        longer than `timeout_s` (it is then still usable: a job hand-over waits for it)."""
        if self.is_ready:
            return True
        if self.ready_fd < 0:
            return False
        deadline = time.monotonic() + timeout_s
        while (left := deadline - time.monotonic()) > 0:
            readable, _, _ = select.select([self.ready_fd], [], [], left)
            if not readable:
                continue
            if os.read(self.ready_fd, 16) == b"ready":
                self.is_ready = True
                return True
            self._close_ready()
            output = self._failure_output()
            log.warning("the warm interpreter could not import %s; jobs start cold: %s",
                        ", ".join(self.modules), output[-2000:] or f"exit status {self.proc.returncode}")
            return False
        return False

    def _failure_output(self) -> str:
        try:
            out, _ = self.proc.communicate(timeout=10)
        except subprocess.TimeoutExpired:
            self.close()
            return ""
        return (out or b"").decode(errors="replace").strip()

    def mismatch(self, argv: list[str], env: dict[str, str]) -> str | None:
        """Why this job cannot be handed over (None: it can)."""
        if self.taken:
            return "it already runs a job"
        if len(argv) < 3 or argv[0] != self.python or argv[1] != "-m":
            return "the command is not `python -m MODULE ...`"
        if self.proc.poll() is not None:
            return f"it exited (status {self.proc.returncode})"
        ours, theirs = _without_job_variables(self.env), _without_job_variables(env)
        if ours != theirs:
            names = sorted(k for k in ours.keys() | theirs.keys() if ours.get(k) != theirs.get(k))
            return f"the job's environment differs in {', '.join(names)}"
        return None

    def take(self, argv: list[str], cwd: Path, env: dict[str, str]) -> subprocess.Popen[bytes] | None:
        """Hand the job over (call `mismatch` first): the returned process is the job's. None if
        the interpreter died in between; it is then closed and the job starts cold."""
        assert self.proc.stdin is not None
        try:
            self.proc.stdin.write(json.dumps({"argv": argv, "cwd": str(cwd), "env": env}).encode())
            self.proc.stdin.close()
        except (BrokenPipeError, OSError):
            self.close()
            return None
        self._close_ready()
        self.taken = True
        return self.proc

    def _close_ready(self) -> None:
        if self.ready_fd >= 0:
            os.close(self.ready_fd)
            self.ready_fd = -1

    def close(self) -> None:
        """Stop an interpreter that was never handed a job."""
        if self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
            self.proc.wait()
        for stream in (self.proc.stdin, self.proc.stdout):
            if stream is not None:
                try:
                    stream.close()
                except OSError:
                    pass
        self._close_ready()
