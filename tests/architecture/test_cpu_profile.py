"""The per-test CPU profile (tests/support/cpu_profile.py): a pytest run with the plugin records
each test, and the report ranks them."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.cpu_profile import report
from tests.support.settings import REPO_ROOT


def test_a_recorded_run_is_reported_with_its_busiest_test_first(tmp_path: Path) -> None:
    (tmp_path / "test_work.py").write_text(
        "import time\n\n"
        "def test_idle():\n    pass\n\n"  # first in the file, second in the report
        "def test_busy():\n    end = time.process_time() + 0.3\n    while time.process_time() < end:\n        pass\n")
    records = tmp_path / "cpu"
    env = {**os.environ, "PARALLAX_TEST_CPU_REPORT": str(records), "PYTHONPATH": str(REPO_ROOT)}
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "tests.support.cpu_profile",
                           "--noconftest", "test_work.py"], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    text = report(records, top=2)
    ranked = [line.split()[-1] for line in text.splitlines() if "test_work.py::" in line]
    assert ranked == ["test_work.py::test_busy", "test_work.py::test_idle"], text
    assert "session controller:" in text and "2 tests:" in text


def test_a_directory_without_records_is_refused_naming_it(tmp_path: Path) -> None:
    with pytest.raises(SystemExit, match=f"{tmp_path} holds no test records"):
        report(tmp_path)
