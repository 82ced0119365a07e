"""Reading a stream timeline: lanes, waits, and the idle share per decode step."""
from __future__ import annotations

import pytest

from app.explain.timeline import TraceError, read_trace
from tests.explain.traces import trace


def test_lanes_are_the_traces_threads_host_first():
    assert read_trace(trace(99.0)).lanes == ["host", "forward", "schedule"]


@pytest.mark.parametrize("busy_us,idle", [(99.0, 0.01), (89.0, 0.11), (100.0, 0.0)])
def test_idle_per_step_is_the_share_of_each_step_the_device_lane_ran_nothing(busy_us, idle):
    assert read_trace(trace(busy_us)).idle_per_step() == pytest.approx(idle)


def test_a_wait_counts_as_idle_not_as_work():
    timeline = read_trace(trace(89.0))
    waits = [s for s in timeline.on("forward") if s.is_wait]
    assert len(waits) == 6 and all(s.name == "wait_stream(schedule)" for s in waits)
    assert timeline.idle_per_step() == pytest.approx(read_trace(trace(89.0, wait=False)).idle_per_step())


@pytest.mark.parametrize("raw,message", [(b"{not json", "not JSON"), (b'{"x": 1}', "no traceEvents"),
                                         (b'{"traceEvents": []}', "no complete")])
def test_an_unreadable_trace_says_why(raw, message):
    with pytest.raises(TraceError, match=message):
        read_trace(raw)
