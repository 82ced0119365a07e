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
    "db": "app.cli.database:db",
    "demo": "app.cli.demo:demo",
    "detect": "app.cli.detect:detect",
    "enqueue": "app.cli.jobs:enqueue",
    "repo": "app.cli.repos:repo",
    "runner": "app.cli.runner:runner",
    "serve": "app.cli.serve:serve",
    "suites": "app.cli.suites:suites",
    "token": "app.cli.tokens:token",
    "upload": "runners.upload:upload",
    "user": "app.cli.users:user",
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


def _unavailable(name: str, exc: ImportError) -> click.Command:
    """Stands in for a command whose dependencies this install lacks (e.g. a runner-only box)."""
    reason = f"needs {exc.name or 'a missing package'}; install parallax-ci[server]"

    @click.command(name, help=f"(unavailable here: {reason})", context_settings={"ignore_unknown_options": True})
    @click.argument("args", nargs=-1, type=click.UNPROCESSED)
    def unavailable(args: tuple[str, ...]) -> None:
        raise click.ClickException(f"`parallax {name}` {reason} ({exc})")

    return unavailable


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
def main() -> None:
    """Parallax: per-commit, cross-platform regression tracking for LLM serving engines."""
