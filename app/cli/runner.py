"""`parallax runner`: the agent (`runners.cli`, which needs no Flask or database) unless the first
argument names an operator subcommand (`parallax runner disable ID`), which is imported only
then."""
from __future__ import annotations

import importlib
from typing import Any

import click

from runners.cli import runner as agent

SUBCOMMANDS = {"disable": "app.cli.runner_admin:disable"}


class RunnerCommand(click.Group):
    """Runs the agent, or dispatches to an operator subcommand named first."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(SUBCOMMANDS)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        target = SUBCOMMANDS.get(cmd_name)
        if target is None:
            return None
        module_name, _, attribute = target.partition(":")
        command = getattr(importlib.import_module(module_name), attribute)
        assert isinstance(command, click.Command), target
        return command

    def make_context(self, info_name: str | None, args: list[str], parent: click.Context | None = None,
                     **extra: Any) -> click.Context:
        if args and args[0] in SUBCOMMANDS:
            return super().make_context(info_name, args, parent=parent, **extra)
        # Anything else is the agent's command line; the caller then invokes the agent.
        return agent.make_context(info_name, args, parent=parent, **extra)


runner = RunnerCommand("runner", help=f"{agent.help}\n\nOperator subcommand: `parallax runner disable ID`.")
