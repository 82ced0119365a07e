"""The CI examples stay runnable: each `parallax upload` line in them parses with the command's
real options, names an adapter the service knows, and the GitHub workflow uploads only after the
benchmark wrote its file."""
from __future__ import annotations

import shlex
from pathlib import Path

import click
import pytest
import yaml

from runners.adapters.registry import ADAPTERS
from runners.upload import upload

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
FILES = [EXAMPLES / "github-actions/sglang-rocm-benchmark.yml", EXAMPLES / "buildkite/vllm-pipeline.yml"]


def scripts(path: Path) -> list[str]:
    """Every shell script in a GitHub workflow (`run`) or a Buildkite pipeline (`command`)."""
    data = yaml.safe_load(path.read_text())
    if "jobs" in data:
        return [step["run"] for job in data["jobs"].values() for step in job["steps"] if "run" in step]
    return [step["command"] for step in data["steps"]]


def upload_lines(script: str) -> list[list[str]]:
    joined = script.replace("\\\n", " ")
    return [shlex.split(line)[2:] for line in joined.splitlines() if line.strip().startswith("parallax upload")]


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.parent.name)
def test_each_upload_line_parses_and_names_a_known_adapter(path, tmp_path, monkeypatch):
    lines = [args for script in scripts(path) for args in upload_lines(script)]
    assert lines, f"{path.name} has no `parallax upload` line"
    monkeypatch.chdir(tmp_path)
    env = {"PARALLAX_SERVER": "https://parallax.example", "PARALLAX_CI_TOKEN": "pxc_x", "GITHUB_REPOSITORY": "o/n",
           "GITHUB_SHA": "a" * 40, "BUILDKITE_COMMIT": "a" * 40, "MEASURED_SHA": "a" * 40}
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    for args in lines:
        args = [a.replace("$MEASURED_SHA", env["MEASURED_SHA"]) for a in args]
        for name in (a for a in args if not a.startswith("-")):
            if name.endswith((".json", ".jsonl")):
                (tmp_path / name).write_text("{}\n")
        context = upload.make_context("upload", list(args))
        assert context.params["adapter"] in ADAPTERS
        assert context.params["platform"] in ("cuda", "rocm")


def test_the_github_workflow_uploads_after_the_benchmark_and_reads_the_secret():
    steps = yaml.safe_load(FILES[0].read_text())["jobs"]["one-batch"]["steps"]
    names = [step.get("name", "") for step in steps]
    assert names.index("Upload to Parallax") > names.index("Benchmark (five runs; each appends its lines to the result file)")
    upload_step = steps[names.index("Upload to Parallax")]
    assert upload_step["env"]["PARALLAX_CI_TOKEN"] == "${{ secrets.PARALLAX_CI_TOKEN }}"


def test_an_unknown_option_in_an_example_would_be_caught():
    with pytest.raises(click.UsageError):
        upload.make_context("upload", ["--platfrom", "rocm", "x.json"])
