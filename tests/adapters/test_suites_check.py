"""`parallax suites check`: the configuration keys of adapter suites."""
from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from app.cli.suites import suites

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def check(path: Path) -> tuple[int, str]:
    result = CliRunner().invoke(suites, ["check", str(path)])
    return result.exit_code, result.output


@pytest.mark.parametrize("name", ["sglang.toml", "vllm.toml"])
def test_the_examples_pass_and_say_what_each_suite_stores(name: str):
    code, output = check(EXAMPLES / name)
    assert code == 0, output
    assert "OK, 3 suite(s)" in output and "stores:" in output and "platforms cuda, rocm" in output


def suite_file(tmp_path: Path, extra: str) -> Path:
    path = tmp_path / "parallax.toml"
    path.write_text('[[suites]]\nname = "s"\ncommand = ["python", "-m", "sglang.bench_one_batch"]\n' + extra)
    return path


def test_an_unknown_adapter_is_named_with_the_known_ones(tmp_path: Path):
    code, output = check(suite_file(tmp_path, 'adapter = "sglang-one-batch"\noutputs = ["r.jsonl"]\n'))
    assert code != 0 and "unknown adapter 'sglang-one-batch'" in output and "sglang-bench-one-batch" in output


def test_an_adapter_without_outputs_is_refused(tmp_path: Path):
    code, output = check(suite_file(tmp_path, 'adapter = "sglang-bench-one-batch"\n'))
    assert code != 0 and "suites[0].outputs" in output


def test_a_misspelled_platform_is_refused(tmp_path: Path):
    code, output = check(suite_file(tmp_path, 'adapter = "sglang-bench-one-batch"\noutputs = ["r.jsonl"]\n'
                                              'platforms = ["cuda", "rcom"]\n'))
    assert code != 0 and "unknown platform 'rcom'" in output


def test_a_misspelled_key_is_refused(tmp_path: Path):
    code, output = check(suite_file(tmp_path, 'adaptor = "sglang-bench-one-batch"\n'))
    assert code != 0 and "unknown key(s) 'adaptor'" in output


def test_outputs_outside_the_output_directory_are_refused(tmp_path: Path):
    code, output = check(suite_file(tmp_path, 'adapter = "sglang-bench-one-batch"\noutputs = ["../r.jsonl"]\n'))
    assert code != 0 and "stay inside" in output
