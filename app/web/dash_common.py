"""What every dashboard page shares: template filters, query-parameter parsing that answers 400
with the reason, 404 lookups, and the verdict words a cell or a metric is coloured by."""
from __future__ import annotations

import statistics
from typing import Any, Sequence

from flask import abort, request
from sqlalchemy import select
from sqlalchemy.orm import Session

from app.core.clock import as_utc
from app.core.models import AlertState, Commit, Repository
from app.core.shas import SHA_RE
from app.detection.service import config_for, noise_floors

OPEN_STATES = (AlertState.new, AlertState.acknowledged)
# Okabe-Ito: distinguishable with every common colour-vision deficiency; platforms also differ by marker.
PALETTE = ("#0072B2", "#D55E00", "#009E73", "#CC79A7", "#E69F00", "#56B4E9", "#000000")
MARKERS = ("circle", "square", "triangle", "diamond", "cross")


def median(values: Sequence[float]) -> float | None:
    return statistics.median(values) if values else None


def relative(value: float | None, before: float | None) -> float | None:
    if value is None or before is None or before == 0:
        return None
    return (value - before) / abs(before)


def is_worse(change: float | None, direction: str) -> bool:
    return change is not None and (change < 0) == (direction == "higher_is_better") and change != 0


def short_sha(sha: str) -> str:
    return sha[:10]


def percent(value: float | None) -> str:
    return "" if value is None else f"{value * 100:+.1f}%"


def change_size(change: Any) -> str:
    """How big an alert's change is: a percentage, or for a correctness alert the hazard count
    (a relative change from zero hazards means nothing)."""
    if change.alert.kind == "correctness":
        before = "" if change.before_value is None else f" (was {change.before_value:g})"
        return f"{change.after_value:g} hazards{before}"
    return percent(change.relative_change)


def number(value: float | None) -> str:
    if value is None:
        return "–"
    magnitude = abs(value)
    return f"{value:,.0f}" if magnitude >= 1000 else f"{value:.3g}" if magnitude < 1 else f"{value:.2f}"


def when(value: Any) -> str:
    value = as_utc(value)
    return value.strftime("%Y-%m-%d %H:%M UTC") if value else "never"


FILTERS = {"short": short_sha, "pct": percent, "size": change_size, "num": number, "when": when}


def arg_choice(name: str, choices: Sequence[str], default: str | None = None) -> str | None:
    """A query parameter that must be one of `choices` (400 naming them otherwise)."""
    value = request.args.get(name, "").strip()
    if not value:
        return default
    if value not in choices:
        abort(400, description=f"{name}: must be one of {', '.join(choices)}, got {value!r}")
    return value


def arg_int(name: str, default: int | None = None, minimum: int = 0) -> int | None:
    value = request.args.get(name, "").strip()
    if not value:
        return default
    try:
        number_ = int(value)
    except ValueError:
        abort(400, description=f"{name}: must be an integer, got {value!r}")
    if number_ < minimum:
        abort(400, description=f"{name}: must be at least {minimum}, got {number_}")
    return number_


def arg_sha(name: str, required: bool = False) -> str | None:
    value = request.args.get(name, "").strip().lower()
    if not value:
        if required:
            abort(400, description=f"{name}: required query parameter (a commit SHA)")
        return None
    if not SHA_RE.fullmatch(value):
        abort(400, description=f"{name}: not a commit SHA (40 hexadecimal digits): {value!r}")
    return value


def arg_required(name: str, hint: str) -> str:
    value = request.args.get(name, "").strip()
    if not value:
        abort(400, description=f"{name}: required query parameter ({hint})")
    return value


def repository_or_404(session: Session, name: str) -> Repository:
    repository = session.scalar(select(Repository).where(Repository.name == name))
    if repository is None:
        abort(404, description=f"repository {name!r} is not tracked by Parallax")
    return repository


def commit_or_404(session: Session, sha: str, repository: Repository | None = None) -> Commit:
    query = select(Commit).where(Commit.sha == sha.lower()).order_by(Commit.id).limit(1)
    if repository is not None:
        query = query.where(Commit.repository_id == repository.id)
    commit = session.scalar(query)
    if commit is None:
        where = f" in {repository.name}" if repository is not None else ""
        abort(404, description=f"commit {sha} is not known to Parallax{where}")
    return commit


def verdict_of(is_regression: bool | None, change: float | None, direction: str, threshold: float) -> str:
    """The word a measured cell is coloured by: the detector's alert when there is one, else
    "unchanged"; a change past the detector's minimum magnitude without an alert is "noise?"."""
    if is_regression is True:
        return "regression"
    if is_regression is False:
        return "improvement"
    if change is not None and abs(change) >= threshold:
        return "worse-unconfirmed" if is_worse(change, direction) else "better-unconfirmed"
    return "unchanged"


class Thresholds:
    """The smallest change a dashboard cell calls worse or better: the detector's minimum for the
    metric, raised to the suite's noise floor on the platform (`min_change`), as its alerts use;
    each suite's floors are read once."""

    def __init__(self, session: Session) -> None:
        self.session = session
        self.floors: dict[str, dict[str, float]] = {}

    def __call__(self, suite: str, platform: str, metric: str) -> float:
        if suite not in self.floors:
            self.floors[suite] = noise_floors(self.session, suite)
        return config_for(metric, self.floors[suite].get(platform, 0.0)).min_relative
