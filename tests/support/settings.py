"""Test settings: the catalogue every service test starts from, and the admin token."""
from __future__ import annotations

from pathlib import Path

from app.core.config import Settings, parse_catalogue

REPO_ROOT = Path(__file__).resolve().parents[2]
SHARED = REPO_ROOT.parent / "shared"
DEFAULT_PG = "postgresql+psycopg://postgres@127.0.0.1:5432/test"
ADMIN_TOKEN = "admin-test-token"

SUITES = [
    {"name": "decode-throughput", "command": ["python", "-c", "print('decode')"],
     "platforms": ["cuda", "rocm", "cpu"], "timeout_s": 60, "repeats": 3},
    {"name": "gsm8k", "command": ["python", "-c", "print('gsm8k')"],
     "platforms": ["cuda", "rocm"], "timeout_s": 60, "repeats": 1},
]


# The same catalogue as a parallax.toml, for tests that start the real command line or server.
CATALOGUE_TOML = """
[[repositories]]
name = "demo/engine"
url = "https://github.com/demo/engine.git"

[[suites]]
name = "decode-throughput"
command = ["python", "-c", "print('decode')"]
platforms = ["cuda", "rocm", "cpu"]
"""


def make_settings(database_url: str, **overrides: object) -> Settings:
    catalogue = parse_catalogue({
        "repositories": [{"name": "demo/engine", "url": "https://github.com/demo/engine.git"}],
        "suites": SUITES,
    })
    # Pages rendered fresh: a test that changes data and reloads the home page means to see it
    # (the snapshot has its own tests, which set its age).
    values = dict(database_url=database_url, admin_token=ADMIN_TOKEN, testing=True, home_max_age_s=0.0, **catalogue)
    values.update(overrides)
    return Settings(**values)
