"""The warm interpreter: a Python process that imported the heavy libraries (`--warm-import
torch`) once, and forks a fresh process for each job from that state.

A suite run as `python -m MODULE ARGS...` spends most of a short job importing torch (about
1.2 CPU-s of a 1.5 s decode-throughput job here). The runner starts one interpreter ahead of
time: it imports the named libraries in an empty directory and waits. For each job the runner
sends it the job's argv, directory and environment with the write end of the job's output pipe
(over a Unix socket, `socket.send_fds`). It forks; the child leads its own session, takes the
pipe as stdout and stderr and /dev/null as stdin, changes into the worktree, takes the job's
environment and runs the module as `python -m` would (`runpy`, `sys.path[0]` the worktree). The
interpreter reports the child's pid, then its exit status when it ends; `ForkedJob` gives the
runner the `subprocess.Popen` calls it uses (`pid`, `stdout`, `poll`, `wait`), so timeout,
cancellation, kill (of the child's process group) and output handling are those of a cold start.

Each job is a fresh fork of an interpreter that never ran job code, so no job sees another's
state. The interpreter starts no thread of its own and runs no torch operation, so no lock or
thread pool is copied mid-use (numpy's OpenBLAS pool, started at import, handles fork itself).
The chain of deaths holds: the interpreter dies with the runner, and a job with the interpreter
(`PR_SET_PDEATHSIG` on each).

What a job may differ in from a cold start is only what the libraries read while they were
imported, so a job is handed over only when its environment equals the one the interpreter
started with, except for the per-job PARALLAX_* variables (which no library reads). Anything else
(a suite `env` such as OMP_NUM_THREADS, another interpreter, interpreter flags, a script path)
starts cold. The commit's own code is never imported ahead: only the named libraries, from the
runner's environment. Forked jobs share the interpreter's hash seed (`PYTHONHASHSEED`), where cold
starts draw one each; `random` reseeds itself in a forked child. Written here because no library
forks a prepared interpreter per job with these semantics (multiprocessing's forkserver runs
functions of the parent's program, not a module in another directory and environment).
"""
from __future__ import annotations

import json
import logging
import os
import select
import signal
import socket
import subprocess
import time
from pathlib import Path

from runners.children import die_with_parent

log = logging.getLogger("parallax.runner")

# Set per job by the runner (agent.job_env / measure); a forked job takes them at hand-over.
JOB_VARIABLES = frozenset({"PARALLAX_RESULTS", "PARALLAX_PLATFORM", "PARALLAX_REPEATS", "PARALLAX_JOB_ID",
                           "PARALLAX_ATTEMPT", "PARALLAX_COMMIT", "PARALLAX_SUITE", "PARALLAX_WORKTREE",
                           "PARALLAX_OUTPUT_DIR", "PARALLAX_RUN"})
MESSAGE_BYTES = 1 << 20  # one job's {argv, cwd, env}; an environment is far smaller
HAND_OVER_TIMEOUT_S = 60.0

# Run with `python -c BOOT READY_FD SOCKET_FD MODULE...`. Imports the modules and says so on
# READY_FD. Then, per message {argv, cwd, env} with one descriptor (the job's output) on SOCKET_FD:
# forks a child that becomes `python -m argv[2] argv[3:]` there, answers {"pid"}, waits for the
# child and answers {"pid", "exit"} (Popen's returncode: negative for a signal). An empty message
# (the runner closed its end) ends it.
BOOT = """
import ctypes, gc, importlib, json, os, runpy, signal, socket, sys
ready, sock = int(sys.argv[1]), socket.socket(fileno=int(sys.argv[2]))
for name in sys.argv[3:]:
    importlib.import_module(name)
gc.freeze()  # a child's collections then leave the imported objects (and their shared pages) alone
prctl = ctypes.CDLL(None, use_errno=True).prctl
os.write(ready, b"ready")
os.close(ready)
while True:
    message, fds, _, _ = socket.recv_fds(sock, %(size)d, 1)
    if not message or len(fds) != 1:
        sys.exit(0)
    spec = json.loads(message)
    pid = os.fork()
    if pid == 0:
        sock.close()
        os.setsid()
        prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG: dies with this interpreter, as it dies with the runner
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        os.dup2(fds[0], 1)
        os.dup2(fds[0], 2)
        os.close(null)
        os.close(fds[0])
        os.chdir(spec["cwd"])
        os.environ.clear()
        os.environ.update(spec["env"])
        sys.path[0] = os.getcwd()
        sys.argv = [spec["argv"][2], *spec["argv"][3:]]
        runpy.run_module(sys.argv[0], run_name="__main__", alter_sys=True)
        sys.exit(0)
    os.close(fds[0])
    sock.send(json.dumps({"pid": pid}).encode())
    _, status = os.waitpid(pid, 0)
    sock.send(json.dumps({"pid": pid, "exit": os.waitstatus_to_exitcode(status)}).encode())
""" % {"size": MESSAGE_BYTES}


def _without_job_variables(env: dict[str, str]) -> dict[str, str]:
    return {key: value for key, value in env.items() if key not in JOB_VARIABLES}


