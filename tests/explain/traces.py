"""Small Chrome trace-event documents with a known idle share per decode step: each 100 µs host
step, the forward stream runs `busy_us` of work, then (with a barrier) waits for the schedule
stream for the rest of the step."""
from __future__ import annotations

import json


def trace(busy_us: float, steps: int = 6, wait: bool = True) -> bytes:
    tracks = {"host": 0, "forward": 1, "schedule": 2}
    events: list[dict] = [{"ph": "M", "name": "process_name", "pid": 1, "args": {"name": "sim:rocm-mi300x"}}]
    events += [{"ph": "M", "name": "thread_name", "pid": 1, "tid": tid, "args": {"name": name}} for name, tid in tracks.items()]
    for i in range(steps):
        start = i * 100.0
        events.append({"ph": "X", "name": "host step", "pid": 1, "tid": 0, "ts": start, "dur": 20.0})
        events.append({"ph": "X", "name": "linear", "pid": 1, "tid": 1, "ts": start, "dur": busy_us})
        events.append({"ph": "X", "name": "index_put_", "pid": 1, "tid": 2, "ts": start + busy_us, "dur": 5.0})
        if wait and busy_us < 100:
            events.append({"ph": "X", "name": "wait_stream(schedule)", "pid": 1, "tid": 1, "ts": start + busy_us,
                           "dur": 100.0 - busy_us})
    return json.dumps({"traceEvents": events}).encode()
