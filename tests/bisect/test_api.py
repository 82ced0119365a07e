"""Bisects end to end: generated git histories, the real API on loopback, runners as threads
speaking the real runner protocol with samples from a seeded noise model per commit, and the
`bisect` duty driving the rounds."""
from __future__ import annotations

import json
import re
import threading
import time
from pathlib import Path
from typing import Any, Callable, Iterator

import pytest
import requests
from sqlalchemy import func, select

from app.bisect import service
from app.core.config import parse_catalogue
from app.core.duties import start as start_duties
from app.core.models import Alert, AlertChange, Bisect, Commit, Job, Repository
from app.git.workdir import git
from runners.client import Client
from tests.bisect.noise import NoisyHistory
from tests.bisect.upstream import Upstream
from tests.support.github import hold_mirror_fetches
from tests.support.live_server import LiveServer
from tests.support.service_api import document, registration_token
from tests.support.settings import ADMIN_TOKEN, SUITES, make_settings

SUITE, METRIC = "decode-throughput", "output_throughput"
HEADERS = {"Authorization": f"Bearer {ADMIN_TOKEN}"}


@pytest.fixture
def settings(database_url: str, data_dir: str, request: pytest.FixtureRequest):  # type: ignore[no-untyped-def]
    """The test catalogue; `indirect` parametrization gives the decode suite extra keys."""
    suites = [dict(suite, **getattr(request, "param", {})) if suite["name"] == SUITE else suite for suite in SUITES]
    return make_settings(database_url, data_dir=data_dir, suites=parse_catalogue({"suites": suites})["suites"])


class Lab:
    """The app on loopback, runner threads per platform, the bisect duty in the background."""

    def __init__(self, app: Any, upstream: Upstream) -> None:
        self.app, self.upstream = app, upstream
        self.db = app.extensions["parallax.db"]
        with self.db.session() as session:
            session.scalar(select(Repository).where(Repository.name == "demo/engine")).url = str(upstream.path)
            session.commit()
        self.server = LiveServer(app).__enter__()
        self.stop = threading.Event()
        self.threads: list[threading.Thread] = []
        self.models: dict[str, Callable[[str], list[float] | None]] = {}

    def runners(self, platform: str, count: int, model: Callable[[str], list[float] | None]) -> None:
        self.models[platform] = model
        for n in range(count):
            client = Client(self.server.url)
            _, token = client.register(registration_token(self.app), f"{platform}-{n}", {"platform": platform}, {})
            thread = threading.Thread(target=self._work, args=(Client(self.server.url, token), platform), daemon=True)
            thread.start()
            self.threads.append(thread)

    def _work(self, client: Client, platform: str) -> None:
        while not self.stop.is_set():
            job = client.claim(wait_s=0.3, budget_s=10)
            if job is None:
                continue
            samples = self.models[platform](job["commit"])
            if samples is None:
                client.fail(job["id"], job["attempt"], "build failed: the commit does not compile", retryable=False)
                continue
            doc = document(environment={"platform": platform, "device": f"test {platform}", "simulated": False},
                           metrics=[{"name": METRIC, "unit": "tok/s", "direction": "higher_is_better",
                                     "samples": samples}])
            doc.pop("items")
            client.complete(job["id"], job["attempt"], json.dumps(doc).encode())

    def measure_first(self, platform: str, *shas: str) -> None:
        """What an alert's range has: both ends measured by routine jobs."""
        ids = []
        for sha in shas:
            response = requests.post(f"{self.server.url}/api/v1/jobs", headers=HEADERS, timeout=10, json={
                "repository": "demo/engine", "commit": sha, "suite": SUITE, "platform": platform})
            assert response.status_code == 201, response.text
            ids += [j["id"] for j in response.json()["jobs"]]
        self.wait(lambda: all(requests.get(f"{self.server.url}/api/v1/jobs/{i}", timeout=10).json()["state"]
                              == "succeeded" for i in ids), "routine jobs")

    def bisect(self, **body: Any) -> requests.Response:
        payload = {"repository": "demo/engine", "suite": SUITE, "metric": METRIC, "platform": "rocm", **body}
        return requests.post(f"{self.server.url}/api/v1/bisects", json=payload, headers=HEADERS, timeout=60)

    def run_duty(self) -> None:
        start_duties(self.db, service.DUTIES, self.app.extensions["parallax.settings"], self.stop, tick_s=0.2)

    def finished(self, bisect_id: int, timeout_s: float = 240) -> dict[str, Any]:
        def done() -> dict[str, Any] | None:
            body = requests.get(f"{self.server.url}/api/v1/bisects/{bisect_id}", timeout=10).json()
            return body if body["state"] not in ("pending", "running") else None
        return self.wait(done, f"bisect {bisect_id}", timeout_s)

    @staticmethod
    def wait(predicate: Callable[[], Any], what: str, timeout_s: float = 120) -> Any:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            value = predicate()
            if value:
                return value
            time.sleep(0.2)
        raise AssertionError(f"timed out waiting for {what}")

    def close(self) -> None:
        self.stop.set()
        for thread in self.threads:
            thread.join(5)
        self.server.__exit__()


