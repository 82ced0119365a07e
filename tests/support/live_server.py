"""A Flask app served by a real HTTP server on a loopback port, in a thread."""
from __future__ import annotations

import threading

from werkzeug.serving import make_server


class LiveServer:
    def __init__(self, flask_app) -> None:  # type: ignore[no-untyped-def]
        self.server = make_server("127.0.0.1", 0, flask_app, threaded=True)
        self.url = f"http://127.0.0.1:{self.server.server_port}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> "LiveServer":
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.thread.join(5)
