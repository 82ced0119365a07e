"""A local HTTP server that stands in for api.github.com: it records every request and answers
from a script (status, headers, body, or a hang); once the script is used up it answers like
GitHub would: an installation access token, a new id for each created object (check runs,
comments), the object for a PATCH, and an empty list for a GET."""
from __future__ import annotations

import json
import threading
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Callable


@dataclass
class Reply:
    status: int = 201
    headers: dict[str, str] = field(default_factory=dict)
    body: Any = field(default_factory=lambda: {"id": 1})
    hang_s: float = 0.0  # sleep this long before answering (a hung GitHub)


@dataclass
class Recorded:
    method: str
    path: str
    headers: dict[str, str]
    json: Any
    raw: bytes = b""  # the body as sent (e.g. to check a signature over it)


class FakeGitHub:
    def __init__(self) -> None:
        self.requests: list[Recorded] = []
        self.script: list[Reply] = []
        self.release = threading.Event()
        self.on_request: Callable[[str, str], None] | None = None  # called with (method, path) before answering
        self.next_id = 1000
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 (http.server's naming)
                self._answer("POST")

            def do_PATCH(self) -> None:  # noqa: N802
                self._answer("PATCH")

            def do_GET(self) -> None:  # noqa: N802
                self._answer("GET")

            def _answer(self, method: str) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length)
                body = json.loads(raw) if raw else None
                owner.requests.append(Recorded(method, self.path, dict(self.headers.items()), body, raw))
                if owner.on_request is not None:
                    owner.on_request(method, self.path)
                reply = owner.script.pop(0) if owner.script else owner.default(method, self.path, body)
                if reply.hang_s:
                    owner.release.wait(reply.hang_s)
                data = json.dumps(reply.body).encode()
                try:
                    self.send_response(reply.status)
                    for key, value in reply.headers.items():
                        self.send_header(key, value)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the client gave up waiting (the hang case)

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.lock = threading.Lock()
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_port}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def default(self, method: str, path: str, body: Any) -> Reply:
        if method == "GET":
            return Reply(200, body=[])
        if method == "PATCH":
            return Reply(200, body={"id": int(path.rstrip("/").rsplit("/", 1)[-1]), **(body or {})})
        with self.lock:
            self.next_id += 1
            new_id = self.next_id
        if path.endswith("/access_tokens"):
            expires = datetime.now(timezone.utc) + timedelta(hours=1)
            return Reply(201, body={"token": f"ghs-installation-{new_id}",
                                    "expires_at": expires.strftime("%Y-%m-%dT%H:%M:%SZ")})
        return Reply(201, body={"id": new_id})

    def calls(self, method: str, fragment: str) -> list[Recorded]:
        return [r for r in list(self.requests) if r.method == method and fragment in r.path]

    def __enter__(self) -> "FakeGitHub":
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.release.set()
        self.server.shutdown()
        self.server.server_close()