@pytest.fixture
def lab(app: Any, tmp_path: Path) -> Iterator[Lab]:
    result = Lab(app, Upstream(tmp_path / "upstream"))
    yield result
    result.close()


def by_sha(shas: list[str], history: NoisyHistory) -> Callable[[str], list[float] | None]:
    index = {sha: i for i, sha in enumerate(shas)}
    return lambda sha: history.measure(index[sha])


def count(lab: Lab, model: type) -> int:
    with lab.db.session() as session:
        return int(session.scalar(select(func.count()).select_from(model)) or 0)


def confirmed_with(lab: Lab, other: dict[str, float]) -> dict[str, Any]:
    """A rocm culprit (-10 %) at commit 8 of 16, bisected; each platform in `other` moves by its
    own step at the same commit, with noise (0.3 %) small enough that any step is significant."""
    shas = lab.upstream.linear(17)
    lab.runners("rocm", 3, by_sha(shas, NoisyHistory(16, steps={8: -0.10}, noise=0.01, seed=1)))
    for n, (platform, step) in enumerate(other.items()):
        lab.runners(platform, 1, by_sha(shas, NoisyHistory(16, steps={8: step}, noise=0.003, seed=2 + n)))
    lab.measure_first("rocm", shas[0], shas[16])
    response = lab.bisect(good=shas[0], bad=shas[16], effect=0.10)
    assert response.status_code == 202, response.text
    lab.run_duty()
    result = lab.finished(response.json()["id"])
    assert result["state"] == "done" and result["culprit"]["sha"] == shas[8], result["reason"]
    return dict(result["confirmation"])


@pytest.mark.parametrize("settings", [{"min_change": {"cpu": 0.10}}], indirect=True)
def test_a_platform_moving_less_than_its_noise_floor_is_unchanged_in_the_confirmation(lab: Lab) -> None:
    confirmation = confirmed_with(lab, {"cuda": 0.0, "cpu": -0.04})
    cpu = confirmation["platforms"]["cpu"]
    assert cpu["p_value"] < 0.01 and cpu["relative_change"] == pytest.approx(-0.04, abs=0.01)
    assert cpu["verdict"] == "unchanged" and "below the 10 %" in cpu["note"], cpu
    assert confirmation["scope"] == "rocm-only"


def test_a_platform_moving_the_other_way_is_unchanged_in_the_confirmation(lab: Lab) -> None:
    confirmation = confirmed_with(lab, {"cuda": 0.0, "cpu": +0.05})
    cpu = confirmation["platforms"]["cpu"]
    assert cpu["p_value"] < 0.01 and cpu["verdict"] == "unchanged" and "the other way" in cpu["note"], cpu
    assert confirmation["scope"] == "rocm-only"


def test_a_platform_moving_the_same_way_beyond_its_floor_is_changed_in_the_confirmation(lab: Lab) -> None:
    confirmation = confirmed_with(lab, {"cuda": 0.0, "cpu": -0.04})
    assert confirmation["platforms"]["cpu"]["verdict"] == "changed" and confirmation["scope"] == "inconclusive"


