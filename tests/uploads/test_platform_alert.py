"""Uploads alone drive detection: thirty commits of main measured on CUDA and ROCm by CI jobs
and uploaded (never seen by the service before, so each is queued, fetched by the `uploads` duty
and placed in main's history), with ROCm decode throughput dropping 20 % from one commit on, raise an alert on ROCm
only, classified platform-specific, with the culprit among its suspects."""
from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest
from sqlalchemy import select

from app.core.config import use_settings
from app.core.models import AlertChange
from app.detection.service import scan_dirty
from app.jobs.queue import deliver_stored_runs
from tests.support.github import Upstream
from tests.support.service_api import document
from tests.uploads.conftest import post_upload, upload_body

COMMITS = 30
DROP_AT = 15
DEVICES = {"cuda": "NVIDIA H100 80GB HBM3", "rocm": "AMD Instinct MI300X"}
LEVELS = {"cuda": 1900.0, "rocm": 1700.0}


@pytest.fixture
def upstream(tmp_path: Path) -> Upstream:
    repo = Upstream(tmp_path / "upstream", branch="main")
    repo.commits(COMMITS)
    return repo


def results(platform: str, index: int, rng: np.random.Generator) -> dict:
    level = LEVELS[platform] * (0.8 if platform == "rocm" and index >= DROP_AT else 1.0)
    samples = [round(float(x), 2) for x in level * (1 + 0.005 * rng.standard_normal(5))]
    return document(metrics=[{"name": "output_throughput", "unit": "tok/s", "direction": "higher_is_better",
                              "samples": samples}],
                    items=None, environment={"platform": platform, "device": DEVICES[platform], "simulated": False})


def test_a_rocm_only_drop_uploaded_over_thirty_commits_raises_a_rocm_alert(live_server, app, db, token, upstream):
    shas = upstream("rev-list", "--reverse", "HEAD").split()
    rng = np.random.default_rng(29)
    bodies = [upload_body(sha, results(platform, i, rng), platform=platform)
              for i, sha in enumerate(shas) for platform in ("cuda", "rocm")]

    def send(body: dict) -> int:  # the outcome, polled when the commit was queued for git
        return post_upload(live_server, token, body).status_code

    with ThreadPoolExecutor(4) as pool:  # CI jobs upload when they finish, not in commit order
        assert list(pool.map(send, reversed(bodies))) == [201] * len(bodies)
    with use_settings(app.extensions["parallax.settings"]):
        assert deliver_stored_runs(db) == len(bodies)
    scan_dirty(db)
    with db.session() as session:
        changes = list(session.scalars(select(AlertChange)))
        described = [(c.platform, c.metric, c.classification, c.relative_change) for c in changes]
        regressions = [c for c in changes if c.is_regression]
        assert [c.platform for c in regressions] == ["rocm"], described
        (change,) = regressions
        assert change.classification == "platform_specific", described
        assert change.relative_change == pytest.approx(-0.2, abs=0.02)
        assert shas[DROP_AT] in change.suspected_commits
