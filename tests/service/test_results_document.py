"""Invalid results documents are refused with 422 naming the field, and store nothing."""
import json

import pytest
from sqlalchemy import func, select

from app.core.models import Job, JobState, Run
from runners.results import MAX_SAMPLES, Limits, ResultsError, loads, validate
from tests.support.service_api import SHA_A, claim, document, queue_jobs, register


def mutate(path, value):
    doc = document()
    target = doc
    *parents, last = path
    for key in parents:
        target = target[key]
    if value is KeyError:
        del target[last]
    else:
        target[last] = value
    return doc


INVALID = [
    ("schema", mutate(["schema"], "parallax.results/0"), "schema"),
    ("missing suite", mutate(["suite"], KeyError), "suite"),
    ("metrics not a list", mutate(["metrics"], {"a": 1}), "metrics"),
    ("no metrics", mutate(["metrics"], []), "metrics"),
    ("empty samples", mutate(["metrics", 0, "samples"], []), "metrics[0].samples"),
    ("unknown direction", mutate(["metrics", 1, "direction"], "sideways"), "metrics[1].direction"),
    ("string sample", mutate(["metrics", 0, "samples"], [1.0, "fast"]), "metrics[0].samples[1]"),
    ("boolean sample", mutate(["metrics", 0, "samples"], [True]), "metrics[0].samples[0]"),
    ("metric name missing", mutate(["metrics", 0, "name"], KeyError), "metrics[0].name"),
    ("metric name empty", mutate(["metrics", 0, "name"], " "), "metrics[0].name"),
    ("metric name over the limit", mutate(["metrics", 0, "name"], "n" * 129), "metrics[0].name"),
    ("duplicate metric", mutate(["metrics", 1, "name"], "output_throughput"), "metrics[1].name"),
    ("items not 0/1", mutate(["items", "correct"], [1, 2]), "items.correct[1]"),
    ("items empty", mutate(["items", "correct"], []), "items.correct"),
    ("context not object", mutate(["context"], [1]), "context"),
    ("environment not object", mutate(["environment"], "cuda"), "environment"),
    ("simulated not bool", mutate(["environment", "simulated"], "yes"), "environment.simulated"),
]


@pytest.mark.parametrize("label,doc,field", INVALID, ids=[case[0] for case in INVALID])
def test_validator_names_the_field(label, doc, field):
    with pytest.raises(ResultsError) as info:
        validate(doc)
    assert info.value.field == field


@pytest.mark.parametrize("literal", ["NaN", "Infinity", "-Infinity"])
def test_non_finite_literals_are_refused(literal):
    text = json.dumps(document()).replace("1210.4", literal)
    with pytest.raises(ResultsError, match="non-finite"):
        loads(text)


@pytest.mark.parametrize("literal", ["1e999", "-1e999", "9" * 400])
def test_a_sample_that_overflows_a_float_is_refused_naming_the_sample(literal):
    # `1e999` is valid JSON that parses to infinity without reaching parse_constant; a 400-digit
    # integer parses to an int that no float can hold.
    text = json.dumps(document()).replace("1198.7", literal)
    with pytest.raises(ResultsError) as info:
        loads(text)
    assert info.value.field == "metrics[0].samples[1]"
    assert "finite" in info.value.message or "out of range" in info.value.message


def test_non_finite_in_context_names_the_key():
    doc = document(context={"batch": {"ratio": float("nan")}})
    with pytest.raises(ResultsError) as info:
        validate(doc)
    assert info.value.field == "context.batch.ratio"


def test_the_contract_example_is_valid():
    parsed = validate(document())
    assert parsed.metrics[0].samples == (1210.4, 1198.7, 1215.0) and parsed.items.correct == (1, 0, 1)


def test_oversize_document_is_refused_by_the_validator():
    with pytest.raises(ResultsError, match="over the limit"):
        loads(json.dumps(document()), max_bytes=100)


@pytest.fixture
def held(client, app):
    queue_jobs(client, SHA_A, suite="decode-throughput", platform="cpu")
    headers = register(client, app)
    return claim(client, headers).get_json()["job"], headers


