"""The words and tables a pull request's verdict is told in: the check run's title and summary,
the PR comment, and the per-platform commit status descriptions."""
from __future__ import annotations

import math
from typing import Any, Sequence

COMMENT_MARKER = "<!-- parallax:pull-request-verdict -->"
ICONS = {"worse": "🔴 worse", "better": "🟢 better", "unchanged": "⚪ unchanged", "inconclusive": "🟡 inconclusive"}


def percent(change: float | None) -> str:
    """-0.203 -> '−20.3 %' (a true minus sign, as GitHub shows it)."""
    if change is None or not math.isfinite(change):
        return "n/a"
    text = f"{abs(change) * 100:.1f} %"
    return ("−" if change < 0 else "+") + text


def _number(value: float | None) -> str:
    if value is None or not math.isfinite(value):
        return "n/a"
    return f"{value:.0f}" if abs(value) >= 100 else f"{value:.3g}"


def scope_words(scope: dict[str, Any] | None, platform: str) -> str:
    if scope is None:
        return ""
    if scope["scope"] == "platform_specific":
        return f"{', '.join(scope['platforms'])} only"
    if scope["scope"] == "common":
        return "every platform"
    return "scope unclear"


def scope_of(classification: Sequence[dict[str, Any]], suite: str, metric: str, direction: str) -> dict[str, Any] | None:
    return next((c for c in classification if c["suite"] == suite and c["metric"] == metric
                 and c.get("direction", "worse") == direction), None)


def finding(verdict: dict[str, Any], classification: Sequence[dict[str, Any]]) -> str:
    """'rocm output_throughput −20.3 %, rocm only'."""
    text = f"{verdict['platform']} {verdict['metric']} {percent(verdict['change'])}"
    words = scope_words(scope_of(classification, verdict["suite"], verdict["metric"], verdict["verdict"]),
                        verdict["platform"])
    return f"{text}, {words}" if words else text


def worst(verdicts: Sequence[dict[str, Any]], kind: str = "worse") -> dict[str, Any] | None:
    found = [v for v in verdicts if v["verdict"] == kind and v["change"] is not None]
    return max(found, key=lambda v: abs(v["change"]), default=None)


def table(verdicts: Sequence[dict[str, Any]]) -> str:
    """Markdown: one row per platform x suite x metric."""
    lines = ["| platform | suite | metric | base | head | change | 95 % interval | p | verdict |",
             "|---|---|---|---:|---:|---:|---|---:|---|"]
    for v in sorted(verdicts, key=lambda v: (v["suite"], v["metric"], v["platform"])):
        low, high = (v["ci"] or [None, None])
        interval = f"{percent(low)} … {percent(high)}" if low is not None and high is not None else "n/a"
        p = "n/a" if v["p_value"] is None else f"{v['p_value']:.2g}"
        lines.append(f"| {v['platform']} | {v['suite']} | {v['metric']} | {_number(v['base_median'])} | "
                     f"{_number(v['head_median'])} | {percent(v['change'])} | {interval} | {p} | "
                     f"{ICONS.get(v['verdict'], v['verdict'])} |")
    return "\n".join(lines)


def summary(*, head: str, base: str | None, rounds: dict[str, int], verdicts: Sequence[dict[str, Any]],
            classification: Sequence[dict[str, Any]], problems: Sequence[str], accepted_by: str | None,
            link: str, notes: Sequence[str] = (), measuring: Sequence[str] = ()) -> str:
    measured = ", ".join(f"{k}: {n}" for k, n in sorted(rounds.items())) or "none yet"
    parts = [f"Head `{head[:8]}` against merge-base `{(base or 'unknown')[:8]}`, measured in interleaved "
             f"A/B rounds on one runner per platform (rounds {measured})."]
    if problems:
        parts.append("\n".join(f"- ⚠️ {p}" for p in problems))
    if notes:
        parts.append("\n".join(f"- ℹ️ {n}" for n in notes))
    if verdicts:
        parts.append(table(verdicts))
    if measuring:
        parts.append(f"⏳ still measuring: {', '.join(measuring)} (the verdicts above are the pairs decided so far)")
    scoped = [c for c in classification if c["scope"] != "inconclusive"]
    if scoped:
        parts.append("\n".join(f"- **{c['suite']} {c['metric']}** {c.get('direction', 'worse')}: "
                               f"{c['scope'].replace('_', '-')} ({', '.join(c['platforms'])})" for c in scoped))
    if accepted_by:
        parts.append(f"Regression accepted as intended by @{accepted_by}.")
    parts.append(f"[Details and every job]({link}) · commands: `/parallax rerun [platform]`, `/parallax accept`")
    return "\n\n".join(parts)


def comment(title: str, conclusion: str | None, body: str) -> str:
    state = {"failure": "❌", "success": "✅", "neutral": "➖"}.get(conclusion or "", "⏳")
    return f"{COMMENT_MARKER}\n### {state} Parallax: {title}\n\n{body}\n"


def status_description(verdicts: Sequence[dict[str, Any]], base: str | None) -> tuple[str, str]:
    """(state, description) of one platform x suite's commit status on the head."""
    bad = worst(verdicts, "worse")
    base_text = f"vs base {(base or 'unknown')[:8]}"
    if bad is not None:
        return "failure", f"{bad['metric']} {percent(bad['change'])} {base_text}"
    chosen = worst(verdicts, "better") or next(iter(sorted(verdicts, key=lambda v: v["metric"])), None)
    if chosen is None:
        return "success", f"nothing measured {base_text}"
    return "success", f"{chosen['metric']} {percent(chosen['change'])} {base_text} ({chosen['verdict']})"
