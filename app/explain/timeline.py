"""A job's stream timeline (a Chrome/Perfetto trace-event file, as the simulator and
`torch.profiler` write) read into lanes of spans, with the numbers the alert page prints.

- lanes: one per thread/stream track (`thread_name` metadata), the host first;
- waits: spans that only wait for another stream or the host (`wait_stream(...)`,
  `dependency for ...`, `... synchronize`), drawn highlighted;
- idle per decode step: for each host step (a `host step` span, the engine's loop iteration),
  the share of the step during which the busiest device lane ran nothing; the median over steps.
"""
from __future__ import annotations

import json
import statistics
from dataclasses import dataclass, field
from typing import Any

WAIT_MARKERS = ("wait_stream", "dependency for", "synchronize", "cudaStreamWaitEvent", "hipStreamWaitEvent")
STEP_NAMES = ("host step",)


class TraceError(ValueError):
    """The file is not a trace-event document this reader understands; the message says why."""


@dataclass(frozen=True)
class Span:
    lane: str
    name: str
    start_us: float
    end_us: float

    @property
    def is_wait(self) -> bool:
        return any(marker in self.name for marker in WAIT_MARKERS)


@dataclass
class Timeline:
    title: str
    lanes: list[str]
    spans: list[Span] = field(default_factory=list)

    def on(self, lane: str) -> list[Span]:
        return [s for s in self.spans if s.lane == lane]

    def steps(self) -> list[tuple[float, float]]:
        """(start, end) of each host step: from one step's start to the next one's."""
        starts = sorted(s.start_us for s in self.spans if s.name in STEP_NAMES)
        return list(zip(starts, starts[1:]))

    def device_lane(self) -> str | None:
        """The device lane that ran longest (the forward stream of an engine)."""
        busy = {lane: sum(s.end_us - s.start_us for s in self.on(lane) if not s.is_wait)
                for lane in self.lanes if lane != "host"}
        return max(busy, key=lambda lane: busy[lane]) if busy else None

    def idle_per_step(self) -> float | None:
        """Median share of a host step during which the device lane ran nothing (0..1); None
        without steps or device work."""
        lane = self.device_lane()
        steps = self.steps()
        if lane is None or not steps:
            return None
        work = sorted((s.start_us, s.end_us) for s in self.on(lane) if not s.is_wait)
        shares = []
        for start, end in steps:
            if end <= start:
                continue
            busy = sum(max(0.0, min(e, end) - max(s, start)) for s, e in work)
            shares.append(max(0.0, 1.0 - busy / (end - start)))
        return statistics.median(shares) if shares else None

    def window(self, first_step: int = 2, count: int = 3) -> tuple[float, float]:
        """A few steady-state steps (after the warm-up) to draw; the whole trace without steps."""
        steps = self.steps()
        if len(steps) > first_step:
            chosen = steps[first_step:first_step + count]
            return chosen[0][0], chosen[-1][1]
        if not self.spans:
            return 0.0, 1.0
        return min(s.start_us for s in self.spans), max(s.end_us for s in self.spans)


def read_trace(raw: bytes) -> Timeline:
    """Parse a trace-event JSON document (`{"traceEvents": [...]}` or a bare list)."""
    try:
        data: Any = json.loads(raw)
    except (UnicodeDecodeError, ValueError) as exc:
        raise TraceError(f"not JSON: {exc}") from exc
    events = data.get("traceEvents") if isinstance(data, dict) else data
    if not isinstance(events, list):
        raise TraceError("no traceEvents list")
    title = "trace"
    names: dict[tuple[Any, Any], str] = {}
    for event in events:
        if not isinstance(event, dict) or event.get("ph") != "M":
            continue
        label = (event.get("args") or {}).get("name")
        if event.get("name") == "process_name" and isinstance(label, str):
            title = label
        elif event.get("name") == "thread_name" and isinstance(label, str):
            names[(event.get("pid"), event.get("tid"))] = label
    spans: list[Span] = []
    for event in events:
        if not isinstance(event, dict) or event.get("ph") != "X":
            continue
        try:
            start, duration = float(event["ts"]), float(event.get("dur", 0.0))
        except (KeyError, TypeError, ValueError):
            continue
        lane = names.get((event.get("pid"), event.get("tid")), f"tid {event.get('tid')}")
        spans.append(Span(lane, str(event.get("name", "")), start, start + duration))
    if not spans:
        raise TraceError("no complete ('X') events")
    lanes = sorted({s.lane for s in spans}, key=lambda lane: (lane != "host", lane))
    return Timeline(title=title, lanes=lanes, spans=spans)