@pytest.mark.parametrize("label,doc,field", INVALID, ids=[case[0] for case in INVALID])
def test_service_answers_422_naming_the_field_and_stores_nothing(client, db, held, label, doc, field):
    job, headers = held
    response = client.post(f"/api/v1/jobs/{job['id']}/complete", data=json.dumps(doc), headers=headers)
    assert response.status_code == 422
    body = response.get_json()
    assert body["field"] == field and field in body["detail"]
    with db.session() as session:
        assert session.scalar(select(func.count()).select_from(Run)) == 0
        assert session.get(Job, job["id"]).state == JobState.running  # still held: the runner may retry


def test_service_refuses_nan_with_422(client, db, held):
    job, headers = held
    text = json.dumps(document()).replace("7.9", "NaN")
    response = client.post(f"/api/v1/jobs/{job['id']}/complete", data=text, headers=headers)
    assert response.status_code == 422 and "non-finite" in response.get_json()["detail"]


@pytest.mark.parametrize("literal", ["1e999", "9" * 400])
def test_service_refuses_an_overflowing_sample_with_422_and_stores_nothing(client, db, held, literal):
    job, headers = held
    text = json.dumps(document()).replace("1198.7", literal)
    response = client.post(f"/api/v1/jobs/{job['id']}/complete", data=text, headers=headers)
    assert response.status_code == 422 and response.get_json()["field"] == "metrics[0].samples[1]"
    with db.session() as session:
        assert session.scalar(select(func.count()).select_from(Run)) == 0
        assert session.get(Job, job["id"]).state == JobState.running


def test_service_refuses_malformed_document_with_422(client, held):
    job, headers = held
    response = client.post(f"/api/v1/jobs/{job['id']}/complete", data=b"{oops", headers=headers)
    assert response.status_code == 422 and response.get_json()["field"] == "$"


def test_exactly_the_sample_limit_is_accepted_and_one_more_is_refused():
    doc = document()
    doc["metrics"][0]["samples"] = [1.0] * MAX_SAMPLES
    assert len(validate(doc).metrics[0].samples) == MAX_SAMPLES
    doc["metrics"][0]["samples"].append(1.0)
    with pytest.raises(ResultsError) as info:
        validate(doc)
    assert info.value.field == "metrics[0].samples" and str(MAX_SAMPLES) in info.value.message


def test_a_metric_name_at_the_limit_is_accepted():
    assert validate(mutate(["metrics", 0, "name"], "n" * 128)).metrics[0].name == "n" * 128


@pytest.mark.parametrize("where", ["context", "environment"])
def test_a_string_value_at_the_string_limit_is_accepted_and_one_longer_is_refused(where):
    limits = Limits(string_chars=200)
    doc = document()
    doc[where]["long"] = "v" * 200
    assert getattr(validate(doc, limits), where)["long"] == "v" * 200
    doc[where]["long"] = "v" * 201
    with pytest.raises(ResultsError) as info:
        validate(doc, limits)
    assert info.value.field == f"{where}.long" and "201 characters" in info.value.message


@pytest.mark.parametrize("where", ["context", "environment"])
def test_a_key_at_the_string_limit_is_accepted_and_one_longer_is_refused(where):
    limits = Limits(string_chars=200)
    doc = document()
    doc[where]["k" * 200] = "v"
    assert "k" * 200 in getattr(validate(doc, limits), where)
    doc[where]["k" * 201] = "v"
    with pytest.raises(ResultsError) as info:
        validate(doc, limits)
    assert info.value.field == where and "key longer than 200" in info.value.message


def test_an_environment_without_a_platform_is_valid():
    environment = {k: v for k, v in document()["environment"].items() if k != "platform"}
    assert "platform" not in validate(document(environment=environment)).environment


def test_a_platform_that_is_not_a_string_is_refused():
    with pytest.raises(ResultsError) as info:
        validate(document(environment={"platform": 3}))
    assert info.value.field == "environment.platform"
