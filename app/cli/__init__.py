"""The `parallax` command. Each command group lives in its own module under `app/cli/` (and
`runners.cli` for the runner agent) and is imported only when invoked, following click's
lazy-loading pattern, so a runner box without Flask or a database driver can still run
`parallax runner`."""
from __future__ import annotations

import importlib

import click

# name -> "module:attribute"; each module imports its own dependencies at the top.
COMMANDS = {
    "backfill": "app.cli.github:backfill",
    "bisect": "app.cli.bisect:bisect",
    "bisects": "app.cli.listing:bisects",
    "catalogue": "app.cli.catalogue:catalogue",
    "db": "app.cli.database:db",
    "deliveries": "app.cli.deliveries:deliveries",
    "demo": "app.cli.demo:demo",
    "detect": "app.cli.detect:detect",
    "enqueue": "app.cli.jobs:enqueue",
    "jobs": "app.cli.listing:jobs",
    "prune": "app.cli.prune:prune_command",
    "repo": "app.cli.repos:repo",
    "runner": "app.cli.runner:runner",
    "serve": "app.cli.serve:serve",
    "suites": "app.cli.suites:suites",
    "token": "app.cli.tokens:token",
    "upload": "runners.upload:upload",
    "user": "app.cli.users:user",
}
# What `parallax --help` lists, without importing every command's dependencies (Flask,
# SQLAlchemy, gevent: seconds); a test checks each line against the command's own help.
SUMMARIES = {
    "backfill": "Store the history of a repository's branch since a commit and queue it.",
    "bisect": "Find the commit between GOOD and BAD that changed METRIC on PLATFORM.",
    "bisects": "Bisects: list them, cancel one.",
    "catalogue": "parallax.toml's repositories, platforms and suites in the database.",
    "db": "Database schema commands.",
    "deliveries": "Webhook deliveries from GitHub: what each did, or why it failed.",
    "demo": "Replay SGLang's two ROCm-only overlap-scheduler regressions on a copy of the service.",
    "detect": "Detect change points and update alerts.",
    "enqueue": "Queue the suite x platform matrix (or one cell) for a commit.",
    "jobs": "Jobs in the queue and their outcomes.",
    "prune": "Apply the retention rules: raw samples of old runs are replaced by their summary.",
    "repo": "Tracked repositories.",
    "runner": "Run jobs for the service at --server on this machine; `runner disable ID`.",
    "serve": "Run the HTTP service (gunicorn) and its background duties.",
    "suites": "Suites declared in parallax.toml.",
    "token": "Runner registration tokens.",
    "upload": "Upload results measured by this CI job: FILE (a results document) or --adapter NAME FILE.",
    "user": "People who triage alerts and queue work through the API.",
}


class LazyGroup(click.Group):
    """A group whose subcommands are imported on first use."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(COMMANDS)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        target = COMMANDS.get(cmd_name)
        if target is None:
            return None
        module_name, _, attribute = target.partition(":")
        try:
            module = importlib.import_module(module_name)
        except ImportError as exc:
            return _unavailable(cmd_name, exc)
        command = getattr(module, attribute)
        assert isinstance(command, click.Command), target
        return command

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        with formatter.section("Commands"):
            formatter.write_dl([(name, SUMMARIES[name]) for name in self.list_commands(ctx)])


def _unavailable(name: str, exc: ImportError) -> click.Command:
    """Stands in for a command whose dependencies this install lacks (e.g. a runner-only box)."""
    reason = f"needs {exc.name or 'a missing package'}; install parallax-ci[server]"

    @click.command(name, help=f"(unavailable here: {reason})", context_settings={"ignore_unknown_options": True})
    @click.argument("args", nargs=-1, type=click.UNPROCESSED)
    def unavailable(args: tuple[str, ...]) -> None:
        raise click.ClickException(f"`parallax {name}` {reason} ({exc})")

    return unavailable


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="parallax-ci", prog_name="parallax")
def main() -> None:
    """Parallax: per-commit, cross-platform regression tracking for LLM serving engines."""
