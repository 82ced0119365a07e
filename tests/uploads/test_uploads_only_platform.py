"""A platform measured only by CI uploads (no Parallax runner): a bisect on it says so plainly
instead of waiting silently."""
from __future__ import annotations

from tests.support.service_api import admin_headers, register


def start_bisect(client, upstream, platform: str):  # type: ignore[no-untyped-def]
    shas = upstream("rev-list", "--reverse", "HEAD").split()
    return client.post("/api/v1/bisects", headers=admin_headers(), json={
        "repository": "demo/engine", "suite": "decode-throughput", "metric": "output_throughput",
        "platform": platform, "good": shas[0], "bad": shas[-1]})


def test_a_bisect_on_a_platform_without_runners_says_so(client, upstream):
    reply = start_bisect(client, upstream, "rocm")
    assert reply.status_code == 202, reply.get_json()
    note = reply.get_json()["note"]
    assert note.startswith("no Parallax runner is registered for platform 'rocm'") and "POST /api/v1/runs" in note


def test_a_bisect_on_a_platform_with_a_runner_has_no_such_note(client, app, upstream):
    register(client, app, platform="rocm")
    reply = start_bisect(client, upstream, "rocm")
    assert reply.status_code == 202 and reply.get_json()["note"] is None
