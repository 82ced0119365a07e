"""A client that sends its request body slowly holds no database transaction while it does: a
small body is read before the handler checks tokens (app.web.bodies.read_small_body_first). On
SQLite, where every transaction holds the file's write lock, every other request of the
service would otherwise wait for that client (up to SQLite's 30 s, then 503)."""
from __future__ import annotations

import json
import socket

import pytest
import requests

from app.demo.service_process import ServiceProcess
from tests.support.service_api import registration_token_at

ANSWER_S = 20  # under SQLite's busy timeout (30 s): a request that waited for the slow one fails first


def register(base: str, registration: str, name: str) -> requests.Response:
    return requests.post(f"{base}/api/v1/runners", json={"name": name, "labels": {"platform": "cpu"}},
                         headers={"Authorization": f"Bearer {registration}"}, timeout=ANSWER_S)


@pytest.mark.slow
def test_a_client_holding_back_its_body_does_not_hold_the_database(sqlite_url: str) -> None:
    registration = registration_token_at(sqlite_url)
    env = {"PARALLAX_DATABASE_URL": sqlite_url, "PARALLAX_LOG_LEVEL": "WARNING"}
    with ServiceProcess(env, workers=1) as service:
        body = json.dumps({"name": "slow", "labels": {"platform": "cpu"}}).encode()
        slow = socket.create_connection(("127.0.0.1", service.port), timeout=ANSWER_S)
        try:
            slow.sendall(f"POST /api/v1/runners HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                         f"Authorization: Bearer {registration}\r\nContent-Length: {len(body)}\r\n"
                         f"Connection: close\r\n\r\n".encode())
            # Answered after the slow request's greenlet ran as far as it could without its body.
            assert requests.get(f"{service.base}/healthz", timeout=ANSWER_S).status_code == 200

            quick = register(service.base, registration, "quick")
            assert quick.status_code == 201, quick.text

            slow.sendall(body)
            answer = b""
            while chunk := slow.recv(65536):
                answer += chunk
        finally:
            slow.close()
        assert answer.startswith(b"HTTP/1.1 201"), answer[:300]
