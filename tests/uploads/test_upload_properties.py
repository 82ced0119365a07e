"""Generated uploads (hypothesis): every body the service can be sent — results documents with
any part replaced, tool output of any shape for any adapter, odd names and environments — is
answered 201 or a 4xx naming the problem, never a server error, and a refused upload stores
nothing."""
from __future__ import annotations

import itertools
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from runners.adapters.registry import ADAPTERS
from tests.fuzz.strategies import json_scalars, json_values, results_documents
from tests.support.github import count_rows
from tests.support.service_api import document
from tests.uploads.conftest import post_upload_client, upload_body

EXAMPLES = 60
SERVICE = settings(max_examples=EXAMPLES, deadline=None, derandomize=True,
                   suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])

tool_outputs = st.fixed_dictionaries({
    "adapter": st.one_of(st.sampled_from(sorted(ADAPTERS)), json_scalars),
    "output": st.one_of(st.text(max_size=200), json_values,
                        st.dictionaries(st.text(min_size=1, max_size=30), st.text(max_size=200), max_size=3)),
})


# Valid documents with any context: the success path gets odd data too (NUL, huge numbers, nesting).
valid_documents = st.builds(lambda context: document(context=context),
                            st.dictionaries(st.text(max_size=10),
                                            st.one_of(st.none(), st.booleans(), st.integers(), st.text(max_size=20)),
                                            max_size=3))


# Valid Unicode only: json_values also draws lone surrogates, which refuse the whole upload.
# Keys of runner facts are identifiers: not blank, no control characters (values may hold anything).
fact_keys = st.text(st.characters(blacklist_categories=("Cc", "Cs")), min_size=1, max_size=10).filter(str.strip)
valid_environments = st.one_of(st.just({}), st.just({"driver": "570.1"}),
                               st.dictionaries(fact_keys, st.one_of(st.none(), st.booleans(), st.integers(),
                                                                               st.text(max_size=20)), max_size=3))
valid_ci = st.one_of(st.just({}), st.builds(lambda n: {"run_url": f"https://ci.example/runs/{n}"}, st.integers(0, 10**6)))


@st.composite
def valid_upload_bodies(draw: st.DrawFn, sha: str) -> dict[str, Any]:
    """Bodies the service must accept: a valid document with odd but valid context, environment and CI."""
    platform = draw(st.sampled_from(["cpu", "cuda"]))
    body = draw(valid_documents)
    body["environment"] = {**body["environment"], "platform": platform}
    return upload_body(sha, body, platform=platform, environment=draw(valid_environments), ci=draw(valid_ci))


@st.composite
def upload_bodies(draw: st.DrawFn, sha: str) -> dict[str, Any]:
    """Any body: a valid one, a fuzzed document or tool output, an unknown platform, odd environment and
    CI values, or one field replaced by anything."""
    body = upload_body(sha, draw(st.one_of(valid_documents, results_documents(), tool_outputs)),
                       platform=draw(st.sampled_from(["cpu", "cuda", "tpu"])),
                       environment=draw(st.one_of(valid_environments,
                                                  st.dictionaries(st.text(max_size=10), json_values, max_size=3))),
                       ci=draw(st.one_of(valid_ci, st.fixed_dictionaries({"run_url": json_scalars}))))
    if draw(st.integers(0, 3)) == 0:  # one field replaced by anything
        body[draw(st.sampled_from(sorted(body)))] = draw(json_values)
    return body


def test_every_valid_upload_with_odd_values_is_stored(app, db, token, upstream, record_examples):
    client = app.test_client()
    stored = 0
    attempts = itertools.count()

    @SERVICE
    @given(st.data())
    def check(data: st.DataObject) -> None:
        nonlocal stored
        body = data.draw(valid_upload_bodies(upstream.head()))
        if body["ci"]:  # a CI run URL is the idempotency key: one per upload (a reused one is a 409)
            body["ci"]["run_url"] += f"/attempt/{next(attempts)}"
        before = count_rows(db)
        response = post_upload_client(client, token, body)  # the first draws the unseen commit: 202, polled
        # The same body twice is the same upload (200, created false), not a second run.
        assert response.status_code in (200, 201), response.text
        assert response.json()["created"] is (response.status_code == 201)
        assert count_rows(db)["runs"] == before["runs"] + (response.status_code == 201)
        stored += response.status_code == 201

    check()
    assert stored, "no generated upload was stored"
    record_examples(f"hypothesis: valid uploads through /api/v1/runs [{db.engine.dialect.name}]: {stored} stored")


def test_every_generated_upload_is_stored_or_refused_whole(app, db, token, upstream, record_examples):
    client = app.test_client()
    statuses: dict[int, int] = {}

    @SERVICE
    @given(st.data())
    def check(data: st.DataObject) -> None:
        body = data.draw(upload_bodies(upstream.head()))
        before = count_rows(db)
        response = post_upload_client(client, token, body)
        statuses[response.status_code] = statuses.get(response.status_code, 0) + 1
        assert response.status_code in (200, 201, 400, 409, 422), response.text
        if response.status_code >= 400:
            assert response.json()["detail"]
            after = count_rows(db)
            if response.first == 202:  # refused by git in the duty: only the queued upload's row remains
                assert after.pop("queued_uploads") == before.pop("queued_uploads") + 1
            assert after == before

    check()
    record_examples(f"hypothesis: uploads through /api/v1/runs [{db.engine.dialect.name}]: "
                    f"{sum(statuses.values())} ({statuses})")
