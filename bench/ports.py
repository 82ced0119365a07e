"""Loopback ports for servers that tests and benchmarks start and stop: reserved across processes
for as long as their holder wants them, and chosen where the kernel never lends a port to a
client socket. A port from `bind(0)` is free only at that moment: a server that binds it seconds
later (gunicorn after its start-up), or a PostgreSQL stopped for an outage and started again, can
find it taken by another test's server, which chose it the same way (CI runs lost tests to both).
"""
from __future__ import annotations

import fcntl
import os
import random
import socket
import tempfile
from pathlib import Path

# Below Linux's ephemeral range (32768-60999 by default): never a `bind(0)` answer or a client's port.
PORT_RANGE = (20000, 32000)
PORT_LOCKS = Path(tempfile.gettempdir()) / "parallax-ports"


def reserve_port() -> tuple[int, int]:
    """A port that no other holder on this machine has reserved and nothing listens on now, with
    the descriptor of its lock file: the reservation lasts until that descriptor is closed (or
    its process ends; flock releases with it)."""
    PORT_LOCKS.mkdir(mode=0o777, exist_ok=True)
    for _ in range(500):
        port = random.randint(*PORT_RANGE)
        fd = os.open(PORT_LOCKS / f"{port}.lock", os.O_RDWR | os.O_CREAT, 0o666)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            continue
        with socket.socket() as sock:
            try:
                sock.bind(("127.0.0.1", port))
            except OSError:
                os.close(fd)
                continue
        return port, fd
    raise RuntimeError(f"no free port in {PORT_RANGE[0]}-{PORT_RANGE[1]} after 500 tries")