def test_64_commits_one_rocm_culprit_3_runners_found_in_3_rounds_and_confirmed_rocm_only(lab: Lab) -> None:
    shas = lab.upstream.linear(65)
    lab.runners("rocm", 3, by_sha(shas, NoisyHistory(64, steps={40: -0.10}, noise=0.01, seed=1)))
    for platform in ("cuda", "cpu"):
        lab.runners(platform, 1, by_sha(shas, NoisyHistory(64, steps={}, noise=0.01, seed=2)))
    lab.measure_first("rocm", shas[0], shas[64])
    response = lab.bisect(good=shas[0], bad=shas[64], effect=0.10)
    assert response.status_code == 202, response.text
    lab.run_duty()
    result = lab.finished(response.json()["id"])
    assert result["state"] == "done", result["reason"]
    assert result["culprit"]["sha"] == shas[40]
    assert result["culprit"]["ci_low"] <= -0.10 <= result["culprit"]["ci_high"]
    search_rounds = [r for r in result["rounds"] if r["stage"] == 0]
    assert len(search_rounds) <= 3 and all(len(r["commits"]) <= 3 for r in search_rounds)
    assert result["confirmation"]["scope"] == "rocm-only"
    assert {p: v["verdict"] for p, v in result["confirmation"]["platforms"].items()} == {
        "cuda": "unchanged", "cpu": "unchanged"}
    tested = {t["sha"]: t for t in result["stages"][0]["tested"]}
    assert tested[shas[40]]["verdict"] == "different" and tested[shas[40]]["samples"]
    with lab.db.session() as session:
        jobs = list(session.scalars(select(Job).where(Job.bisect_id == result["id"])))
    assert result["runner_jobs"] == len(jobs) and all(j.priority == service.BISECT_PRIORITY for j in jobs)
    page = requests.get(f"{lab.server.url}/bisects/{result['id']}", timeout=10).text
    assert "Scope: <strong>rocm-only</strong>" in page
    tested_table = page[page.index('id="tested"'):]
    row = tested_table[tested_table.index(f'href="/commits/{shas[40]}"'):]
    assert row[:row.index("</tr>")].count("different") == 1, "the culprit's row shows its verdict"
    assert page.count("<td>finished</td>") == len(result["rounds"])


def test_two_changes_in_the_range_are_both_reported(lab: Lab) -> None:
    shas = lab.upstream.linear(33)
    lab.runners("rocm", 3, by_sha(shas, NoisyHistory(32, steps={10: -0.10, 22: -0.10}, noise=0.01, seed=3)))
    lab.runners("cuda", 1, by_sha(shas, NoisyHistory(32, steps={}, noise=0.01, seed=4)))
    lab.runners("cpu", 1, by_sha(shas, NoisyHistory(32, steps={}, noise=0.01, seed=5)))
    lab.measure_first("rocm", shas[0], shas[32])
    response = lab.bisect(good=shas[0], bad=shas[32], effect=0.10)
    lab.run_duty()
    result = lab.finished(response.json()["id"])
    assert result["monotonic"] is False and "not monotonic" in result["reason"]
    assert sorted(c["culprit"] for c in result["changes"]) == sorted([shas[10], shas[22]])


def test_a_range_where_every_commit_fails_ends_failed_with_the_reason(lab: Lab) -> None:
    shas = lab.upstream.linear(7)
    history = NoisyHistory(6, steps={3: -0.10}, noise=0.01, seed=6, broken={1, 2, 3, 4, 5})
    lab.runners("rocm", 2, by_sha(shas, history))
    lab.measure_first("rocm", shas[0], shas[6])
    response = lab.bisect(good=shas[0], bad=shas[6], effect=0.10)
    lab.run_duty()
    result = lab.finished(response.json()["id"])
    assert result["state"] == "failed"
    assert "every one of the 5 commits between good and bad failed to build or run" in result["reason"]
    assert sorted(result["stages"][0]["skipped"]) == sorted(shas[1:6])


def test_a_merge_culprit_is_followed_into_the_merged_branch(lab: Lab) -> None:
    up = lab.upstream
    good = up.commit()
    git(up.path, "checkout", "-q", "-b", "feature")
    branch = up.linear(4)
    git(up.path, "checkout", "-q", "main")
    main = up.linear(3)
    git(up.path, "merge", "-q", "--no-ff", "-m", "merge feature", "feature")
    merge = git(up.path, "rev-parse", "HEAD")
    after = up.linear(3)
    culprit = branch[2]
    regressed = {culprit, *git(up.path, "rev-list", "--ancestry-path", f"{culprit}..{after[-1]}").split()}

    def model(platform_noise_seed: int, changes: bool) -> Callable[[str], list[float] | None]:
        histories: dict[str, NoisyHistory] = {}

        def measure(sha: str) -> list[float]:
            level = -0.10 if changes and sha in regressed else 0.0
            history = histories.setdefault(sha, NoisyHistory(1, steps={1: level}, noise=0.01,
                                                             seed=platform_noise_seed + len(histories)))
            return history.measure(1) or []
        return measure

    lab.runners("rocm", 3, model(10, True))
    lab.runners("cuda", 1, model(100, True))
    lab.runners("cpu", 1, model(200, True))
    lab.measure_first("rocm", good, after[-1])
    response = lab.bisect(good=good, bad=after[-1], effect=0.10)
    assert response.status_code == 202, response.text
    lab.run_duty()
    result = lab.finished(response.json()["id"])
    assert [s["kind"] for s in result["stages"]] == ["first_parent", "merged_branch"]
    assert result["stages"][0]["changes"][0]["culprit"] == merge
    assert result["stages"][1]["merge"] == merge
    assert result["culprit"]["sha"] == culprit, result
    assert result["confirmation"]["scope"] == "all platforms"
    assert main  # the main-line commits between fork and merge are part of the first stage


