"""What the runner says while it cannot claim: the first failed claim as a warning, then at
most one line per `every_s` saying how long claims have been failing, and one line when a claim
works again, instead of a warning per failed claim and per retry (a two-minute outage used to
log 37 of them)."""
from __future__ import annotations

from dataclasses import dataclass


def span(seconds: float) -> str:
    """A duration as people read it in a log: 45 s, 3 min 5 s, 2 h 10 min."""
    whole = int(seconds)
    if whole < 60:
        return f"{whole} s"
    if whole < 3600:
        return f"{whole // 60} min {whole % 60} s"
    return f"{whole // 3600} h {whole // 60 % 60} min"


@dataclass
class OutageReport:
    """The state of one run of failed claims; `now` is a monotonic clock reading."""
    every_s: float = 60.0
    since: float | None = None  # when the first failure of this run happened
    failures: int = 0
    last_said: float = 0.0

    def failed(self, error: str, now: float) -> str | None:
        """Count a failed claim; returns the line to log, or None while there is nothing new to say."""
        self.failures += 1
        if self.since is None:
            self.since = self.last_said = now
            return (f"cannot claim jobs: {error}; retrying, with a line every {span(self.every_s)} "
                    "until it works again")
        if now - self.last_said < self.every_s:
            return None
        self.last_said = now
        return f"claims have been failing for {span(now - self.since)} ({self.failures} in a row); last error: {error}"

    def succeeded(self, now: float) -> str | None:
        """A claim got an answer; returns the recovery line when claims had been failing."""
        if self.since is None:
            return None
        line = f"claims work again after {span(now - self.since)} ({self.failures} failed)"
        self.since, self.failures = None, 0
        return line
