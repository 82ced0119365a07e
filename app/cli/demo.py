"""`parallax demo`: a platform-specific regression caught, bisected and fixed, on this machine."""
from __future__ import annotations

import sys

import click

from app.demo.run import run_demo


@click.command()
@click.option("--workdir", default="var/demo", show_default=True, help="where the demo keeps its database, "
              "engine repository and logs (wiped at the start)")
@click.option("--port", default=0, type=int, help="port for the demo service (0: any free port)")
@click.option("--model", default="tiny-random-8l", show_default=True,
              help="model the engine runs (a 64-wide random toy with 8 layers, quick; smollm2-135m-8l is the "
                   "simulator's calibration model, smollm2-135m the whole real one, both slower)")
@click.option("--repeats", default=3, show_default=True, type=click.IntRange(2, 20), help="measured runs per job")
@click.option("--quick", is_flag=True, help="fewer quiet pushes around each event (every event is kept)")
@click.option("--exit-when-done", is_flag=True, help="print the summary and stop instead of serving until Ctrl-C")
@click.option("--timeout", "timeout_s", default=900, show_default=True, type=click.IntRange(60),
              help="seconds to wait for the measurements to settle")
def demo(workdir: str, port: int, model: str, repeats: int, quick: bool, exit_when_done: bool,
         timeout_s: int) -> None:
    """Replay SGLang's two ROCm-only overlap-scheduler regressions on a copy of the engine: the
    service, a CPU runner and two simulated GPU runners (H100, MI300X) measure every push,
    detection flags the regressions, bisect finds the culprits, and the fixes close the alerts."""
    sys.stdout.reconfigure(line_buffering=True)  # progress lines reach a pipe (tee, a test) as they happen
    sys.exit(run_demo(workdir=workdir, port=port, model=model, repeats=repeats, quick=quick,
                      exit_when_done=exit_when_done, timeout_s=timeout_s))