@pytest.mark.parametrize("change, field", [
    ({"same": True}, "bad"),                      # good = bad
    ({"suite": "no-such-suite"}, "suite"),
    ({"platform": "tpu"}, "platform"),
    ({"good": "not-a-sha"}, "good"),
    ({"repository": "nobody/nothing"}, "repository"),
])
def test_bad_input_is_a_422_naming_the_field_with_nothing_queued(lab: Lab, change: dict[str, Any],
                                                                 field: str) -> None:
    change = dict(change)  # the parameter is shared by both backends' runs
    shas = lab.upstream.linear(5)
    body: dict[str, Any] = {"good": shas[0], "bad": shas[4]}
    if change.pop("same", False):
        body["bad"] = body["good"]
    body.update(change)
    response = lab.bisect(**body)
    assert response.status_code == 422, response.text
    assert response.json()["field"] == field and response.json()["detail"]
    lab.run_duty()
    time.sleep(1.5)
    assert count(lab, Job) == 0 and count(lab, Bisect) == 0


@pytest.mark.parametrize("change, field, words", [
    ({"good": "f" * 40}, "good", "is not in demo/engine"),          # unknown commit
    ({"swap": True}, "good", "is not an ancestor of bad"),          # good not an ancestor of bad
])
def test_what_only_git_can_refuse_ends_the_bisect_failed_naming_the_field(lab: Lab, change: dict[str, Any],
                                                                          field: str, words: str) -> None:
    change = dict(change)
    shas = lab.upstream.linear(5)
    body: dict[str, Any] = {"good": shas[0], "bad": shas[4]}
    if change.pop("swap", False):
        body = {"good": shas[4], "bad": shas[0]}
    body.update(change)
    response = lab.bisect(**body)
    assert response.status_code == 202, response.text
    assert response.json()["state"] == "pending" and response.json()["good"] == body["good"]
    lab.run_duty()
    result = lab.finished(response.json()["id"])
    assert result["state"] == "failed" and result["field"] == field and words in result["reason"], result
    assert count(lab, Job) == 0


def test_the_bisect_paths_are_in_the_openapi_document(client: Any) -> None:
    paths = client.get("/api/v1/openapi.json").get_json()["paths"]
    assert "post" in paths["/api/v1/bisects"] and "get" in paths["/api/v1/bisects/{bisect_id}"]


def test_an_alert_over_several_unmeasured_commits_starts_a_bisect_its_api_links(lab: Lab) -> None:
    shas = lab.upstream.linear(9)
    lab.runners("rocm", 2, by_sha(shas, NoisyHistory(8, steps={5: -0.08}, noise=0.01, seed=7)))
    lab.runners("cuda", 1, by_sha(shas, NoisyHistory(8, steps={}, noise=0.01, seed=8)))
    lab.runners("cpu", 1, by_sha(shas, NoisyHistory(8, steps={}, noise=0.01, seed=9)))
    lab.measure_first("rocm", shas[0], shas[8])
    with lab.db.session() as session:
        repository = session.scalar(select(Repository).where(Repository.name == "demo/engine"))
        ids = {c.sha: c.id for c in session.scalars(select(Commit).where(Commit.sha.in_([shas[0], shas[8]])))}
        alert = Alert(repository_id=repository.id, branch="main", good_commit_id=ids[shas[0]],
                      bad_commit_id=ids[shas[8]], kind="performance", is_regression=True)
        session.add(alert)
        session.flush()
        session.add(AlertChange(alert_id=alert.id, suite=SUITE, metric=METRIC, platform="rocm",
                                context_fingerprint="x", direction="higher_is_better", relative_change=-0.08,
                                suspected_commits=shas[1:9]))
        session.commit()
        alert_id = alert.id
    lab.run_duty()
    alerts = lab.wait(lambda: [a for a in requests.get(f"{lab.server.url}/api/v1/alerts", timeout=10).json()["alerts"]
                               if a["id"] == alert_id and a["bisects"] and a["bisects"][0]["culprit"]], "alert link")
    link = alerts[0]["bisects"][0]
    assert link["culprit"] == shas[5]
    assert requests.get(f"{lab.server.url}{link['url']}", timeout=10).json()["alert_id"] == alert_id


