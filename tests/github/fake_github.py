"""A local HTTP server that stands in for api.github.com: it records every request and answers
from a script (status, headers, body, or a hang), then 201 once the script is used up."""
from __future__ import annotations

import json
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


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
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 (http.server's naming)
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length)
                owner.requests.append(Recorded(self.command, self.path, dict(self.headers.items()),
                                               json.loads(raw) if raw else None, raw))
                reply = owner.script.pop(0) if owner.script else Reply()
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

            do_GET = do_POST  # noqa: N815 (recorded and answered from the script the same way)

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_port}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> "FakeGitHub":
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.release.set()
        self.server.shutdown()
        self.server.server_close()
