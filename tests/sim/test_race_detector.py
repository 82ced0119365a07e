"""The race detector's rules, one per test, on hand-written stream programs (no torch)."""
from __future__ import annotations

import pytest

from scheduler_core.sim.race import HOST, RaceDetector


def two_streams() -> tuple[RaceDetector, int, int]:
    det = RaceDetector()
    return det, det.new_stream("schedule"), det.new_stream("forward")


def test_read_after_an_unordered_write_is_a_hazard() -> None:
    det, a, b = two_streams()
    det.op(a, "write", [], ["table"])
    found = det.op(b, "read", ["table"], [])
    assert [(h.kind, h.buffer, h.first_stream, h.second_stream) for h in found] == [
        ("read-after-write", "table", "schedule", "forward")]


def test_wait_stream_orders_the_read_after_the_write() -> None:
    det, a, b = two_streams()
    det.op(a, "write", [], ["table"])
    det.wait_stream(b, a)
    assert det.op(b, "read", ["table"], []) == []


def test_write_after_an_unordered_read_is_a_hazard() -> None:
    det, a, b = two_streams()
    det.op(a, "write", [], ["table"])
    det.wait_stream(b, a)
    det.op(b, "read", ["table"], [])
    assert [h.kind for h in det.op(a, "write again", [], ["table"])] == ["write-after-read"]


def test_the_war_barrier_orders_the_next_write_after_the_read() -> None:
    det, a, b = two_streams()
    det.op(a, "write", [], ["table"])
    det.wait_stream(b, a)
    det.op(b, "read", ["table"], [])
    det.wait_stream(a, b)  # schedule.wait_stream(forward)
    assert det.op(a, "write again", [], ["table"]) == []


def test_two_unordered_writes_are_a_hazard() -> None:
    det, a, b = two_streams()
    det.op(a, "w1", [], ["x"])
    assert [h.kind for h in det.op(b, "w2", [], ["x"])] == ["write-after-write"]


def test_an_event_recorded_before_the_write_does_not_order_it() -> None:
    det, a, b = two_streams()
    early = det.record(a)
    det.op(a, "write", [], ["x"])
    det.wait_event(b, early)
    assert [h.kind for h in det.op(b, "read", ["x"], [])] == ["read-after-write"]
    late = det.record(a)
    det.wait_event(b, late)
    assert det.op(b, "read", ["x"], []) == []


def test_host_read_needs_a_host_sync_on_the_writer() -> None:
    det, a, _ = two_streams()
    det.op(a, "copy to host", [], ["pinned"])
    assert [h.kind for h in det.op(HOST, "host read", ["pinned"], [])] == ["read-after-write"]
    det.op(a, "copy to host", [], ["pinned"])
    det.sync_event(det.record(a))
    assert det.op(HOST, "host read", ["pinned"], []) == []


def test_work_launched_after_a_host_sync_is_ordered_after_what_the_host_saw() -> None:
    det, a, b = two_streams()
    det.op(a, "write", [], ["x"])
    det.sync_stream(a)
    assert det.op(b, "read", ["x"], []) == []


def test_freeing_a_block_another_stream_still_reads_is_a_use_after_free() -> None:
    det, a, b = two_streams()
    det.allocate("batch", a, "forward_batch.positions")
    det.op(a, "fill", [], ["batch"])
    det.wait_stream(b, a)
    det.op(b, "read", ["batch"], [])
    found = det.free("batch")
    assert [(h.kind, h.buffer, h.first_stream) for h in found] == [("use-after-free", "forward_batch.positions", "forward")]


def test_record_stream_makes_the_free_safe() -> None:
    det, a, b = two_streams()
    det.allocate("batch", a)
    det.op(a, "fill", [], ["batch"])
    det.wait_stream(b, a)
    det.op(b, "read", ["batch"], [])
    det.record_stream("batch", b)
    assert det.free("batch") == []


def test_a_free_after_the_owner_waited_on_the_user_is_safe() -> None:
    det, a, b = two_streams()
    det.allocate("batch", a)
    det.op(a, "fill", [], ["batch"])
    det.wait_stream(b, a)
    det.op(b, "read", ["batch"], [])
    det.wait_stream(a, b)
    assert det.free("batch") == []


def test_a_hazard_report_names_both_stacks() -> None:
    det, a, b = two_streams()
    det.op(a, "index_put_", [], ["table"], stack=(("batch.py", 10, "prepare_for_decode"),))
    (hazard,) = det.op(b, "index", ["table"], [], stack=(("llama.py", 20, "apply"),))
    text = hazard.describe()
    assert "batch.py:10 in prepare_for_decode" in text and "llama.py:20 in apply" in text


@pytest.mark.parametrize("later_work", [0, 1], ids=["synced at the read", "synced past the read"])
def test_a_free_after_the_host_synced_the_user_is_safe(later_work: int) -> None:
    det, a, b = two_streams()
    det.allocate("batch", a)
    det.op(a, "fill", [], ["batch"])
    det.wait_stream(b, a)
    det.op(b, "read", ["batch"], [])
    for _ in range(later_work):
        det.op(b, "other work", [], ["scratch"])
    det.sync_stream(b)
    assert det.free("batch") == []


def test_freeing_a_host_owned_block_or_an_unknown_key_reports_nothing() -> None:
    det, a, _ = two_streams()
    det.allocate("pinned", HOST)
    det.op(HOST, "fill", [], ["pinned"])
    det.op(a, "copy to device", ["pinned"], [])
    assert det.free("pinned") == []
    assert det.free("never allocated") == []


def test_a_read_after_the_read_done_event_that_claims_it_is_a_hazard_with_both_stacks() -> None:
    det, a, b = two_streams()
    det.op(a, "write", [], ["table"])
    det.wait_stream(b, a)
    det.reads_done(b, det.record(b), ["table"], stack=(("overlap.py", 1, "launch"),))
    found = det.op(b, "gather", ["table"], [], stack=(("llama.py", 2, "apply"),))
    assert [(h.kind, h.buffer, h.first_stream, h.second_stream) for h in found] == [
        ("read-after-read-done", "table", "forward", "forward")]
    assert found[0].first_stack == ("overlap.py:1 in launch",) and found[0].second_stack == ("llama.py:2 in apply",)


def test_reads_before_the_read_done_event_and_of_other_buffers_are_fine() -> None:
    det, a, b = two_streams()
    det.op(b, "gather", ["table"], [])
    det.reads_done(b, det.record(b), ["table"])
    assert det.op(b, "layers", ["kv"], []) == []


def test_a_read_done_claim_ends_when_the_stream_waits_for_the_next_batch() -> None:
    det, a, b = two_streams()
    det.reads_done(b, det.record(b), ["table"])
    det.wait_stream(b, a)  # forward.wait_stream(schedule): the next launch
    assert det.op(b, "gather", ["table"], []) == []


def test_waiting_on_the_read_done_event_orders_the_next_write_after_the_reads() -> None:
    det, a, b = two_streams()
    det.op(b, "gather", ["table"], [])
    done = det.record(b)
    det.reads_done(b, done, ["table"])
    det.op(b, "layers", ["kv"], [])
    det.wait_event(a, done)  # schedule.wait_event(shared_read_done)
    assert det.op(a, "write", [], ["table"]) == []
    assert det.op(a, "write kv", [], ["kv"])[0].kind == "write-after-read"