def test_the_command_shows_rounds_as_they_finish_and_the_culprit(lab: Lab, tmp_path: Path) -> None:
    from click.testing import CliRunner

    from app.cli import main
    shas = lab.upstream.linear(9)
    lab.runners("rocm", 2, by_sha(shas, NoisyHistory(8, steps={5: -0.10}, noise=0.01, seed=11)))
    lab.runners("cuda", 1, by_sha(shas, NoisyHistory(8, steps={5: -0.10}, noise=0.01, seed=12)))
    lab.runners("cpu", 1, by_sha(shas, NoisyHistory(8, steps={5: -0.10}, noise=0.01, seed=13)))
    config = tmp_path / "parallax.toml"
    config.write_text(f'[[repositories]]\nname = "demo/engine"\nurl = "{lab.upstream.path}"\n\n'
                      f'[[suites]]\nname = "{SUITE}"\ncommand = ["true"]\nplatforms = ["cuda", "rocm", "cpu"]\n')
    env = {"PARALLAX_DATABASE_URL": lab.app.extensions["parallax.settings"].database_url,
           "PARALLAX_CONFIG": str(config), "PARALLAX_DATA_DIR": str(tmp_path / "cli-data")}
    result = CliRunner().invoke(main, ["bisect", "demo/engine", "--suite", SUITE, "--metric", METRIC,
                                       "--platform", "rocm", "--good", shas[0], "--bad", shas[8],
                                       "--effect", "0.1", "--poll", "0.2"], env=env, catch_exceptions=False)
    assert result.exit_code == 0, result.output
    assert "parallax.toml applied: suite decode-throughput updated" in result.stderr  # its file differs from the app's
    lines = result.stdout.splitlines()
    assert lines[0].startswith("bisect 1: 8 first-parent commits")
    queued = next(i for i, line in enumerate(lines) if line.startswith("round 1 (stage 0): queued "))
    measured = next(i for i, line in enumerate(lines) if line.startswith("round 1 (stage 0): measured "))
    assert queued < measured, "each round is shown when it is queued, then when it is measured"
    assert f"culprit {shas[5]}" in result.output and "scope: all platforms" in result.output


def test_every_route_answers_while_a_mirror_fetch_is_held(lab: Lab, monkeypatch: pytest.MonkeyPatch) -> None:
    """Starting a bisect fetches the git mirror, which can take minutes: the request answers 202
    at once, and every route keeps answering while the duty's fetch is held."""
    shas = lab.upstream.linear(5)
    fetching, release = hold_mirror_fetches(monkeypatch)
    lab.run_duty()
    try:
        response = lab.bisect(good=shas[0], bad=shas[4])
        assert response.status_code == 202 and response.json()["state"] == "pending", response.text
        bisect_id = response.json()["id"]
        assert fetching.wait(120), "the bisect duty never started its fetch"
        answered = []
        values = {"bisect_id": str(bisect_id), "sha": shas[4], "alert_id": "1", "job_id": "1", "id": "1"}
        for rule in lab.app.url_map.iter_rules():
            if "GET" not in rule.methods or rule.endpoint == "static":
                continue
            path = rule.rule
            for name in rule.arguments:
                path = re.sub(rf"<(?:[^:>]*:)?{name}>", values.get(name, "1"), path)
            got = requests.get(f"{lab.server.url}{path}", headers=HEADERS, timeout=60)
            assert got.status_code < 500, (path, got.status_code, got.text[:300])
            answered.append(path)
        again = lab.bisect(good=shas[1], bad=shas[4])
        assert again.status_code == 202, again.text
        assert requests.get(f"{lab.server.url}/api/v1/bisects/{bisect_id}", timeout=60).json()["state"] == "pending"
        assert not release.is_set() and f"/bisects/{bisect_id}" in answered and "/" in answered
    finally:
        release.set()
    started = lab.wait(lambda: requests.get(f"{lab.server.url}/api/v1/bisects/{bisect_id}", timeout=10).json()["state"]
                       != "pending", "the held bisect to be checked against git")
    assert started
    body = requests.get(f"{lab.server.url}/api/v1/bisects/{bisect_id}", timeout=10).json()
    assert body["state"] == "running" and body["stages"][0]["size"] == 4, body


