"""`parallax demo` end to end, as `make demo` runs it (with the tiny model to stay quick)."""
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_demo_measures_a_commit_and_prints_the_summary(tmp_path):
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "PARALLAX_DATABASE_URL": f"sqlite:///{tmp_path / 'demo.db'}"}
    result = subprocess.run([str(ROOT / ".venv/bin/parallax"), "demo", "--workdir", str(tmp_path / "demo"),
                             "--model", "tiny-random"], env=env, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "decode-throughput on cpu: succeeded" in result.stdout
    assert "decode_throughput" in result.stdout and "tok/s" in result.stdout
    assert "/commits/" in result.stdout
