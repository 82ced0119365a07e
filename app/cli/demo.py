"""`parallax demo`: the main job end to end on the embedded database."""
from __future__ import annotations

import sys

import click

from app.demo.run import run_demo


@click.command()
@click.option("--workdir", default="var/demo", show_default=True)
@click.option("--port", default=0, type=int, help="port for the demo service (0: any free port)")
@click.option("--model", default="smollm2-135m", show_default=True,
              help="model the engine runs (tiny-random: a seeded random tiny model, seconds instead of minutes)")
def demo(workdir: str, port: int, model: str) -> None:
    """Run the main job end to end on the embedded database and print a summary."""
    sys.exit(run_demo(workdir=workdir, port=port, model=model))
