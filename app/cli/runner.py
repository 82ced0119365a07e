"""`parallax runner`: the agent (`runners.cli`, which needs no Flask or database) unless the first
argument names an operator subcommand (`parallax runner disable ID`), which is imported only
then."""
from __future__ import annotations

import importlib
from typing import Any

import click

from runners.cli import runner as agent

SUBCOMMANDS = {"disable": "app.cli.runner_admin:disable", "list": "app.cli.runner_admin:list_runners"}
OPERATOR_HELP = ("Operator subcommands (on the service host): `parallax runner list` shows the registered "
                 "runners; `parallax runner disable ID` refuses one's token from now on.")


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
        # Anything else is the agent's command line (its --help included, which names the
        # operator subcommands in its epilog); the caller then invokes the agent.
        agent.epilog = OPERATOR_HELP
        return agent.make_context(info_name, args, parent=parent, **extra)


runner = RunnerCommand("runner", help=f"{agent.help}\n\n{OPERATOR_HELP}")
