"""The body of `POST /api/v1/runs`, checked for shape: which repository, commit, platform and
suite; the results document or a tool's raw output with its adapter; environment facts; the CI
run it came from; and the idempotency key that makes a retry store nothing new."""
from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from typing import Any

from app.core import limits
from app.core.config import Settings
from app.core.errors import Invalid
from app.core.shas import is_sha

IDEMPOTENCY_KEY_CHARS = 200
PROVIDER_CHARS = 64
RUN_URL_CHARS = 1000
OUTPUT_NAME_CHARS = 255


@dataclass(frozen=True)
class ToolOutput:
    """A tool's output for an adapter: per repetition, its files by name (`output` may be one
    string, one object of files, or a list of either, one per repetition)."""
    adapter: str
    runs: list[dict[str, str]]


@dataclass(frozen=True)
class UploadRequest:
    repository: str
    sha: str
    platform: str
    suite: str
    document: dict[str, Any] | None  # a parallax.results/1 document, validated when stored
    output: ToolOutput | None
    environment: dict[str, Any] = field(default_factory=dict)
    provider: str | None = None
    run_url: str | None = None
    idempotency_key: str | None = None  # as stored: "key:<header>" or "ci:<hash of run URL, suite, platform>"
    digest: str = ""  # SHA-256 of the canonical request: a retry with the same key must match it

    @property
    def adapter(self) -> str | None:
        return self.output.adapter if self.output else None


def _object(value: Any, name: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise Invalid(f"{name}: must be a JSON object", extra={"field": name})
    return value


def _files(value: Any, name: str) -> dict[str, str]:
    """One repetition's files: a string is one file called `output`."""
    if isinstance(value, str):
        _utf8(value, name)
        return {"output": value}
    if not isinstance(value, dict) or not value:
        raise Invalid(f"{name}: must be the tool's output as a string, or an object of file name -> text",
                      extra={"field": name})
    for file_name, text in value.items():
        limits.identifier(file_name, f"{name} file name", OUTPUT_NAME_CHARS)
        if "/" in file_name or "\\" in file_name or file_name in (".", ".."):
            raise Invalid(f"{name}: file name {file_name!r} must be a plain name, without a directory",
                          extra={"field": name})
        if not isinstance(text, str):
            raise Invalid(f"{name}.{file_name}: must be the file's text", extra={"field": name})
        _utf8(text, f"{name}.{file_name}")
    return value


def _utf8(text: str, name: str) -> None:
    """JSON can spell a lone surrogate (\\ud800), which no UTF-8 file or database text can hold."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise Invalid(f"{name}: not valid Unicode (a lone surrogate at character {exc.start})",
                      extra={"field": name}) from None


def _tool_output(value: dict[str, Any]) -> ToolOutput:
    adapter = limits.identifier(value.get("adapter"), "document.adapter", 64)
    if "output" not in value:
        raise Invalid("document.output: required with document.adapter (the tool's raw output)",
                      extra={"field": "document.output"})
    output = value["output"]
    if isinstance(output, list):
        if not output:
            raise Invalid("document.output: an empty list holds no repetitions", extra={"field": "document.output"})
        runs = [_files(item, f"document.output[{i}]") for i, item in enumerate(output)]
    else:
        runs = [_files(output, "document.output")]
    return ToolOutput(adapter=adapter, runs=runs)


def parse(body: dict[str, Any], header_key: str | None, settings: Settings) -> UploadRequest:
    """The request, or a 422 naming the first field that is wrong."""
    repository = limits.identifier(body.get("repository"), "repository", 200)
    sha = body.get("sha")
    if not is_sha(sha):
        raise Invalid(f"sha: must be a full 40-character lowercase hex commit SHA, got {sha!r:.80}",
                      extra={"field": "sha"})
    platform = limits.identifier(body.get("platform"), "platform", limits.PLATFORM_CHARS)
    suite = limits.identifier(body.get("suite"), "suite", limits.SUITE_NAME_CHARS)
    if "document" not in body:
        raise Invalid("document: required (a parallax.results/1 document, or {adapter, output})",
                      extra={"field": "document"})
    raw_document = _object(body["document"], "document")
    document: dict[str, Any] | None = None
    output: ToolOutput | None = None
    if "adapter" in raw_document or "output" in raw_document:
        output = _tool_output(raw_document)
    else:
        document = raw_document
    environment = _object(body.get("environment", {}), "environment")
    limits.json_value(environment, "environment", settings)
    ci = _object(body.get("ci", {}), "ci")
    provider = ci.get("provider")
    if provider is not None:
        provider = limits.identifier(provider, "ci.provider", PROVIDER_CHARS)
    run_url = ci.get("run_url")
    if run_url is not None:
        run_url = limits.identifier(run_url, "ci.run_url", RUN_URL_CHARS)
        if not run_url.startswith(("https://", "http://")):
            raise Invalid(f"ci.run_url: must be an http(s) URL, got {run_url!r:.80}", extra={"field": "ci.run_url"})
    key: str | None = None
    if header_key is not None:
        key = "key:" + limits.identifier(header_key, "Idempotency-Key header", IDEMPOTENCY_KEY_CHARS)
    elif run_url is not None:
        key = "ci:" + hashlib.sha256(json.dumps([run_url, suite, platform]).encode()).hexdigest()
    for name in ("document", "environment", "ci"):
        _utf8(json.dumps(body.get(name), ensure_ascii=False), name)
    canonical = {"repository": repository, "sha": sha, "platform": platform, "suite": suite,
                 "document": raw_document, "environment": environment, "ci": ci}
    digest = hashlib.sha256(json.dumps(canonical, sort_keys=True).encode()).hexdigest()
    return UploadRequest(repository=repository, sha=sha, platform=platform, suite=suite, document=document,
                         output=output, environment=dict(environment), provider=provider, run_url=run_url,
                         idempotency_key=key, digest=digest)
