"""`parallax bisect REPO --suite S --metric M --platform P --good SHA --bad SHA`: start a bisect
and show its rounds as they finish. The command drives the `bisect` duty itself while it waits
(through the duty's lease, so a running service and this command never both step it)."""
from __future__ import annotations

import time

import click

from app.bisect import service
from app.cli.context import CliContext, api_errors_as_click, pass_context
from app.core.config import use_settings
from app.core.duties import run_due
from app.core.models import Bisect, BisectState


@click.command()
@click.argument("repository")
@click.option("--suite", required=True)
@click.option("--metric", required=True)
@click.option("--platform", required=True)
@click.option("--good", required=True, help="last commit at the old level (40-hex SHA)")
@click.option("--bad", required=True, help="first commit at the new level (40-hex SHA)")
@click.option("--effect", type=float, default=service.DEFAULT_EFFECT, show_default=True,
              help="relative change sought, e.g. 0.08")
@click.option("--poll", type=float, default=1.0, show_default=True, help="seconds between checks")
@pass_context
def bisect(ctx: CliContext, repository: str, suite: str, metric: str, platform: str, good: str, bad: str,
           effect: float, poll: float) -> None:
    """Find the commit between GOOD and BAD that changed METRIC on PLATFORM."""
    db = ctx.database()
    with db.session() as session:
        with api_errors_as_click():
            row = service.start(session, ctx.settings, service.BisectRequest(
                repository, suite, metric, platform, good, bad, effect=effect))
        session.commit()
        bisect_id, size = row.id, len(row.stages[0]["commits"]) - 1
    click.echo(f"bisect {bisect_id}: {size} first-parent commits after {good[:12]} on {platform}; "
               f"`parallax bisects cancel {bisect_id}` stops it")
    with db.session() as session:
        if service.seen_runners(session, platform) == 0:
            click.echo(f"warning: no {platform} runner was seen in the last {service.RUNNER_SEEN.total_seconds() / 60:g} min; "
                       f"rounds wait until one runs (`parallax runner --server URL ...`)", err=True)
    shown: set[int] = set()
    announced: set[int] = set()
    with use_settings(ctx.settings):
        while True:
            run_due(db, service.DUTIES)
            with db.session() as session:
                row = session.get(Bisect, bisect_id)
                assert row is not None
                body = service.bisect_json(session, row)
            for step in body["rounds"]:
                if step["round"] not in announced:
                    announced.add(step["round"])
                    click.echo(f"round {step['round']} (stage {step['stage']}): queued {len(step['jobs'])} job(s) "
                               f"on {', '.join(sha[:12] for sha in step['commits'])}; waiting for a {platform} runner")
                if step["finished"] and step["round"] not in shown:
                    shown.add(step["round"])
                    where = ", ".join(sha[:12] for sha in step["commits"])
                    click.echo(f"round {step['round']} (stage {step['stage']}): measured {where}")
            if body["state"] != BisectState.running.value:
                break
            time.sleep(poll)
    click.echo(f"{body['state']}: {body['reason']}")
    if body["culprit"]:
        culprit = body["culprit"]
        change = culprit.get("relative_change")
        interval = (f" [{culprit['ci_low']:+.1%}, {culprit['ci_high']:+.1%}]"
                    if culprit.get("ci_low") is not None else "")
        click.echo(f"culprit {culprit['sha']} {culprit['summary'] or ''}".rstrip()
                   + (f": {change:+.1%}{interval}" if change is not None else ""))
    if body["confirmation"]:
        click.echo(f"scope: {body['confirmation']['scope']}")
    click.echo(f"runner jobs: {body['runner_jobs']}")
    if body["state"] == BisectState.failed.value:
        raise SystemExit(1)
