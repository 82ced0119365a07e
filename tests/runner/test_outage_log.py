"""While the service is down the runner's claim loop says so once, then at most one line per
`--outage-report` interval, and one line when claims work again: not a warning per failed claim."""
from __future__ import annotations

import pytest

from runners.outage import OutageReport
from tests.support.runner_harness import Harness, wait_for


def _claim_warnings(log: str) -> list[str]:
    return [line for line in log.splitlines() if " WARNING " in line and "claim" in line]


@pytest.mark.slow
def test_an_outage_is_one_warning_then_a_line_when_claims_work_again(harness: Harness):
    proc = harness.start_runner("idle", "-v", "--claim-retry", "0.5")
    wait_for(lambda: "on " + harness.server.url in harness.runner_log(proc), 30, "the runner to start claiming")
    harness.server.stop()
    wait_for(lambda: harness.runner_log(proc).count("claim failed (") >= 3, 120, "three failed claims in a row")
    log = harness.runner_log(proc)
    assert len(_claim_warnings(log)) == 1 + log.count("claims have been failing for"), log
    assert len(_claim_warnings(log)) < log.count("claim failed (") + 1, log  # fewer warnings than failed claims
    assert "cannot claim jobs:" in _claim_warnings(log)[0]
    harness.server.start()
    wait_for(lambda: "claims work again after" in harness.runner_log(proc), 120, "the recovery line")
    job_id = harness.enqueue(harness.shas[0])
    assert harness.wait_job(job_id, ("succeeded",), proc=proc)["state"] == "succeeded"


def test_the_first_failure_is_reported_then_nothing_until_the_interval_has_passed():
    report = OutageReport(every_s=60.0)
    assert report.failed("ConnectionError", now=1000.0).startswith("cannot claim jobs: ConnectionError")
    assert [report.failed("ConnectionError", now=t) for t in (1010.0, 1030.0, 1059.0)] == [None, None, None]
    assert report.failed("ConnectionError", now=1061.0) == (
        "claims have been failing for 1 min 1 s (5 in a row); last error: ConnectionError")
    assert report.failed("ConnectionError", now=1100.0) is None


def test_recovery_is_one_line_with_the_length_of_the_outage_and_resets_the_count():
    report = OutageReport(every_s=60.0)
    assert report.succeeded(now=5.0) is None  # no outage: nothing to say
    report.failed("HTTP 503", now=10.0)
    report.failed("HTTP 503", now=20.0)
    assert report.succeeded(now=135.0) == "claims work again after 2 min 5 s (2 failed)"
    assert report.succeeded(now=140.0) is None
    assert report.failed("HTTP 503", now=150.0).startswith("cannot claim jobs")
