"""The virtual timeline: when each stream's work ran, in microseconds, and what it adds up to.

Spans are kept per stream (plus the host's blocking waits) for statistics and for the
Chrome/Perfetto trace (``write_trace``: one track per stream and one for the host, opens in
ui.perfetto.dev).
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path


@dataclass
class Span:
    track: str
    name: str
    start_us: float
    end_us: float


@dataclass
class Timeline:
    keep_spans: bool = True
    host_us: float = 0.0
    spans: list[Span] = field(default_factory=list)
    busy_us: dict[str, float] = field(default_factory=dict)
    first_us: float | None = None

    def add(self, track: str, name: str, start: float, end: float) -> None:
        self.busy_us[track] = self.busy_us.get(track, 0.0) + (end - start)
        if self.first_us is None:
            self.first_us = start
        if self.keep_spans:
            self.spans.append(Span(track, name, start, end))

    def idle_gaps(self, track: str, start_us: float, end_us: float) -> float:
        """Microseconds within [start, end) when ``track`` ran nothing."""
        busy = 0.0
        for span in self.spans:
            if span.track == track:
                lo, hi = max(span.start_us, start_us), min(span.end_us, end_us)
                if hi > lo:
                    busy += hi - lo
        return max(end_us - start_us - busy, 0.0)

    def extent(self, track: str, after_us: float) -> tuple[float, float]:
        """(first start, last end) of ``track``'s spans that start at or after ``after_us``."""
        spans = [s for s in self.spans if s.track == track and s.start_us >= after_us]
        if not spans:
            raise ValueError(f"no work on {track!r} after {after_us} us")
        return spans[0].start_us, max(s.end_us for s in spans)

    def signature(self) -> list[tuple[str, str, float, float]]:
        """Every span as a plain tuple (for the determinism test)."""
        return [(s.track, s.name, s.start_us, s.end_us) for s in self.spans]

    def trace_events(self, process: str) -> list[dict]:
        tracks = sorted({s.track for s in self.spans}, key=lambda t: (t != "host", t))
        tid = {t: i for i, t in enumerate(tracks)}
        events: list[dict] = [{"ph": "M", "name": "process_name", "pid": 1, "args": {"name": process}}]
        events += [{"ph": "M", "name": "thread_name", "pid": 1, "tid": tid[t], "args": {"name": t}} for t in tracks]
        events += [{"ph": "X", "name": s.name, "pid": 1, "tid": tid[s.track], "ts": s.start_us,
                    "dur": s.end_us - s.start_us} for s in self.spans]
        return events

    def write_trace(self, path: str | Path, process: str) -> None:
        """Chrome trace-event JSON (``traceEvents``), the format ui.perfetto.dev opens."""
        Path(path).write_text(json.dumps({"traceEvents": self.trace_events(process), "displayTimeUnit": "ms"}))
