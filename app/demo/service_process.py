"""`parallax serve` as a child process on a free loopback port, for the demo and the benchmarks
(real gunicorn workers and background duties, as in production)."""
from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import IO, Mapping, Sequence

import requests


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class ServiceProcess:
    """Context manager: starts the service, waits for /healthz, stops it with SIGTERM."""

    def __init__(self, env: Mapping[str, str], *, workers: int = 4, port: int = 0,
                 log: IO[bytes] | IO[str] | None = None, start_timeout_s: float = 60.0,
                 args: Sequence[str] = ()) -> None:
        self.port = port or free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        self.env = dict(os.environ, **env)
        self.workers = workers
        self.log = log
        self.start_timeout_s = start_timeout_s
        self.args = list(args)  # more `parallax serve` options, e.g. ["--worker-class", "gthread"]
        self.process: subprocess.Popen | None = None

    def __enter__(self) -> "ServiceProcess":
        parallax = str(Path(sys.executable).with_name("parallax"))
        self.process = subprocess.Popen([parallax, "serve", "--port", str(self.port), "--workers", str(self.workers),
                                         *self.args],
                                        env=self.env, stdout=subprocess.DEVNULL,
                                        stderr=self.log if self.log is not None else subprocess.DEVNULL)
        deadline = time.monotonic() + self.start_timeout_s
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"parallax serve exited with status {self.process.returncode}")
            try:
                if requests.get(f"{self.base}/healthz", timeout=5).status_code == 200:
                    return self
            except requests.RequestException:  # not listening yet, or too busy starting to answer
                pass
            time.sleep(0.2)
        self.stop()
        raise RuntimeError(f"parallax serve did not answer /healthz within {self.start_timeout_s:.0f} s")

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def stop(self) -> None:
        if self.process is None or self.process.poll() is not None:
            return
        self.process.send_signal(signal.SIGTERM)
        try:
            self.process.wait(30)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