def test_a_misspelt_metric_is_a_422_naming_the_stored_ones_with_nothing_queued(lab: Lab) -> None:
    shas = lab.upstream.linear(5)
    lab.runners("rocm", 1, by_sha(shas, NoisyHistory(4, steps={}, noise=0.01, seed=20)))
    lab.measure_first("rocm", shas[0], shas[4])
    jobs_before = count(lab, Job)
    response = lab.bisect(good=shas[0], bad=shas[4], metric="output_throughpt")
    assert response.status_code == 422, response.text
    body = response.json()
    assert body["field"] == "metric" and "'output_throughpt'" in body["detail"] and METRIC in body["detail"]
    assert count(lab, Bisect) == 0 and count(lab, Job) == jobs_before


def rounds_queued(lab: Lab, bisect_id: int) -> list[dict[str, Any]]:
    return lab.wait(lambda: requests.get(f"{lab.server.url}/api/v1/bisects/{bisect_id}", timeout=10).json()["rounds"],
                    "the first round")


def test_cancelling_a_bisect_cancels_its_queued_jobs_and_it_is_never_stepped_again(lab: Lab) -> None:
    shas = lab.upstream.linear(9)   # no rocm runner: the first round stays queued
    response = lab.bisect(good=shas[0], bad=shas[8])
    assert response.status_code == 202, response.text
    bisect_id = response.json()["id"]
    lab.run_duty()
    queued = [j for r in rounds_queued(lab, bisect_id) for j in r["jobs"]]
    url = f"{lab.server.url}/api/v1/bisects/{bisect_id}/cancel"
    assert requests.post(url, timeout=10).status_code == 401
    cancelled = requests.post(url, headers=HEADERS, timeout=10)
    assert cancelled.status_code == 200, cancelled.text
    assert cancelled.json()["state"] == "cancelled" and cancelled.json()["reason"] == "cancelled by admin"
    with lab.db.session() as session:
        assert {j.state.value for j in session.scalars(select(Job).where(Job.id.in_(queued)))} == {"cancelled"}
    for _ in range(3):  # ticks of the duty (besides the background one) leave it alone
        assert bisect_id not in service.run_duty(lab.db)["steps"]
    after = requests.get(f"{lab.server.url}/api/v1/bisects/{bisect_id}", timeout=10).json()
    assert after["state"] == "cancelled" and len(after["rounds"]) == len(cancelled.json()["rounds"])
    assert requests.post(url, headers=HEADERS, timeout=10).status_code == 409
    page = requests.get(f"{lab.server.url}/bisects/{bisect_id}", timeout=10).text
    assert "none (cancelled)" in page and "not found yet" not in page


def test_the_command_cancels_a_bisect_and_lists_it(lab: Lab, tmp_path: Path) -> None:
    from click.testing import CliRunner

    from app.cli import main
    shas = lab.upstream.linear(5)
    bisect_id = lab.bisect(good=shas[0], bad=shas[4]).json()["id"]
    env = {"PARALLAX_DATABASE_URL": lab.app.extensions["parallax.settings"].database_url,
           "PARALLAX_DATA_DIR": str(tmp_path / "cli-data")}
    result = CliRunner().invoke(main, ["bisects", "cancel", str(bisect_id)], env=env, catch_exceptions=False)
    assert result.exit_code == 0 and f"bisect {bisect_id} cancelled" in result.output
    listed = CliRunner().invoke(main, ["bisects", "list", "--state", "cancelled"], env=env, catch_exceptions=False)
    assert listed.output.startswith(f"{bisect_id}\tcancelled\t{SUITE}/{METRIC} on rocm")
    again = CliRunner().invoke(main, ["bisects", "cancel", str(bisect_id)], env=env, catch_exceptions=False)
    assert again.exit_code == 1 and "already cancelled" in again.output
