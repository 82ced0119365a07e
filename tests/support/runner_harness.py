"""The real service on a fixed loopback port (restartable, to stage outages) and `parallax runner`
as a separate process, for the runner tests."""
from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any, Callable

from app.git.workdir import git
from bench.ports import reserve_port
from tests.support.settings import ADMIN_TOKEN

FAKE_SUITE = Path(__file__).resolve().parents[1] / "runner" / "fake_suite.py"
PARALLAX = Path(sys.executable).with_name("parallax")


# A port from bind(0) is free only for that moment: a test that stops its server to stage an outage
# binds the same number again later, and another test could be handed it meanwhile (a `parallax
# serve` that then could not bind kept retrying while the other test's server answered its health
# check). So a test server's port is reserved through `bench.ports` (below the ephemeral range,
# locked across processes) and held for the rest of this process: no test on this machine, through
# here or `reserve_port`, is handed it again.
_held: list[int] = []  # the reservations' lock descriptors


def free_port() -> int:
    port, lock = reserve_port()
    _held.append(lock)
    return port


class Server:
    """A werkzeug server on a fixed port that can be stopped and started again."""

    def __init__(self, flask_app: Any, port: int) -> None:
        self.app = flask_app
        self.port = port
        self.url = f"http://127.0.0.1:{port}"
        self.server: Any = None
        self.thread: threading.Thread | None = None

    def start(self) -> None:
        from werkzeug.serving import make_server
        self.server = make_server("127.0.0.1", self.port, self.app, threaded=True)
        self.connections: list[socket.socket] = []
        accept = self.server.get_request

        def get_request() -> tuple[socket.socket, Any]:
            conn, addr = accept()
            self.connections.append(conn)
            return conn, addr

        self.server.get_request = get_request
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def stop(self) -> None:
        if self.server is not None:
            self.server.shutdown()
            self.server.server_close()
            # Keep-alive connections outlive shutdown(); a real outage drops them too.
            for conn in self.connections:
                try:
                    conn.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
            assert self.thread is not None
            self.thread.join(5)
            self.server = None


def wait_for(predicate: Callable[[], Any], timeout_s: float, what: str, interval_s: float = 0.1) -> Any:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval_s)
    raise AssertionError(f"timed out after {timeout_s} s waiting for {what}")


def pid_alive(pid: int) -> bool:
    import psutil
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


class Harness:
    """One service (its app, database and server) with a tracked repository, plus runners."""

    def __init__(self, flask_app: Any, server: Server, repo: Path, tmp_path: Path) -> None:
        self.app = flask_app
        self.db = flask_app.extensions["parallax.db"]
        self.client = flask_app.test_client()
        self.server = server
        self.repo = repo
        self.tmp_path = tmp_path
        self.control = tmp_path / "control"
        self.control.mkdir()
        self.shas = git(repo, "rev-list", "--reverse", "HEAD").split()
        self.runners: list[tuple[subprocess.Popen[bytes], Path]] = []

    def registration_token(self) -> str:
        from app.auth.tokens import create_registration_token
        with self.db.session() as session:
            return create_registration_token(session, "runner test")

    def enqueue(self, sha: str, platform: str = "cpu") -> int:
        response = self.client.post("/api/v1/jobs", json={"repository": "demo/engine", "commit": sha,
                                                          "suite": "fake", "platform": platform},
                                    headers={"Authorization": f"Bearer {ADMIN_TOKEN}"})
        assert response.status_code == 201, response.get_json()
        return response.get_json()["jobs"][0]["id"]

    def start_runner(self, name: str, *args: str, mode: str = "ok", register: bool = True,
                     env: dict[str, str] | None = None) -> subprocess.Popen[bytes]:
        work_dir = self.tmp_path / f"work-{name}"
        log_path = self.tmp_path / f"runner-{name}-{len(self.runners)}.log"
        argv = [str(PARALLAX), "runner", "--server", self.server.url, "--work-dir", str(work_dir),
                "--name", name, "--poll", "1", "--kill-grace", "1"]
        if register:
            argv += ["--registration-token", self.registration_token()]
        full_env = dict(os.environ, FAKE_SUITE_MODE=mode, FAKE_SUITE_DIR=str(self.control), **(env or {}))
        with open(log_path, "wb") as out:
            proc = subprocess.Popen([*argv, *args], stdout=out, stderr=subprocess.STDOUT, env=full_env)
        self.runners.append((proc, log_path))
        return proc

    def runner_log(self, proc: subprocess.Popen[bytes]) -> str:
        for candidate, path in self.runners:
            if candidate is proc:
                return path.read_text(errors="replace")
        return ""

    def wait_exit(self, proc: subprocess.Popen[bytes], timeout_s: float = 60.0) -> int:
        try:
            return proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            raise AssertionError(f"runner did not exit within {timeout_s} s; its log:\n{self.runner_log(proc)}")

    def job(self, job_id: int) -> dict[str, Any]:
        response = self.client.get(f"/api/v1/jobs/{job_id}")
        assert response.status_code == 200
        return response.get_json()

    def wait_job(self, job_id: int, states: tuple[str, ...], timeout_s: float = 60.0,
                 proc: subprocess.Popen[bytes] | None = None) -> dict[str, Any]:
        try:
            return wait_for(lambda: (j := self.job(job_id))["state"] in states and j, timeout_s,
                            f"job {job_id} to reach {states}")
        except AssertionError as exc:
            logs = "\n".join(self.runner_log(p) for p, _ in self.runners) if proc is None else self.runner_log(proc)
            raise AssertionError(f"{exc}; job is {self.job(job_id)}\nrunner logs:\n{logs}") from None

    def runs(self, job_id: int) -> list[dict[str, Any]]:
        from sqlalchemy import select

        from app.core.models import Run
        with self.db.session() as session:
            return [{"attempt": run.attempt, "runner_id": run.runner_id, "context": run.context,
                     "environment": run.environment, "simulated": run.simulated, "platform": run.platform,
                     "samples": {m.metric: m.samples for m in run.measurements}}
                    for run in session.scalars(select(Run).where(Run.job_id == job_id).order_by(Run.id))]

    def runner_ids(self) -> dict[str, int]:
        from sqlalchemy import select

        from app.core.models import Runner
        with self.db.session() as session:
            return {r.name: r.id for r in session.scalars(select(Runner).order_by(Runner.id))}

    def marker(self, name: str, timeout_s: float = 60.0) -> dict[str, Any]:
        import json
        path = self.control / name
        wait_for(path.exists, timeout_s, f"marker {name}")
        return json.loads(path.read_text())

    def close(self) -> None:
        for proc, _ in self.runners:
            if proc.poll() is None:
                proc.send_signal(signal.SIGKILL)
                proc.wait(10)
        self.server.stop()
