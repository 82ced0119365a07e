"""The alert page in a real browser: what changed at the culprit, and the stream timelines of
the last good and the culprit commit one above the other (lanes, waits, idle share), both
offered for download. The timelines are real simulator traces of the decode-throughput job on
the ROCm profile, with the WAR barrier off (good) and on (culprit)."""
from __future__ import annotations

import hashlib
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from sqlalchemy import select

from app.core.config import use_settings
from app.core.models import Commit, JobArtifact, Run
from tests.dashboard.conftest import ARTIFACTS
from tests.detection.builder import Builder
from tests.explain.histories import barrier_on_rocm

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def traces(tmp_path_factory: pytest.TempPathFactory) -> dict[bool, bytes]:
    """{war_barrier: the trace the simulated job wrote}."""
    out = tmp_path_factory.mktemp("traces")
    found = {}
    for barrier in (False, True):
        path = out / f"barrier-{int(barrier)}.json"
        env = dict(os.environ, PARALLAX_DEVICE="sim:rocm-mi300x", PARALLAX_REPEATS="1", PARALLAX_SIM_NOISE="0",
                   PARALLAX_WAR_BARRIER=str(int(barrier)), PYTHONPATH=str(REPO))
        env.pop("PARALLAX_OUTPUT_DIR", None)
        subprocess.run([sys.executable, "-m", "scheduler_core.jobs.decode_throughput", "--model", "tiny-random-8l",
                        "--mode", "one-batch", "--batch-size", "8", "--input-len", "32", "--output-len", "16",
                        "--threads", "1", "--trace", str(path), "--output", str(out / "doc.json")],
                       env=env, check=True, capture_output=True, timeout=600)
        found[barrier] = path.read_bytes()
    return found


@pytest.fixture
def alert_with_timelines(app, db, traces) -> int:  # type: ignore[no-untyped-def]
    build = Builder(db)
    shas = build.branch(30)
    with use_settings(app.extensions["parallax.settings"]):
        alert_id = barrier_on_rocm(build, db, shas, 20)
    with db.session() as session:
        for sha, barrier in ((shas[19], False), (shas[20], True)):
            run = session.scalar(select(Run).join(Commit, Commit.id == Run.commit_id)
                                 .where(Commit.sha == sha, Run.platform == "rocm"))
            data = traces[barrier]
            session.add(JobArtifact(job_id=run.job_id, attempt=run.attempt, name="timeline.json",
                                    content_type="application/json", size_bytes=len(data),
                                    sha256=hashlib.sha256(data).hexdigest(), data=data))
        session.commit()
    return alert_id


def test_the_alert_page_says_what_changed_and_draws_both_timelines(page, live_server, alert_with_timelines):
    page.goto(f"{live_server.url}/alerts/{alert_with_timelines}")
    summary = page.locator("#explanation-summary").inner_text()
    match = re.fullmatch(r"sync_policy\.war_barrier false → true on rocm; idle per decode step (\d+) % → (\d+) %", summary)
    assert match, summary
    before, after = int(match.group(1)), int(match.group(2))
    assert before < 5 and after > 10  # the barrier leaves the forward stream waiting in every step
    assert page.locator("#explanation-platforms tr[data-platform=cuda]").inner_text().count("unchanged") == 2
    good, culprit = page.locator("#timeline-good svg.timeline"), page.locator("#timeline-culprit svg.timeline")
    assert good.get_attribute("data-lanes") == culprit.get_attribute("data-lanes") == "host,forward,schedule"
    assert good.bounding_box()["y"] < culprit.bounding_box()["y"]  # one above the other
    assert culprit.locator("rect.span-wait").count() > good.locator("rect.span-wait").count() > 0
    assert culprit.locator("rect.span-work").count() > 0
    assert page.locator("#timeline-culprit .idle").inner_text() == f"{after} %"
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    page.locator("#timelines").screenshot(path=str(ARTIFACTS / "alert-timelines.png"))


def test_both_traces_are_offered_for_download(page, live_server, alert_with_timelines, traces):
    page.goto(f"{live_server.url}/alerts/{alert_with_timelines}")
    for which, barrier in (("good", False), ("culprit", True)):
        with page.expect_download() as started:
            page.locator(f"#timeline-{which} a.download").click()
        assert Path(started.value.path()).read_bytes() == traces[barrier]
