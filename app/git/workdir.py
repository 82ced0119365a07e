"""Git in a working directory with a fixed identity: how the demo, the benches and the tests
build real repositories (the service itself reads repositories through `app.git.mirror`)."""
from __future__ import annotations

import os
import subprocess
from pathlib import Path

IDENTITY = {"GIT_AUTHOR_NAME": "Parallax", "GIT_AUTHOR_EMAIL": "parallax@example.invalid",
            "GIT_COMMITTER_NAME": "Parallax", "GIT_COMMITTER_EMAIL": "parallax@example.invalid"}


def git(cwd: Path, *args: str) -> str:
    """Run `git *args` in `cwd`; returns stdout stripped, raises CalledProcessError on failure."""
    env = {**os.environ, **IDENTITY}
    return subprocess.run(["git", *args], cwd=cwd, env=env, check=True, capture_output=True, text=True).stdout.strip()
