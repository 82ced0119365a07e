"""`parallax suites check parallax.toml`: validate a configuration without a database and say
what each suite will store (adapters known, outputs declared, platforms spelled right)."""
from __future__ import annotations

import tomllib
from pathlib import Path

import click

from app.core.config import ConfigError, SuiteSpec, parse_catalogue
from runners.adapters.registry import ADAPTERS


@click.group()
def suites() -> None:
    """Suites declared in parallax.toml."""


def describe(spec: SuiteSpec) -> list[str]:
    lines = [f"suite {spec.name}: platforms {', '.join(spec.platforms)}; {spec.repeats} run(s) per job, "
             f"{spec.timeout_s} s limit"]
    if spec.adapter:
        adapter = ADAPTERS[spec.adapter]
        lines.append(f"  adapter {spec.adapter} reads {', '.join(spec.outputs)} under $PARALLAX_OUTPUT_DIR "
                     f"(written by: {adapter.tool})")
        lines.append(f"  stores: {adapter.stores}")
    else:
        lines.append("  stores: the results document the command writes to $PARALLAX_RESULTS")
    if spec.setup:
        lines.append(f"  setup once per job ({spec.setup_timeout_s} s limit; failure = build failure): "
                     f"{' '.join(spec.setup)}")
    if spec.env:
        lines.append(f"  env (recorded in the context): {', '.join(f'{k}={v}' for k, v in sorted(spec.env.items()))}")
    if spec.min_change:
        floors = ", ".join(f"{platform} {fraction:.0%}" for platform, fraction in sorted(spec.min_change.items()))
        lines.append(f"  noise floor (no smaller change reported there): {floors}")
    return lines


@suites.command("check")
@click.argument("path", type=click.Path(dir_okay=False, path_type=Path))
def check(path: Path) -> None:
    """Validate PATH (a parallax.toml) and print what each suite will store."""
    try:
        data = tomllib.loads(path.read_text())
    except FileNotFoundError:
        raise click.ClickException(f"{path}: no such file") from None
    except tomllib.TOMLDecodeError as exc:
        raise click.ClickException(f"{path}: not valid TOML: {exc}") from None
    try:
        catalogue = parse_catalogue(data, source=str(path))
    except ConfigError as exc:
        raise click.ClickException(str(exc)) from None
    for repository in catalogue["repositories"]:
        click.echo(f"repository {repository.name}: {repository.url} ({repository.default_branch})")
    for spec in catalogue["suites"]:
        for line in describe(spec):
            click.echo(line)
    click.echo(f"{path}: OK, {len(catalogue['suites'])} suite(s)")

