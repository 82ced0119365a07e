"""Job artifacts in the runner protocol: the holder uploads files beside its results document;
past the size cap a clear 413 that leaves the job and its results alone; listed and downloadable."""
from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest
from sqlalchemy import update

from app.core.clock import utcnow
from app.core.models import JobArtifact
from app.jobs.artifacts import prune
from tests.support.service_api import SHA_A, claim, document, queue_jobs, raw, register
from tests.support.settings import make_settings

CAP = 4096
TRACE = b'{"traceEvents": []}'


@pytest.fixture
def settings(database_url: str, tmp_path: Path):  # type: ignore[no-untyped-def]
    return make_settings(database_url, max_artifact_bytes=CAP)


@pytest.fixture
def held(client, app):  # type: ignore[no-untyped-def]
    queue_jobs(client, SHA_A, suite="decode-throughput", platform="cpu")
    headers = register(client, app, name="holder")
    job = claim(client, headers).get_json()["job"]
    return job, headers


def upload(client, job, headers, name: str, data: bytes):  # type: ignore[no-untyped-def]
    return client.post(f"/api/v1/jobs/{job['id']}/artifacts?name={name}&attempt={job['attempt']}", data=data,
                       headers={**headers, "Content-Type": "application/json"})


def test_an_uploaded_artifact_is_listed_on_the_job_and_downloadable(client, held):
    job, headers = held
    response = upload(client, job, headers, "timeline.json", TRACE)
    assert response.status_code == 201 and response.get_json()["size_bytes"] == len(TRACE)
    (listed,) = client.get(f"/api/v1/jobs/{job['id']}/artifacts").get_json()["artifacts"]
    assert (listed["name"], listed["attempt"]) == ("timeline.json", job["attempt"])
    download = client.get(listed["url"])
    assert download.data == TRACE and "attachment" in download.headers["Content-Disposition"]
    assert 'data-artifact="timeline.json"' in client.get(f"/jobs/{job['id']}").get_data(as_text=True)


def test_the_same_upload_again_is_200_and_stored_once(client, held):
    job, headers = held
    upload(client, job, headers, "timeline.json", TRACE)
    assert upload(client, job, headers, "timeline.json", TRACE).status_code == 200
    assert upload(client, job, headers, "timeline.json", b"{}").status_code == 409
    assert len(client.get(f"/api/v1/jobs/{job['id']}/artifacts").get_json()["artifacts"]) == 1


def test_an_artifact_over_the_cap_is_413_and_the_results_still_complete(client, held):
    job, headers = held
    response = upload(client, job, headers, "timeline.json", b"x" * (CAP + 1))
    assert response.status_code == 413
    assert "artifact 'timeline.json' is 4097 bytes, over the limit of 4096" in response.get_json()["detail"]
    assert "results are not affected" in response.get_json()["detail"]
    assert client.get(f"/api/v1/jobs/{job['id']}/artifacts").get_json()["artifacts"] == []
    completed = client.post(f"/api/v1/jobs/{job['id']}/complete", data=raw(document()), headers=headers)
    assert completed.status_code == 201


def test_an_html_artifact_is_served_as_a_download_not_a_page(client, held):
    job, headers = held
    client.post(f"/api/v1/jobs/{job['id']}/artifacts?name=report.html", data=b"<script>alert(1)</script>",
                headers={**headers, "Content-Type": "text/html"})
    download = client.get(f"/api/v1/jobs/{job['id']}/artifacts/report.html")
    assert download.mimetype == "application/octet-stream"
    assert download.headers["Content-Disposition"].startswith("attachment")


@pytest.mark.parametrize("name", ["../etc/passwd", ".hidden", "a b", "x" * 129, ""])
def test_a_bad_artifact_name_is_422(client, held, name):
    job, headers = held
    response = upload(client, job, headers, name, TRACE)
    assert response.status_code == 422 and response.get_json()["field"] == "name"


def test_only_the_lease_holder_uploads(client, app, held):
    job, _ = held
    stranger = register(client, app, name="stranger")
    assert upload(client, job, stranger, "timeline.json", TRACE).status_code == 403


def test_retention_deletes_artifacts_older_than_the_setting(client, db, held):
    job, headers = held
    upload(client, job, headers, "old.json", TRACE)
    upload(client, job, headers, "new.json", TRACE)
    with db.session() as session:
        session.execute(update(JobArtifact).where(JobArtifact.name == "old.json")
                        .values(created_at=utcnow() - timedelta(days=31)))
        session.commit()
        assert prune(session, retention_days=30) == 1
    assert [a["name"] for a in client.get(f"/api/v1/jobs/{job['id']}/artifacts").get_json()["artifacts"]] == ["new.json"]
