"""schemathesis against `/api/v1/openapi.json` of a live `parallax serve` (gunicorn) on
PostgreSQL: no server error, and every response matches the document."""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest
import requests

from tests.support.runner_harness import free_port
from tests.support.settings import ADMIN_TOKEN, CATALOGUE_TOML, REPO_ROOT

MAX_EXAMPLES = int(os.environ.get("PARALLAX_FUZZ_EXAMPLES", "25"))
CHECKS = "not_a_server_error,response_schema_conformance,content_type_conformance,status_code_conformance"
# schemathesis' CLI, with anyio imported in the main thread first. anyio >= 4.15 parses its own
# source into an AST when first imported, and schemathesis first imports it from a worker thread
# while the other worker may be building an AST too; CPython 3.11's AST builder keeps its recursion
# depth in per-interpreter state, so two threads at once can fail with "SystemError: AST constructor
# recursion depth mismatch" (CPython gh-106905; CI failed so on 7 December 2026).
SCHEMATHESIS = ("import sys, anyio; from schemathesis.cli import schemathesis; "
                "sys.argv[0] = 'schemathesis'; sys.exit(schemathesis())")


def parallax(*args: str) -> list[str]:
    return [sys.executable, "-c", "import sys; from app.cli import main; sys.argv[0] = 'parallax'; main()", *args]


@pytest.mark.slow
@pytest.mark.postgres
def test_schemathesis_finds_no_server_error_and_no_schema_mismatch(postgres_url, tmp_path: Path, record_examples):
    config = tmp_path / "parallax.toml"
    config.write_text(CATALOGUE_TOML)
    env = dict(os.environ, PARALLAX_DATABASE_URL=postgres_url, PARALLAX_CONFIG=str(config),
               PARALLAX_ADMIN_TOKEN=ADMIN_TOKEN, PARALLAX_GITHUB_WEBHOOK_SECRET="fuzz-secret",
               PARALLAX_LOG_LEVEL="WARNING", PYTHONPATH=str(REPO_ROOT))
    port = free_port()
    server = subprocess.Popen(parallax("serve", "--port", str(port), "--workers", "2", "--threads", "4"),
                              env=env, cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                if requests.get(f"{base}/healthz", timeout=10).status_code == 200:
                    break
            except requests.RequestException:  # not listening yet, or too busy starting to answer
                pass
            assert server.poll() is None and time.monotonic() < deadline, "parallax serve did not start"
            time.sleep(0.3)
        report = tmp_path / "report.json"
        result = subprocess.run(
            [sys.executable, "-c", SCHEMATHESIS, "run", f"{base}/api/v1/openapi.json",
             "--checks", CHECKS, "--max-examples", str(MAX_EXAMPLES), "--seed", "17", "--workers", "2",
             "--header", f"Authorization: Bearer {ADMIN_TOKEN}",
             "--request-timeout", "30", "--report", "ndjson", "--report-ndjson-path", str(report)],
            env=env, cwd=tmp_path, capture_output=True, text=True, timeout=900)
        summary = result.stdout[-8000:]
        cases = sum(1 for line in report.read_text().splitlines() if '"ScenarioFinished"' in line) if report.exists() else 0
        match = re.search(r"Test cases:\s*\n?\s*(.+)", result.stdout)
        record_examples(f"schemathesis: {match.group(1).strip() if match else f'{cases} scenarios'} "
                        f"(max {MAX_EXAMPLES} per operation, seed 17)")
        assert result.returncode == 0, summary
    finally:
        server.terminate()
        _, stderr = server.communicate(timeout=30)
        assert b"unhandled error" not in stderr, stderr.decode()[-3000:]


def test_the_openapi_document_lists_parameters_for_every_templated_path(client):
    document = json.loads(client.get("/api/v1/openapi.json").get_data(as_text=True))
    for path, operations in document["paths"].items():
        names = set(re.findall(r"{(\w+)}", path))
        for operation in operations.values():
            declared = {p["name"] for p in operation["parameters"] if p["in"] == "path"}
            assert declared == names, path
