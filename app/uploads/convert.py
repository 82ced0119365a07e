"""An upload's results document: the one it carries, or the one the runner's own adapter code
makes from a tool's raw output (`runners.adapters.registry.build_document`, the same call a
runner makes after running a suite). Either way it is validated with the service's limits and
its environment says which platform measured it."""
from __future__ import annotations

import json
import tempfile
from pathlib import Path
from typing import Any

from app.core.errors import Invalid
from app.uploads.request import ToolOutput, UploadRequest
from runners.adapters import registry
from runners.adapters.base import AdapterError
from runners.results import Limits, ResultsDocument, ResultsError, validate


def _environment(request: UploadRequest, document_environment: dict[str, Any]) -> dict[str, Any]:
    """The document's environment with the request's facts over it; its platform must be the
    upload's."""
    environment = {**document_environment, **request.environment}
    claimed = environment.get("platform")
    if claimed is not None and claimed != request.platform:
        raise Invalid(f"environment.platform: the results say {claimed!r}, but the upload is for platform "
                      f"{request.platform!r}", extra={"field": "environment.platform"})
    environment["platform"] = request.platform
    return environment


def _adapter_error(exc: AdapterError, output: ToolOutput, root: Path) -> Invalid:
    """A 422 naming the adapter, the file as the uploader named it, the line and the field."""
    try:
        relative = Path(exc.file).resolve().relative_to(root.resolve())
        run, _, name = str(relative).partition("/")
        file = name if len(output.runs) == 1 else f"{run}/{name}"
    except ValueError:
        file = Path(exc.file).name
    where = f"{file}, line {exc.line}" if exc.line else file
    field = f", field {exc.field!r}" if exc.field else ""
    return Invalid(f"document.output: adapter {output.adapter!r} cannot read {where}{field}: {exc.message}",
                   extra={"field": "document.output", "adapter": output.adapter, "file": file,
                          "line": exc.line, "tool_field": exc.field})


def _from_output(request: UploadRequest, output: ToolOutput, limits: Limits) -> ResultsDocument:
    if output.adapter not in registry.ADAPTERS:
        raise Invalid(f"document.adapter: unknown adapter {output.adapter!r}; known: {', '.join(sorted(registry.ADAPTERS))}",
                      extra={"field": "document.adapter", "known": sorted(registry.ADAPTERS)})
    with tempfile.TemporaryDirectory(prefix="parallax-upload-") as tmp:
        root = Path(tmp)
        run_dirs = []
        for number, files in enumerate(output.runs, start=1):
            run_dir = root / f"run-{number}"
            run_dir.mkdir()
            for name, text in files.items():
                (run_dir / name).write_text(text, encoding="utf-8")
            run_dirs.append(run_dir)
        try:
            raw = registry.build_document(output.adapter, run_dirs, ["*"], suite=request.suite, context={},
                                          environment=_environment(request, {}))
        except AdapterError as exc:
            raise _adapter_error(exc, output, root) from exc
        except ResultsError as exc:
            raise Invalid(f"document.output: adapter {output.adapter!r} made an invalid document: {exc}",
                          extra={"field": "document.output", "adapter": output.adapter}) from exc
    return _validated(json.loads(raw), limits, "document.")


def _validated(data: dict[str, Any], limits: Limits, prefix: str) -> ResultsDocument:
    try:
        return validate(data, limits)
    except ResultsError as exc:
        raise Invalid(f"{prefix}{exc}", extra={"field": prefix + exc.field}) from exc


def results_document(request: UploadRequest, limits: Limits) -> ResultsDocument:
    """The validated document to store, or a 422 that names the problem."""
    if request.output is not None:
        return _from_output(request, request.output, limits)
    assert request.document is not None
    data = dict(request.document)
    environment = data.get("environment", {})
    if not isinstance(environment, dict):
        raise Invalid("document.environment: must be an object", extra={"field": "document.environment"})
    document = _validated(data, limits, "document.")
    if document.suite != request.suite:
        raise Invalid(f"document.suite: the document is for suite {document.suite!r}, but the upload names "
                      f"{request.suite!r}", extra={"field": "document.suite"})
    data["environment"] = _environment(request, environment)
    return _validated(data, limits, "document.")
