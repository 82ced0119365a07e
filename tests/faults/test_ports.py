"""Ports for the servers tests start and stop (bench/ports.py: the fault tests' own PostgreSQL,
a service started after its client): reserved across processes for as long as they are held, so
one stopped for an outage keeps its port, and chosen below the kernel's ephemeral range."""
from __future__ import annotations

import fcntl
import os
import random
import socket

import pytest

from bench import ports
from tests.support.runner_harness import free_port


def _unreserved(port: int) -> bool:
    """Whether no process holds the port's reservation now (another test worker's server, perhaps
    stopped for an outage, keeps its reservation while nothing listens on it)."""
    ports.PORT_LOCKS.mkdir(mode=0o777, exist_ok=True)
    fd = os.open(ports.PORT_LOCKS / f"{port}.lock", os.O_RDWR | os.O_CREAT, 0o666)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return True
    except BlockingIOError:
        return False
    finally:
        os.close(fd)  # releases the lock taken to look


@pytest.fixture
def one_port(monkeypatch: pytest.MonkeyPatch) -> int:
    """A range of one port that nothing listens on and no process has reserved. Tried from a random
    start: other workers reserve ports at random, and one holding the range's first port for a
    whole session would otherwise meet this fixture every time."""
    low, high = ports.PORT_RANGE
    start = random.randint(low, high)
    for port in [*range(start, high + 1), *range(low, start)]:
        with socket.socket() as sock:
            try:
                sock.bind(("127.0.0.1", port))
            except OSError:
                continue
        if not _unreserved(port):
            continue
        monkeypatch.setattr(ports, "PORT_RANGE", (port, port))
        return port
    raise AssertionError("no free port in the range")


def test_a_reserved_port_is_not_reserved_again_until_it_is_released(one_port: int) -> None:
    port, held = ports.reserve_port()
    assert port == one_port
    with pytest.raises(RuntimeError, match="no free port"):
        ports.reserve_port()  # another instance, even in this process, must pick another
    os.close(held)
    again, fd = ports.reserve_port()
    os.close(fd)
    assert again == one_port


def test_a_port_something_listens_on_is_skipped(one_port: int) -> None:
    with socket.socket() as server:
        server.bind(("127.0.0.1", one_port))
        server.listen()
        with pytest.raises(RuntimeError, match="no free port"):
            ports.reserve_port()


def test_the_range_is_below_the_kernel_s_ephemeral_ports() -> None:
    low = int(open("/proc/sys/net/ipv4/ip_local_port_range").read().split()[0])
    assert ports.PORT_RANGE[1] < low


def test_a_test_servers_port_stays_reserved_for_the_rest_of_its_process(one_port: int) -> None:
    assert free_port() == one_port
    with pytest.raises(RuntimeError, match="no free port"):
        ports.reserve_port()  # a server stopped for an outage must find its port again
