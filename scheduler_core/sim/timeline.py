"""The virtual timeline: when each stream's work ran, in microseconds, and what it adds up to.

Spans are kept per stream (plus the host's blocking waits) for statistics and for the
Chrome/Perfetto trace (``write_trace``: one track per stream and one for the host, opens in
ui.perfetto.dev). They are stored in columns (one run adds one per device op, and an object per
span would give the garbage collector tens of thousands of objects to walk); ``spans`` builds the
rows.
"""
from __future__ import annotations

import json
from array import array
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator, NamedTuple, Sequence


class Span(NamedTuple):
    """One piece of work on a track, in microseconds."""

    track: str
    name: str
    start_us: float
    end_us: float


class _Queries:
    """What a timeline answers from its columns (``_tracks``, ``_names``, ``_times``, ``_issued``)."""

    _tracks: list[str]
    _names: list[str]
    _times: Sequence[float]
    _issued: Sequence[float]

    @property
    def spans(self) -> list[Span]:
        times = self._times
        return [Span(track, name, times[2 * i], times[2 * i + 1])
                for i, (track, name) in enumerate(zip(self._tracks, self._names))]

    def idle_gaps(self, track: str, start_us: float, end_us: float) -> float:
        """Microseconds within [start, end) when ``track`` ran nothing."""
        busy = 0.0
        for start, end in self._on(track):
            lo, hi = max(start, start_us), min(end, end_us)
            if hi > lo:
                busy += hi - lo
        return max(end_us - start_us - busy, 0.0)

    def extent(self, track: str, issued_from_us: float) -> tuple[float, float]:
        """(first start, last end) of ``track``'s spans queued by the host at or after ``issued_from_us``.

        By queue time, not start time: under the overlap loop the host queues the next step while
        the device still runs the previous one, whose later spans start after that moment."""
        times, issued = self._times, self._issued
        spans = [(times[2 * i], times[2 * i + 1]) for i, t in enumerate(self._tracks)
                 if t == track and issued[i] >= issued_from_us]
        if not spans:
            raise ValueError(f"no work queued on {track!r} from {issued_from_us} us")
        return spans[0][0], max(end for _, end in spans)

    def _on(self, track: str) -> Iterator[tuple[float, float]]:
        """(start, end) of each span on ``track``, in order, without building the rows."""
        times = self._times
        for i, t in enumerate(self._tracks):
            if t == track:
                yield times[2 * i], times[2 * i + 1]

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


@dataclass
class Timeline(_Queries):
    keep_spans: bool = True
    host_us: float = 0.0
    busy_us: dict[str, float] = field(default_factory=dict)
    first_us: float | None = None
    _tracks: list[str] = field(default_factory=list)
    _names: list[str] = field(default_factory=list)
    _times: array = field(default_factory=lambda: array("d"))  # start, end of each span in turn
    _issued: array = field(default_factory=lambda: array("d"))  # the host clock when each span was queued

    def add(self, track: str, name: str, start: float, end: float) -> None:
        busy = self.busy_us
        busy[track] = busy.get(track, 0.0) + (end - start)
        if self.first_us is None:
            self.first_us = start
        if self.keep_spans:
            self._tracks.append(track)
            self._names.append(name)
            self._times.append(start)
            self._times.append(end)
            self._issued.append(self.host_us)


class NativeTimeline(_Queries):
    """A ``Timeline`` whose columns live in the simulator's C++ core (``native_core.cpp``'s
    ``Spans``), where its per-op spans are added; the same answers, read from there."""

    def __init__(self, spans: Any) -> None:
        self.spans_store = spans

    @property
    def keep_spans(self) -> bool:
        return bool(self.spans_store.keep_spans)

    @property
    def host_us(self) -> float:
        return float(self.spans_store.host_us)

    @host_us.setter
    def host_us(self, value: float) -> None:
        self.spans_store.host_us = value

    @property
    def busy_us(self) -> dict[str, float]:
        return dict(self.spans_store.busy_us)

    @property
    def first_us(self) -> float | None:
        return self.spans_store.first_us

    def add(self, track: str, name: str, start: float, end: float) -> None:
        self.spans_store.add(track, name, start, end)

    def extent(self, track: str, issued_from_us: float) -> tuple[float, float]:
        start, end = self.spans_store.extent(track, issued_from_us)
        return start, end

    def idle_gaps(self, track: str, start_us: float, end_us: float) -> float:
        return float(self.spans_store.idle_gaps(track, start_us, end_us))

    @property
    def _tracks(self) -> list[str]:  # type: ignore[override]
        return list(self.spans_store.tracks)

    @property
    def _names(self) -> list[str]:  # type: ignore[override]
        return list(self.spans_store.names)

    @property
    def _times(self) -> array:  # type: ignore[override]
        return array("d", self.spans_store.times)

    @property
    def _issued(self) -> array:  # type: ignore[override]
        return array("d", self.spans_store.issued)
