"""The speculative and grammar paths on the simulator: race-free under the CUDA policy (and under HIP
up to the request-table finding docs/sim.md reports for HIP's default), and each of their
synchronisations, removed, is reported by the race detector on the right buffer."""
from __future__ import annotations

from typing import Callable

import pytest

from scheduler_core.grammar import GrammarBackend
from scheduler_core.overlap import OverlapPipeline
from scheduler_core.platform import DEFAULT_POLICIES, SyncPolicy
from scheduler_core.sim.measure import run_reference
from scheduler_core.sim.race import Hazard
from scheduler_core.spec import SpecConfig

from .conftest import SMALL

CUDA = DEFAULT_POLICIES["cuda"]
HIP = DEFAULT_POLICIES["rocm"]
SELF_DRAFT = SpecConfig("self-draft", num_draft_tokens=3, draft_layers=1)
PATTERN = r"[0-9]{1,3}(\+[0-9]{1,3})*"
HIP_TABLE_FINDING = {("write-after-read", "req_to_token"), ("write-after-read", "seq_lens")}


def run(tiny, monkeypatch, policy: SyncPolicy, bug: Callable[[OverlapPipeline], None] | None = None,
        profile: str = "cuda-h100", spec: SpecConfig | None = None, grammar: bool = False) -> list[Hazard]:
    if bug is not None:
        original = OverlapPipeline.__init__

        def patched(self, *args, **kwargs):
            original(self, *args, **kwargs)
            bug(self)

        monkeypatch.setattr(OverlapPipeline, "__init__", patched)
    backend = GrammarBackend(tiny.tokenizer, tiny.config.vocab_size)
    make = (lambda i: backend.regex(PATTERN)) if grammar else None
    return run_reference(tiny, profile, policy, workload=SMALL, speculative=spec, grammar=make).hazards


@pytest.mark.parametrize("profile", ["cuda-h100", "rocm-mi300x"])
@pytest.mark.parametrize("spec, grammar", [(SELF_DRAFT, False), (None, True)], ids=["speculative", "grammar"])
def test_the_cuda_policy_is_race_free_on_the_new_paths(tiny, monkeypatch, profile, spec, grammar) -> None:
    assert run(tiny, monkeypatch, CUDA, profile=profile, spec=spec, grammar=grammar) == []


@pytest.mark.parametrize("spec, grammar", [(SELF_DRAFT, False), (None, True)], ids=["speculative", "grammar"])
def test_hip_default_adds_no_finding_on_the_new_paths(tiny, monkeypatch, spec, grammar) -> None:
    hs = run(tiny, monkeypatch, HIP, profile="rocm-mi300x", spec=spec, grammar=grammar)
    assert {(h.kind, h.buffer) for h in hs} <= HIP_TABLE_FINDING


def no_publish_wait(pipe: OverlapPipeline) -> None:
    """Resolve the speculative step's sequence lengths without waiting for its publish_ready event
    (the CUDA path: the forward-prepare D2H stream's wait_event on it deleted)."""
    device, forward, prepare = pipe.device, pipe.forward, pipe.prepare_d2h
    real_name, real_record, real_wait = device.name_buffer, forward.record_event, prepare.wait_event
    publish: list = []
    state = {"next_is_publish": False}

    def name_buffer(tensor, name):
        if name == "spec.new_seq_lens":
            state["next_is_publish"] = True  # publish_ready is the next event the forward records
        real_name(tensor, name)

    def record_event():
        event = real_record()
        if state["next_is_publish"]:
            publish.append(event)
            state["next_is_publish"] = False
        return event

    def wait_event(event):
        if not any(event is e for e in publish):
            real_wait(event)

    device.name_buffer, forward.record_event, prepare.wait_event = name_buffer, record_event, wait_event


def test_the_draft_state_resolved_without_waiting_is_a_read_after_write(tiny, monkeypatch) -> None:
    hs = [h for h in run(tiny, monkeypatch, CUDA, no_publish_wait, spec=SELF_DRAFT) if h.kind == "read-after-write"]
    assert hs and {h.buffer for h in hs} == {"spec.new_seq_lens"}
    assert {(h.first_stream, h.second_stream) for h in hs} == {("forward", "fwd_prepare_d2h")}


def no_wait_before_resolving_the_lengths(pipe: OverlapPipeline) -> None:
    """The next verify step reads the draft state (the in-flight step's new KV lengths in the future
    map) on the schedule stream without waiting on that step's publish_ready event."""
    real = pipe.schedule.wait_event

    def wait_event(event):
        if event is not pipe.futures.publish_ready:
            real(event)

    pipe.schedule.wait_event = wait_event


def test_the_next_step_resolving_the_draft_state_without_waiting_is_a_read_after_write(tiny, monkeypatch) -> None:
    hs = [h for h in run(tiny, monkeypatch, CUDA, no_wait_before_resolving_the_lengths, spec=SELF_DRAFT)
          if h.kind == "read-after-write"]
    assert hs and {h.buffer for h in hs} == {"future_map.new_seq_lens"}
    assert {(h.first_stream, h.second_stream) for h in hs} == {("forward", "schedule")}


def grammar_copy_done_on_the_forward_stream(pipe: OverlapPipeline) -> None:
    """The grammar path's copy without its event: copy_done recorded on the forward stream, not after
    the copy on the copy stream."""
    real = pipe._copy_result

    def copy_result(tokens, margins, grammar=False):
        tokens_host, margins_host, done = real(tokens, margins, grammar)
        return tokens_host, margins_host, (pipe.forward.record_event() if grammar else done)

    pipe._copy_result = copy_result


def test_the_grammar_copy_without_its_event_is_a_host_read_of_an_unfinished_copy(tiny, monkeypatch) -> None:
    hs = run(tiny, monkeypatch, HIP, grammar_copy_done_on_the_forward_stream, profile="rocm-mi300x", grammar=True)
    found = [h for h in hs if h.kind == "read-after-write" and h.buffer == "next_token_ids_host"]
    assert found and {(h.first_stream, h.second_stream) for h in found} == {("copy", "host")}
