"""Refused uploads: each answer names the problem (and the known values where a name is
unknown), and nothing at all is stored (a refusal found by git, in the `uploads` duty, is kept
only as the queued upload's own `failed` row, which the poll reads)."""
from __future__ import annotations

import json
from typing import Any

import pytest
import requests

from tests.support.github import count_rows
from tests.support.service_api import document
from tests.uploads.conftest import bearer, settle, upload_body


@pytest.fixture
def refused(live_server, db, token):  # type: ignore[no-untyped-def]
    """Post an upload that must be refused; returns the response after checking nothing changed."""
    def send(body: Any, status: int, **headers: str) -> dict[str, Any]:
        before = count_rows(db)
        data = body if isinstance(body, bytes) else None
        reply = requests.post(f"{live_server.url}/api/v1/runs", json=None if data else body, data=data,
                              headers=bearer(token, **headers), timeout=60)
        outcome = settle(reply.status_code, reply.json(), lambda path: requests.get(
            f"{live_server.url}{path}", headers=bearer(token), timeout=60).json())
        assert outcome.status == status, outcome.text
        after = count_rows(db)
        if outcome.first == 202:  # queued for git: the queued upload's row keeps the refusal, nothing else
            assert after.pop("queued_uploads") == before.pop("queued_uploads") + 1
        assert after == before
        return outcome.body
    return send


def test_an_unknown_adapter_lists_the_known_ones(refused, upstream):
    body = refused(upload_body(upstream.head(), {"adapter": "bencher", "output": "x"}), 422)
    assert "unknown adapter 'bencher'" in body["detail"] and "sglang-bench-one-batch" in body["known"]


def test_an_unknown_suite_lists_the_known_ones(refused, upstream):
    body = refused(upload_body(upstream.head(), document(), suite="nightly"), 422)
    assert body["field"] == "suite" and body["known"] == ["decode-throughput", "gsm8k", "sglang-one-batch"]


def test_a_platform_the_suite_does_not_run_on_lists_its_platforms(refused, upstream):
    body = refused(upload_body(upstream.head(), document(), platform="tpu"), 422)
    assert body["field"] == "platform" and body["known"] == ["cuda", "rocm", "cpu"]


def test_a_sha_of_the_wrong_shape_is_refused(refused):
    body = refused(upload_body("HEAD~1", document()), 422)
    assert body["field"] == "sha" and "40-character" in body["detail"]


def test_a_sha_the_repository_does_not_have_is_refused(refused):
    body = refused(upload_body("f" * 40, document()), 422)
    assert body["field"] == "sha" and "is not in repository 'demo/engine'" in body["detail"]


def test_a_document_over_the_size_cap_is_too_large(refused, upstream, settings):
    padding = "x" * settings.max_document_bytes
    body = refused(upload_body(upstream.head(), document(context={"padding": padding})), 413)
    assert body["error"] == "payload_too_large"


def test_an_invalid_document_names_the_field(refused, upstream):
    bad = document(metrics=[{"name": "tps", "unit": "tok/s", "direction": "higher_is_better", "samples": []}])
    body = refused(upload_body(upstream.head(), bad), 422)
    assert body["field"] == "document.metrics[0].samples" and "must not be empty" in body["detail"]


def test_a_document_of_another_suite_is_refused(refused, upstream):
    body = refused(upload_body(upstream.head(), document(suite="gsm8k")), 422)
    assert body["field"] == "document.suite"


def test_results_of_another_platform_are_refused(refused, upstream):
    body = refused(upload_body(upstream.head(), document(), platform="rocm"), 422)  # the document says cpu
    assert body["field"] == "environment.platform"


def test_an_adapter_output_that_is_empty_is_refused(refused, upstream):
    body = refused(upload_body(upstream.head(), {"adapter": "sglang-bench-one-batch", "output": "  \n"},
                               platform="cuda"), 422)
    assert "is empty" in body["detail"] and body["adapter"] == "sglang-bench-one-batch"


def test_an_output_file_name_with_a_directory_is_refused(refused, upstream):
    body = refused(upload_body(upstream.head(), {"adapter": "lm-eval", "output": {"../results.json": "{}"}},
                               platform="cuda"), 422)
    assert "plain name" in body["detail"]


def test_malformed_json_is_refused(refused):
    assert refused(b"{not json", 400)["error"] == "malformed_json"


def test_a_missing_document_is_named(refused, upstream):
    body = upload_body(upstream.head(), None)
    del body["document"]
    assert refused(body, 422)["field"] == "document"


def test_a_run_url_that_is_not_a_url_is_refused(refused, upstream):
    body = refused(upload_body(upstream.head(), document(), ci={"run_url": "javascript:alert(1)"}), 422)
    assert body["field"] == "ci.run_url"


def test_a_lone_surrogate_in_tool_output_is_refused(refused, upstream):
    body = json.dumps(upload_body(upstream.head(), {"adapter": "sglang-gsm8k", "output": "x"}, platform="cuda"))
    body = body.replace('"output": "x"', '"output": "\\ud800"').encode()
    assert refused(body, 422)["field"] == "document.output"


def test_a_lone_surrogate_in_the_document_is_refused(refused, upstream):
    body = json.dumps(upload_body(upstream.head(), document(context={"model": "x"})))
    body = body.replace('"model": "x"', '"model": "\\udfff"').encode()
    assert refused(body, 422)["field"] == "document.context.model"
