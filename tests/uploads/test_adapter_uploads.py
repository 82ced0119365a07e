"""Uploads of a tool's raw output: each adapter's sample output (the files `tests/adapters`
writes the way each tool does) is converted by the service with the runner's own adapter code,
so the stored run holds exactly what a runner would have stored; unreadable output is refused
with the adapter and the line named, and nothing is stored."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Callable

import pytest
from sqlalchemy import select

from app.core.models import ItemResult, Run
from runners.adapters import registry
from tests.adapters import tool_output
from tests.support.github import count_rows
from tests.uploads.conftest import Outcome, post_upload, upload_body


def one_batch(out: Path) -> list[Path]:
    tool_output.sglang_one_batch(out / "one_batch.jsonl", [{"bs": 1, "in": 1024, "out": 256, "decode_throughput": 80.0},
                                                           {"bs": 32, "in": 1024, "out": 256, "decode_throughput": 1900.0}])
    return [out / "one_batch.jsonl"]


def serving(out: Path) -> list[Path]:
    tool_output.sglang_serving(out / "serving.jsonl", output_throughput=5000.0)
    return [out / "serving.jsonl"]


def gsm8k(out: Path) -> list[Path]:
    tool_output.sglang_gsm8k(out / "gsm8k.jsonl", accuracy=0.81)
    return [out / "gsm8k.jsonl"]


def vllm_serve(out: Path) -> list[Path]:
    tool_output.vllm_serve(out / "serve.json", output_throughput=4200.0, max_concurrency=64)
    return [out / "serve.json"]


def vllm_throughput(out: Path) -> list[Path]:
    tool_output.vllm_throughput(out / "throughput.json", tokens_per_second=9000.0)
    return [out / "throughput.json"]


def lm_eval(out: Path) -> list[Path]:
    return list(tool_output.lm_eval(out, correct=[1, 0, 1, 1, 0, 1]))


SAMPLES: dict[str, Callable[[Path], list[Path]]] = {
    "sglang-bench-one-batch": one_batch, "sglang-bench-serving": serving, "sglang-gsm8k": gsm8k,
    "vllm-bench-serve": vllm_serve, "vllm-bench-throughput": vllm_throughput, "lm-eval": lm_eval,
}


def test_every_adapter_has_a_sample_here():
    assert set(SAMPLES) == set(registry.ADAPTERS)


def post(server, token: str, body: dict) -> Outcome:  # type: ignore[no-untyped-def]
    """The upload's outcome (an unseen commit is answered 202 and polled)."""
    return post_upload(server, token, body)


@pytest.mark.parametrize("adapter", sorted(SAMPLES))
def test_a_tools_output_is_stored_as_the_runner_would_store_it(adapter, live_server, db, token, upstream, tmp_path):
    files = SAMPLES[adapter](tmp_path)
    environment = {"platform": "cuda", "device": "NVIDIA H100 80GB HBM3", "driver": "570.1", "torch": "2.13.0"}
    output = {f.name: f.read_text() for f in files}
    reply = post(live_server, token, upload_body(upstream.head(), {"adapter": adapter, "output": output},
                                                 platform="cuda", environment=environment))
    assert reply.status_code == 201, reply.text
    # What a runner's job would have sent for the same files (its adapter call, in a run directory).
    expected = json.loads(registry.build_document(adapter, [tmp_path], ["**/*.json*"], suite="decode-throughput",
                                                  context={}, environment=environment))
    with db.session() as session:
        run = session.get(Run, reply.json()["run_id"])
        stored = [{"name": m.metric, "unit": m.unit, "direction": m.direction, "samples": list(m.samples)}
                  for m in sorted(run.measurements, key=lambda m: m.id)]
        assert stored == expected["metrics"]
        assert run.context == expected["context"] and run.context["adapter"] == adapter
        assert run.environment == environment
        items = session.scalars(select(ItemResult).where(ItemResult.run_id == run.id)).all()
        assert [list(i.correct) for i in items] == ([expected["items"]["correct"]] if "items" in expected else [])


def test_repetitions_given_as_a_list_become_samples(live_server, db, token, upstream, tmp_path):
    texts = []
    for i, speed in enumerate((5000.0, 5100.0, 4950.0)):
        tool_output.sglang_serving(tmp_path / f"s{i}.jsonl", output_throughput=speed)
        texts.append((tmp_path / f"s{i}.jsonl").read_text())
    reply = post(live_server, token, upload_body(upstream.head(), {"adapter": "sglang-bench-serving", "output": texts},
                                                 platform="cuda"))
    assert reply.status_code == 201, reply.text
    with db.session() as session:
        run = session.get(Run, reply.json()["run_id"])
        throughput = next(m for m in run.measurements if m.metric.startswith("output_throughput["))
        assert list(throughput.samples) == [5000.0, 5100.0, 4950.0]


def test_output_the_adapter_cannot_read_names_the_adapter_and_the_line(live_server, db, token, upstream, tmp_path):
    (path,) = one_batch(tmp_path)
    lines = path.read_text().splitlines(keepends=True)
    broken = lines[0] + lines[1].replace('"batch_size": 32', '"batch_size": "32"')
    before = count_rows(db)
    reply = post(live_server, token, upload_body(upstream.head(), {"adapter": "sglang-bench-one-batch",
                                                                   "output": {"one_batch.jsonl": broken}},
                                                 platform="cuda"))
    assert reply.status_code == 422, reply.text
    body = reply.json()
    assert (body["adapter"], body["file"], body["line"]) == ("sglang-bench-one-batch", "one_batch.jsonl", 2)
    assert "adapter 'sglang-bench-one-batch' cannot read one_batch.jsonl, line 2" in body["detail"]
    assert count_rows(db) == before


def test_another_tools_output_is_refused_with_what_it_looks_like(live_server, db, token, upstream, tmp_path):
    (path,) = vllm_serve(tmp_path)
    reply = post(live_server, token, upload_body(upstream.head(), {"adapter": "sglang-bench-serving",
                                                                   "output": path.read_text()}, platform="cuda"))
    assert reply.status_code == 422 and "it looks like vllm bench serve output" in reply.json()["detail"], reply.text
    assert count_rows(db)["runs"] == 0
