from tests.support.service_api import SHA_A, claim, document, queue_jobs, raw, register


def test_healthz(client):
    assert client.get("/healthz").get_json() == {"status": "ok", "catalogue": "no file"}


def test_claim_and_complete_round_trip(client, app):
    queue_jobs(client, SHA_A, suite="decode-throughput", platform="cpu")
    headers = register(client, app, "cpu")
    job = claim(client, headers).get_json()["job"]
    assert job["commit"] == SHA_A and job["suite"] == "decode-throughput"
    response = client.post(f"/api/v1/jobs/{job['id']}/complete", data=raw(document()), headers=headers)
    assert response.status_code == 201, response.get_json()