class ForkedJob:
    """A job forked by the warm interpreter, with the `subprocess.Popen` calls the runner uses.
    Its exit status comes from the interpreter, whose child it is."""

    def __init__(self, pid: int, stdout_fd: int, server: "WarmInterpreter") -> None:
        self.pid = pid
        self.stdout = os.fdopen(stdout_fd, "rb", buffering=0)
        self.returncode: int | None = None
        self._server = server

    def poll(self) -> int | None:
        if self.returncode is None:
            self._receive(0.0)
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        deadline = None if timeout is None else time.monotonic() + timeout
        while self.returncode is None:
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                raise subprocess.TimeoutExpired(f"job pid {self.pid}", timeout or 0.0)
            self._receive(left)
        return self.returncode

    def _receive(self, timeout: float | None) -> None:
        message = self._server.receive(timeout)
        if message is None:
            return
        if message == {}:  # the interpreter is gone, and with it this job (PR_SET_PDEATHSIG)
            log.warning("the warm interpreter exited while job pid %d ran; the job was killed with it", self.pid)
            self.returncode = -signal.SIGKILL
        elif message.get("pid") == self.pid and "exit" in message:
            self.returncode = int(message["exit"])


class WarmInterpreter:
    """The started interpreter; `take` forks it a job, or says why it cannot (`mismatch`)."""

    def __init__(self, proc: subprocess.Popen[bytes], ready_fd: int, sock: socket.socket, python: str,
                 env: dict[str, str], modules: tuple[str, ...]) -> None:
        self.proc = proc
        self.ready_fd = ready_fd
        self.sock = sock
        self.python = python
        self.env = env
        self.modules = modules
        self.is_ready = False
        self.running: ForkedJob | None = None  # the job it forked last, until that one has ended

    @classmethod
    def start(cls, python: str, env: dict[str, str], modules: tuple[str, ...], directory: Path) -> WarmInterpreter:
        """Start it in `directory` (created empty, so nothing there shadows a library). Like a
        job's process it leads its own session and dies with the runner."""
        directory.mkdir(parents=True, exist_ok=True)
        read_end, write_end = os.pipe()
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        try:
            proc = subprocess.Popen([python, "-c", BOOT, str(write_end), str(theirs.fileno()), *modules],
                                    cwd=directory, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                    stderr=subprocess.STDOUT, start_new_session=True, preexec_fn=die_with_parent,
                                    pass_fds=(write_end, theirs.fileno()))
        except BaseException:
            os.close(read_end)
            ours.close()
            raise
        finally:
            os.close(write_end)
            theirs.close()
        return cls(proc, read_end, ours, python, dict(env), modules)

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
        if self.running is not None and self.running.poll() is None:
            return "it runs another job"
        if len(argv) < 3 or argv[0] != self.python or argv[1] != "-m":
            return "the command is not `python -m MODULE ...`"
        if self.proc.poll() is not None:
            return f"it exited (status {self.proc.returncode})"
        ours, theirs = _without_job_variables(self.env), _without_job_variables(env)
        if ours != theirs:
            names = sorted(k for k in ours.keys() | theirs.keys() if ours.get(k) != theirs.get(k))
            return f"the job's environment differs in {', '.join(names)}"
        return None

    def take(self, argv: list[str], cwd: Path, env: dict[str, str]) -> ForkedJob | None:
        """Fork the job (call `mismatch` first): the returned process is the job's. None if the
        interpreter died or did not answer; it is then closed and the job starts cold."""
        read_end, write_end = os.pipe()
        try:
            spec = json.dumps({"argv": argv, "cwd": str(cwd), "env": env}).encode()
            socket.send_fds(self.sock, [spec], [write_end])
            answer = self.receive(HAND_OVER_TIMEOUT_S)
        except OSError:
            answer = {}
        finally:
            os.close(write_end)
        if not answer or "pid" not in answer:
            log.warning("the warm interpreter did not fork the job (%s); it starts cold",
                        "no answer" if answer is None else "it exited")
            os.close(read_end)
            self.close()
            return None
        self._close_ready()
        self.running = ForkedJob(int(answer["pid"]), read_end, self)
        return self.running

    def receive(self, timeout: float | None) -> dict[str, object] | None:
        """The interpreter's next message; None if none came within `timeout`, {} if it is gone."""
        if self.sock.fileno() < 0:
            return {}
        readable, _, _ = select.select([self.sock], [], [], timeout)
        if not readable:
            return None
        try:
            data = self.sock.recv(MESSAGE_BYTES)
        except OSError:
            data = b""
        return json.loads(data) if data else {}

    def _close_ready(self) -> None:
        if self.ready_fd >= 0:
            os.close(self.ready_fd)
            self.ready_fd = -1

    def close(self) -> None:
        """Stop the interpreter (a job it still runs dies with it)."""
        if self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
            self.proc.wait()
        if self.proc.stdout is not None:
            try:
                self.proc.stdout.close()
            except OSError:
                pass
        self.sock.close()
        self._close_ready()
