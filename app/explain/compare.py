"""Which recorded keys differ between two results documents' `context` (or `environment`) blocks.

Nested objects are flattened to dotted keys (`sync_policy.war_barrier`), so a switch inside the
sync policy is named by itself. Keys that change with every run without saying anything about
the engine (the commit, timings, hostnames, the simulator's observations) are left out: a diff
that lists them on every platform hides the one that matters.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Mapping

# Bookkeeping and observations, not causes (app.jobs.measurements.VOLATILE_CONTEXT_KEYS minus
# the sync policy, which is exactly what an explanation is after).
IGNORED_KEYS = frozenset({
    "commit", "head", "checked_out", "started_at", "finished_at", "duration_s", "wall_s", "hostname",
    "job_id", "run_id", "attempt", "pid", "sim_stream_busy", "sim_hazard_kinds", "seed",
    "engine_version", "engine_version_source", "engine_describe", "git_describe",
})
MISSING = None


@dataclass(frozen=True)
class Difference:
    key: str
    before: Any
    after: Any

    def as_json(self) -> dict[str, Any]:
        return {"key": self.key, "before": self.before, "after": self.after}

    def text(self) -> str:
        return f"{self.key}: {show(self.before)} → {show(self.after)}"


def show(value: Any) -> str:
    """A value as the TOML/JSON reader would write it: false, null, 2.13.0, [1, 2]."""
    if isinstance(value, str):
        return value
    return json.dumps(value, sort_keys=True, default=str)


def flatten(block: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    flat: dict[str, Any] = {}
    for key, value in block.items():
        if not prefix and key in IGNORED_KEYS:
            continue
        name = f"{prefix}{key}"
        if isinstance(value, Mapping) and value:
            flat.update(flatten(value, f"{name}."))
        else:
            flat[name] = value
    return flat


def differences(before: Mapping[str, Any] | None, after: Mapping[str, Any] | None) -> list[Difference]:
    """Every flattened key whose value differs (a key present on one side only included), by key."""
    old, new = flatten(before or {}), flatten(after or {})
    return [Difference(key, old.get(key, MISSING), new.get(key, MISSING))
            for key in sorted(set(old) | set(new)) if old.get(key, MISSING) != new.get(key, MISSING)]
